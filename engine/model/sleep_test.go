package model

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// heldBytes is the weight memory c holds: its mappings and its owned copy.
func heldBytes(c *Checkpoint) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, m := range slices.Concat(c.maps, c.owned) {
		n += int64(len(m))
	}
	return n
}

// TestReleaseReload: a level-2 sleep's round trip, for both load modes:
// every weight byte is let go, and the reload gives every tensor the same
// bytes back, held the way they were (mapped, or owned).
func TestReleaseReload(t *testing.T) {
	for _, mode := range []string{LoadMmap, LoadCopy} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			cfg := tinyConfig(ArchQwen3, false)
			writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), BF16), 2)
			c, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if mode == LoadCopy {
				if _, err := c.CopyToMemory(context.Background(), 2); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string][]byte{}
			for name, tn := range c.Tensors {
				want[name] = bytes.Clone(tn.Data)
			}
			held := heldBytes(c)
			st, err := c.ReleaseWeights()
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode != mode || st.Bytes != held || heldBytes(c) != 0 || !c.Released() {
				t.Fatalf("release %+v (held %d before, %d after, released %v)", st, held, heldBytes(c), c.Released())
			}
			for name, tn := range c.Tensors {
				if tn.Data != nil {
					t.Fatalf("tensor %s still has data after the release", name)
				}
			}
			if _, err := c.ReleaseWeights(); err == nil {
				t.Fatal("a second release succeeded")
			}
			rs, err := c.Reload(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rs.Mode != mode || rs.Bytes <= 0 || rs.Files != 2 || c.Released() {
				t.Fatalf("reload %+v", rs)
			}
			for name, tn := range c.Tensors {
				if !bytes.Equal(tn.Data, want[name]) {
					t.Fatalf("tensor %s differs after the reload", name)
				}
			}
			mapped := len(c.maps) > 0
			if mapped != (mode == LoadMmap) || (len(c.owned) > 0) != (mode == LoadCopy) {
				t.Fatalf("after the reload: %d mappings, %d owned regions for --load %s", len(c.maps), len(c.owned), mode)
			}
			if _, err := c.Reload(context.Background()); err == nil {
				t.Fatal("a reload of weights that are held succeeded")
			}
		})
	}
}

// TestReloadRefusesChangedFiles: a weight file replaced while the weights
// were released is refused with ErrFilesChanged naming it, and the
// checkpoint stays released (no tensor points at the new bytes).
func TestReloadRefusesChangedFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(ArchQwen3, false)
	writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), BF16), 1)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ReleaseWeights(); err != nil {
		t.Fatal(err)
	}
	f := c.WeightFiles()[0]
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(f, later, later); err != nil {
		t.Fatal(err)
	}
	_, err = c.Reload(context.Background())
	if !errors.Is(err, ErrFilesChanged) || !bytes.Contains([]byte(err.Error()), []byte(f)) {
		t.Fatalf("reload of a touched file: %v, want ErrFilesChanged naming %s", err, f)
	}
	if !c.Released() || heldBytes(c) != 0 {
		t.Fatal("a refused reload left weights mapped")
	}
	for name, tn := range c.Tensors {
		if tn.Data != nil {
			t.Fatalf("tensor %s has data after a refused reload", name)
		}
	}
}

// TestSameFiles: a checkpoint opened again matches the files it was
// loaded from until one of them is touched (ErrFilesChanged naming it).
func TestSameFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(ArchQwen3, false)
	writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), BF16), 2)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	was := c.Files
	again := func() *Checkpoint {
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	if err := again().SameFiles(was); err != nil {
		t.Fatalf("unchanged files: %v", err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(was[1].Path, later, later); err != nil {
		t.Fatal(err)
	}
	if err := again().SameFiles(was); !errors.Is(err, ErrFilesChanged) || !strings.Contains(err.Error(), was[1].Path) {
		t.Fatalf("a touched file: %v, want ErrFilesChanged naming %s", err, was[1].Path)
	}
	if err := again().SameFiles(was[:1]); !errors.Is(err, ErrFilesChanged) {
		t.Fatalf("another number of files: %v", err)
	}
}
