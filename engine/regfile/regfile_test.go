package regfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{
		// A FIFO with no writer: a blocking open would never return.
		{fifo, "a named pipe (FIFO)"},
		{sub, "a directory"},
	} {
		_, _, err := Open(tc.path)
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tc.kind) {
			t.Errorf("Open(%s) = %v, want ErrNotRegular naming %q", tc.path, err, tc.kind)
		}
		if _, err := ReadFile(tc.path, 1<<20); !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFile(%s) = %v, want ErrNotRegular", tc.path, err)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A symlink to a regular file is a regular file (Hugging Face's cache
	// links every file to its blob).
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, link} {
		b, err := ReadFile(p, 10)
		if err != nil || string(b) != "0123456789" {
			t.Errorf("ReadFile(%s, 10) = %q, %v", p, b, err)
		}
	}
	if _, err := ReadFile(path, 9); err == nil || !strings.Contains(err.Error(), "more than the 9") {
		t.Errorf("ReadFile over its limit = %v, want a refusal naming the limit", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file = %v, want fs.ErrNotExist kept", err)
	}
}
