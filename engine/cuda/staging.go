package cuda

import (
	"errors"
	"math"
	"time"
)

// stagingLeft is what a staged upload leaves behind once its copies are
// done: the page-locked ring and the copy engine's streams, events and
// slot registrations.
type stagingLeft struct {
	ring    *stagingRing
	dma     *cudaDMA       // nil until the upload thread made it
	inPlace []*cudaInPlace // the in-place copiers, with their registrations
	maps    fileMaps       // the files' mappings they registered in
}

// releaseStaging releases what the staged upload left, once (runner
// thread; b.mu held, or the backend not yet published): the ring, the
// copy engine's streams and slot registrations, the in-place copiers'
// registrations and then the mappings they lie in. Unregistering the
// slots and destroying the streams took 6–8 ms on the H100, and once
// 40 ms (2026-11-26, docs/BENCHMARKS.md), between the last weight copy
// and a ready backend; they now run as the background warm-up's "staging"
// item (WarmBackground), the in-place registrations as its last,
// "inplace" items (releaseInPlaceStep), or all in free.
func (b *Backend) releaseStaging() error {
	err := b.releaseRing()
	_, err2 := b.releaseInPlaceStep(math.MaxInt64)
	return errors.Join(err, err2)
}

// releaseRing releases the ring and the copy engine's streams and slot
// registrations.
func (b *Backend) releaseRing() error {
	for {
		if done, err := b.releaseRingStep(); done || err != nil {
			return err
		}
	}
}

// releaseRingStep releases the next part of the ring (a "staging"
// background item): the copy engine's streams and events, then one
// page-locked slot, then the mapping; it says whether the ring is gone.
// Released in one item the ring held the runner thread for 7–12 ms on the
// H100, and a request arriving meanwhile waited that long (sixteenth
// session); a slot's unregistering is a fraction of it.
func (b *Backend) releaseRingStep() (bool, error) {
	st := b.staging
	if st == nil {
		return true, nil
	}
	if st.dma != nil {
		if st.dma.releaseNext() {
			return false, nil
		}
		st.dma = nil
	}
	return true, errors.Join(st.ring.unmap(), b.forgetStaging())
}

// ringItems is how many "staging" background items release the ring
// (releaseRingStep): the copy engine's streams and events, each
// page-locked slot, and the mapping.
func (st *stagingLeft) ringItems() int {
	n := 1 // the mapping
	if st.dma != nil {
		n += st.dma.pieces()
	}
	return n
}

// forgetStaging unmaps the in-place mappings and drops b.staging once the
// ring and every in-place registration are released (releaseRing,
// releaseInPlaceStep), whichever went last.
func (b *Backend) forgetStaging() error {
	st := b.staging
	if (st.ring != nil && st.ring.mem != nil) || len(st.inPlace) > 0 {
		return nil
	}
	b.staging = nil
	return st.maps.unmap()
}

// The in-place copiers' registrations (~6 GB of a 4B-shaped checkpoint)
// took ~55 ms to unregister on an idle server and 120–175 ms on one
// serving a burst, which that work stalled (docs/BENCHMARKS.md). So the
// background releases them stagingReleaseBytes at a time, each step only
// once the steps have paused for stagingQuiet: a burst is not stalled, a
// request arriving during a step waits for that step only, and the
// process's RSS (the registered file pages count while mapped) falls back
// at the first pause. A server under steady load from its start never
// pauses: stagingForceAfter after the first step could have run, the
// steps run between two steps anyway, at most one every stagingForceGap,
// so the page cache is unpinned within a bounded time at the cost of a
// short stall a step (inPlaceWait).
const (
	stagingReleaseBytes = 512 << 20
	stagingQuiet        = 100 * time.Millisecond
	stagingForceAfter   = 2 * time.Second
	stagingForceGap     = 250 * time.Millisecond
)

// inPlaceWait is how much longer an in-place release step waits, now,
// given when the steps last finished (lastDone), when the first release
// step became due (due) and when the last one ended (last, zero for
// none): until the steps have paused for stagingQuiet, or, from
// stagingForceAfter after due, until stagingForceGap after the last
// step. 0 or less: run it (once no step is pending); forced then says it
// runs by the deadline, without a pause.
func inPlaceWait(now, lastDone, due, last time.Time) (wait time.Duration, forced bool) {
	quiet := stagingQuiet - now.Sub(lastDone)
	switch {
	case now.Sub(due) < stagingForceAfter:
		wait = min(quiet, stagingForceAfter-now.Sub(due))
	case last.IsZero():
		wait = 0
	default:
		wait = min(quiet, stagingForceGap-now.Sub(last))
	}
	return wait, quiet > 0
}

// releaseInPlaceStep unregisters in-place ranges until budget bytes have
// gone and reports whether none is left.
func (b *Backend) releaseInPlaceStep(budget int64) (done bool, err error) {
	st := b.staging
	if st == nil {
		return true, nil
	}
	var errs []error
	for len(st.inPlace) > 0 && budget > 0 {
		e := st.inPlace[0]
		n, err := e.unregister(budget)
		errs = append(errs, err)
		budget -= n
		if len(e.registered) == 0 {
			errs = append(errs, e.release())
			st.inPlace = st.inPlace[1:]
		}
	}
	if len(st.inPlace) > 0 {
		return false, errors.Join(errs...)
	}
	return true, errors.Join(append(errs, b.forgetStaging())...)
}

// inPlaceItems is how many "inplace" background items release st's
// in-place registrations, one releaseInPlaceStep of stagingReleaseBytes
// each (0 without copiers).
func (st *stagingLeft) inPlaceItems() int {
	var n int64
	for _, e := range st.inPlace {
		for _, r := range e.registered {
			n += int64(len(r))
		}
	}
	return int((n + stagingReleaseBytes - 1) / stagingReleaseBytes)
}
