package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// dmaEngine is what the staged pipeline needs from the device: prepare a
// slot once, before its first copy (the CUDA engine page-locks it then, so
// registering the ring costs no time before the first read: slot by slot,
// while the readers fill the others), enqueue a copy of src (inside a
// slot) to dst on one of two streams, fence a slot after its copies, and
// wait for a slot's fence before the slot is refilled. The CUDA
// implementation enqueues asynchronous copies and events; tests use one
// that performs the copies only when the fence is waited for, so a slot
// refilled too early shows up as corrupt weights.
type dmaEngine interface {
	prepare(slot int) error
	copy(stream int, dst DevicePtr, src []byte) error
	fence(slot, stream int) error
	wait(slot int) error
}

// stagedStats is what a staged upload did, and where its time went: if
// the copy loop mostly waited for reads (readWait), reading the files is
// the limit; if it mostly waited for slots to drain (fenceWait), the copy
// engine is.
type stagedStats struct {
	chunks    int
	readBytes int64 // bytes read from the files, gaps included
	// readBusy is the readers' time inside read calls, summed over readers.
	readBusy time.Duration
	// readIdle is the readers' time without a read under way, summed over
	// readers, from the first read to the last copy's fence: waiting for
	// the copy loop to hand them the next chunk and slot (or, enqueueing
	// their own copies, for a slot's copies, page-locking it and
	// enqueueing), and the end.
	readIdle time.Duration
	// readWait and fenceWait are the copy loop's time blocked on a read
	// result and on a slot's copies; prepare is its time registering slots
	// (with readers that copy their own chunks, the mean reader's time
	// reading, waiting for its slots' copies and registering them).
	readWait, fenceWait, prepare time.Duration
}

// attrs are the stats as stage attributes (ms, GB/s per reader).
func (st stagedStats) attrs() map[string]any {
	perReader := 0.0
	if st.readBusy > 0 {
		perReader = gbPerS(st.readBytes, st.readBusy)
	}
	return map[string]any{"read_busy_ms": durMS(st.readBusy), "read_idle_ms": durMS(st.readIdle), "read_gb_per_s_per_reader": perReader,
		trace.AttrReadWaitMS: durMS(st.readWait), trace.AttrCopyWaitMS: durMS(st.fenceWait), "slot_register_ms": durMS(st.prepare)}
}

// runStaged takes chunks from the front of q until it is empty, reads each
// into the ring with up to feed.readers readers and hands each filled slot
// to dma (the readers themselves, or one copy loop: readerFeed); a slot is
// reused only after its fence has been waited for. It opens q's back end
// once every slot in use is prepared, or when it returns. It returns when
// every copy has been fenced and waited for, or at the first error (after
// the readers have stopped, and after closing q so that the in-place
// copiers stop too); ctx ending is such an error, seen by each reader
// before its next chunk.
func runStaged(ctx context.Context, chunks []readChunk, q *chunkQueue, ring *stagingRing, feed readerFeed, dma dmaEngine) (st stagedStats, err error) {
	defer func() {
		if err != nil {
			q.close()
		}
		q.openBack()
	}()
	if len(chunks) == 0 {
		return st, nil
	}
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, c := range chunks {
		if _, ok := files[c.file]; ok {
			continue
		}
		f, err := os.Open(c.file)
		if err != nil {
			return st, fmt.Errorf("open weight file for upload: %w", err)
		}
		files[c.file] = f
	}
	read := func(c readChunk, dst []byte) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("upload weights: %w", err)
		}
		if _, err := files[c.file].ReadAt(dst, c.off); err != nil {
			return fmt.Errorf("read %s at %d (%d bytes): %w", c.file, c.off, c.n, err)
		}
		return nil
	}
	if feed.ownCopies {
		return stageOwnCopies(chunks, q, ring, feed, read, dma)
	}
	return stageCopyLoop(chunks, q, ring, feed.readers, read, dma)
}

// readerFeed is how the staged upload's readers are fed and who copies
// what they read: with ownCopies each of readers enqueues its own chunks'
// copies (stageOwnCopies), alternating between perReader slots of its own,
// on a thread that thread starts (one where the context is current;
// contextThread); otherwise one copy loop does (stageCopyLoop).
type readerFeed struct {
	readers, perReader int
	ownCopies          bool
	thread             func(f func() error) <-chan error
}

// stageOwnCopies: every reader reads a chunk into one of its slots,
// enqueues that chunk's copies on its own stream and fences the slot, then
// takes the next chunk into its next slot, waiting first for that slot's
// previous copies. No thread stands between a read and its copy. With one
// copy loop beside the readers (stageCopyLoop), on the lent H100 the copy
// engine sat idle 18% of the 4B upload in gaps between copies while the
// readers, ~15% of their time, waited for the loop to hand them their next
// chunk (docs/BENCHMARKS.md). The slots are page-locked by their readers
// at first use.
func stageOwnCopies(chunks []readChunk, q *chunkQueue, ring *stagingRing, feed readerFeed, read func(readChunk, []byte) error, dma dmaEngine) (stagedStats, error) {
	per := max(1, min(feed.perReader, ring.slots()))
	readers := max(1, min(feed.readers, ring.slots()/per))
	var unprepared atomic.Int32
	unprepared.Store(int32(readers * per))
	var failed atomic.Bool // the first error stops the other readers
	stats := make([]stagedStats, readers)
	done := make([]<-chan error, readers)
	start := time.Now()
	for r := range readers {
		st := &stats[r]
		done[r] = feed.thread(func() (err error) {
			defer func() {
				if err != nil {
					failed.Store(true)
				}
			}()
			filled := make([]bool, per)
			for n := 0; !failed.Load(); n++ {
				i, ok := q.takeFront()
				if !ok {
					break
				}
				k := n % per
				slot := r*per + k
				if filled[k] {
					t := time.Now()
					if err := dma.wait(slot); err != nil {
						return err
					}
					st.fenceWait += time.Since(t)
				}
				c := chunks[i]
				buf := ring.slot(slot)
				t := time.Now()
				if err := read(c, buf[:c.n]); err != nil {
					return err
				}
				st.readBusy += time.Since(t)
				if !filled[k] {
					t := time.Now()
					if err := dma.prepare(slot); err != nil {
						return err
					}
					st.prepare += time.Since(t)
					if unprepared.Add(-1) == 0 {
						q.openBack()
					}
				}
				for _, p := range c.pieces {
					if err := dma.copy(r, p.dst, buf[p.at:p.at+p.n]); err != nil {
						return fmt.Errorf("upload weights: %w", err)
					}
				}
				if err := dma.fence(slot, r); err != nil {
					return err
				}
				filled[k] = true
				st.chunks++
				st.readBytes += int64(c.n)
			}
			// This reader's last copies, before its slots may be unmapped.
			t := time.Now()
			for k, f := range filled {
				if f {
					if err := dma.wait(r*per + k); err != nil {
						return err
					}
				}
			}
			st.fenceWait += time.Since(t)
			return nil
		})
	}
	var errs []error
	for _, d := range done {
		errs = append(errs, <-d)
	}
	var st stagedStats
	for _, s := range stats {
		st.chunks += s.chunks
		st.readBytes += s.readBytes
		st.readBusy += s.readBusy
		st.fenceWait += s.fenceWait
		st.prepare += s.prepare
	}
	st.readIdle = max(0, time.Duration(readers)*time.Since(start)-st.readBusy)
	// The upload's split as the copy loop's was, in wall-clock time: the
	// mean reader's time in reads (what the copies waited for: a cold
	// page cache shows here), in waiting for its slots' copies, and in
	// page-locking them.
	n := time.Duration(readers)
	st.readWait, st.fenceWait, st.prepare = st.readBusy/n, st.fenceWait/n, st.prepare/n
	return st, errors.Join(errs...)
}

// stageCopyLoop: one copy loop hands each reader its next chunk and a
// slot, enqueues the copies of what they read on two streams, and waits
// for the oldest copies when no slot is free (UploadFeedEnv=loop).
func stageCopyLoop(chunks []readChunk, q *chunkQueue, ring *stagingRing, readers int, read func(readChunk, []byte) error, dma dmaEngine) (st stagedStats, err error) {
	type job struct{ chunk, slot int }
	type done struct {
		job
		err  error
		took time.Duration
	}
	nslots := ring.slots()
	readers = max(1, min(readers, nslots))
	start := time.Now()
	jobs := make(chan job)
	results := make(chan done, nslots)
	var wg sync.WaitGroup
	for w := 0; w < readers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c := chunks[j.chunk]
				t := time.Now()
				err := read(c, ring.slot(j.slot)[:c.n])
				results <- done{j, err, time.Since(t)}
			}
		}()
	}
	// The readers are owned here: stop them on every return, the error
	// paths included. results has room for one result per slot and at most
	// one read per slot is in flight, so a reader never blocks on sending
	// and stop's Wait returns once the reads under way have ended — before
	// the caller may unmap the ring they write into.
	closed := false
	stop := func() {
		if !closed {
			close(jobs)
			closed = true
		}
		wg.Wait()
	}
	defer stop()

	free := make([]int, 0, nslots)
	for s := nslots - 1; s >= 0; s-- {
		free = append(free, s)
	}
	var fenced []int // slots whose copies are enqueued, oldest first
	prepared, unprepared := make([]bool, nslots), nslots
	reading := 0
	for {
		// Keep every reader busy. A reader without a free slot takes the
		// oldest fenced one once its copies are done: they were enqueued
		// first, so they finish first. Slots are conserved (free + fenced
		// + reading), so with no read under way there is always one.
		for reading < readers && (len(free) > 0 || len(fenced) > 0) {
			if len(free) == 0 {
				s := fenced[0]
				t := time.Now()
				if err := dma.wait(s); err != nil {
					return st, err
				}
				st.fenceWait += time.Since(t)
				fenced = fenced[1:]
				free = append(free, s)
			}
			i, ok := q.takeFront()
			if !ok {
				break
			}
			s := free[len(free)-1]
			free = free[:len(free)-1]
			jobs <- job{i, s}
			reading++
		}
		if reading == 0 {
			break // the queue is empty and every read is copied
		}
		t := time.Now()
		d := <-results
		st.readWait += time.Since(t)
		st.readBusy += d.took
		reading--
		if d.err != nil {
			return st, d.err
		}
		if !prepared[d.slot] {
			t := time.Now()
			if err := dma.prepare(d.slot); err != nil {
				return st, err
			}
			st.prepare += time.Since(t)
			prepared[d.slot] = true
			if unprepared--; unprepared == 0 {
				q.openBack()
			}
		}
		c := chunks[d.chunk]
		stream := d.chunk % 2
		buf := ring.slot(d.slot)
		for _, p := range c.pieces {
			if err := dma.copy(stream, p.dst, buf[p.at:p.at+p.n]); err != nil {
				return st, fmt.Errorf("upload weights: %w", err)
			}
		}
		if err := dma.fence(d.slot, stream); err != nil {
			return st, err
		}
		fenced = append(fenced, d.slot)
		st.chunks++
		st.readBytes += int64(c.n)
	}
	t := time.Now()
	for _, s := range fenced {
		if err := dma.wait(s); err != nil {
			return st, err
		}
	}
	st.fenceWait += time.Since(t)
	st.readIdle = max(0, time.Duration(readers)*time.Since(start)-st.readBusy)
	return st, nil
}
