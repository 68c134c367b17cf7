package main

// End-to-end checks of promises the CLI makes: the exit statuses of live
// sessions (a ctrl-c'd headless run exits 130 with its session complete
// and marked interrupted; a TUI whose target crashed exits 2 after q) and
// bench --tui without a terminal (headless, no escape codes in the report).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// TestE2EHeadlessInterruptExits130 sends SIGINT to a headless run once its
// target is healthy.
func TestE2EHeadlessInterruptExits130(t *testing.T) {
	needBinary(t)
	dir := synthCheckpoint(t, "tiny")
	rec := filepath.Join(e2e.dir, "sessions", "interrupted.jsonl")
	if err := os.MkdirAll(filepath.Dir(rec), 0o755); err != nil {
		t.Fatal(err)
	}
	// Many warm requests, so the sequence is still running when the
	// signal comes.
	cmd := exec.Command(e2e.bin, "run", "--headless", "--model", dir, "--record", rec, "--repeat", "1000", "--max-tokens", "4", "--prompt", "Hi", "--timeout", "2m", "--grace", "5s")
	cmd.Env = childEnv()
	var stdout bytes.Buffer
	stderr := &syncWriter{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(90 * time.Second)
	for !strings.Contains(stderr.String(), "request warm_1") {
		select {
		case err := <-done:
			t.Fatalf("treni-top ended before a warm request (%v):\n%s", err, stderr.String())
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("no warm request within 90 s:\n%s", stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("treni-top did not end within 60 s of SIGINT:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit after SIGINT: %v, want status 130\n%s", err, stderr.String())
	}
	s, err := sessions.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	last := s.Events[len(s.Events)-1]
	if s.Truncated || last.Kind != trace.KindMarker || last.Marker.Name != trace.MarkerInterrupted {
		t.Errorf("session: truncated %v, last event %+v; want a complete file ending with the interrupted marker", s.Truncated, last)
	}
	for _, e := range s.Events {
		if e.Kind == trace.KindProcess && e.Process.Action == trace.ProcessExit && !e.Process.Expected {
			t.Errorf("the target was not stopped by treni-top: %+v", *e.Process)
		}
	}
	if !strings.Contains(stdout.String(), "interrupted (interrupt signal received)") {
		t.Errorf("the report on stdout does not say the run was interrupted:\n%s", stdout.String())
	}
	assertNothingLeft(t, s, nil)
}

// TestE2ETUICrashedTargetExits2 runs the TUI in tmux on a target that
// exits on its own, waits for the header to say so, presses q and checks
// the exit status.
func TestE2ETUICrashedTargetExits2(t *testing.T) {
	needBinary(t)
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed; skipping the interactive TUI test")
	}
	exitFile := filepath.Join(e2e.dir, "crash.exit")
	_ = os.Remove(exitFile)
	socket := fmt.Sprintf("treni-e2e-crash-%d-%d", os.Getpid(), time.Now().UnixNano())
	// Port 9 (discard) has no HTTP server: the target never becomes
	// healthy, it exits with status 3 after a second.
	shell := fmt.Sprintf("'%s' run --no-record --url http://127.0.0.1:9 -- sh -c 'echo starting; sleep 1; exit 3'; echo $? > '%s'", e2e.bin, exitFile)
	if out, err := tmuxCmd(socket, "new-session", "-d", "-x", "120", "-y", "36", "sh", "-c", shell); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = tmuxCmd(socket, "kill-server") })
	var screen string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !strings.Contains(screen, "crashed (exit 3)") {
		if ctx.Err() != nil {
			t.Fatalf("the header never said the target crashed; screen:\n%s", screen)
		}
		time.Sleep(200 * time.Millisecond)
		screen, _ = tmuxCmd(socket, "capture-pane", "-p")
	}
	if out, err := tmuxCmd(socket, "send-keys", "q"); err != nil {
		t.Fatalf("tmux send-keys q: %v\n%s", err, out)
	}
	for {
		if b, err := os.ReadFile(exitFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			if code := strings.TrimSpace(string(b)); code != "2" {
				t.Errorf("treni-top exited %s after q with a crashed target, want 2", code)
			}
			return
		}
		if ctx.Err() != nil {
			out, _ := tmuxCmd(socket, "capture-pane", "-p")
			t.Fatalf("treni-top did not end after q; screen:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2EBenchTUIWithoutTerminal runs bench --tui with stdout and stdin
// not terminals (a report redirected to a file): it says so in one line,
// runs headless, and the report holds no escape sequence.
func TestE2EBenchTUIWithoutTerminal(t *testing.T) {
	needBinary(t)
	dir := synthCheckpoint(t, "tiny")
	addr := freeLocalAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, e2e.bin, "serve", "--device", "cpu", "--model", dir, "--addr", addr)
	srv.Env = childEnv()
	srv.Cancel = func() error { return srv.Process.Signal(os.Interrupt) }
	srv.WaitDelay = 10 * time.Second
	var srvErr syncWriter
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = srv.Wait()
	}()
	for !strings.Contains(srvErr.String(), "listening on") {
		if ctx.Err() != nil {
			t.Fatalf("serve did not start:\n%s", srvErr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	bench := exec.CommandContext(ctx, e2e.bin, "bench", "--tui", "--no-record", "--url", "http://"+addr,
		"--num-requests", "2", "--prompt-tokens", "8", "--max-tokens", "4")
	bench.Env = childEnv()
	var stdout, stderr bytes.Buffer
	bench.Stdout, bench.Stderr = &stdout, &stderr
	if err := bench.Run(); err != nil {
		t.Fatalf("bench --tui without a terminal: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "--tui needs a terminal on stdin and stdout; running headless") {
		t.Errorf("stderr does not say the TUI was skipped:\n%s", stderr.String())
	}
	if strings.Contains(stdout.String(), "\x1b") || !strings.Contains(stdout.String(), "custom") {
		t.Errorf("stdout should be the plain report:\n%q", stdout.String())
	}
}

// syncWriter is a buffer the child's stderr copier and the test share.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
