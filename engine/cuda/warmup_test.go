package cuda

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/treni-top/treni-top/trace"
)

func TestBackgroundItems(t *testing.T) {
	buckets := DefaultGraphBuckets()
	got := backgroundItems([]int{64, 32, 128, 256}, buckets, 128, 12, true)
	want := []warmItem{{"gemm", 64}, {"gemm", 32}, {"gemm", 128}, {"graph", 2}, {"graph", 4}, {"graph", 8}, {"graph", 16}}
	if !slices.Equal(got, want) {
		t.Fatalf("items for max batch 12, scratch 128:\n got %v\nwant %v", got, want)
	}
	if got := backgroundItems([]int{8}, buckets, 256, 0, true); len(got) != 1+len(buckets)-1 || got[len(got)-1] != (warmItem{"graph", 256}) {
		t.Errorf("max batch 0 should warm every bucket above 1: %v", got)
	}
	if got := backgroundItems([]int{8}, buckets, 256, 64, false); !slices.Equal(got, []warmItem{{"gemm", 8}}) {
		t.Errorf("graphs off: %v", got)
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
		items := []warmItem{{"gemm", 64}, {"gemm", 32}, {"graph", 2}}
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
	b.warmBackground(ctx, []warmItem{{"gemm", 8}, {"gemm", 16}}, func(context.Context, warmItem) error {
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
		items := []warmItem{{"graph", 8}, {"graph", 64}}
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
		b.warmBackground(context.Background(), []warmItem{{"gemm", 8}, {what: "staging"}, {what: "inplace"}, {what: "inplace"}}, func(_ context.Context, it warmItem) error {
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
