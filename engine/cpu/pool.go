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

// runner runs a task's items in parallel and returns when all are done;
// pool is the implementation (the benchmarks compare it with others).
type runner interface {
	run(t task, items int)
	close()
}

// pool is the Backend's worker pool: n-1 goroutines plus the calling (step)
// goroutine, which works too. Items are claimed one at a time from a shared
// counter rather than split statically, because on a shared machine one core
// is often slower than the other and a static split waits for the slowest.
//
// The step goroutine never waits for a worker that has not started: waking
// a worker is a non-blocking signal, and run returns as soon as every item
// is done, whoever did it. It waits only for items a worker has claimed and
// is still running. A worker that wakes late finds its run over (every item
// claimed) and goes back to sleep. This is what keeps the batch-1 ITL tail
// short on a loaded 2-core host: with a blocking hand-off, one step goroutine
// waiting for a descheduled worker to reach its receive, or to report done
// having done nothing, cost a scheduler time slice (several ms) per step.
type pool struct {
	n    int
	wake []chan struct{} // per worker, buffered: a pending wake-up
	exit sync.WaitGroup  // worker goroutines, for close

	cur atomic.Pointer[poolRun]
	// spare is the last finished run, reused when no late worker can still
	// hold it (see run).
	spare *poolRun
}

// poolRun is one run's state. Workers reach it only through pool.cur, so a
// worker that wakes after its run ended sees a newer run or a spent one,
// never a half-written one.
type poolRun struct {
	t     task
	items int64
	next  atomic.Int64 // next item to claim
	done  atomic.Int64 // items finished
	// holders counts workers that loaded this run and have not let go.
	holders atomic.Int32
	// finished receives one value when a worker finishes the last item
	// while the step goroutine waits.
	finished chan struct{}
	waiting  atomic.Bool
}

func newPool(n int) *pool {
	if n < 1 {
		n = 1
	}
	p := &pool{n: n, wake: make([]chan struct{}, n)}
	for w := 1; w < n; w++ {
		ch := make(chan struct{}, 1)
		p.wake[w] = ch
		p.exit.Add(1)
		go func(w int) {
			defer p.exit.Done()
			for range ch {
				r := p.cur.Load()
				if r == nil {
					continue
				}
				r.holders.Add(1)
				// Re-check: run may have swapped in a new run between the
				// load and the count; this run is then spent.
				if p.cur.Load() == r {
					r.work(w)
				}
				r.holders.Add(-1)
			}
		}(w)
	}
	return p
}

// work claims and runs items until none is left, and signals the step
// goroutine if it finished the last one while it waited.
func (r *poolRun) work(w int) {
	for {
		i := r.next.Add(1) - 1
		if i >= r.items {
			return
		}
		r.t.runItem(w, int(i))
		if r.done.Add(1) == r.items && r.waiting.Load() {
			select {
			case r.finished <- struct{}{}:
			default:
			}
		}
	}
}

// run executes t.runItem for items 0..items-1 across the pool and returns
// when all are done. Only one run is in flight at a time (the Backend holds
// its mutex).
func (p *pool) run(t task, items int) {
	if items <= 0 {
		return
	}
	r := p.spare
	p.spare = nil
	if r == nil || r.holders.Load() != 0 {
		r = &poolRun{finished: make(chan struct{}, 1)}
	}
	r.t, r.items = t, int64(items)
	r.next.Store(0)
	r.done.Store(0)
	r.waiting.Store(false)
	select { // a stale signal from a previous use
	case <-r.finished:
	default:
	}
	p.cur.Store(r)
	for w := 1; w <= min(p.n-1, items-1); w++ {
		select {
		case p.wake[w] <- struct{}{}:
		default: // already has a wake-up pending
		}
	}
	r.work(0)
	if r.done.Load() != r.items {
		r.waiting.Store(true)
		// The last item may have finished between the check and the
		// flag; checking again after setting it closes the gap.
		if r.done.Load() != r.items {
			<-r.finished
		}
	}
	p.cur.Store(nil)
	r.t = nil
	p.spare = r
}

// close stops the worker goroutines and waits for them to exit.
func (p *pool) close() {
	for w := 1; w < p.n; w++ {
		close(p.wake[w])
	}
	p.exit.Wait()
}
