package cuda

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/trace"
)

// TestBackgroundItems: the prefill buckets' GEMMs, then each decode
// bucket's five plans and its graph, up to the batch limit.
func TestBackgroundItems(t *testing.T) {
	buckets := DefaultGraphBuckets()
	got := backgroundItems([]int{64, 32, 128, 256}, buckets, 128, 12, true)
	want := []warmItem{{what: "gemm", rows: 64}, {what: "gemm", rows: 32}, {what: "gemm", rows: 128}}
	for _, Bk := range []int{2, 4, 8, 16} {
		for i := range stepGemmCount {
			want = append(want, warmItem{what: "plan", rows: Bk, gemm: i})
		}
		want = append(want, warmItem{what: "graph", rows: Bk})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("items for max batch 12, scratch 128:\n got %v\nwant %v", got, want)
	}
	if got := backgroundItems([]int{8}, buckets, 256, 0, true); len(got) != 1+(stepGemmCount+1)*(len(buckets)-1) || got[len(got)-1] != (warmItem{what: "graph", rows: 256}) {
		t.Errorf("max batch 0 should warm every bucket above 1: %v", got)
	}
	if got := backgroundItems([]int{8}, buckets, 256, 64, false); !slices.Equal(got, []warmItem{{what: "gemm", rows: 8}}) {
		t.Errorf("graphs off: %v", got)
	}
	if s := (warmItem{what: "plan", rows: 64, gemm: 4}).String(); s != "plan 64/4" {
		t.Errorf("a plan item is named %q", s)
	}
}

// TestCaptureReady: a bucket's graph is captured without an eager step
// first only once every GEMM it runs on cuBLASLt has run in the context;
// under GemmAuto those are the GEMMs of more than SkinnyAutoRows rows,
// under GemmCublasLt all of them, under GemmSkinny those gemm_skinny does
// not fit.
func TestCaptureReady(t *testing.T) {
	b := &Backend{opts: BackendOptions{Gemm: GemmAuto}, cfg: model.Config{HiddenSize: 2560, IntermediateSize: 9728, VocabSize: 151936},
		qDim: 4096, qkvDim: 6144, capT: 256, capRows: 64}
	if !b.captureReady(8) {
		t.Error("8 rows (all on gemm_skinny) not ready")
	}
	if b.captureReady(32) {
		t.Error("32 rows ready before cuBLASLt ran their shapes")
	}
	gs := b.decodeGemms(32)
	if len(gs) != stepGemmCount {
		t.Fatalf("a 32-row decode step has %d GEMMs, want %d (the LM head's included)", len(gs), stepGemmCount)
	}
	for _, g := range gs[:4] {
		b.warm.ran(g.shape)
	}
	if b.captureReady(32) {
		t.Error("32 rows ready before cuBLASLt ran the LM head's shape")
	}
	b.warm.ran(gs[4].shape)
	if !b.captureReady(32) {
		t.Error("32 rows not ready once every shape ran")
	}
	if n := len(b.decodeGemms(128)); n != 4 {
		t.Errorf("a 128-row decode step past the 64 logits rows has %d GEMMs, want 4", n)
	}
	b.opts.Gemm = GemmCublasLt
	if b.captureReady(8) {
		t.Error("under GemmCublasLt, 8 rows ready before cuBLASLt ran their shapes")
	}
	b.opts.Gemm = GemmSkinny
	if !b.captureReady(64) || !b.capturedOnBLAS(GemmShape{M: 65, N: 2560, K: 4096}) {
		t.Error("under GemmSkinny: 64 rows wait, or 65 rows stay on gemm_skinny")
	}
	// No cuBLASLt here: a plan item does nothing.
	if err := b.warmPlan(32, 0); err != nil {
		t.Errorf("plan item without cuBLASLt: %v", err)
	}
}

// The background warm-up runs no item while a step is pending, runs them
// all in order once none is, and reports one warmup stage of kind
// "background" with the items that failed named in its error. The bubble
// makes "the warm-up is waiting" observable: synctest.Wait returns once it
// sleeps between its checks.
func TestWarmBackgroundYieldsToSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stages []StageRecord
		b := &Backend{r: NewRunner(), opts: BackendOptions{Stage: func(r StageRecord) { stages = append(stages, r) }}}
		defer b.r.Close()
		items := []warmItem{{what: "gemm", rows: 64}, {what: "gemm", rows: 32}, {what: "graph", rows: 2}}
		var ran []warmItem
		b.pending.Add(1) // a step is waiting
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.warmBackground(context.Background(), items, func(_ context.Context, it warmItem) error {
				ran = append(ran, it)
				if it.what == "graph" {
					return errors.New("capture refused")
				}
				if it.rows == 32 {
					time.Sleep(3 * time.Millisecond) // the longest item
				}
				return nil
			}, nil)
		}()
		synctest.Wait()
		if len(ran) != 0 {
			t.Fatalf("items %v ran while a step was pending", ran)
		}
		// The pending step takes the backend and finishes.
		b.mu.Lock()
		b.pending.Add(-1)
		b.mu.Unlock()
		<-done
		if !slices.Equal(ran, items) {
			t.Fatalf("ran %v, want %v", ran, items)
		}
		if len(stages) != 1 || stages[0].Stage != trace.StageWarmup {
			t.Fatalf("stages %v, want one warmup", stages)
		}
		a := stages[0].Attrs
		if a["kind"] != "background" || a["items"] != 2 || a["gemm_buckets"] != 2 || a["graphs"] != 0 || a["yields"].(int) < 1 {
			t.Errorf("attrs %v", a)
		}
		if a["max_item"] != "gemm 32" || a["max_item_ms"] != 3.0 {
			t.Errorf("longest item %v, %v ms; want gemm 32, 3 ms", a["max_item"], a["max_item_ms"])
		}
		if by, _ := a["max_ms_by_kind"].(map[string]float64); by["gemm"] != 3.0 || by["graph"] != 0 || len(by) != 2 {
			t.Errorf("max_ms_by_kind %v, want gemm 3 ms and graph 0 ms", a["max_ms_by_kind"])
		}
		if got, want := a["longest_items"], []string{"gemm 32 3.0 ms", "gemm 64 0.0 ms", "graph 2 0.0 ms"}; !slices.Equal(got.([]string), want) {
			t.Errorf("longest_items %v, want %v", got, want)
		}
		if e, _ := a["error"].(string); e != "graph 2: capture refused" {
			t.Errorf("error attr %q", e)
		}
		// The stage ends with the process's resident memory (Linux).
		if runtime.GOOS == "linux" {
			rss, _ := a["rss_mb"].(float64)
			anon, _ := a["rss_anon_mb"].(float64)
			file, _ := a["rss_file_mb"].(float64)
			if rss <= 0 || anon <= 0 || anon+file > rss+1 {
				t.Errorf("resident memory attrs: rss %v, anonymous %v, file %v", a["rss_mb"], a["rss_anon_mb"], a["rss_file_mb"])
			}
		}
	})
}

// A cancelled warm-up stops between items and reports nothing.
func TestWarmBackgroundStops(t *testing.T) {
	var stages []StageRecord
	b := &Backend{r: NewRunner(), opts: BackendOptions{Stage: func(r StageRecord) { stages = append(stages, r) }}}
	defer b.r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	b.warmBackground(ctx, []warmItem{{what: "gemm", rows: 8}, {what: "gemm", rows: 16}}, func(context.Context, warmItem) error {
		n++
		cancel()
		return nil
	}, nil)
	if n != 1 || len(stages) != 0 {
		t.Errorf("after cancel: %d items ran, stages %v", n, stages)
	}
}

// An item whose gate gives a channel waits for it to close, without
// holding the backend (a step can run meanwhile); the items before it run
// at once.
func TestWarmBackgroundGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &Backend{r: NewRunner()}
		defer b.r.Close()
		items := []warmItem{{what: "graph", rows: 8}, {what: "graph", rows: 64}}
		open := make(chan struct{})
		var ran []warmItem
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.warmBackground(context.Background(), items, func(_ context.Context, it warmItem) error {
				ran = append(ran, it)
				return nil
			}, func(it warmItem) <-chan struct{} {
				if it.rows > 8 {
					return open
				}
				return nil
			})
		}()
		synctest.Wait()
		if !slices.Equal(ran, items[:1]) {
			t.Fatalf("before the gate opened: ran %v, want %v", ran, items[:1])
		}
		if !b.mu.TryLock() {
			t.Fatal("the gated warm-up holds the backend")
		}
		b.mu.Unlock()
		close(open)
		<-done
		if !slices.Equal(ran, items) {
			t.Fatalf("ran %v, want %v", ran, items)
		}
	})
}

// TestWarmBackgroundInPlaceWaitsForQuiet: the in-place release runs only
// once no step has finished for stagingQuiet (a step ends 50 ms in, so
// not before 150 ms), while other items, the ring's release included,
// wait for no pause.
func TestWarmBackgroundInPlaceWaitsForQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &Backend{r: NewRunner()}
		defer b.r.Close()
		start := time.Now()
		b.lastDone.Store(start.UnixNano()) // a step just finished
		go func() {
			time.Sleep(50 * time.Millisecond)
			b.lastDone.Store(time.Now().UnixNano()) // another one
		}()
		ranAt := map[string]time.Duration{}
		b.warmBackground(context.Background(), []warmItem{{what: "gemm", rows: 8}, {what: "staging"}, {what: "inplace"}, {what: "inplace"}}, func(_ context.Context, it warmItem) error {
			if _, ok := ranAt[it.what]; !ok {
				ranAt[it.what] = time.Since(start)
			}
			return nil
		}, nil)
		if ranAt["gemm"] != 0 || ranAt["staging"] != 0 {
			t.Errorf("a GEMM item waited %v and the ring's release %v for a pause", ranAt["gemm"], ranAt["staging"])
		}
		if got := ranAt["inplace"]; got < 50*time.Millisecond+stagingQuiet {
			t.Errorf("the in-place release ran %v after start, %v after the last step", got, got-50*time.Millisecond)
		}
	})
}

// TestInPlaceWait: an in-place release step waits for a stagingQuiet
// pause until stagingForceAfter has passed since the first step was due;
// after that, for stagingForceGap after the previous step, or for the
// pause if it comes sooner.
func TestInPlaceWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, c := range []struct {
		name                 string
		now, done, due, last time.Time
		want                 time.Duration
		forced               bool // when want ≤ 0: by the deadline, not a pause
	}{
		{"a step just ended, release just due", ms(0), ms(0), ms(0), time.Time{}, stagingQuiet, true},
		{"paused long enough", ms(500), ms(300), ms(0), time.Time{}, stagingQuiet - 200*time.Millisecond, false},
		{"steady load, before the deadline", ms(1000), ms(995), ms(0), time.Time{}, stagingQuiet - 5*time.Millisecond, true},
		{"steady load, the deadline nearer than the pause", ms(1950), ms(1990), ms(0), time.Time{}, 50 * time.Millisecond, true},
		{"steady load, past the deadline, first forced step", ms(2000), ms(1999), ms(0), time.Time{}, 0, true},
		{"steady load, past the deadline, 100 ms after a step (the next pause could come sooner than the gap)", ms(2400), ms(2399), ms(0), ms(2300), stagingQuiet - time.Millisecond, true},
		{"steady load, past the deadline, 200 ms after a step", ms(2500), ms(2499), ms(0), ms(2300), stagingForceGap - 200*time.Millisecond, true},
		{"past the deadline, a pause sooner than the gap", ms(2400), ms(2350), ms(0), ms(2390), stagingQuiet - 50*time.Millisecond, true},
		{"past the deadline, the gap over", ms(2600), ms(2599), ms(0), ms(2300), stagingForceGap - 300*time.Millisecond, true},
		{"past the deadline, the gap over and a pause too", ms(2600), ms(2450), ms(0), ms(2300), stagingQuiet - 150*time.Millisecond, false},
	} {
		got, forced := inPlaceWait(c.now, c.done, c.due, c.last)
		if got != c.want {
			t.Errorf("%s: inPlaceWait = %v, want %v", c.name, got, c.want)
		}
		if got <= 0 && forced != c.forced {
			t.Errorf("%s: forced %v, want %v", c.name, forced, c.forced)
		}
	}
}

// TestWarmBackgroundInPlaceUnderSteadyLoad: with a step finishing every
// 20 ms and no pause for 30 s, the in-place release still runs within
// the load: no step before stagingForceAfter, then one step per
// stagingForceGap at most, each counted as forced in the background
// stage.
func TestWarmBackgroundInPlaceUnderSteadyLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stages []StageRecord
		b := &Backend{r: NewRunner(), opts: BackendOptions{Stage: func(r StageRecord) { stages = append(stages, r) }}}
		defer b.r.Close()
		start := time.Now()
		// A step has just finished when the release becomes due: stored
		// here, not left to the load goroutine, which may run after the
		// background's first look (lastDone 0 would read as a long pause).
		b.lastDone.Store(start.UnixNano())
		ctx, stop := context.WithCancel(context.Background())
		loadDone := make(chan struct{})
		defer func() { stop(); <-loadDone }()
		// The load lasts loadFor: a release that waits for a pause runs
		// only after it, and fails the test rather than hanging it.
		const loadFor = 30 * time.Second
		go func() {
			defer close(loadDone)
			for ctx.Err() == nil && time.Since(start) < loadFor {
				b.lastDone.Store(time.Now().UnixNano())
				time.Sleep(20 * time.Millisecond)
			}
		}()
		var ranAt []time.Duration
		b.warmBackground(context.Background(), []warmItem{{what: "staging"}, {what: "inplace"}, {what: "inplace"}, {what: "inplace"}},
			func(_ context.Context, it warmItem) error {
				if it.what == "inplace" {
					ranAt = append(ranAt, time.Since(start))
				}
				return nil
			}, nil)
		if len(ranAt) != 3 {
			t.Fatalf("%d of 3 in-place steps ran", len(ranAt))
		}
		if last := ranAt[len(ranAt)-1]; last >= loadFor {
			t.Errorf("the last in-place step ran %v after start, after the load ended: it waited for a pause", last)
		}
		if ranAt[0] < stagingForceAfter {
			t.Errorf("the first forced step ran %v after start, before the %v deadline", ranAt[0], stagingForceAfter)
		}
		for i := 1; i < len(ranAt); i++ {
			if gap := ranAt[i] - ranAt[i-1]; gap < stagingForceGap {
				t.Errorf("in-place steps %d and %d ran %v apart, less than %v", i-1, i, gap, stagingForceGap)
			}
		}
		if len(stages) != 1 || stages[0].Attrs["inplace_forced_steps"] != 3 {
			t.Errorf("background stage: %+v, want inplace_forced_steps 3", stages)
		}
	})
}

// The staging ring is released before the background's other items (the
// process's peak was the ring beside the aside thread's cuBLASLt growth),
// the in-place registrations after them (each waits for a pause).
func TestWithLeftoversOrder(t *testing.T) {
	items := []warmItem{{what: "gemm", rows: 8}, {what: "plan", rows: 16}, {what: "graph", rows: 16}}
	got := withLeftovers(items, 3, 2)
	var names []string
	for _, it := range got {
		names = append(names, it.String())
	}
	want := "staging staging staging gemm 8 plan 16/0 graph 16 inplace inplace"
	if s := strings.Join(names, " "); s != want {
		t.Errorf("items %q, want %q", s, want)
	}
	if got := withLeftovers(items, 0, 0); len(got) != 3 {
		t.Errorf("no leftovers: %d items, want 3", len(got))
	}
}
