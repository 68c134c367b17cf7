//go:build linux

package main

// End-to-end tests of issue 41's "measuring the process it launched": a
// port already taken, an attach where nothing listens, a URL that cannot
// be inferred, and a server that wants an API key, each with the built
// binary and real sockets on 127.0.0.1.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// treniRun runs the built binary with args (OPENAI_API_KEY removed from
// its environment, env added) and returns its exit code, stdout and
// stderr.
func treniRun(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2e.bin, args...)
	for _, kv := range childEnv() {
		if !strings.HasPrefix(kv, "OPENAI_API_KEY=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 15 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("treni-top %s: %v", strings.Join(args, " "), err)
	return -1, "", ""
}

// startServe starts `treni-top serve` on addr (extra flags added) as a
// server treni-top did not launch, waits for its /health and returns its
// process.
func startServe(t *testing.T, addr string, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"serve", "--model", synthCheckpoint(t, "tiny"), "--device", "cpu", "--addr", addr}, extra...)
	cmd := exec.Command(e2e.bin, args...)
	cmd.Env = childEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("treni-top serve on %s never answered /health:\n%s", addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2EPortTaken: with another server on the target's port, run refuses
// to launch (exit 2), names the holder's pid and command line, and prints
// no health and no TTFT (before, the old server answered for the target).
func TestE2EPortTaken(t *testing.T) {
	needBinary(t)
	addr := freeLocalAddr(t)
	holder := startServe(t, addr)
	code, stdout, stderr := treniRun(t, nil, "run", "--headless", "--no-record", "--timeout", "30s", "--grace", "2s",
		"--", e2e.bin, "serve", "--model", synthCheckpoint(t, "tiny"), "--device", "cpu", "--addr", addr)
	out := stdout + stderr
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, out)
	}
	want := fmt.Sprintf("http://%s is taken before the launch: port %s is held by pid %d (%s serve", addr, addr[strings.LastIndex(addr, ":")+1:], holder.Process.Pid, e2e.bin)
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	for _, never := range []string{"healthy", "TTFT", "launched pid"} {
		if strings.Contains(out, never) {
			t.Errorf("output says %q for a run that was refused:\n%s", never, out)
		}
	}
}

// TestE2EAttachRefused: attaching where nothing listens says at once that
// the connection is refused and that it waits (until --timeout), and never
// claims a running server.
func TestE2EAttachRefused(t *testing.T) {
	needBinary(t)
	u := "http://" + freeLocalAddr(t)
	code, _, stderr := treniRun(t, nil, "attach", u, "--headless", "--no-record", "--timeout", "3s")
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, stderr)
	}
	m := regexp.MustCompile(`(?m)^\s*([0-9.]+)s run 0  no healthy answer at ` + regexp.QuoteMeta(u) + `/health yet: connection refused; waiting for a server to come up \(until --timeout 3s\)$`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no refused line:\n%s", stderr)
	}
	// Said with the first poll, not when the wait ends.
	if at, _ := strconv.ParseFloat(m[1], 64); at >= 3 {
		t.Errorf("refused line at %ss, not before the 3 s timeout", m[1])
	}
	t.Logf("refused said at %ss", m[1])
	if strings.Contains(stderr, "already running") {
		t.Errorf("claims a running server:\n%s", stderr)
	}
	if want := "target not healthy after 3s at " + u + " (raise --timeout, or check --url): no healthy answer (last poll " + u + "/health: connection refused)"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}

// TestE2EURLNotInferred: a server whose URL nothing names is not polled,
// and run says that --url is needed (it used to end "at  (raise
// --timeout…)" with an empty URL).
func TestE2EURLNotInferred(t *testing.T) {
	needBinary(t)
	code, _, stderr := treniRun(t, nil, "run", "--headless", "--no-record", "--timeout", "2s", "--grace", "2s", "--", "sleep", "60")
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, stderr)
	}
	for _, want := range []string{
		"waiting: no URL to poll: none could be inferred from the command or the server kind",
		"treni-top: target not healthy after 2s: no URL to poll: none could be inferred from the command, the server kind or its output; pass --url http://HOST:PORT",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, " at  ") {
		t.Errorf("an empty URL is printed:\n%s", stderr)
	}
}

// TestE2EAPIKey: a server that wants a key (treni-top serve --api-key):
// run, attach and bench send --api-key or $OPENAI_API_KEY; without it the
// failure names the flag.
func TestE2EAPIKey(t *testing.T) {
	needBinary(t)
	addr := freeLocalAddr(t)
	startServe(t, addr, "--api-key", "sk-e2e")
	u := "http://" + addr
	short := []string{"--headless", "--no-record", "--warmup", "0", "--repeat", "1", "--max-tokens", "2", "--prompt", "Hi", "--timeout", "30s"}
	hint := "the server wants an API key: pass --api-key KEY or set OPENAI_API_KEY"

	code, _, stderr := treniRun(t, nil, append([]string{"attach", u}, short...)...)
	if code != 2 || !strings.Contains(stderr, hint) {
		t.Errorf("attach without a key: exit %d, want 2 naming the flag:\n%s", code, stderr)
	}
	code, _, stderr = treniRun(t, []string{"OPENAI_API_KEY=sk-e2e"}, append([]string{"attach", u}, short...)...)
	if code != 0 || !strings.Contains(stderr, "request warm_1    TTFT") {
		t.Errorf("attach with OPENAI_API_KEY: exit %d:\n%s", code, stderr)
	}
	code, _, stderr = treniRun(t, []string{"OPENAI_API_KEY=sk-wrong"}, append([]string{"attach", u, "--api-key", "sk-e2e"}, short...)...)
	if code != 0 || !strings.Contains(stderr, "request warm_1    TTFT") {
		t.Errorf("attach --api-key (over a wrong OPENAI_API_KEY): exit %d:\n%s", code, stderr)
	}

	// run: the key goes to the server it launches.
	runAddr := freeLocalAddr(t)
	code, _, stderr = treniRun(t, nil, append(append([]string{"run"}, short...), "--api-key", "sk-run", "--grace", "2s",
		"--", e2e.bin, "serve", "--model", synthCheckpoint(t, "tiny"), "--device", "cpu", "--addr", runAddr, "--api-key", "sk-run")...)
	if code != 0 || !strings.Contains(stderr, "request cold_1    TTFT") {
		t.Errorf("run --api-key: exit %d:\n%s", code, stderr)
	}

	bench := []string{"bench", "--url", u, "--num-requests", "2", "--prompt-tokens", "8", "--max-tokens", "2", "--no-record", "--quiet", "--timeout", "30s"}
	code, stdout, stderr := treniRun(t, nil, bench...)
	if code != 2 || !strings.Contains(stdout+stderr, hint) {
		t.Errorf("bench without a key: exit %d, want 2 naming the flag:\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr = treniRun(t, []string{"OPENAI_API_KEY=sk-e2e"}, bench...); code != 0 {
		t.Errorf("bench with OPENAI_API_KEY: exit %d:\n%s%s", code, stdout, stderr)
	}
}
