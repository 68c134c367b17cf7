package cpu

import (
	"sync"
	"sync/atomic"
)

// task is a parallel loop body: runItem processes item i on the given worker
// (worker ids index per-worker scratch buffers). Tasks are preallocated
// structs held by the Backend, so dispatching one allocates nothing.
type task interface {
	runItem(worker, item int)
}

// pool is the Backend's worker pool: n-1 goroutines plus the calling
// goroutine, which works too instead of idling at a barrier. Items are taken
// from a shared atomic counter rather than split statically, because on a
// shared machine one core is often slower than the other and a static split
// waits for the slowest.
type pool struct {
	n     int
	start []chan task
	wg    sync.WaitGroup // one run's workers
	exit  sync.WaitGroup // worker goroutines, for close

	items int
	next  atomic.Int64
}

func newPool(n int) *pool {
	if n < 1 {
		n = 1
	}
	p := &pool{n: n, start: make([]chan task, n)}
	for w := 1; w < n; w++ {
		ch := make(chan task)
		p.start[w] = ch
		p.exit.Add(1)
		go func(w int) {
			defer p.exit.Done()
			for t := range ch {
				p.loop(t, w)
				p.wg.Done()
			}
		}(w)
	}
	return p
}

func (p *pool) loop(t task, w int) {
	for {
		i := int(p.next.Add(1) - 1)
		if i >= p.items {
			return
		}
		t.runItem(w, i)
	}
}

// run executes t.runItem for items 0..items-1 across the pool and returns
// when all are done. Only one run is in flight at a time (the Backend holds
// its mutex); small runs stay on the caller's goroutine.
func (p *pool) run(t task, items int) {
	if items <= 0 {
		return
	}
	p.items = items
	p.next.Store(0)
	helpers := p.n - 1
	if helpers > items-1 {
		helpers = items - 1
	}
	p.wg.Add(helpers)
	for w := 1; w <= helpers; w++ {
		p.start[w] <- t
	}
	p.loop(t, 0)
	p.wg.Wait()
}

// close stops the worker goroutines and waits for them to exit.
func (p *pool) close() {
	for w := 1; w < p.n; w++ {
		close(p.start[w])
	}
	p.exit.Wait()
}
