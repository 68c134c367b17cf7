package model

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A server in sleep mode (docs/ARCHITECTURE.md, "Sleep and wake") that
// drops its weights at level 2 lets go of every weight byte it holds and
// takes the weights back from the same files on a wake.

// ErrFilesChanged is returned (wrapped) by Reload when a weight file is no
// longer the one that was loaded.
var ErrFilesChanged = errors.New("the weight files changed since they were loaded")

// ReleaseStats is what ReleaseWeights let go of.
type ReleaseStats struct {
	// Bytes is the weight memory released: the owned copy (LoadCopy) or
	// the files' mappings (LoadMmap; their pages stay in the page cache
	// for whoever reads the files next).
	Bytes int64
	// Mode is how the weights were held: LoadCopy or LoadMmap.
	Mode string
}

// ReleaseWeights unmaps the weight files and frees the memory CopyToMemory
// filled. The index stays (Files, and every Tensor's name, dtype, shape,
// file and offset), but every Tensor's Data is nil until Reload.
func (c *Checkpoint) ReleaseWeights() (ReleaseStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released != "" {
		return ReleaseStats{}, fmt.Errorf("release the weights of %s: already released", c.Dir)
	}
	st := ReleaseStats{Mode: LoadMmap}
	if len(c.owned) > 0 {
		st.Mode = LoadCopy
	}
	for _, ms := range [][][]byte{c.maps, c.owned} {
		for _, m := range ms {
			st.Bytes += int64(len(m))
		}
	}
	err := errors.Join(munmapAll(c.maps), munmapAll(c.owned))
	c.maps, c.owned = nil, nil
	for _, t := range c.Tensors {
		t.Data = nil
	}
	c.released = st.Mode
	if err != nil {
		return st, fmt.Errorf("release the weights of %s: %w", c.Dir, err)
	}
	return st, nil
}

// ReloadStats is what Reload read.
type ReloadStats struct {
	// Bytes is the weight bytes brought back: read into owned memory
	// (LoadCopy) or faulted into the page cache through the mapping
	// (LoadMmap).
	Bytes int64
	// Mode is the load mode, the one the weights had when released.
	Mode string
	// Files is the number of weight files; Readers the parallel readers.
	Files, Readers int
}

// Reload takes the weights back after ReleaseWeights, the way they were
// held: it checks that every weight file is still the one opened (same
// size and modification time; ErrFilesChanged otherwise, so a server never
// mixes an index with other bytes), maps the files again and then, for
// LoadCopy, reads them into owned memory (CopyToMemory) or, for LoadMmap,
// into the page cache through the mapping (Prefetch). On error the
// weights stay released and Reload may be called again.
func (c *Checkpoint) Reload(ctx context.Context) (ReloadStats, error) {
	c.mu.Lock()
	mode := c.released
	c.mu.Unlock()
	if mode == "" {
		return ReloadStats{}, fmt.Errorf("reload the weights of %s: they were not released", c.Dir)
	}
	st := ReloadStats{Mode: mode, Files: len(c.Files)}
	var maps [][]byte
	fail := func(err error) (ReloadStats, error) {
		for _, m := range maps {
			_ = unix.Munmap(m)
		}
		for _, t := range c.Tensors {
			t.Data = nil
		}
		return ReloadStats{}, fmt.Errorf("reload the weights of %s: %w", c.Dir, err)
	}
	byPath := map[string][]byte{}
	for _, f := range c.Files {
		m, err := remap(f)
		if err != nil {
			return fail(err)
		}
		maps = append(maps, m)
		byPath[f.Path] = m
	}
	for _, t := range c.Tensors {
		n := int64(t.NumElements() * t.DType.Size())
		t.Data = byPath[t.File][t.Offset : t.Offset+n : t.Offset+n]
	}
	c.mu.Lock()
	c.maps, c.released = maps, ""
	c.mu.Unlock()
	if mode == LoadCopy {
		cs, err := c.CopyToMemory(ctx, 0)
		if err != nil {
			c.mu.Lock()
			c.maps, c.released = nil, mode
			c.mu.Unlock()
			return fail(err)
		}
		st.Bytes, st.Readers = cs.Bytes, cs.Readers
		return st, nil
	}
	n, err := c.Prefetch(ctx, 0)
	if err != nil {
		c.mu.Lock()
		c.maps, c.released = nil, mode
		c.mu.Unlock()
		return fail(err)
	}
	st.Bytes = n
	return st, nil
}

// remap maps f again, read-only, after checking it is the file that was
// opened.
func remap(f File) ([]byte, error) {
	fh, err := os.Open(f.Path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", f.Path, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", f.Path, err)
	}
	if fi.Size() != f.Size || !fi.ModTime().Equal(f.ModTime) {
		return nil, fmt.Errorf("%w: %s was %d bytes modified %s when loaded, now %d bytes modified %s; restart the server to serve the new weights",
			ErrFilesChanged, f.Path, f.Size, f.ModTime.Format("2006-01-02 15:04:05.000"), fi.Size(), fi.ModTime().Format("2006-01-02 15:04:05.000"))
	}
	m, err := unix.Mmap(int(fh.Fd()), 0, int(f.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Path, err)
	}
	return m, nil
}

// Released says whether the weights are released (ReleaseWeights without
// a Reload since).
func (c *Checkpoint) Released() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.released != ""
}

// SameFiles checks that a checkpoint opened again has the weight files it
// had when loaded (was): the same paths, sizes and modification times;
// ErrFilesChanged otherwise.
func (c *Checkpoint) SameFiles(was []File) error {
	if len(c.Files) != len(was) {
		return fmt.Errorf("%w: %s has %d weight files, %d when loaded; restart the server to serve the new weights", ErrFilesChanged, c.Dir, len(c.Files), len(was))
	}
	for i, f := range c.Files {
		w := was[i]
		if f.Path != w.Path || f.Size != w.Size || !f.ModTime.Equal(w.ModTime) {
			return fmt.Errorf("%w: %s was %d bytes modified %s when loaded, now %s is %d bytes modified %s; restart the server to serve the new weights",
				ErrFilesChanged, w.Path, w.Size, w.ModTime.Format("2006-01-02 15:04:05.000"), f.Path, f.Size, f.ModTime.Format("2006-01-02 15:04:05.000"))
		}
	}
	return nil
}
