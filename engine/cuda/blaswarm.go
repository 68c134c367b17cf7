package cuda

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Warming cuBLASLt beside the steps (docs/ARCHITECTURE.md, "Stages").
//
// cuBLASLt loads each GEMM shape's kernel on that shape's first launch: on
// the lent H100 the first few shapes took 100–200 ms together. Under
// GemmAuto a server that has just started runs its GEMMs of up to
// SkinnyMaxRows rows on gemm_skinny, which the engine's own module
// provides, and a second OS thread — its own stream, cuBLASLt handle and
// scratch, the context current on it — runs every shape the steps will
// want from cuBLASLt once, so that those kernels are loaded while the
// server already answers. A shape leaves gemm_skinny for cuBLASLt once
// that thread has run it (warm.has) and ended (the runner's first
// cuBLASLt plan, made while it loads kernels, held a request 34–43 ms).
// The runner thread never waits for the aside thread: a step that arrives
// meanwhile runs on gemm_skinny, and a decode graph of more than
// SkinnyAutoRows rows is captured only once its shapes are settled
// (gemmsSettled), so that no graph keeps gemm_skinny where cuBLASLt is
// faster.

// blasWarmth is the set of GEMM shapes cuBLASLt has run, and whether the
// aside thread is still warming more. Safe for concurrent use.
type blasWarmth struct {
	mu      sync.Mutex
	shapes  map[GemmShape]bool
	warming bool
}

func (w *blasWarmth) ran(s GemmShape) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shapes == nil {
		w.shapes = map[GemmShape]bool{}
	}
	w.shapes[s] = true
}

func (w *blasWarmth) has(s GemmShape) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shapes[s]
}

func (w *blasWarmth) setWarming(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warming = on
}

func (w *blasWarmth) isWarming() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.warming
}

// asideRows are the step row counts whose cuBLASLt GEMMs the aside thread
// warms, most likely first: a prefill bucket of a short prompt, then
// decode batches and longer chunks (padRows gives these sizes).
var asideRows = [...]int{64, 32, 16, 128, 256}

// asideLMHeadRows is the most LM-head rows the aside thread warms: its
// scratch holds that many rows of the vocabulary's logits.
const asideLMHeadRows = 64

// stepGemm is one GEMM of a step: its shape and, for the warm-ups, its
// operands on the step scratch with layer 0's weights (0 before the
// weights are placed).
type stepGemm struct {
	shape   GemmShape
	y, x, w DevicePtr
	acc     bool
}

// stepGemms are the GEMMs of a step of M rows: the four layer GEMMs and,
// when lmHead, the LM head's. The one list of a step's GEMM shapes.
func (b *Backend) stepGemms(M int, lmHead bool) []stepGemm {
	c := b.cfg
	H, I := c.HiddenSize, c.IntermediateSize
	var l devLayer
	if len(b.layers) > 0 {
		l = b.layers[0]
	}
	g := func(N, K int, out DType, y, x, w DevicePtr, acc bool) stepGemm {
		return stepGemm{GemmShape{M: M, N: N, K: K, In: BF16, Out: out}, y, x, w, acc}
	}
	s := []stepGemm{
		g(b.qkvDim, H, BF16, b.qkv, b.h, l.qkv, false),
		g(H, b.qDim, F32, b.x, b.att, l.o, true), // o_proj accumulates into the residual
		g(2*I, H, BF16, b.gu, b.h, l.gu, false),
		g(H, I, F32, b.x, b.act, l.down, true),
	}
	if lmHead {
		s = append(s, g(c.VocabSize, H, F32, b.logitsD, b.lmX, b.lmHead, false))
	}
	return s
}

// gemmsSettled says whether every GEMM of a decode step of M rows is on
// the path it will keep: false only under GemmAuto for more than
// SkinnyAutoRows rows (up to SkinnyMaxRows) while the aside thread is
// warming, since those GEMMs stay on gemm_skinny until it has ended
// (gemmOnSkinny). A graph captured before then would keep gemm_skinny.
func (b *Backend) gemmsSettled(M int) bool {
	return b.opts.Gemm != GemmAuto || M <= SkinnyAutoRows || M > SkinnyMaxRows || !b.warm.isWarming()
}

// asideGemms lists what the aside thread runs: each of asideRows' step
// GEMMs that the scratch holds (M ≤ capT; the LM head up to
// asideLMHeadRows and capRows rows), not yet run, that cuBLASLt will run.
func (b *Backend) asideGemms() []stepGemm {
	var out []stepGemm
	for _, M := range asideRows {
		if M > b.capT {
			continue
		}
		for _, g := range b.stepGemms(M, M <= min(asideLMHeadRows, b.capRows)) {
			// Under GemmSkinny cuBLASLt runs only what gemm_skinny does not fit.
			if s := g.shape; !b.warm.has(s) && (b.opts.Gemm != GemmSkinny || !SkinnyFits(s.M, s.N, s.K, 0, 0)) {
				out = append(out, g)
			}
		}
	}
	return out
}

// asideStats is what the aside thread's shapes took: the first pays
// cuBLASLt's one-time initialisation (74–140 ms on the lent H100).
type asideStats struct {
	n              int // shapes run
	firstMS, maxMS float64
	maxShape       GemmShape
}

// asideWarm runs each GEMM's shape once on cuBLASLt, over its weights and
// a scratch of the thread's own, on a thread of its own (see the comment
// at the top of this file), marking each as it completes, until done or
// ctx ends. It returns how many ran and how long they took.
func (b *Backend) asideWarm(ctx context.Context, gemms []stepGemm) (asideStats, error) {
	var as asideStats
	if len(gemms) == 0 {
		return as, nil
	}
	maxX, maxY := 0, 0
	for _, g := range gemms {
		s := g.shape
		maxX = max(maxX, s.M*s.K*2)
		maxY = max(maxY, s.M*s.N*s.Out.Size())
	}
	err := <-contextThread(b.c, "cuBLASLt warm-up thread", func() (err error) {
		lib, err := openBLASPath(b.blas.Path)
		if err != nil {
			return err
		}
		bl, err := b.c.newBLASFrom(lib)
		if err != nil {
			return err
		}
		var x, y DevicePtr
		var st *Stream
		// Freeing may synchronise the device, which must not happen
		// beside a graph capture on the runner thread: release everything
		// there, between steps (the runner is free then).
		defer func() {
			err = errors.Join(err, b.r.Do(context.Background(), func() error {
				var errs []error
				if st != nil {
					errs = append(errs, st.Synchronize(), st.Destroy())
				}
				for _, p := range []DevicePtr{x, y} {
					if p != 0 {
						errs = append(errs, b.c.Free(p))
					}
				}
				return errors.Join(append(errs, bl.Close())...)
			}))
		}()
		if st, err = b.c.NewStream(); err != nil {
			return err
		}
		if x, err = b.c.Alloc(maxX); err != nil {
			return err
		}
		if y, err = b.c.Alloc(maxY); err != nil {
			return err
		}
		for _, g := range gemms {
			if ctx.Err() != nil {
				return nil
			}
			s := g.shape
			ts := time.Now()
			if err := bl.Gemm(st, s, y, x, g.w, false); err != nil {
				return fmt.Errorf("%dx%dx%d: %w", s.M, s.N, s.K, err)
			}
			if err := st.Synchronize(); err != nil {
				return err
			}
			b.warm.ran(s)
			ms := msSince(ts)
			if as.n == 0 {
				as.firstMS = ms
			}
			if ms > as.maxMS {
				as.maxMS, as.maxShape = ms, s
			}
			as.n++
		}
		return nil
	})
	return as, err
}

// warmBLASAside is the aside thread's part of WarmBackground: it warms
// asideGemms and reports a warmup stage of kind "cublaslt_aside".
func (b *Backend) warmBLASAside(ctx context.Context) {
	defer b.warm.setWarming(false)
	t0 := time.Now()
	b.mu.Lock()
	gemms := b.asideGemms()
	b.mu.Unlock()
	as, err := b.asideWarm(ctx, gemms)
	attrs := trace.Attrs{"kind": "cublaslt_aside", "shapes": as.n, "of": len(gemms), "thread": "own (beside the steps)"}
	if as.n > 0 {
		attrs["first_shape_ms"], attrs["max_shape_ms"] = as.firstMS, as.maxMS
		attrs["max_shape"] = fmt.Sprintf("%dx%dx%d", as.maxShape.M, as.maxShape.N, as.maxShape.K)
	}
	if err != nil {
		attrs["error"] = err.Error()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.stage(trace.StageWarmup, t0, attrs)
	}
}
