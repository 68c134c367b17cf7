package cuda

import "sort"

// stepProfiler times the kinds of work of eager steps with CUDA events on
// the compute stream: an event before every operation of the layer loop,
// the LM head and the token choice, summed by operation name. It exists
// for the GPU profiling test (it synchronises every step and is never on
// in serving); captured graphs are not profiled.
type stepProfiler struct {
	c      *Context
	events []*Event
	names  []string
	n      int
	totals map[string]float64 // ms by operation
	steps  int
}

func newStepProfiler(c *Context) *stepProfiler {
	return &stepProfiler{c: c, totals: map[string]float64{}}
}

// mark records an event that ends the previous operation and starts name
// (runner thread). Errors only lose a measurement.
func (p *stepProfiler) mark(s *Stream, name string) {
	if p == nil {
		return
	}
	if p.n == len(p.events) {
		e, err := p.c.NewEvent()
		if err != nil {
			return
		}
		p.events = append(p.events, e)
		p.names = append(p.names, "")
	}
	if p.events[p.n].Record(s) != nil {
		return
	}
	p.names[p.n] = name
	p.n++
}

// end closes the last operation, waits for the step and adds its
// intervals to the totals (runner thread).
func (p *stepProfiler) end(s *Stream) {
	if p == nil || p.n == 0 {
		return
	}
	p.mark(s, "")
	if p.events[p.n-1].Synchronize() == nil {
		for i := 0; i+1 < p.n; i++ {
			if ms, err := ElapsedMS(p.events[i], p.events[i+1]); err == nil {
				p.totals[p.names[i]] += float64(ms)
			}
		}
		p.steps++
	}
	p.n = 0
}

// opTime is one operation's total.
type opTime struct {
	name string
	ms   float64
}

// sorted lists the totals, largest first, and resets them.
func (p *stepProfiler) sorted() ([]opTime, int) {
	out := make([]opTime, 0, len(p.totals))
	for k, v := range p.totals {
		out = append(out, opTime{k, v})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ms > out[b].ms })
	steps := p.steps
	p.totals, p.steps = map[string]float64{}, 0
	return out, steps
}

func (p *stepProfiler) destroy() {
	if p == nil {
		return
	}
	for _, e := range p.events {
		e.Destroy()
	}
}
