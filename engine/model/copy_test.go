package model

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"
)

// TestCopyToMemory: after --load copy every tensor holds the same bytes as
// the file, none of them lives in a file mapping any more (the files may
// be overwritten under a running engine), and Close frees the copy.
func TestCopyToMemory(t *testing.T) {
	for _, shards := range []int{1, 2} {
		dir := t.TempDir()
		cfg := tinyConfig(ArchQwen3, false)
		writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), BF16), shards)
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]byte{}
		for name, tn := range c.Tensors {
			want[name] = bytes.Clone(tn.Data)
		}
		st, err := c.CopyToMemory(context.Background(), 3)
		if err != nil {
			t.Fatalf("%d shard(s): %v", shards, err)
		}
		var dataBytes int64
		for _, tn := range c.Tensors {
			dataBytes += int64(len(tn.Data))
		}
		if st.Files != shards || st.Bytes < dataBytes || st.Readers < 1 || st.Chunks < shards {
			t.Errorf("%d shard(s): stats %+v for %d tensor bytes", shards, st, dataBytes)
		}
		// The engine no longer depends on the files: overwrite them.
		for _, f := range c.WeightFiles() {
			if err := os.WriteFile(f, []byte("gone"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for name, tn := range c.Tensors {
			if !bytes.Equal(tn.Data, want[name]) {
				t.Fatalf("%d shard(s): tensor %s differs after the copy", shards, name)
			}
		}
		if res, total, err := c.Residency(); err != nil || res != 0 || total != 0 {
			t.Errorf("Residency after the copy = %d of %d (%v), want nothing mapped", res, total, err)
		}
		if _, err := c.CopyToMemory(context.Background(), 1); err == nil {
			t.Errorf("a second CopyToMemory succeeded; the files are no longer mapped")
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if len(c.owned) != 0 {
			t.Errorf("Close left %d copied regions", len(c.owned))
		}
	}
}

// TestCopyToMemoryErrors: a file cut short after the index was built and a
// cancelled context both fail with an error that says why, and leave the
// checkpoint mapped as before (its tensors still readable).
func TestCopyToMemoryErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(ArchQwen2, false)
	writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), F32), 1)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.CopyToMemory(ctx, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("CopyToMemory on a cancelled context: %v", err)
	}
	if len(c.maps) != 1 || len(c.owned) != 0 {
		t.Fatalf("after a failed copy: %d maps, %d owned regions; want the mapping kept and nothing owned", len(c.maps), len(c.owned))
	}
	// Truncate a copy of the file under a second checkpoint: pread sees the
	// short file (the mapping is not touched past the end).
	f := c.WeightFiles()[0]
	c2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	st, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.CopyToMemory(context.Background(), 2); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("CopyToMemory of a truncated file: %v, want io.ErrUnexpectedEOF", err)
	}
	if len(c2.maps) != 1 || len(c2.owned) != 0 {
		t.Fatalf("after a failed copy: %d maps, %d owned", len(c2.maps), len(c2.owned))
	}
}

// stuckReader reads a weight file, but each read first waits for release:
// storage that stopped answering, induced. The first read to begin says
// so on entered; Close says so on closed.
type stuckReader struct {
	f                 *os.File
	entered           chan struct{}
	release, closed   chan struct{}
	enterOnce, closes sync.Once
}

func (r *stuckReader) ReadAt(p []byte, off int64) (int, error) {
	r.enterOnce.Do(func() { close(r.entered) })
	<-r.release
	return r.f.ReadAt(p, off)
}

func (r *stuckReader) Close() error {
	err := r.f.Close()
	r.closes.Do(func() { close(r.closed) })
	return err
}

// TestCopyToMemoryStopsWhileAReadIsStuck: a context cancelled (SIGTERM,
// Ctrl-C) while a --load copy read is blocked returns context.Canceled
// without waiting for that read, leaves the checkpoint mapped and usable,
// and releases the copy's file and memory only once the read returns.
func TestCopyToMemoryStopsWhileAReadIsStuck(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(ArchQwen2, false)
	writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), F32), 1)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := map[string][]byte{}
	for name, tn := range c.Tensors {
		want[name] = bytes.Clone(tn.Data)
	}
	r := &stuckReader{entered: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
	defer func() {
		select {
		case <-r.release:
		default:
			close(r.release)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.copyToMemory(ctx, 2, func(path string) (sectionReader, error) {
			f, _, err := OpenRegular(path)
			r.f = f
			return r, err
		})
		done <- err
	}()
	<-r.entered
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("copy cancelled during a stuck read: %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute): // a hang guard, not a timing assertion
		t.Fatal("the copy did not return while a read was stuck: a stop waits for the storage")
	}
	select {
	case <-r.closed:
		t.Fatal("the file was closed (and its buffer freed) while a read into it was under way")
	default:
	}
	if len(c.maps) != 1 || len(c.owned) != 0 {
		t.Fatalf("after a cancelled copy: %d maps, %d owned; want the mapping kept and nothing owned", len(c.maps), len(c.owned))
	}
	for name, tn := range c.Tensors {
		if !bytes.Equal(tn.Data, want[name]) {
			t.Fatalf("tensor %s changed after a cancelled copy", name)
		}
	}
	close(r.release)
	<-r.closed // the stuck read returned: its region is released
}

func TestCheckLoadMode(t *testing.T) {
	for in, want := range map[string]string{"": LoadMmap, "mmap": LoadMmap, "copy": LoadCopy} {
		if got, err := CheckLoadMode(in); err != nil || got != want {
			t.Errorf("CheckLoadMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := CheckLoadMode("direct"); err == nil {
		t.Errorf("CheckLoadMode accepted an unknown mode")
	}
}
