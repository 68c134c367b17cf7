package cpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/treni-top/treni-top/engine/memstat"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/trace"
)

// Sleep mode on the CPU backend (docs/ARCHITECTURE.md, "Sleep and wake").
// The CPU computes from the weights where they lie in host memory, so
// there is no device copy to drop:
//   - level 1 frees the KV pool (an anonymous mapping: its resident blocks
//     go back to the system) and the step scratch; the weights stay where
//     they are (the mapped files, or the owned copy of --load copy), and a
//     wake only maps a fresh KV pool;
//   - level 2 also lets go of the weights: the files' mappings (their pages
//     stay in the page cache for whoever reads next) or the owned copy, and
//     a wake takes them back from the files as they were loaded (faulted in
//     through a new mapping, or read into new owned memory).

// ErrAsleep is returned (wrapped) by Forward, ForwardTokens and CopyBlocks
// while the backend sleeps.
var ErrAsleep = errors.New("cpu: backend is asleep (sleep mode); wake it first")

// sleepState is the backend's sleep mode: which parts are asleep, and the
// checkpoint a level-2 wake reloads (nil for a backend built on a bare
// tensor source, which sleeps at level 1 only).
type sleepState struct {
	ck          *model.Checkpoint
	level       int  // the level of the current sleep; 0 awake
	weightsGone bool // the weights were released (level 2) and not yet reloaded
	weights, kv bool // asleep: not yet woken
}

var _ sched.Sleeper = (*Backend)(nil)

// usable is nil when a step may run (b.mu held).
func (b *Backend) usable() error {
	switch {
	case b.closed:
		return ErrClosed
	case b.sl.weights || b.sl.kv:
		return ErrAsleep
	}
	return nil
}

// Sleep frees the KV pool and the step scratch and, at level 2, releases
// the weights (sched.Sleeper). The KV contents are lost.
func (b *Backend) Sleep(_ context.Context, level int) ([]sched.Phase, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return nil, ErrClosed
	case b.sl.level != 0:
		return nil, fmt.Errorf("cpu: already asleep at level %d; wake it first", b.sl.level)
	case level != sched.SleepLevel1 && level != sched.SleepLevel2:
		return nil, fmt.Errorf("cpu: sleep level %d: use 1 (keep the weights in host memory) or 2 (drop them)", level)
	case level == sched.SleepLevel2 && b.sl.ck == nil:
		return nil, errors.New("cpu: this backend has no checkpoint to reload its weights from; sleep at level 1")
	}
	t0 := time.Now()
	before := rssAttrs("rss_before_mb")
	attrs := trace.Attrs{"level": level, "kv_bytes": b.kvFloats * 4}
	if err := b.kv.free(); err != nil {
		return nil, err
	}
	b.kv = nil
	b.s = scratch{wbuf: b.s.wbuf, scores: b.s.scores} // the step buffers grow again on the next step
	b.sl.level, b.sl.weights, b.sl.kv = level, true, true
	attrs["weights"] = "kept in host memory"
	if level == sched.SleepLevel2 {
		st, err := b.sl.ck.ReleaseWeights()
		b.w = nil
		b.sl.weightsGone = true
		if err != nil {
			return nil, err
		}
		attrs["weights"], attrs["weights_bytes"], attrs["load"] = "released", st.Bytes, st.Mode
	}
	for k, v := range before {
		attrs[k] = v
	}
	for k, v := range rssAttrs("rss_mb") {
		attrs[k] = v
	}
	return []sched.Phase{{Stage: trace.StageSleep, Start: t0, End: time.Now(), Attrs: attrs}}, nil
}

// Wake puts the weights back, then maps a fresh KV pool (sched.Sleeper).
func (b *Backend) Wake(ctx context.Context, weights, kv bool) ([]sched.Phase, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	var phases []sched.Phase
	if weights && b.sl.weights {
		p, err := b.wakeWeights(ctx)
		if err != nil {
			return phases, err
		}
		phases = append(phases, p)
	}
	if kv && b.sl.kv {
		p, err := b.wakeKV()
		if err != nil {
			return phases, err
		}
		phases = append(phases, p)
	}
	if !b.sl.weights && !b.sl.kv {
		b.sl.level = 0
	}
	return phases, nil
}

// Asleep says which parts sleep (sched.Sleeper).
func (b *Backend) Asleep() (weights, kv bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sl.weights, b.sl.kv
}

// wakeWeights puts the weights back: after a level-2 sleep it reloads
// them from the checkpoint's files and rebuilds the backend's view of
// them; after level 1 they never left, and the phase says so (b.mu held).
func (b *Backend) wakeWeights(ctx context.Context) (sched.Phase, error) {
	t0 := time.Now()
	attrs := trace.Attrs{"level": b.sl.level}
	if !b.sl.weightsGone {
		attrs["bytes"], attrs["from"] = int64(0), "host memory (level 1: the CPU backend computes from the weights where they lie, nothing to restore)"
	} else {
		st, err := b.sl.ck.Reload(ctx)
		if err != nil {
			return sched.Phase{}, err
		}
		w, err := loadWeights(&b.cfg, b.src)
		if err != nil {
			_, _ = b.sl.ck.ReleaseWeights()
			return sched.Phase{}, fmt.Errorf("cpu: reload the weights: %w", err)
		}
		b.w, b.sl.weightsGone = w, false
		end := time.Now()
		attrs["bytes"], attrs["from"], attrs["load"] = st.Bytes, "files", st.Mode
		if st.Readers > 0 {
			attrs["readers"] = st.Readers
		}
		attrs["gb_per_s"] = float64(st.Bytes) / max(end.Sub(t0).Seconds(), 1e-9) / 1e9
	}
	b.sl.weights = false
	for k, v := range rssAttrs("rss_mb") {
		attrs[k] = v
	}
	return sched.Phase{Stage: trace.StageWeightsRestore, Start: t0, End: time.Now(), Attrs: attrs}, nil
}

// wakeKV maps a fresh KV pool; its pages cost memory only once written, as
// at startup (b.mu held).
func (b *Backend) wakeKV() (sched.Phase, error) {
	t0 := time.Now()
	kv, err := allocKV(b.kvFloats)
	if err != nil {
		return sched.Phase{}, err
	}
	b.kv, b.sl.kv = kv, false
	attrs := trace.Attrs{"blocks": b.opts.NumBlocks, "block_size": b.opts.BlockSize, "bytes": b.kvFloats * 4, "level": b.sl.level}
	return sched.Phase{Stage: trace.StageKVAlloc, Start: t0, End: time.Now(), Attrs: attrs}, nil
}

// rssAttrs is the process's resident memory (VmRSS, 10⁶ bytes) as the
// stage attribute name, or nothing when /proc says nothing.
func rssAttrs(name string) trace.Attrs {
	r, err := memstat.Self()
	if err != nil {
		return nil
	}
	return trace.Attrs{name: memstat.MB(r.Total)}
}
