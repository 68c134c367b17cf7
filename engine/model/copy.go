package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Load modes: how a backend that computes from host memory (the CPU
// backend) takes the weights. See docs/ARCHITECTURE.md, "Loading".
const (
	// LoadMmap computes straight from the mapped files (the default): the
	// pages are shared with the page cache and loading is faulting them in
	// (the page_cache stage, Prefetch).
	LoadMmap = "mmap"
	// LoadCopy reads the files with pread into memory the process owns
	// and unmaps them (llama.cpp's --no-mmap): every weight byte is copied
	// once at load, the decoder_tensor_upload stage of a CPU backend. The
	// running engine then no longer depends on the files (network
	// filesystems, a checkpoint replaced on disk under a live server).
	LoadCopy = "copy"
)

// CheckLoadMode returns mode if it is a known load mode ("" means LoadMmap).
func CheckLoadMode(mode string) (string, error) {
	switch mode {
	case "", LoadMmap:
		return LoadMmap, nil
	case LoadCopy:
		return LoadCopy, nil
	}
	return "", fmt.Errorf("load mode %q: use %s (compute from the mapped files) or %s (read them into the engine's own memory, like llama.cpp --no-mmap)", mode, LoadMmap, LoadCopy)
}

// CopyStats describes one CopyToMemory.
type CopyStats struct {
	// Bytes is the tensor data copied (every file's data section).
	Bytes int64
	// Files is the number of weight files read.
	Files int
	// Readers is the number of parallel pread workers.
	Readers int
	// Chunks is the number of pread calls' work units.
	Chunks int
}

// copyChunk is one pread worker's unit: large enough that the system call
// and scheduling cost vanish, small enough to spread a single-file
// checkpoint over every core.
const copyChunk = 8 << 20

// CopyToMemory implements LoadCopy: it reads every weight file's data
// section with pread into anonymous memory the checkpoint owns, points
// every Tensor's Data there, and unmaps the files. workers <= 0 means
// GOMAXPROCS. On error (a short or failed read, ctx done) the tensors still
// point into the mapped files and the checkpoint stays usable as before.
// Residency and Prefetch report nothing afterwards: no file is mapped.
//
// When ctx ends it returns at once with ctx's error, even while a read is
// under way: storage that stopped answering must not hold a server that
// was told to stop (SIGTERM, Ctrl-C). A read cannot be interrupted, so
// the memory it reads into is released only once it returns.
func (c *Checkpoint) CopyToMemory(ctx context.Context, workers int) (CopyStats, error) {
	return c.copyToMemory(ctx, workers, func(path string) (sectionReader, error) {
		f, _, err := OpenRegular(path)
		if err != nil {
			return nil, err
		}
		return f, nil
	})
}

// sectionReader is what the copy reads a weight file through: an
// *os.File, or in tests a reader that blocks where a test wants it to.
type sectionReader interface {
	io.ReaderAt
	io.Closer
}

// copyRegion is one weight file's data section and the memory it is
// copied into.
type copyRegion struct {
	file  sectionReader
	path  string
	start int64  // file offset of the data section
	buf   []byte // anonymous memory for [start, size)
}

// releaseRegions closes the files and frees the buffers of regions.
func releaseRegions(regions []copyRegion) {
	for _, r := range regions {
		if r.file != nil {
			_ = r.file.Close()
		}
		if r.buf != nil {
			_ = unix.Munmap(r.buf)
		}
	}
}

// copyToMemory is CopyToMemory with the files opened by open.
func (c *Checkpoint) copyToMemory(ctx context.Context, workers int, open func(string) (sectionReader, error)) (CopyStats, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	c.mu.Lock()
	mapped := len(c.maps)
	c.mu.Unlock()
	if mapped != len(c.Files) || len(c.Files) == 0 {
		return CopyStats{}, fmt.Errorf("copy the weights of %s into memory: they are not mapped (already copied or closed)", c.Dir)
	}
	regions, st, err := c.openRegions(open)
	if err != nil {
		return CopyStats{}, err
	}
	st.Readers, st.Chunks, err = readRegions(ctx, regions, workers)
	if err != nil {
		return CopyStats{}, fmt.Errorf("copy the weights of %s into memory: %w", c.Dir, err)
	}
	if err := c.adoptRegions(regions); err != nil {
		return st, err
	}
	return st, nil
}

// openRegions opens every weight file with open and allocates anonymous
// memory for its data section, counting the files and bytes in the
// stats. On an error it releases what it had opened and allocated.
func (c *Checkpoint) openRegions(open func(string) (sectionReader, error)) ([]copyRegion, CopyStats, error) {
	regions := make([]copyRegion, 0, len(c.Files))
	st := CopyStats{Files: len(c.Files)}
	for _, f := range c.Files {
		start := c.dataStart(f.Path)
		n := f.Size - start
		if n <= 0 {
			regions = append(regions, copyRegion{path: f.Path, start: start})
			continue
		}
		fh, err := open(f.Path)
		if err != nil {
			releaseRegions(regions)
			return nil, CopyStats{}, fmt.Errorf("open %s to copy its weights: %w", f.Path, err)
		}
		buf, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			_ = fh.Close()
			releaseRegions(regions)
			return nil, CopyStats{}, fmt.Errorf("allocate %d bytes for the weights of %s: %w (not enough memory for --load %s; use --load %s)", n, f.Path, err, LoadCopy, LoadMmap)
		}
		// Huge pages cut the page faults of filling the buffer; advisory.
		_ = unix.Madvise(buf, unix.MADV_HUGEPAGE)
		regions = append(regions, copyRegion{file: fh, path: f.Path, start: start, buf: buf})
		st.Bytes += n
	}
	return regions, st, nil
}

// adoptRegions closes the files of the filled regions, repoints every
// tensor into their memory, which the checkpoint then owns, and unmaps
// the weight files.
func (c *Checkpoint) adoptRegions(regions []copyRegion) error {
	// Repoint every tensor, then drop the file mappings.
	byPath := make(map[string]copyRegion, len(regions))
	for _, r := range regions {
		byPath[r.path] = r
		if r.file != nil {
			_ = r.file.Close()
		}
	}
	for _, t := range c.Tensors {
		r := byPath[t.File]
		lo := t.Offset - r.start
		n := int64(len(t.Data))
		t.Data = r.buf[lo : lo+n : lo+n]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := munmapAll(c.maps)
	c.maps = nil
	for _, r := range regions {
		if r.buf != nil {
			c.owned = append(c.owned, r.buf)
		}
	}
	if err != nil {
		return fmt.Errorf("unmap the weight files of %s after copying them: %w", c.Dir, err)
	}
	return nil
}

// readRegions fills every region's buffer from its file with up to
// workers parallel readers taking copyChunk-sized chunks, and returns the
// readers and chunks it used. On an error it stops the readers and
// releases the regions (files and buffers) itself. When ctx ends it
// returns ctx's error at once; readers still inside a read (storage that
// stopped answering) are left to finish it, and the regions are released
// only after the last of them has returned, by a goroutine that exists
// for just that: nothing may unmap a buffer a read is still filling.
func readRegions(ctx context.Context, regions []copyRegion, workers int) (readers, nChunks int, err error) {
	type chunk struct {
		r      int
		lo, hi int64 // offsets into the region's buffer
	}
	var chunks []chunk
	for i, r := range regions {
		for lo := int64(0); lo < int64(len(r.buf)); lo += copyChunk {
			chunks = append(chunks, chunk{i, lo, min(lo+copyChunk, int64(len(r.buf)))})
		}
	}
	readers = min(workers, max(len(chunks), 1))
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		readErr error // written once, read after done is closed
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { readErr = err })
		failed.Store(true)
	}
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				if err := ctx.Err(); err != nil {
					fail(err)
					return
				}
				k := int(next.Add(1) - 1)
				if k >= len(chunks) {
					return
				}
				ch := chunks[k]
				r := regions[ch.r]
				if _, err := r.file.ReadAt(r.buf[ch.lo:ch.hi], r.start+ch.lo); err != nil {
					if errors.Is(err, io.EOF) {
						err = fmt.Errorf("%w: the file ended at %d bytes (it changed after the index was built?)", io.ErrUnexpectedEOF, r.start+ch.lo)
					}
					fail(fmt.Errorf("read %s at %d: %w", r.path, r.start+ch.lo, err))
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		fail(ctx.Err())
		select {
		case <-done: // every reader had already stopped
		default:
			go func() {
				<-done
				releaseRegions(regions)
			}()
			return readers, len(chunks), ctx.Err()
		}
	}
	if readErr != nil {
		releaseRegions(regions)
		return readers, len(chunks), readErr
	}
	return readers, len(chunks), nil
}

// dataStart is the file offset where path's tensor data begins: the
// lowest offset of its tensors (the header precedes them), or the file's
// size when it holds none.
func (c *Checkpoint) dataStart(path string) int64 {
	start := int64(-1)
	var size int64
	for _, f := range c.Files {
		if f.Path == path {
			size = f.Size
		}
	}
	for _, t := range c.Tensors {
		if t.File == path && (start < 0 || t.Offset < start) {
			start = t.Offset
		}
	}
	if start < 0 {
		return size
	}
	return start
}
