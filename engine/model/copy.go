package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
func (c *Checkpoint) CopyToMemory(ctx context.Context, workers int) (CopyStats, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	c.mu.Lock()
	mapped := len(c.maps)
	c.mu.Unlock()
	if mapped != len(c.Files) || len(c.Files) == 0 {
		return CopyStats{}, fmt.Errorf("copy the weights of %s into memory: they are not mapped (already copied or closed)", c.Dir)
	}
	type region struct {
		file  *os.File
		path  string
		start int64  // file offset of the data section
		buf   []byte // anonymous memory for [start, size)
	}
	regions := make([]region, 0, len(c.Files))
	release := func() {
		for _, r := range regions {
			if r.file != nil {
				_ = r.file.Close()
			}
			if r.buf != nil {
				_ = unix.Munmap(r.buf)
			}
		}
	}
	st := CopyStats{Files: len(c.Files)}
	for _, f := range c.Files {
		start := c.dataStart(f.Path)
		n := f.Size - start
		if n <= 0 {
			regions = append(regions, region{path: f.Path, start: start})
			continue
		}
		fh, err := os.Open(f.Path)
		if err != nil {
			release()
			return CopyStats{}, fmt.Errorf("open %s to copy its weights: %w", f.Path, err)
		}
		buf, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			_ = fh.Close()
			release()
			return CopyStats{}, fmt.Errorf("allocate %d bytes for the weights of %s: %w (not enough memory for --load %s; use --load %s)", n, f.Path, err, LoadCopy, LoadMmap)
		}
		// Huge pages cut the page faults of filling the buffer; advisory.
		_ = unix.Madvise(buf, unix.MADV_HUGEPAGE)
		regions = append(regions, region{file: fh, path: f.Path, start: start, buf: buf})
		st.Bytes += n
	}
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
	st.Chunks = len(chunks)
	st.Readers = min(workers, max(len(chunks), 1))
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		readErr error // written once, read after wg.Wait
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { readErr = err })
		failed.Store(true)
	}
	for w := 0; w < st.Readers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
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
				if failed.Load() {
					return
				}
			}
		}()
	}
	wg.Wait()
	if readErr != nil {
		release()
		return CopyStats{}, fmt.Errorf("copy the weights of %s into memory: %w", c.Dir, readErr)
	}
	// Repoint every tensor, then drop the file mappings.
	byPath := make(map[string]region, len(regions))
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
	var errs []error
	for _, m := range c.maps {
		if err := unix.Munmap(m); err != nil {
			errs = append(errs, err)
		}
	}
	c.maps = nil
	for _, r := range regions {
		if r.buf != nil {
			c.owned = append(c.owned, r.buf)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return st, fmt.Errorf("unmap the weight files of %s after copying them: %w", c.Dir, err)
	}
	return st, nil
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
