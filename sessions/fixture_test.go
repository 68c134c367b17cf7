package sessions

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

const ms = time.Millisecond

func d(v float64) time.Duration { return time.Duration(v * float64(ms)) }

// coldRun returns the events of one realistic cold run of the built-in
// engine starting at base, with every stage and request time scaled by
// scale (a 1.3 scale is a 30% slowdown), and warm TTFTs drawn from warm.
func coldRun(run int, base time.Duration, scale float64, warm []float64) []trace.Event {
	at := func(v float64) time.Duration { return base + d(v*scale) }
	var ev []trace.Event
	add := func(e trace.Event) { e.Run = run; ev = append(ev, e) }
	add(trace.Event{At: at(0), Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart}})
	add(trace.Event{At: at(0), Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, PID: 100 + run, Command: []string{"treni-top", "serve"}, ServerKind: "treni"}})
	stage := func(name trace.Stage, a, b float64, attrs trace.Attrs) {
		add(trace.Event{At: at(a), Kind: trace.KindStage, Stage: &trace.Span{Name: name, Start: at(a), End: at(a), Open: true, Source: "engine"}})
		add(trace.Event{At: at(b), Kind: trace.KindStage, Stage: &trace.Span{Name: name, Start: at(a), End: at(b), Source: "engine", Attrs: attrs}})
	}
	stage(trace.StageProcessStart, 0, 8, nil)
	stage(trace.StageRuntimeInit, 8, 12, nil)
	stage(trace.StageTensorIndexBuild, 12, 15, trace.Attrs{"tensors": 398.0})
	stage(trace.StageTokenizerLoad, 12, 40, nil)
	stage(trace.StagePageCache, 15, 215, trace.Attrs{"bytes": 4e8})
	stage(trace.StageKVAlloc, 215, 230, trace.Attrs{"blocks": 1024.0})
	stage(trace.StageWarmup, 230, 290, nil)
	stage(trace.StageHTTPReady, 290, 292, nil)
	for i := 0; i < 10; i++ {
		add(trace.Event{At: at(float64(i) * 30), Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourceProcess, Values: map[string]float64{trace.MetricRSS: float64(i) * 4e7}}})
	}
	add(trace.Event{At: at(293), Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthy}})
	add(trace.Event{At: at(294), Kind: trace.KindLog, Log: &trace.Log{Stream: "stderr", Text: "listening on http://127.0.0.1:8000"}})
	req := func(label string, phase trace.Phase, sent, ttft float64) {
		sentAt := at(sent)
		tok := []time.Duration{d(ttft), d(ttft + 20), d(ttft + 41), d(ttft + 60)}
		add(trace.Event{At: sentAt + d(ttft+60), Kind: trace.KindRequest, Request: &trace.Request{
			ID: fmt.Sprintf("%d-%s", run, label), Label: label, Phase: phase, Sent: sentAt, FirstByte: d(ttft / 2), FirstToken: d(ttft),
			Tokens: tok, End: d(ttft + 61), CompletionTokens: 4, PromptTokens: 10, Done: true}})
	}
	req("cold_1", trace.PhaseCold, 300, 150)
	req("warmup_1", trace.PhaseWarmup, 600, 60)
	for i, w := range warm {
		req(fmt.Sprintf("warm_%d", i+1), trace.PhaseWarm, 800+float64(i)*200, w)
	}
	add(trace.Event{At: at(2000), Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessExit, PID: 100 + run, Expected: true}})
	trace.SortEvents(ev)
	return ev
}

// writeSession records events into a new session file in dir.
func writeSession(t testing.TB, dir, name string, events []trace.Event) string {
	t.Helper()
	path := filepath.Join(dir, name)
	h := NewHeader("test", time.Unix(1_700_000_000, 0), Target{Kind: TargetBuiltin, Model: "demo-qwen3", Device: "cpu"})
	h.ModelFiles = []ModelFile{{Path: "/models/demo/model.safetensors", Bytes: 4e8}}
	r, err := Create(path, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		r.Emit(e)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
