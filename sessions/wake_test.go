package sessions

import (
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// wakeSession is a cold start and a level-1 wake of the same process, as
// the runner's sleep cycles record them, with cold stage durations coldMS
// and a weights_restore of wakeMS.
func wakeSession(coldMS, wakeMS float64) *Session {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var evs []trace.Event
	add := func(run int, at time.Duration, e trace.Event) {
		e.Run, e.At = run, at
		evs = append(evs, e)
	}
	stage := func(run int, name trace.Stage, start, end time.Duration) {
		add(run, end, trace.Event{Kind: trace.KindStage, Stage: &trace.Span{Name: name, Start: start, End: end, Source: "engine"}})
	}
	req := func(run int, sent, ttft time.Duration) {
		add(run, sent+ttft, trace.Event{Kind: trace.KindRequest, Request: &trace.Request{ID: "c" + time.Duration(sent).String(), Label: "cold_1", Phase: trace.PhaseCold, Sent: sent, FirstToken: ttft, End: ttft, Done: true}})
	}
	add(0, 0, trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart, Attrs: trace.Attrs{"run": 0}}})
	stage(0, trace.StageDecoderTensorUpload, 0, ms(coldMS))
	req(0, ms(coldMS), ms(5))
	stage(0, trace.StageSleep, ms(coldMS+100), ms(coldMS+250))
	w0 := ms(coldMS + 1000)
	add(1, w0, trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart, Attrs: trace.Attrs{"run": 1, trace.AttrWake: 1, trace.AttrWakes: 3, trace.AttrSleepLevel: 1}}})
	stage(1, trace.StageWeightsRestore, w0+ms(1), w0+ms(1+wakeMS))
	req(1, w0+ms(2+wakeMS), ms(5))
	return &Session{Events: evs}
}

// TestWakeRuns: a wake run carries its place and level, its cold window
// starts at the wake (the sleep that ended the run before stays there),
// the report names it, and diff keeps its metrics apart from a cold
// start's, after them: a wake is a sample of the wake's metrics, not a
// cold run.
func TestWakeRuns(t *testing.T) {
	s := wakeSession(400, 150)
	runs := s.Runs()
	if len(runs) != 2 || runs[0].Wake != nil {
		t.Fatalf("runs %+v", runs)
	}
	w := runs[1].Wake
	if w == nil || w.String() != "wake 1/3 (level 1)" {
		t.Fatalf("wake %+v", w)
	}
	if got := runs[1].ColdTotal(); got != 157*time.Millisecond {
		t.Errorf("the wake's window %v, want 157ms (wake → first token)", got)
	}
	if _, ok := runs[1].Attribution.Stage(trace.StageSleep); ok {
		t.Error("the sleep is in the wake's window")
	}
	md := BuildReport(s).Markdown()
	if !strings.Contains(md, "## Run 1: wake 1/3 (level 1): 157.0 ms (wake → first token)") {
		t.Errorf("report:\n%s", md)
	}
	// Five sessions a side (each a cold start and a wake): the wake's
	// restore doubled, the cold start did not move.
	var base, slow []*Session
	for i := range 5 {
		base = append(base, wakeSession(400+float64(i), 150+float64(i)))
		slow = append(slow, wakeSession(400+float64(i), 300+float64(i)))
	}
	d, err := Diff(base, slow, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	verdict := map[string]string{}
	label := map[string]string{}
	for _, r := range d.Rows {
		order = append(order, r.Metric)
		verdict[r.Metric] = r.Verdict
		label[r.Metric] = r.Label
	}
	if d.BaseRuns != 5 || d.NewRuns != 5 {
		t.Errorf("cold runs %d/%d, want 5/5: a wake is not a cold start", d.BaseRuns, d.NewRuns)
	}
	if verdict["wake_l1/cold_total/first_token"] != DiffRegression || label["wake_l1/cold_total/first_token"] != "wake L1 first token" ||
		verdict["wake_l1/stage/weights_restore"] != DiffSlower ||
		verdict["cold_total/first_token"] != DiffNoChange || verdict["stage/decoder_tensor_upload"] != DiffNoChange {
		t.Errorf("verdicts %v", verdict)
	}
	if d.Verdict != VerdictRegression || len(d.Summary) == 0 || !strings.Contains(d.Summary[0], "wake L1 first token") ||
		!strings.Contains(d.Summary[0], "weights_restore") || strings.Contains(d.Summary[0], "decoder_tensor_upload") {
		t.Errorf("verdict %s, summary %q: the wake's regression explained by the wake's stages", d.Verdict, d.Summary)
	}
	if _, ok := verdict["stage/weights_restore"]; ok {
		t.Error("the wake's weights_restore is mixed into the cold start's stages")
	}
	last := order[len(order)-1]
	if !strings.HasPrefix(last, "wake_l1/") || !strings.HasPrefix(order[0], "cold_total/") {
		t.Errorf("row order %v: cold start first, the wake's rows after", order)
	}
}

// TestImportVLLMSleepAndWake: a vLLM log with sleep mode lines imports as
// the cold start and one run a wake, each wake's run starting where vLLM's
// figure says its wake began, the sleeps staying in the runs they end.
func TestImportVLLMSleepAndWake(t *testing.T) {
	log := strings.Join([]string{
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: tensor_parallel_size=1",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:05 [default_loader.py:1] Loading weights took 2.00 seconds",
		"(APIServer pid=2) INFO 11-29 05:00:08 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
		"(APIServer pid=2) INFO:     Application startup complete.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:01:00 [gpu_worker.py:116] Sleep mode freed 12.34 GiB memory, 1.02 GiB memory is still in use.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:01:00 [abstract.py:233] It took 0.500000 seconds to fall asleep.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:01:10 [abstract.py:251] It took 1.000000 seconds to wake up tags {'weights', 'kv_cache'}.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:01:20 [abstract.py:233] It took 0.500000 seconds to fall asleep.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:01:30 [abstract.py:251] It took 1.000000 seconds to wake up tags {'weights', 'kv_cache'}.",
	}, "\n")
	s, err := Import(strings.NewReader(log), ImportOptions{Kind: "vllm", Ref: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	runs := s.Runs()
	if len(runs) != 3 || runs[0].Wake != nil {
		t.Fatalf("%d runs (first a wake: %v), want the cold start and 2 wakes", len(runs), len(runs) > 0 && runs[0].Wake != nil)
	}
	for i, r := range runs[1:] {
		if r.Wake == nil || r.Wake.String() != "wake "+string(rune('1'+i)) {
			t.Fatalf("run %d: wake %+v", i+1, r.Wake)
		}
		wr, ok := r.Attribution.Stage(trace.StageWeightsRestore)
		if !ok || wr.Start != r.Start || wr.Duration != time.Second || r.ColdTotal() != time.Second {
			t.Errorf("run %d: weights_restore %+v (found %v), window %v; want the 1 s wake, the whole window, at the run's start %v", i+1, wr, ok, r.ColdTotal(), r.Start)
		}
	}
	for i := 0; i < 2; i++ {
		found := false
		for _, sp := range runs[i].Spans {
			found = found || sp.Name == trace.StageSleep
		}
		if !found {
			t.Errorf("run %d lacks the sleep that ended it", i)
		}
	}
	if _, ok := runs[0].Attribution.Stage(trace.StageDecoderTensorUpload); !ok {
		t.Error("the cold start lost its upload")
	}
}
