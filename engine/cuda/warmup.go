package cuda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// Warm-up in two parts (docs/ARCHITECTURE.md, "Stages").
//
// cuBLASLt picks a kernel per GEMM shape and loads it lazily on its first
// launch; on the H100 that cost tens of milliseconds per shape, and the
// old load warm-up (29 plans, six prefill passes) took 300–420 ms, ending
// up to 180 ms after the weight upload: the server became healthy that
// much later. Now:
//
//   - the GEMMs of up to SkinnyMaxRows rows run on the engine's own
//     gemm_skinny (loaded with the module in kernel_load) until cuBLASLt
//     has run their shape and the aside thread has ended (gemmOnSkinny),
//     so neither the load warm-up nor a first request of a few dozen
//     tokens loads any cuBLASLt kernel;
//   - loadWarmup, during the upload, warms only what every request needs:
//     the batch-1 decode step and the capture of its graph (on
//     GemmCublasLt, its GEMM plans and kernels at one row, the LM head's
//     at one row, which a prefill's last token also uses);
//   - WarmBackground, once the server is serving, warms the rest one small
//     item at a time (the prefill row buckets' cuBLASLt GEMMs, then the
//     decode graphs of every bucket up to the batch limit, each after its
//     GEMMs' plans and a first run of each, one item a GEMM, and last the
//     upload's staging ring, one item a piece), each item taken only
//     while no step is waiting for the backend, so a request waits at
//     most for the one item under way (max_item, max_item_ms and
//     max_ms_by_kind in its warmup stage).
//
// Warm-up rows are graph padding rows: KV slot −1 (they store nothing) at
// position 0 through an all-zero block table, so they never disturb a
// live sequence's cache, before or after the server starts.

// warmupPrefill are the GEMM row counts padRows gives prefill steps,
// ordered by how soon a request is likely to need them (the first
// request of a chat is a few dozen tokens).
var warmupPrefill = [...]int{64, 32, 128, 16, 256, 8}

// maxWarmRows is the scratch sized at load: the largest prefill bucket.
const maxWarmRows = 256

// loadWarmup sizes the step scratch for the largest prefill bucket and
// every graph bucket (so that no later step reallocates it and drops
// captured graphs) and warms the batch-1 decode step, capturing its graph.
// It runs while the weights are still uploading: the weights read are
// partly stale, which does not matter for what is being warmed.
func (b *Backend) loadWarmup(ctx context.Context, overlapped bool) error {
	t0 := time.Now()
	bs := b.opts.BlockSize
	maxT := min(maxWarmRows, b.opts.NumBlocks*bs-1)
	if maxT < 1 {
		return nil
	}
	rows, meta := 8, metaLen(maxT, 1, (maxT+bs-1)/bs)
	if !b.opts.NoGraphs && len(b.buckets) > 0 {
		Bk := b.buckets[len(b.buckets)-1]
		rows = max(rows, Bk)
		meta = max(meta, metaLen(Bk, Bk, b.graphStride))
	}
	if err := b.grow(maxT, rows, meta); err != nil {
		return err
	}
	graphs := 0
	if Bk := b.bucket(1); !b.opts.NoGraphs && Bk > 0 {
		if err := b.warmDecode(ctx, Bk, nil, true); err != nil {
			return fmt.Errorf("cuda: load warm-up decode step: %w", err)
		}
		graphs = len(b.graphs)
	} else if !b.skinnyServes(1) {
		// Eager decode steps run on cuBLASLt: load its kernels now.
		if err := b.warmGemms(1); err != nil {
			return fmt.Errorf("cuda: load warm-up: %w", err)
		}
	}
	b.stage(trace.StageWarmup, t0, trace.Attrs{"kind": "load", "gemm_plans": b.blas.Plans(), "graphs": graphs, "gemm": b.opts.Gemm, "fuse": b.opts.Fuse,
		"concurrent_with_upload": overlapped, "scratch_rows": b.capT, "logits_rows": b.capRows})
	return nil
}

// padMeta lays out T padding rows (the warm-up's dummy tokens) with
// tableRows table rows of stride entries (runner thread).
func (b *Backend) padMeta(T, tableRows, stride int) {
	b.layoutMeta(&sched.Batch{}, T, tableRows, stride)
}

// warmDecode lays out bucket Bk's padding rows, runs its decode step
// eagerly on them when eagerFirst (which makes its GEMM plans and loads
// every kernel it launches), then captures its graph (runner thread);
// attrs go to the graph_capture stage.
func (b *Backend) warmDecode(ctx context.Context, Bk int, attrs trace.Attrs, eagerFirst bool) error {
	if err := b.padDecode(Bk); err != nil {
		return err
	}
	if eagerFirst {
		if err := b.upMeta(); err != nil {
			return err
		}
		if err := b.enqueueDecode(ctx, Bk); err != nil {
			return err
		}
		if err := b.s.Synchronize(); err != nil {
			return err
		}
	}
	b.captureWith(Bk, attrs)
	return nil
}

// padDecode lays out bucket Bk's padding rows in the graph layout, for a
// warm-up step or capture (runner thread).
func (b *Backend) padDecode(Bk int) error {
	if err := b.grow(Bk, Bk, metaLen(Bk, Bk, b.graphStride)); err != nil {
		return err
	}
	b.padMeta(Bk, Bk, b.graphStride)
	return nil
}

// warmGemms runs the four layer GEMMs of a step of M rows once on
// cuBLASLt (layer 0's weights, scratch in and out), and the LM head's when
// M logits rows fit, which builds their plans and loads their kernels
// (runner thread); under GemmAuto the shapes then leave gemm_skinny. The
// scratch holds no state between steps: a step's embedding rewrites the
// residual rows it uses.
func (b *Backend) warmGemms(M int) error {
	if M > b.capT || len(b.layers) == 0 {
		return nil
	}
	for _, g := range b.stepGemms(M, M <= b.capRows) {
		if err := b.blasGemm(g.shape, g.y, g.x, g.w, g.acc); err != nil {
			return fmt.Errorf("warm the GEMMs of %d rows: %w", M, err)
		}
	}
	return b.s.Synchronize()
}

// skinnyServes says whether every GEMM of an M-row step runs on
// gemm_skinny before cuBLASLt has run any (the cold path).
func (b *Backend) skinnyServes(M int) bool {
	if b.opts.Gemm == GemmCublasLt {
		return false
	}
	for _, g := range b.stepGemms(M, true) {
		if s := g.shape; !SkinnyFits(s.M, s.N, s.K, 0, 0) {
			return false
		}
	}
	return true
}

// warmItem is one piece of background warm-up: "gemm" (a prefill row
// bucket's cuBLASLt GEMMs), "plan" (the cuBLASLt plan and a first run of
// one GEMM of a decode bucket), "graph" (a decode bucket's graph),
// "staging" (a piece of the upload's ring) or "inplace" (a step of the
// in-place copiers' registrations).
type warmItem struct {
	what string
	rows int
	gemm int // "plan": the GEMM's index in stepGemms
}

// String names the item in the warmup stage ("graph 32", "plan 64/4",
// "staging").
func (it warmItem) String() string {
	switch {
	case it.what == "plan":
		return fmt.Sprintf("%s %d/%d", it.what, it.rows, it.gemm)
	case it.rows == 0:
		return it.what
	}
	return fmt.Sprintf("%s %d", it.what, it.rows)
}

// stepGemmCount is the most GEMMs a step has (stepGemms: qkv, o_proj,
// gate_up, down_proj, the LM head).
const stepGemmCount = 5

// backgroundItems lists what WarmBackground does for a batch limit of
// maxBatch sequences: the prefill GEMM buckets, then the decode graph
// buckets above 1 up to the one holding maxBatch (every bucket when
// maxBatch is 0 or beyond the largest), each graph after the plans of its
// GEMMs, one item a GEMM.
func backgroundItems(prefill []int, buckets []int, capT, maxBatch int, graphs bool) []warmItem {
	var items []warmItem
	for _, M := range prefill {
		if M <= capT {
			items = append(items, warmItem{what: "gemm", rows: M})
		}
	}
	if !graphs {
		return items
	}
	for _, Bk := range buckets {
		if Bk <= 1 {
			continue
		}
		for i := range stepGemmCount {
			items = append(items, warmItem{what: "plan", rows: Bk, gemm: i})
		}
		items = append(items, warmItem{what: "graph", rows: Bk})
		if maxBatch > 0 && Bk >= maxBatch {
			break
		}
	}
	return items
}

// withLeftovers puts the load's leftovers around the background items:
// the staging ring's release first (ring items, releaseRingStep), the
// in-place copiers' registrations last (inPlace items,
// releaseInPlaceStep). The ring goes first because it is the largest
// thing the process holds once loaded (two 16 MiB slots a reader, 448 MiB
// with 14 readers) and the aside thread's cuBLASLt warm-up grows the RSS
// by ~145 MB beside the items: released last, the ring was still there
// at that growth's top, the process's peak (VmHWM 968 MB against 787
// when healthy on the H200, issue 44). Its steps hold the runner a
// fraction of a millisecond each (7–12 ms for the whole ring on the
// H100), so the graphs after them come that much later. The in-place
// steps stay last: each waits for a pause in the steps (inPlaceWait),
// which would hold back every item after it.
func withLeftovers(items []warmItem, ring, inPlace int) []warmItem {
	out := make([]warmItem, 0, ring+len(items)+inPlace)
	for range ring {
		out = append(out, warmItem{what: "staging"})
	}
	out = append(out, items...)
	for range inPlace {
		out = append(out, warmItem{what: "inplace"})
	}
	return out
}

// WarmBackground starts warming, on a goroutine the backend owns, what the
// load warm-up left out: the GEMMs of the prefill row buckets and the
// decode graphs of the buckets up to maxBatch sequences (0: all), and
// the load's leftovers (withLeftovers: releaseRing first,
// releaseInPlaceStep last). Each item runs
// only while no Forward, ForwardTokens or CopyBlocks is waiting for the
// backend, the in-place release's steps only once none has finished for
// stagingQuiet; a call that arrives during an item waits for that item
// only. When it ends it reports a warmup stage of kind "background" (its
// items, the longest one, how often it yielded). It returns at once; a
// second call does nothing; Close stops it.
func (b *Backend) WarmBackground(maxBatch int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.bgDone != nil {
		return
	}
	// Under GemmAuto and GemmSkinny the cuBLASLt GEMMs warm on a thread
	// of their own (blaswarm.go) instead of between steps.
	prefill := warmupPrefill[:]
	aside := b.opts.Gemm != GemmCublasLt && len(b.layers) > 0
	if aside {
		prefill = nil
	}
	items := backgroundItems(prefill, b.buckets, b.capT, maxBatch, !b.opts.NoGraphs && !b.graphsOff)
	if b.staging != nil {
		items = withLeftovers(items, b.staging.ringItems(), b.staging.inPlaceItems())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, asideDone := make(chan struct{}), make(chan struct{})
	b.bgCancel, b.bgDone = cancel, done
	if aside {
		b.warm.setWarming(true)
		go func() {
			defer close(asideDone)
			b.warmBLASAside(ctx)
		}()
	} else {
		close(asideDone)
	}
	go func() {
		defer func() { <-asideDone; close(done) }()
		b.warmBackground(ctx, items, b.runWarmItem, func(it warmItem) <-chan struct{} {
			// A decode graph whose GEMMs are still moving to cuBLASLt
			// waits for the aside thread (the steps meanwhile run eagerly),
			// and so does a cuBLASLt plan of this thread: made while the
			// aside thread loads kernels, the first took 67–91 ms.
			switch it.what {
			case "graph":
				if !b.gemmsSettled(it.rows) {
					return asideDone
				}
			case "plan":
				if _, ok := b.planShape(it.rows, it.gemm); ok {
					return asideDone
				}
			}
			return nil
		})
	}()
}

// runWarmItem is one background item (runner thread, b.mu held).
func (b *Backend) runWarmItem(ctx context.Context, it warmItem) error {
	switch it.what {
	case "gemm":
		return b.warmGemms(it.rows)
	case "plan":
		return b.warmPlan(it.rows, it.gemm)
	case "staging":
		_, err := b.releaseRingStep()
		return err
	case "inplace":
		_, err := b.releaseInPlaceStep(stagingReleaseBytes)
		return err
	}
	if b.graphs[it.rows] != nil || b.graphsOff {
		return nil // a step captured it first, or captures failed
	}
	// Once captureReady, only the capture is left: every kernel of the
	// engine's module was loaded with it (kernel_load), every cuBLASLt
	// kernel of the bucket by the aside thread, and this thread's plans by
	// the "plan" items. The eager step before it took ~10 ms at 64 rows on
	// the H100, and a request arriving meanwhile waited for it and the
	// capture (docs/BENCHMARKS.md, fifteenth session).
	attrs := trace.Attrs{"background": true}
	if !b.captureReady(it.rows) {
		return b.warmDecode(ctx, it.rows, attrs, true)
	}
	// Only the recording holds this thread: warmBackground has the graph
	// instantiated on a thread of its own (1.6–3.7 ms for the 4B shape on
	// the H100, which a request arriving meanwhile used to wait for) and
	// then installs it here.
	attrs["eager_first"] = false
	attrs["instantiate_thread"] = "own"
	if err := b.padDecode(it.rows); err != nil {
		return err
	}
	rg, err := b.recordGraph(it.rows, attrs)
	if err != nil {
		b.installGraph(rg, 0, err)
		return nil
	}
	b.recorded = rg
	return nil
}

// instantiateRecorded instantiates a graph a background item recorded, on
// inst's thread, while the runner thread serves steps, then installs it on
// the runner thread; it returns how long instantiating took.
func (b *Backend) instantiateRecorded(inst *Runner, rg *recordedGraph) time.Duration {
	ti := time.Now()
	err := inst.Do(context.Background(), func() error {
		if err := b.c.SetCurrent(); err != nil {
			return err
		}
		return rg.g.Instantiate()
	})
	took := time.Since(ti)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		// Not reached while Close waits for the background (stopBackground)
		// before it closes; the context's release would free the graph.
		return took
	}
	_ = b.r.Do(context.Background(), func() error {
		b.installGraph(rg, durMS(took), err)
		return nil
	})
	return took
}

// decodeGemms are the GEMMs of a decode step of Bk rows (the LM head's
// where Bk logits rows fit).
func (b *Backend) decodeGemms(Bk int) []stepGemm { return b.stepGemms(Bk, Bk <= b.capRows) }

// capturedOnBLAS says whether a decode graph captured once its shapes are
// settled (gemmsSettled) runs the GEMM of shape on cuBLASLt.
func (b *Backend) capturedOnBLAS(s GemmShape) bool { return !b.skinnyOnceWarm(s, 0, 0, false) }

// warmPlan makes this thread's cuBLASLt plan for GEMM i of a Bk-row decode
// step where its graph will run it on cuBLASLt, and runs the GEMM once on
// the step scratch (a "plan" item): the plan's heuristic query and this
// handle's first launch of the kernel are then no part of the capture,
// and a request arriving meanwhile waits for one GEMM. Planning alone
// left the first capture on this handle (bucket 16) recording for 4–8.5
// ms, against ~1–2 ms for the others (H100, docs/BENCHMARKS.md, sixteenth
// session). The scratch holds no state between steps.
func (b *Backend) warmPlan(Bk, i int) error {
	s, ok := b.planShape(Bk, i)
	if !ok {
		return nil
	}
	g := b.decodeGemms(Bk)[i]
	if err := b.blasGemm(s, g.y, g.x, g.w, g.acc); err != nil {
		return err
	}
	return b.s.Synchronize()
}

// planShape is the shape of GEMM i of a Bk-row decode step, and whether it
// wants a cuBLASLt plan of this thread before its graph's capture
// (warmPlan).
func (b *Backend) planShape(Bk, i int) (GemmShape, bool) {
	gs := b.decodeGemms(Bk)
	if b.blas == nil || i >= len(gs) || Bk > b.capT || !b.capturedOnBLAS(gs[i].shape) {
		return GemmShape{}, false
	}
	return gs[i].shape, true
}

// captureReady says whether bucket Bk's graph can be captured without an
// eager step first: every GEMM it runs on cuBLASLt has run once in this
// context (its kernel is loaded; warm.has), by the aside thread or a step.
func (b *Backend) captureReady(Bk int) bool {
	for _, g := range b.decodeGemms(Bk) {
		if b.capturedOnBLAS(g.shape) && !b.warm.has(g.shape) {
			return false
		}
	}
	return true
}

// warmBackground runs items through run on the runner thread with b.mu
// held, each only once no step is pending (see WarmBackground) and, where
// gate gives a channel for the item (gate may be nil), once that channel
// is closed.
func (b *Backend) warmBackground(ctx context.Context, items []warmItem, run func(context.Context, warmItem) error,
	gate func(warmItem) <-chan struct{}) {
	t0 := time.Now()
	tl := backgroundTally{maxByKind: map[string]float64{}}
	var inst *Runner // instantiates background graphs (instantiateRecorded)
	for _, it := range items {
		if gate != nil {
			if ch := gate(it); ch != nil {
				select {
				case <-ch:
				case <-ctx.Done():
					return
				}
			}
		}
		forcedNow, ok := b.awaitTurn(ctx, it, &tl)
		if !ok {
			return
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return
		}
		ti := time.Now()
		err := b.r.Do(ctx, func() error { return run(ctx, it) })
		took := time.Since(ti)
		if ms := durMS(took); ms >= tl.maxByKind[it.what] {
			tl.maxByKind[it.what] = ms
		}
		tl.times = append(tl.times, itemTime{it, took})
		rg := b.recorded
		b.recorded = nil
		b.mu.Unlock()
		if rg != nil {
			if inst == nil {
				inst = NewRunner()
				defer inst.Close()
			}
			if ms := durMS(b.instantiateRecorded(inst, rg)); ms > tl.maxByKind["instantiate"] {
				tl.maxByKind["instantiate"] = ms // off the runner thread
			}
		}
		tl.record(it, took, forcedNow, err)
		if err != nil && ctx.Err() != nil {
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	attrs := tl.attrs(b.blas)
	if !b.closed {
		b.stage(trace.StageWarmup, t0, attrs)
	}
}

// backgroundTally is what warmBackground counts as its items run, for its
// warmup stage.
type backgroundTally struct {
	staging          time.Duration
	yields, ran      int
	gemms, graphed   int
	errs             []error
	due, lastInPlace time.Time          // when the first in-place step was due; when the last one ended
	forced           int                // in-place steps that ran without a pause (inPlaceWait)
	maxByKind        map[string]float64 // the longest item of each kind (ms)
	times            []itemTime         // every item run: max_item, longest_items
}

// awaitTurn lets every waiting step go first; the in-place release also
// waits for the steps to have paused for stagingQuiet, or under steady
// load for its deadline (inPlaceWait). It says whether item it runs by
// that deadline, without a pause (forced), and false once ctx has ended.
func (b *Backend) awaitTurn(ctx context.Context, it warmItem, tl *backgroundTally) (forced, ok bool) {
	if it.what == "inplace" && tl.due.IsZero() {
		tl.due = time.Now()
	}
	for {
		wait := 200 * time.Microsecond
		if b.pending.Load() == 0 {
			if it.what != "inplace" {
				break
			}
			if wait, forced = inPlaceWait(time.Now(), time.Unix(0, b.lastDone.Load()), tl.due, tl.lastInPlace); wait <= 0 {
				break
			}
		}
		tl.yields++
		select {
		case <-ctx.Done():
			return forced, false
		case <-time.After(wait):
		}
	}
	return forced, ctx.Err() == nil
}

// record counts item it, which ran for took (forced: by the in-place
// deadline) and returned err.
func (tl *backgroundTally) record(it warmItem, took time.Duration, forced bool, err error) {
	if it.what == "inplace" {
		tl.lastInPlace = time.Now()
		if forced {
			tl.forced++
		}
	}
	if err != nil {
		tl.errs = append(tl.errs, fmt.Errorf("%s %d: %w", it.what, it.rows, err))
		return
	}
	tl.ran++
	switch it.what {
	case "gemm":
		tl.gemms++
	case "graph":
		tl.graphed++
	case "staging", "inplace":
		tl.staging += took
	}
}

// attrs are the background warmup stage's attributes (blas, if any, for
// its plan count).
func (tl *backgroundTally) attrs(blas *BLAS) trace.Attrs {
	slowest := byTime(tl.times)
	var longest itemTime
	if len(slowest) > 0 {
		longest = slowest[0]
	}
	attrs := trace.Attrs{"kind": "background", "items": tl.ran, "gemm_buckets": tl.gemms, "graphs": tl.graphed,
		"max_item_ms": durMS(longest.took), "max_item": longest.it.String(), "max_ms_by_kind": tl.maxByKind, "longest_items": itemNames(slowest, 5), "yields": tl.yields}
	if blas != nil {
		attrs["gemm_plans"] = blas.Plans()
	}
	if tl.staging > 0 {
		attrs["staging_release_ms"] = durMS(tl.staging)
	}
	if !tl.due.IsZero() {
		attrs["inplace_forced_steps"] = tl.forced
	}
	if err := errors.Join(tl.errs...); err != nil {
		attrs["error"] = err.Error()
	}
	return attrs
}

// itemTime is how long a background item held the runner thread.
type itemTime struct {
	it   warmItem
	took time.Duration
}

// byTime is times, longest first (in run order where equal).
func byTime(times []itemTime) []itemTime {
	times = slices.Clone(times)
	slices.SortStableFunc(times, func(a, b itemTime) int { return cmp.Compare(b.took, a.took) })
	return times
}

// itemNames names the first n items of times with how long each held the
// runner thread ("plan 16/1 3.2 ms"): given byTime's order, the longest,
// which a request arriving during one waited for.
func itemNames(times []itemTime, n int) []string {
	out := []string{}
	for _, t := range times[:min(n, len(times))] {
		out = append(out, fmt.Sprintf("%s %.1f ms", t.it, durMS(t.took)))
	}
	return out
}

// stopBackground stops the background warm-up and waits for it; the
// caller must not hold b.mu.
func (b *Backend) stopBackground() {
	b.mu.Lock()
	cancel, done := b.bgCancel, b.bgDone
	b.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
