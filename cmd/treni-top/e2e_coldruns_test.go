//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// onTmpfs reports whether dir's pages cannot be evicted (tmpfs, ramfs).
func onTmpfs(dir string) bool {
	var fs syscall.Statfs_t
	return syscall.Statfs(dir, &fs) == nil && (fs.Type == 0x01021994 || fs.Type == 0x858458f6)
}

// TestE2EColdRuns: `run --headless --cold-runs 3` on the built-in CPU
// engine records three cold starts in one session file, each a fresh
// process with its stages, its cold request and its warm requests, and
// (where the filesystem can drop its pages) each evicted and verified
// before its launch.
func TestE2EColdRuns(t *testing.T) {
	needBinary(t)
	dir := synthCheckpoint(t, "tiny")
	args := []string{"--device", "cpu", "--model", dir, "--cold-runs", "3"}
	evict := !onTmpfs(dir)
	if evict {
		args = append(args, "--evict-page-cache")
	} else {
		t.Logf("%s is on tmpfs: the runs are not evicted", dir)
	}
	sc := runScenario(t, "cold-runs", args...)
	if sc.sess.Header.ColdRuns != 3 {
		t.Errorf("header cold_runs %d, want 3", sc.sess.Header.ColdRuns)
	}
	runs := sc.sess.Runs()
	if len(runs) != 3 {
		t.Fatalf("%d runs in the session, want 3", len(runs))
	}
	pids := map[int]bool{}
	for i, r := range runs {
		if r.Index != i || r.Failed != "" {
			t.Errorf("run %d: index %d, failed %q", i, r.Index, r.Failed)
		}
		if r.ColdEndKind != sessions.ColdEndFirstToken {
			t.Errorf("run %d: cold window ends at %q, want the cold request's first token", i, r.ColdEndKind)
		}
		if _, ok := stageSpan(r, trace.StageProcessStart); !ok {
			t.Errorf("run %d has no process_start stage", i)
		}
		if _, ok := stageSpan(r, trace.StageTokenizerLoad); !ok {
			t.Errorf("run %d has no tokenizer_load stage (the engine's own stage lines)", i)
		}
		if q, ok := r.ColdRequest(); !ok || q.FirstToken <= 0 {
			t.Errorf("run %d has no timed cold request", i)
		}
		warm := 0
		for _, q := range r.Requests {
			if q.Phase == trace.PhaseWarm {
				warm++
			}
		}
		if warm != 3 {
			t.Errorf("run %d has %d warm requests, want 3", i, warm)
		}
		if r.Exit == nil || r.Crashed {
			t.Errorf("run %d: target not stopped by treni-top (exit %+v)", i, r.Exit)
		} else {
			pids[r.Exit.PID] = true
		}
	}
	if len(pids) != 3 {
		t.Errorf("the three runs were %d processes, want 3 fresh ones", len(pids))
	}
	evicted := map[int]bool{}
	for _, e := range sc.sess.Events {
		if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerEvicted && e.Marker.Attrs["ok"] == true {
			evicted[e.Run] = true
		}
	}
	if evict && len(evicted) != 3 {
		t.Errorf("verified evictions before runs %v, want before each of the 3", evicted)
	}
	for i := 1; i <= 3; i++ {
		if want := "launching (" + string(rune('0'+i)) + " of 3)"; !strings.Contains(sc.stderr, want) {
			t.Errorf("transcript lacks %q", want)
		}
	}
}

// TestE2EColdRunsStopAtFailure: a target that never becomes healthy ends
// the series at its first run: exit 2, a message naming the failed run and
// what completed, and a session holding that one failed run.
func TestE2EColdRunsStopAtFailure(t *testing.T) {
	needBinary(t)
	rec := filepath.Join(e2e.dir, "sessions", "cold-runs-fail.jsonl")
	if err := os.MkdirAll(filepath.Dir(rec), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2e.bin, "run", "--headless", "--record", rec, "--cold-runs", "3",
		"--url", "http://"+freeLocalAddr(t), "--timeout", "30s", "--grace", "2s",
		"--", "sh", "-c", "echo no model here; exit 3")
	cmd.Env = childEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2\n%s", err, stderr.String())
	}
	if want := "cold run 1 of 3 failed, so the 2 runs after it were not started (the session holds 0 complete cold runs): target exited before it became healthy (exit status 3)"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	s, err := sessions.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	runs := s.Runs()
	if len(runs) != 1 || runs[0].Failed == "" || s.Header.ColdRuns != 3 {
		t.Errorf("session: %d runs (failed %q), header cold_runs %d; want the one failed run of 3 asked", len(runs), runs[0].Failed, s.Header.ColdRuns)
	}
}
