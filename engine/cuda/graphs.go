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

// captureWith is capture with extra attributes for the stage: it records,
// instantiates and installs the graph on the runner thread.
func (b *Backend) captureWith(Bk int, extra trace.Attrs) {
	cg, err := b.recordGraph(Bk, extra)
	var instantiateMS float64
	if err == nil {
		ti := time.Now()
		err = cg.g.Instantiate()
		instantiateMS = msSince(ti)
	}
	b.installGraph(cg, instantiateMS, err)
}

// recordedGraph is a decode graph recorded and not yet installed
// (installGraph), perhaps not yet instantiated.
type recordedGraph struct {
	Bk       int
	g        *Graph // nil when recording failed
	gen      int    // scratchGen when recorded: the buffers its launches use
	t0       time.Time
	recordMS float64
	extra    trace.Attrs
}

// recordGraph records bucket Bk's decode step into a graph, without
// instantiating it (runner thread, in the graph layout).
func (b *Backend) recordGraph(Bk int, extra trace.Attrs) (*recordedGraph, error) {
	prof := b.prof
	b.prof = nil // no timing events inside a graph
	defer func() { b.prof = prof }()
	rg := &recordedGraph{Bk: Bk, gen: b.scratchGen, t0: time.Now(), extra: extra}
	if err := b.s.BeginCapture(); err != nil {
		return rg, err
	}
	b.capturing = true
	err := b.enqueueDecode(context.Background(), Bk)
	b.capturing = false
	g, err2 := b.s.EndCaptureGraph()
	rg.recordMS = msSince(rg.t0)
	if err = errors.Join(err, err2); err != nil {
		if g != nil {
			g.Destroy()
		}
		return rg, err
	}
	rg.g = g
	return rg, nil
}

// installGraph ends a capture (runner thread): it keeps rg's graph as its
// bucket's unless err (from recording or instantiating) says it failed, a
// step captured the bucket meanwhile or the scratch was reallocated since,
// and reports the graph_capture stage. A failure turns graphs off for
// this backend.
func (b *Backend) installGraph(rg *recordedGraph, instantiateMS float64, err error) {
	switch {
	case err != nil:
		if rg.g != nil {
			rg.g.Destroy()
		}
	case b.graphs[rg.Bk] != nil || rg.gen != b.scratchGen:
		// A step captured it first, or the scratch it launches over was
		// reallocated since (grow): its next use records it again.
		rg.g.Destroy()
		return
	default:
		b.graphs[rg.Bk] = rg.g
	}
	// Recording is the host's launches into the graph; instantiating is
	// the driver building the executable graph from them. Recording holds
	// the runner thread, so a request that arrives meanwhile waits for it;
	// so does instantiating, except for a background capture's
	// (instantiate_thread "own").
	attrs := trace.Attrs{"bucket": rg.Bk, "layers": len(b.layers), "buckets_captured": len(b.graphs), "record_ms": rg.recordMS, "instantiate_ms": instantiateMS}
	for k, v := range rg.extra {
		attrs[k] = v
	}
	if err != nil {
		b.graphsOff = true
		attrs["error"] = err.Error()
	}
	b.stage(trace.StageGraphCapture, rg.t0, attrs)
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
