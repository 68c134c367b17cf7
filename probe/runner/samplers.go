package runner

import (
	"context"
	"errors"
	"sync"

	"github.com/treni-top/treni-top/probe"
	"github.com/treni-top/treni-top/probe/gpu"
	"github.com/treni-top/treni-top/probe/pagecache"
	"github.com/treni-top/treni-top/probe/proc"
	"github.com/treni-top/treni-top/trace"
)

// Samplers is the default set for a target: its process tree (proc), the
// GPUs (when NVML is there) and the page-cache residency of the weight
// files. Close releases what they hold (NVML).
type Samplers struct {
	// GPUStatus is the line a UI shows about GPUs.
	GPUStatus string
	gpu       *gpu.Sampler
	weights   func() []string
}

// NewSamplers prepares the default samplers; weightFiles may be nil.
// NVML is opened by Build, when the runner is created.
func NewSamplers(weightFiles func() []string) *Samplers {
	return &Samplers{weights: weightFiles}
}

// Build is Config.Samplers: it makes the samplers for the current target.
// Without a GPU driver the GPU sampler is left out and GPUStatus says why.
func (s *Samplers) Build(pid func() int, pids func() []int) []probe.Sampler {
	out := []probe.Sampler{&procSampler{pid: pid}}
	if g, err := gpu.Open(pids); err != nil {
		s.GPUStatus = gpu.StatusOf(err)
	} else {
		s.gpu = g
		s.GPUStatus = g.Status()
		out = append(out, g)
	}
	out = append(out, pagecache.NewSampler(s.weights))
	return out
}

// Close releases NVML.
func (s *Samplers) Close() error {
	if s.gpu != nil {
		return s.gpu.Close()
	}
	return nil
}

// Emit records the GPU status once on the stream.
func (s *Samplers) Emit(sink trace.Sink, clock trace.Clock) {
	sink.Emit(trace.Event{At: clock.Now(), Kind: trace.KindMarker, Marker: &trace.Marker{
		Name: trace.MarkerGPUStatus, Attrs: trace.Attrs{"status": s.GPUStatus},
	}})
}

// procSampler follows the current target: a new cold run has a new PID, so
// the proc sampler is rebuilt when the PID changes. Between targets (or for
// an attach without --pid) it reports nothing rather than failing.
type procSampler struct {
	pid func() int

	mu  sync.Mutex
	cur int
	s   *proc.Sampler
}

// Name is the wrapped sampler's name.
func (p *procSampler) Name() string { return "proc" }

// Sample reads the current target's tree.
func (p *procSampler) Sample(ctx context.Context) ([]trace.Sample, error) {
	pid := p.pid()
	if pid == 0 {
		return nil, nil
	}
	p.mu.Lock()
	if pid != p.cur || p.s == nil {
		p.cur, p.s = pid, proc.New(pid)
	}
	s := p.s
	p.mu.Unlock()
	out, err := s.Sample(ctx)
	if errors.Is(err, proc.ErrExited) {
		// The target is gone (stopped or crashed): the launcher reports
		// that; the sampler just has nothing to read until the next run.
		return nil, nil
	}
	return out, err
}

// PageCacheFuncs is the PageCache of probe/pagecache.
type PageCacheFuncs struct{}

// Residency is pagecache.Residency.
func (PageCacheFuncs) Residency(files []string) (int64, int64, error) {
	return pagecache.Residency(files)
}

// Evict is pagecache.Evict.
func (PageCacheFuncs) Evict(files []string) error { return pagecache.Evict(files) }
