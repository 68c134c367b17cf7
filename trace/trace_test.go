package trace

import (
	"encoding/json"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"
)

const ms = time.Millisecond

func allKinds() []Event {
	return []Event{
		{At: 5 * ms, Kind: KindStage, Stage: &Span{Name: StageTensorIndexBuild, Start: 1 * ms, End: 5 * ms, Source: "engine", Workers: 2, Attrs: Attrs{"tensors": 398.0, "file": "model.safetensors"}}},
		{At: 6 * ms, Kind: KindStage, Run: 1, Stage: &Span{Name: StagePageCache, Start: 2 * ms, End: 6 * ms, Open: true}},
		{At: 7 * ms, Kind: KindSample, Sample: &Sample{Source: GPUSource(0), Values: map[string]float64{MetricGPUMemUsed: 1 << 30, MetricGPUUtil: 42.5}}},
		{At: 8 * ms, Kind: KindRequest, Request: &Request{ID: "r1", Label: "cold_1", Phase: PhaseCold, Endpoint: "chat", Sent: 8 * ms,
			FirstByte: 2 * ms, FirstEvent: 3 * ms, FirstToken: 4 * ms, Tokens: []time.Duration{4 * ms, 6 * ms, 9 * ms}, MultiTokenChunks: 1,
			End: 10 * ms, PromptTokens: 12, CompletionTokens: 4, Status: 200, Done: true}},
		{At: 9 * ms, Kind: KindLog, Log: &Log{Stream: "stderr", PID: 77, Text: "Loading weights took 3.41 seconds", Stage: StageDecoderTensorUpload}},
		{At: 10 * ms, Kind: KindProcess, Process: &Process{Action: ProcessStart, PID: 77, Command: []string{"vllm", "serve", "x"}, ServerKind: "vllm"}},
		{At: 11 * ms, Kind: KindProcess, Process: &Process{Action: ProcessExit, PID: 77, ExitCode: 3, Signal: "killed", Expected: false}},
		{At: 12 * ms, Kind: KindMarker, Marker: &Marker{Name: MarkerHealthy, Attrs: Attrs{"url": "http://127.0.0.1:8000/health"}}},
	}
}

func TestEventRoundTrip(t *testing.T) {
	for _, e := range allKinds() {
		if err := e.Validate(); err != nil {
			t.Fatalf("%s: %v", e.Kind, err)
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", e.Kind, err)
		}
		if !reflect.DeepEqual(e, back) {
			t.Errorf("%s round trip differs:\n in  %+v\n out %+v\n json %s", e.Kind, e, back, b)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	bad := []Event{
		{Kind: "bogus"},
		{Kind: KindStage},
		{Kind: KindSample},
		{At: -1, Kind: KindMarker, Marker: &Marker{Name: "x"}},
		{Kind: KindStage, Stage: &Span{Name: StageWarmup, Start: 5, End: 4}},
	}
	for _, e := range bad {
		if e.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want error", e)
		}
	}
}

func TestRequestMetrics(t *testing.T) {
	r := allKinds()[3].Request
	if r.TTFT() != 4*ms || r.E2E() != 10*ms {
		t.Fatalf("TTFT %v E2E %v", r.TTFT(), r.E2E())
	}
	if got := r.ITLs(); !reflect.DeepEqual(got, []time.Duration{2 * ms, 3 * ms}) {
		t.Fatalf("ITLs %v", got)
	}
	// TPOT = (E2E − TTFT) / (N − 1) with N from usage (4), not chunk count.
	if got := r.TPOT(); got != 2*ms {
		t.Fatalf("TPOT %v, want 2ms", got)
	}
	r2 := Request{FirstToken: 4 * ms, End: 4 * ms, Tokens: []time.Duration{4 * ms}}
	if r2.TPOT() != 0 || r2.ITLs() != nil {
		t.Fatalf("single-token request: TPOT %v ITLs %v", r2.TPOT(), r2.ITLs())
	}
}

func iv(a, b int) Interval { return Interval{time.Duration(a) * ms, time.Duration(b) * ms} }

func TestUnionAndGaps(t *testing.T) {
	got := Union([]Interval{iv(5, 10), iv(0, 2), iv(8, 12), iv(12, 13), iv(20, 20), iv(1, 3)})
	want := []Interval{iv(0, 3), iv(5, 13)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Union = %v, want %v", got, want)
	}
	if c := Covered([]Interval{iv(0, 10), iv(2, 4), iv(8, 15)}); c != 15*ms {
		t.Fatalf("Covered = %v", c)
	}
	gaps := Gaps([]Interval{iv(2, 4), iv(6, 8)}, iv(0, 10))
	if !reflect.DeepEqual(gaps, []Interval{iv(0, 2), iv(4, 6), iv(8, 10)}) {
		t.Fatalf("Gaps = %v", gaps)
	}
}

func span(name Stage, a, b int) Span {
	return Span{Name: name, Start: time.Duration(a) * ms, End: time.Duration(b) * ms}
}

// A cold start shaped like the built-in engine's: CUDA init in parallel
// with page cache and index build (overlap), the tokenizer nested inside
// the page cache, a gap before the upload, then upload and HTTP.
func engineSpans() []Span {
	return []Span{
		span(StageProcessStart, 0, 10),
		span(StageRuntimeInit, 10, 20),
		span(StageCUDAInit, 20, 320),
		span(StagePageCache, 20, 220),
		span(StageTokenizerLoad, 50, 80), // nested in page_cache
		span(StageTensorIndexBuild, 20, 25),
		span(StageDecoderTensorUpload, 340, 840),
		span(StageHTTPReady, 840, 850),
	}
}

func TestAttributeOverlapAndNesting(t *testing.T) {
	a := Attribute(engineSpans(), iv(0, 900))
	if a.Total != 900*ms {
		t.Fatalf("Total %v", a.Total)
	}
	// Covered: [0,320) ∪ [340,850) = 320 + 510 = 830; unattributed 70.
	if a.Attributed != 830*ms || a.Unattributed != 70*ms {
		t.Fatalf("attributed %v unattributed %v", a.Attributed, a.Unattributed)
	}
	if !reflect.DeepEqual(a.Gaps, []Interval{iv(320, 340), iv(850, 900)}) {
		t.Fatalf("gaps %v", a.Gaps)
	}
	up, _ := a.Stage(StageDecoderTensorUpload)
	if up.Duration != 500*ms || up.Exclusive != 500*ms || len(up.Overlaps) != 0 {
		t.Fatalf("upload row %+v", up)
	}
	if up.Share < 0.555 || up.Share > 0.556 {
		t.Fatalf("upload share %v, want 500/900", up.Share)
	}
	pc, _ := a.Stage(StagePageCache)
	// page_cache [20,220) overlaps cuda_init entirely: no exclusive time.
	if pc.Exclusive != 0 {
		t.Fatalf("page_cache exclusive %v, want 0", pc.Exclusive)
	}
	want := map[Stage]bool{StageCUDAInit: true, StageTokenizerLoad: true, StageTensorIndexBuild: true}
	if len(pc.Overlaps) != len(want) {
		t.Fatalf("page_cache overlaps %v", pc.Overlaps)
	}
	for _, o := range pc.Overlaps {
		if !want[o] {
			t.Fatalf("unexpected overlap %s", o)
		}
	}
	cu, _ := a.Stage(StageCUDAInit)
	// cuda_init exclusive: [220,320) only.
	if cu.Exclusive != 100*ms {
		t.Fatalf("cuda_init exclusive %v", cu.Exclusive)
	}
	if a.Dominant != StageDecoderTensorUpload {
		t.Fatalf("dominant %s", a.Dominant)
	}
}

func TestAttributeMergesSameNameAndClips(t *testing.T) {
	spans := []Span{span(StageDecoderTensorUpload, 0, 40), span(StageDecoderTensorUpload, 30, 60), span(StageWarmup, 90, 200)}
	a := Attribute(spans, iv(0, 100))
	up, _ := a.Stage(StageDecoderTensorUpload)
	if up.Duration != 60*ms || up.Spans != 2 {
		t.Fatalf("merged upload %+v", up)
	}
	w, _ := a.Stage(StageWarmup)
	if w.Duration != 10*ms {
		t.Fatalf("clipped warmup %v", w.Duration)
	}
	if a.Unattributed != 30*ms || a.Dominant != StageDecoderTensorUpload {
		t.Fatalf("unattributed %v dominant %s", a.Unattributed, a.Dominant)
	}
}

func TestDominantGap(t *testing.T) {
	a := Attribute([]Span{span(StageRuntimeInit, 0, 10)}, iv(0, 100))
	if a.Dominant != StageUnattributed {
		t.Fatalf("dominant %s, want unattributed", a.Dominant)
	}
}

func TestCriticalPath(t *testing.T) {
	p := CriticalPath(engineSpans(), iv(0, 900))
	var names []Stage
	var total time.Duration
	prev := time.Duration(0)
	for _, st := range p {
		if st.Start != prev {
			t.Fatalf("path does not tile the window at %v: %+v", prev, p)
		}
		prev = st.End
		total += st.End - st.Start
		names = append(names, st.Name)
	}
	if total != 900*ms {
		t.Fatalf("path covers %v", total)
	}
	want := []Stage{StageProcessStart, StageRuntimeInit, StageCUDAInit, StageUnattributed, StageDecoderTensorUpload, StageHTTPReady, StageUnattributed}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("critical path %v, want %v", names, want)
	}
}

func TestStageLineRoundTrip(t *testing.T) {
	start := time.Unix(1_700_000_000, 123456789)
	l := NewStageLine(StageKVAlloc, start, start.Add(7*ms), Attrs{AttrBlocks: 512.0, AttrBytes: 1048576.0})
	l.PID = 42
	back, err := ParseStageLine(string(l.Marshal()) + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, l) {
		t.Fatalf("round trip %+v vs %+v", back, l)
	}
	sp := back.Span(ClockAt(start.Add(-time.Second)))
	if sp.Start != time.Second || sp.Duration() != 7*ms || sp.Source != "engine" {
		t.Fatalf("span %+v", sp)
	}
	for _, bad := range []string{
		`INFO plain log line`,
		`{"treni_stage":"v1","stage":"nope","start_ns":1,"end_ns":2}`,
		`{"treni_stage":"v9","stage":"warmup","start_ns":1,"end_ns":2}`,
		`{"treni_stage":"v1","stage":"warmup","start_ns":3,"end_ns":2}`,
		`{"treni_stage":"v1","stage":`,
	} {
		if _, err := ParseStageLine(bad); err == nil {
			t.Errorf("ParseStageLine(%q) accepted", bad)
		}
	}
	if _, err := ParseStageLine("hello"); err != ErrNotStageLine {
		t.Errorf("plain line: %v", err)
	}
}

func TestBusDeliversEverythingInOrder(t *testing.T) {
	b := NewBus()
	fast, slow := b.Subscribe(), b.Subscribe()
	const producers, each = 4, 500
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				b.Emit(Event{At: time.Duration(i), Kind: KindMarker, Marker: &Marker{Name: "m", Attrs: Attrs{"p": float64(p)}}})
			}
		}(p)
	}
	count := func(s *Subscription, delay bool) chan map[float64]time.Duration {
		out := make(chan map[float64]time.Duration, 1)
		go func() {
			last := map[float64]time.Duration{}
			n := 0
			for e := range s.Events() {
				if delay && n%100 == 0 {
					time.Sleep(time.Millisecond)
				}
				p, _ := e.Marker.Attrs.Float("p")
				if prev, ok := last[p]; ok && e.At != prev+1 {
					t.Errorf("producer %v: %v after %v", p, e.At, prev)
				}
				last[p] = e.At
				n++
			}
			if n != producers*each {
				t.Errorf("got %d events, want %d", n, producers*each)
			}
			out <- last
		}()
		return out
	}
	f, s := count(fast, false), count(slow, true)
	wg.Wait()
	b.Close()
	<-f
	<-s
	b.Emit(Event{Kind: KindMarker, Marker: &Marker{Name: "after close"}}) // ignored, no panic
	if _, open := <-b.Subscribe().Events(); open {
		t.Fatal("subscription to a closed bus is open")
	}
}

func TestSubscriptionCancelDoesNotLeak(t *testing.T) {
	b := NewBus()
	s := b.Subscribe()
	for i := 0; i < 10; i++ {
		b.Emit(Event{Kind: KindMarker, Marker: &Marker{Name: "x"}})
	}
	<-s.Events() // the pump is now blocked sending the second event
	done := make(chan struct{})
	go func() { s.Cancel(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Cancel did not return")
	}
	b.Emit(Event{Kind: KindMarker, Marker: &Marker{Name: "after cancel"}})
	b.Close()
}

// TestBoundedBusWaits: a bounded bus's Emit waits while the subscriber's
// queue is full, delivers everything in order once it reads, and a
// cancelled subscription releases a waiting producer.
func TestBoundedBusWaits(t *testing.T) {
	const limit, n = 16, 50 * 16
	for _, cancel := range []bool{false, true} {
		b := NewBoundedBus(limit)
		s := b.Subscribe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < n; i++ {
				b.Emit(Event{At: time.Duration(i), Kind: KindMarker, Marker: &Marker{Name: "m"}})
			}
			b.Close()
		}()
		queued := func() int {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.queue)
		}
		for queued() < limit {
			runtime.Gosched() // the producer fills the queue, the consumer reads nothing
		}
		select {
		case <-done:
			t.Fatal("every event was emitted though the consumer read none")
		default:
		}
		if q := queued(); q > limit {
			t.Fatalf("%d events queued, limit %d", q, limit)
		}
		if cancel {
			s.Cancel()
			<-done // a producer waiting on room is released
			continue
		}
		i := 0
		for e := range s.Events() {
			if e.At != time.Duration(i) {
				t.Fatalf("event %d has offset %v", i, e.At)
			}
			if q := queued(); q > limit {
				t.Fatalf("%d events queued, limit %d", q, limit)
			}
			i++
		}
		<-done
		if i != n {
			t.Fatalf("got %d events, want %d", i, n)
		}
	}
}

func TestStageTaxonomy(t *testing.T) {
	seen := map[Stage]bool{}
	for i, s := range Stages() {
		if seen[s] || !s.Valid() || s.Order() != i || s.Description() == "unknown stage" {
			t.Fatalf("stage %q broken", s)
		}
		seen[s] = true
	}
	if len(seen) != 17 || Stage("x").Valid() || StageUnattributed.Valid() {
		t.Fatal("taxonomy must be the 17 stages of docs/ARCHITECTURE.md, Stages")
	}
}
