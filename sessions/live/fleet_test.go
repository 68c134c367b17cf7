package live

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/sessions/otelexport"
	"github.com/treni-top/treni-top/sessions/otelexport/otlptest"
	"github.com/treni-top/treni-top/trace"
)

const exportFixture = "../otelexport/testdata/h200-builtin.jsonl"

// TestFleetPlumbing drives StartFleet the way a live session does: live
// export, /metrics and the OTLP receiver on one bus.
func TestFleetPlumbing(t *testing.T) {
	s, err := sessions.Open(exportFixture)
	if err != nil {
		t.Fatal(err)
	}
	col, spans := otlptest.SpanCounter(t)
	ctx := context.Background()
	bus := trace.NewBus()
	all := bus.Subscribe()
	var got []trace.Event
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for e := range all.Events() {
			got = append(got, e)
		}
	}()
	var stderr bytes.Buffer
	f, err := StartFleet(ctx, FleetOptions{OTLP: col.URL, Metrics: "127.0.0.1:0", OTLPListen: "127.0.0.1:0"},
		s.Header, trace.ClockAt(s.Header.Created), bus, nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if tc := f.TraceContext(); tc == nil || !tc(0, "r1").Equal(otelexport.NewIDs(s.Header).RequestSpanContext(0, "r1")) {
		t.Error("TraceContext does not give the export's request span")
	}
	for _, e := range s.Events {
		bus.Emit(e)
	}
	// The server reports its model load over OTLP.
	created := uint64(s.Header.Created.UnixNano())
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: make([]byte, 16), SpanId: []byte{0, 0, 0, 0, 0, 0, 0, 1}, Name: "Load model",
		StartTimeUnixNano: created + 100e6, EndTimeUnixNano: created + 300e6,
	}}}}}}}
	req.ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId[15] = 1
	body, _ := proto.Marshal(req)
	resp, err := http.Post(f.recv.Endpoint(), "application/x-protobuf", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("post to the receiver: %v %v", err, resp)
	}
	resp.Body.Close()
	// The metrics follow the bus on their own goroutine: poll until they
	// have caught up (the deadline only bounds a broken build).
	var metrics []byte
	for deadline := time.Now().Add(30 * time.Second); ; {
		mresp, err := http.Get(f.srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ = io.ReadAll(mresp.Body)
		mresp.Body.Close()
		if strings.Contains(string(metrics), "treni_cold_start_seconds{") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks the cold start:\n%s", metrics)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.StopInputs()
	bus.Close()
	f.Finish(ctx)
	<-collected
	runs := sessions.Analyze(got)
	var merged bool
	for _, sp := range runs[0].Spans {
		merged = merged || (sp.Name == trace.StageModelLoad && sp.Source == "otlp:unknown" && sp.Start == 100e6 && sp.End == 300e6)
	}
	if !merged {
		t.Errorf("the server's Load model span is not a model_load stage of run 0: %v", runs[0].Spans)
	}
	if want := int64(1 + len(runs[0].Spans) + len(runs[0].Requests)); spans.Load() != want {
		t.Errorf("collector got %d spans, want %d (the received stage included)", spans.Load(), want)
	}
	if !strings.Contains(stderr.String(), "exported") {
		t.Errorf("stderr %q", stderr.String())
	}

	// An address in use is an error, and nothing is left running.
	busy := trace.NewBus()
	defer busy.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := StartFleet(ctx, FleetOptions{OTLP: col.URL, Metrics: ln.Addr().String()}, s.Header, trace.ClockAt(s.Header.Created), busy, nil, io.Discard); err == nil {
		t.Error("StartFleet accepted a metrics address in use")
	}
}
