package load

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/probe/roofline"
	"github.com/treni-top/treni-top/trace"
)

// planned makes n requests planned every gap from 1 s on the session
// clock, each sent late by 1 ms, with completion lag lag(planned time).
func plannedRun(n int, gap time.Duration, lag func(at time.Duration) time.Duration) ([]trace.Request, []time.Duration) {
	reqs := make([]trace.Request, n)
	plan := make([]time.Duration, n)
	for i := range reqs {
		at := time.Second + time.Duration(i)*gap
		plan[i] = at
		sent := at + time.Millisecond
		reqs[i] = trace.Request{ID: "r", Done: true, Sent: sent, FirstToken: 10 * time.Millisecond, End: at + lag(at-time.Second) - sent}
	}
	return reqs, plan
}

func TestQueueTrendSteady(t *testing.T) {
	// A server that keeps up: every lag 500 ms, ±40 ms of noise.
	reqs, plan := plannedRun(60, 250*time.Millisecond, func(at time.Duration) time.Duration {
		return 500*time.Millisecond + time.Duration(40*math.Sin(float64(at)/3e8))*time.Millisecond
	})
	q := queueTrend(reqs, plan)
	// Judged: planned from about 0.5 s (the first third's median lag)
	// after the first arrival to as long before the last (14.75 s of
	// arrivals): 54 of 60.
	if q.Growth == nil || q.Growing || math.Abs(*q.Growth) > 0.02 || q.Judged != 54 || math.Abs(q.WindowS-13.74) > 0.01 {
		t.Fatalf("steady run: %+v", q)
	}
}

func TestQueueTrendGrowing(t *testing.T) {
	// Arrivals 30% faster than the service: each request waits 0.3 s
	// longer for every second of arrivals before it.
	reqs, plan := plannedRun(60, 250*time.Millisecond, func(at time.Duration) time.Duration {
		return 500*time.Millisecond + time.Duration(0.3*float64(at))
	})
	q := queueTrend(reqs, plan)
	if q.Growth == nil || !q.Growing || math.Abs(*q.Growth-0.3) > 1e-6 {
		t.Fatalf("growing run: %+v", q)
	}
	// The ramp-up trimmed is the first third's median lag (20 requests
	// to 4.75 s, their median planned 2.375 s after the first: 0.5 +
	// 0.7125 s); the judged lag is the window's middle arrival's (7.375 s:
	// 2.7125 s).
	if math.Abs(q.RampLagMS-1212.5) > 1 || math.Abs(q.LagMS-2712.5) > 1 {
		t.Errorf("ramp lag %.1f ms, judged lag %.1f ms; want 1212.5, 2712.5", q.RampLagMS, q.LagMS)
	}
}

func TestQueueTrendNotJudged(t *testing.T) {
	// Too few requests.
	reqs, plan := plannedRun(6, 250*time.Millisecond, func(time.Duration) time.Duration { return time.Second })
	if q := queueTrend(reqs, plan); q.Growth != nil || !strings.Contains(q.Note, "too few") {
		t.Errorf("6 requests: %+v", q)
	}
	// 30 requests in 2.9 s, each taking 1 s: less a second of ramp-up
	// and one of drain, 0.9 s are left, less than a lag.
	reqs, plan = plannedRun(30, 100*time.Millisecond, func(time.Duration) time.Duration { return time.Second })
	if q := queueTrend(reqs, plan); q.Growth != nil || !strings.Contains(q.Note, "leaves 0.90 s and 10 requests, too little") {
		t.Errorf("a run hardly longer than its lag: %+v", q)
	}
	// The drain is left out: lags that fall in the last second (fewer
	// requests to share the steps with) do not read as a trend.
	reqs, plan = plannedRun(60, 250*time.Millisecond, func(at time.Duration) time.Duration {
		if at > 14*time.Second {
			return 200 * time.Millisecond
		}
		return 500 * time.Millisecond
	})
	if q := queueTrend(reqs, plan); q.Growth == nil || *q.Growth != 0 {
		t.Errorf("a drain at the end: %+v", q)
	}
	// Failed requests are left out: 30 planned, 24 failed.
	reqs, plan = plannedRun(30, 250*time.Millisecond, func(time.Duration) time.Duration { return time.Second })
	for i := 6; i < 30; i++ {
		reqs[i].Error = "boom"
	}
	if q := queueTrend(reqs, plan); q.Growth != nil || !strings.Contains(q.Note, "6 successful requests") {
		t.Errorf("24 of 30 failed: %+v", q)
	}
}

// level is one synthetic sweep level: a run with its TPOT p99, queue
// growth (nil: not judged) and failures.
func level(t *testing.T, qps, tpotP99 float64, growth *float64, failed int) WorkloadReport {
	t.Helper()
	specs, err := Sweep([]float64{qps}, 32, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	q := &QueueTrend{Growth: growth, Note: "too few"}
	if growth != nil {
		q.Note, q.Growing = "", *growth > QueueGrowthLimit
	}
	m := RunMetrics{Repeat: 1, Requests: 32, Completed: 32 - failed, Failed: failed, OutputTokPerSec: 128 * qps,
		TPOT: Dist{N: 32, P99: tpotP99}, Queue: q}
	return WorkloadReport{Spec: specs[0], Runs: []RunMetrics{m}}
}

func g(x float64) *float64 { return &x }

func TestSaturation(t *testing.T) {
	for _, c := range []struct {
		name    string
		levels  []WorkloadReport
		qps     float64
		reached bool
		verdict string
	}{
		{"every level holds", []WorkloadReport{level(t, 2, 5, g(0), 0), level(t, 4, 6, g(0.01), 0), level(t, 8, 8, g(-0.02), 0)},
			8, false, "not saturated: every level up to QPS 8 held"},
		{"TPOT over the limit", []WorkloadReport{level(t, 2, 5, g(0), 0), level(t, 4, 6, g(0), 0), level(t, 8, 55, g(0), 0)},
			4, true, "saturation at QPS 4 (TPOT p99 ≤ 50 ms, no queue growth, no errors): 512 output tok/s; QPS 8 failed: TPOT p99 55.0 ms > 50 ms"},
		{"queue growth", []WorkloadReport{level(t, 8, 20, g(0.45), 0), level(t, 2, 5, g(0), 0), level(t, 4, 9, g(0.05), 0)},
			4, true, "QPS 8 failed: queue growth: the lag grew 0.45 s a second of arrivals"},
		{"errors", []WorkloadReport{level(t, 2, 5, g(0), 0), level(t, 4, 6, g(0), 3)},
			2, true, "QPS 4 failed: 3 requests failed"},
		{"not judged", []WorkloadReport{level(t, 2, 5, g(0), 0), level(t, 4, 6, nil, 0), level(t, 8, 80, g(0.5), 0)},
			2, false, "QPS 2 held (TPOT p99 ≤ 50 ms, no queue growth, no errors): 256 output tok/s; QPS 4 could not be judged: queue growth not judged: too few"},
		{"the lowest fails", []WorkloadReport{level(t, 2, 70, g(0), 0), level(t, 4, 80, g(0), 0)},
			0, true, "no level held: the lowest, QPS 2: TPOT p99 70.0 ms > 50 ms"},
	} {
		s := saturationOf(c.levels, 50)
		if s == nil {
			t.Fatalf("%s: no verdict", c.name)
		}
		if s.QPS != c.qps || s.Reached != c.reached || !strings.Contains(s.Verdict, c.verdict) {
			t.Errorf("%s: QPS %g reached %v verdict %q; want QPS %g reached %v verdict containing %q", c.name, s.QPS, s.Reached, s.Verdict, c.qps, c.reached, c.verdict)
		}
		if c.qps > 0 && s.OutputTokPerS != 128*c.qps {
			t.Errorf("%s: %.0f tok/s at saturation, want %.0f", c.name, s.OutputTokPerS, 128*c.qps)
		}
		for i := 1; i < len(s.Levels); i++ {
			if s.Levels[i].QPS < s.Levels[i-1].QPS {
				t.Errorf("%s: levels out of order: %+v", c.name, s.Levels)
			}
		}
	}
	// The TPOT limit is the caller's (--slo-tpot-ms).
	if s := saturationOf([]WorkloadReport{level(t, 2, 5, g(0), 0), level(t, 4, 30, g(0), 0)}, 20); s.QPS != 2 || !s.Reached {
		t.Errorf("a 20 ms limit: %+v", s)
	}
}

func TestSaturationOnlyForSweeps(t *testing.T) {
	mixed := []WorkloadReport{}
	for _, s := range Builtin() {
		mixed = append(mixed, WorkloadReport{Spec: s, Runs: []RunMetrics{{Repeat: 1}}})
	}
	if s := saturationOf(mixed, 50); s != nil {
		t.Errorf("the five built-in workloads got a saturation verdict: %+v", s)
	}
	if s := saturationOf([]WorkloadReport{level(t, 2, 5, g(0), 0)}, 50); s != nil {
		t.Errorf("one level got a saturation verdict: %+v", s)
	}
	a, b := level(t, 2, 5, g(0), 0), level(t, 4, 5, g(0), 0)
	b.Spec.MaxTokens = Fixed(256)
	if s := saturationOf([]WorkloadReport{a, b}, 50); s != nil {
		t.Errorf("levels of two workloads got a saturation verdict: %+v", s)
	}
}

func TestRunBound(t *testing.T) {
	rf := &Roofline{
		Model: roofline.Model{Layers: 36, Hidden: 2560, Intermediate: 9728, Heads: 32, KVHeads: 8, HeadDim: 128, Vocab: 151936, Tied: true, QKNorm: true, DTypeBytes: 2},
		Rates: roofline.Rates{MatmulTFLOPS: 790, MemoryGBps: 4168, Device: "NVIDIA H200"},
	}
	spec := Custom(64, 1024, 128, Arrival{Pattern: Burst})
	m := RunMetrics{Requests: 64, Completed: 64, InputTokens: 64 * 1030, InputTokensFromServer: true, OutputTokens: 64 * 128, OutputTokPerSec: 4207}
	b, note := rf.bound(spec, 64, m)
	if b == nil || note != "" {
		t.Fatalf("no bound: %s", note)
	}
	// The server's prompt count (a template's 6 tokens more), not the spec's.
	want, _ := roofline.Burst(rf.Model, rf.Rates, roofline.Batch{Streams: 64, PromptTokens: 1030, OutputTokens: 128})
	if b.Bound != want || math.Abs(b.Ratio-4207/want.OutputTokPerS) > 1e-12 {
		t.Errorf("bound %+v ratio %g, want %+v ratio %g", b.Bound, b.Ratio, want, 4207/want.OutputTokPerS)
	}
	// Without the server's counts, the spec's.
	m.InputTokensFromServer = false
	if b, _ := rf.bound(spec, 0, m); b == nil || b.PromptTokens != 1024 {
		t.Errorf("without usage: %+v", b)
	}
	for _, c := range []struct {
		spec        Spec
		concurrency int
		failed      int
		want        string
	}{
		{Custom(64, 1024, 128, Arrival{Pattern: Poisson, Rate: 4}), 0, 0, "arrivals are poisson 4 RPS"},
		{spec, 8, 0, "--concurrency 8 < 64 requests"},
		{Builtin()[2], 0, 0, "one prompt length and one output length"}, // paged_attention: a burst of [128, 384]
		{spec, 64, 2, "2 of 64 requests failed"},
	} {
		mm := m
		mm.Failed, mm.Completed = c.failed, 64-c.failed
		if b, note := rf.bound(c.spec, c.concurrency, mm); b != nil || !strings.Contains(note, c.want) {
			t.Errorf("%s: bound %v note %q, want a note containing %q", c.spec.Name, b, note, c.want)
		}
	}
}

// Through Execute: a sweep's runs get their queue trend and the report
// its saturation; a burst's run its bound; the Markdown says both.
func TestExecuteSweepAndBound(t *testing.T) {
	f := newFake(t, "")
	clock := trace.NewClock()
	cl, _ := NewClient(ClientConfig{BaseURL: f.URL, Model: "fake-model"}, clock)
	defer cl.Close()
	rf := &Roofline{Model: roofline.Model{Layers: 2, Hidden: 64, Intermediate: 128, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 4096, Tied: true, DTypeBytes: 2},
		Rates: roofline.Rates{MatmulTFLOPS: 100, MemoryGBps: 1000}}
	b := &Bench{Client: cl, Clock: clock, Roofline: rf}
	sweep, err := Sweep([]float64{400, 800}, 12, 8, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := b.Execute(context.Background(), Plan{Workloads: sweep, Seed: 1, RepeatRuns: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Saturation == nil || len(rep.Saturation.Levels) != 2 || rep.Saturation.TPOTP99LimitMS != DefaultSaturationTPOTms {
		t.Fatalf("saturation %+v", rep.Saturation)
	}
	for _, w := range rep.Workloads {
		if q := w.Runs[0].Queue; q == nil || (q.Growth == nil && q.Note == "") {
			t.Errorf("%s: queue trend %+v", w.Spec.Name, q)
		}
		if w.Runs[0].Bound != nil || !strings.Contains(w.Runs[0].BoundNote, "no bound") {
			t.Errorf("%s: a Poisson level got a bound (%+v) or no note", w.Spec.Name, w.Runs[0].Bound)
		}
	}
	if md := rep.Markdown(); !strings.Contains(md, "### Saturation") || !strings.Contains(md, "| 400 |") {
		t.Errorf("Markdown lacks the saturation:\n%s", md)
	}

	rep, err = b.Execute(context.Background(), Plan{Workloads: []Spec{Custom(4, 8, 3, Arrival{Pattern: Burst})}, Seed: 1, RepeatRuns: 1, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	run := rep.Workloads[0].Runs[0]
	if run.Bound == nil || run.Bound.Streams != 4 || run.Bound.PromptTokens != 7 || run.Bound.OutputTokens != 3 || !(run.Bound.Ratio > 0) || run.Queue != nil {
		t.Fatalf("burst run: bound %+v queue %+v note %q", run.Bound, run.Queue, run.BoundNote)
	}
	if rep.Saturation != nil {
		t.Errorf("one burst got a saturation verdict")
	}
	if md := rep.Markdown(); !strings.Contains(md, "**Bound** (custom_n4_p8_t3): 4 streams of 7 prompt + 3 output tokens") {
		t.Errorf("Markdown lacks the bound:\n%s", md)
	}
}
