package cpu

import (
	"sync/atomic"
	"testing"
)

// countTask counts how often each item ran and on which worker.
type countTask struct {
	hits    []atomic.Int32
	workers []atomic.Int32
}

func (c *countTask) runItem(worker, item int) {
	c.hits[item].Add(1)
	c.workers[worker].Add(1)
}

// Every item of every run runs exactly once, across many runs of varying
// size, with workers waking late or not at all.
func TestPoolRunsEachItemOnce(t *testing.T) {
	p := newPool(4)
	defer p.close()
	c := &countTask{hits: make([]atomic.Int32, 300), workers: make([]atomic.Int32, 4)}
	for r := range 3000 {
		items := 1 + (r*37)%300
		for i := range items {
			c.hits[i].Store(0)
		}
		p.run(c, items)
		for i := range items {
			if n := c.hits[i].Load(); n != 1 {
				t.Fatalf("run %d: item %d of %d ran %d times", r, i, items, n)
			}
		}
	}
	if c.workers[0].Load() == 0 {
		t.Fatal("the calling goroutine did no work")
	}
}

// The step goroutine never waits for a worker that has not started: with
// workers that never get to run at all (no goroutine behind them), run
// still completes, on the caller alone, and again on the next run.
func TestPoolDoesNotWaitForUnstartedWorkers(t *testing.T) {
	p := &pool{n: 3, wake: []chan struct{}{nil, make(chan struct{}, 1), make(chan struct{}, 1)}}
	c := &countTask{hits: make([]atomic.Int32, 50), workers: make([]atomic.Int32, 3)}
	for range 3 {
		p.run(c, 50)
	}
	if got := c.workers[0].Load(); got != 150 {
		t.Fatalf("caller ran %d items, want all 150", got)
	}
	for i := range c.hits {
		if c.hits[i].Load() != 3 {
			t.Fatalf("item %d ran %d times in 3 runs", i, c.hits[i].Load())
		}
	}
}
