package cuda

import (
	"context"
	"errors"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Decode CUDA graphs: one per batch-size bucket, captured lazily on first
// use and replayed with padding rows.

// DefaultGraphBuckets are the decode batch sizes graphs are captured for
// (a fresh slice each call).
func DefaultGraphBuckets() []int { return []int{1, 2, 4, 8, 16, 32, 64, 128, 256} }

// bucket is the smallest graph bucket holding n sequences, 0 if none.
func (b *Backend) bucket(n int) int {
	for _, k := range b.buckets {
		if k >= n {
			return k
		}
	}
	return 0
}

// GraphLaunches counts decode steps that replayed a captured graph.
func (b *Backend) GraphLaunches() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.graphLaunches
}

// enqueueDecode is a whole decode step over Bk rows in the graph layout:
// layers, final norm and LM head on every row (runner thread).
func (b *Backend) enqueueDecode(ctx context.Context, Bk int) error {
	c := b.cfg
	if err := b.enqueueLayers(ctx, Bk, b.graphStride); err != nil {
		return err
	}
	if err := b.k.RMSNorm(b.s, b.h, b.x, b.finalNorm, Bk, c.HiddenSize, float32(c.RMSNormEps)); err != nil {
		return err
	}
	return b.gemm(b.logitsD, b.h, b.lmHead, Bk, c.VocabSize, c.HiddenSize, F32, false)
}

// forwardGraph runs a decode step of len(rowSeq) sequences (row i is
// sequence i) through bucket Bk's graph, capturing it first when the
// bucket is new: that step runs eagerly in the graph's layout (which also
// builds the GEMM plans the capture needs), then the same sequence is
// captured for the next steps (runner thread). The graph ends at the
// logits; emit copies them back or chooses tokens after it.
func (b *Backend) forwardGraph(ctx context.Context, out *stepOut, rowSeq []int, Bk int) error {
	if err := b.grow(Bk, Bk, len(b.hostMeta)); err != nil {
		return err
	}
	if err := b.upMeta(); err != nil {
		return err
	}
	g := b.graphs[Bk]
	if g != nil {
		if err := g.Launch(b.s); err != nil {
			return err
		}
		b.graphLaunches++
	} else if err := b.enqueueDecode(ctx, Bk); err != nil {
		return err
	}
	if err := b.emit(out, rowSeq); err != nil {
		return err
	}
	// Capture once the bucket's GEMMs are on their final path: a graph
	// captured while GemmAuto still runs them on gemm_skinny would keep it.
	if g == nil && b.gemmsSettled(Bk) {
		b.capture(Bk)
	}
	return nil
}

// capture records bucket Bk's decode graph. A failure turns graphs off
// for this backend (eager steps stay correct) and is reported as a
// graph_capture stage with the error.
func (b *Backend) capture(Bk int) { b.captureWith(Bk, nil) }

// captureWith is capture with extra attributes for the stage.
func (b *Backend) captureWith(Bk int, extra trace.Attrs) {
	prof := b.prof
	b.prof = nil // no timing events inside a graph
	defer func() { b.prof = prof }()
	t0 := time.Now()
	var recordMS, instantiateMS float64
	err := b.s.BeginCapture()
	if err == nil {
		b.capturing = true
		err = b.enqueueDecode(context.Background(), Bk)
		b.capturing = false
		recordMS = msSince(t0)
		ti := time.Now()
		g, err2 := b.s.EndCapture()
		instantiateMS = msSince(ti)
		if err == nil && err2 == nil {
			b.graphs[Bk] = g
		} else if g != nil {
			g.Destroy()
		}
		err = errors.Join(err, err2)
	}
	// Recording is the host's launches into the graph; instantiating is
	// the driver building the executable graph from them. Both hold the
	// runner thread, so a request that arrives meanwhile waits for them.
	attrs := trace.Attrs{"bucket": Bk, "layers": len(b.layers), "buckets_captured": len(b.graphs), "record_ms": recordMS, "instantiate_ms": instantiateMS}
	for k, v := range extra {
		attrs[k] = v
	}
	if err != nil {
		b.graphsOff = true
		attrs["error"] = err.Error()
	}
	b.stage(trace.StageGraphCapture, t0, attrs)
}

// dropGraphs destroys the captured graphs (their buffers were reallocated).
func (b *Backend) dropGraphs() error {
	var errs []error
	for k, g := range b.graphs {
		errs = append(errs, g.Destroy())
		delete(b.graphs, k)
	}
	return errors.Join(errs...)
}
