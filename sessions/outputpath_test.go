package sessions

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOutputTargetKeepsSpecialFiles: a rename onto /dev/null or a FIFO
// would put a regular file where the node was (an import benchmark's
// `report -o /dev/null` once did so to a machine's /dev/null): such a
// path is written in place, a symlink (dangling or not) is written
// through and stays a link, a directory is refused.
func TestOutputTargetKeepsSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	put := func(target string, direct bool, text string) {
		t.Helper()
		tmp, err := os.CreateTemp(TempDirFor(target, direct), ".out-*.tmp")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tmp.WriteString(text); err != nil {
			t.Fatal(err)
		}
		tmp.Close()
		if err := PlaceOutput(tmp.Name(), target, direct); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(tmp.Name()); !os.IsNotExist(err) {
			t.Errorf("the temporary file %s is left behind", tmp.Name())
		}
	}

	fresh := filepath.Join(dir, "new.md")
	if target, direct, err := OutputTarget(fresh); err != nil || direct || target != fresh {
		t.Fatalf("a new path: %q direct=%v err=%v", target, direct, err)
	}

	file := filepath.Join(dir, "report.md")
	os.WriteFile(file, []byte("old"), 0o644)
	link := filepath.Join(dir, "latest.md")
	if err := os.Symlink("report.md", link); err != nil {
		t.Fatal(err)
	}
	target, direct, err := OutputTarget(link)
	if err != nil || direct {
		t.Fatalf("a symlink: %q direct=%v err=%v", target, direct, err)
	}
	put(target, direct, "new")
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(file); string(b) != "new" {
		t.Errorf("the link's file holds %q, want new", b)
	}

	// A dangling symlink: the file it names is created, the link stays.
	dangling := filepath.Join(dir, "next.md")
	if err := os.Symlink("made.md", dangling); err != nil {
		t.Fatal(err)
	}
	target, direct, err = OutputTarget(dangling)
	if err != nil || direct || target != filepath.Join(dir, "made.md") {
		t.Fatalf("a dangling symlink: %q direct=%v err=%v", target, direct, err)
	}
	put(target, direct, "made")
	if b, err := os.ReadFile(dangling); err != nil || string(b) != "made" {
		t.Errorf("through the link: %q %v", b, err)
	}
	if fi, err := os.Lstat(dangling); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the dangling symlink was replaced: %v %v", fi, err)
	}

	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	target, direct, err = OutputTarget(fifo)
	if err != nil || !direct || target != fifo {
		t.Fatalf("a FIFO: %q direct=%v err=%v", target, direct, err)
	}
	got := make(chan string)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	put(target, direct, "through the pipe")
	if s := <-got; s != "through the pipe" {
		t.Errorf("the FIFO's reader got %q", s)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", fi, err)
	}

	if _, _, err := OutputTarget(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a directory as output: %v", err)
	}
}
