package otelexport

import (
	"context"
	"testing"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// TestExportWakeRun: a wake of a sleeping target exports as a trace of its
// own whose root span is "wake", with its place and level, over the wake's
// window; the cold start's stays "cold_start".
func TestExportWakeRun(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	ev := func(run int, at time.Duration, e trace.Event) trace.Event { e.Run, e.At = run, at; return e }
	cold := func(run int, sent time.Duration) trace.Event {
		return ev(run, sent+ms(5), trace.Event{Kind: trace.KindRequest, Request: &trace.Request{ID: "c" + sent.String(), Label: "cold_1", Phase: trace.PhaseCold, Sent: sent, FirstToken: ms(5), End: ms(5), Done: true}})
	}
	s := &sessions.Session{Header: sessions.NewHeader("test", time.Now().Add(-time.Hour), sessions.Target{Kind: sessions.TargetBuiltin}), Events: []trace.Event{
		ev(0, 0, trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart, Attrs: trace.Attrs{"run": 0}}}),
		ev(0, ms(400), trace.Event{Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageDecoderTensorUpload, Start: 0, End: ms(400)}}),
		cold(0, ms(400)),
		ev(1, ms(1000), trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart, Attrs: trace.Attrs{"run": 1, trace.AttrWake: 2, trace.AttrWakes: 5, trace.AttrSleepLevel: 1}}}),
		ev(1, ms(1150), trace.Event{Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageWeightsRestore, Start: ms(1001), End: ms(1150)}}),
		cold(1, ms(1150)),
	}}
	col := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.srv.URL)
	st, err := Export(context.Background(), s, Config{})
	if err != nil || !st.OK() {
		t.Fatalf("export: %v %+v", err, st)
	}
	ids := NewIDs(s.Header)
	roots := map[string]int{}
	for _, r := range col.spans() {
		switch hexID(r.span.SpanId) {
		case ids.RootSpanID(0).String():
			roots[r.span.Name]++
		case ids.RootSpanID(1).String():
			roots[r.span.Name]++
			wantFloat(t, "wake root", attrMap(r.span.Attributes), "treni.wake", 2)
			wantFloat(t, "wake root", attrMap(r.span.Attributes), "treni.wakes", 5)
			wantFloat(t, "wake root", attrMap(r.span.Attributes), "treni.sleep_level", 1)
			if r.span.StartTimeUnixNano != unix(s, ms(1000)) || r.span.EndTimeUnixNano != unix(s, ms(1155)) {
				t.Errorf("wake root [%d, %d], want the wake's window", r.span.StartTimeUnixNano, r.span.EndTimeUnixNano)
			}
		}
	}
	if roots["cold_start"] != 1 || roots["wake"] != 1 {
		t.Fatalf("root spans %v, want one cold_start and one wake", roots)
	}
}
