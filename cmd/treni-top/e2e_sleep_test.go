//go:build linux

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// TestE2ESleepCycles: `run --headless --sleep-cycles 2` on the built-in
// CPU engine records the cold start and two wakes of the same process, one
// run each: a wake run carries its place and level, its window runs from
// the wake to the first token after it and holds the engine's own
// weights_restore, kv_alloc and first_request lines, with its cold request
// and warm requests; the sleep that ends a run stays in that run, outside
// its cold window; the transcript and the report name each wake.
// crossClockSlack is how far an engine span's wall-clock end may pass an
// instant the client measured on the monotonic clock (see its use).
const crossClockSlack = 10 * time.Millisecond

func TestE2ESleepCycles(t *testing.T) {
	needBinary(t)
	dir := synthCheckpoint(t, "tiny")
	sc := runScenario(t, "sleep-cycles", "--device", "cpu", "--model", dir, "--sleep-cycles", "2", "--sleep-level", "2", "--sleep-for", "50ms")
	runs := sc.sess.Runs()
	if len(runs) != 3 {
		t.Fatalf("%d runs in the session, want the cold start and 2 wakes", len(runs))
	}
	if runs[0].Wake != nil {
		t.Errorf("run 0 is a wake: %+v", runs[0].Wake)
	}
	starts := 0
	for _, e := range sc.sess.Events {
		if e.Kind == trace.KindProcess && e.Process.Action == trace.ProcessStart {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("%d process starts, want 1: a wake is the same process", starts)
	}
	if last := runs[2]; last.Exit == nil || last.Crashed {
		t.Errorf("the last run's target was not stopped by treni-top (exit %+v)", last.Exit)
	}
	for i, r := range runs {
		if r.Failed != "" || r.ColdEndKind != sessions.ColdEndFirstToken {
			t.Errorf("run %d: failed %q, cold window ends at %q", i, r.Failed, r.ColdEndKind)
		}
		if q, ok := r.ColdRequest(); !ok || q.FirstToken <= 0 {
			t.Errorf("run %d has no timed cold request", i)
		}
		if i < 2 {
			sp, ok := stageSpan(r, trace.StageSleep)
			if !ok || sp.Start < r.ColdEnd {
				t.Errorf("run %d: sleep stage %+v (found %v), want one after its cold window (ends %v)", i, sp, ok, r.ColdEnd)
			}
		}
		if i == 0 {
			continue
		}
		if w := r.Wake; w == nil || w.Cycle != i || w.Of != 2 || w.Level != 2 {
			t.Fatalf("run %d: wake %+v, want %d of 2 at level 2", i, w, i)
		}
		for _, st := range []trace.Stage{trace.StageWeightsRestore, trace.StageKVAlloc, trace.StageFirstRequest} {
			sp, ok := stageSpan(r, st)
			// The engine's spans are wall-clock instants from its stage
			// lines; the window's end is the client's first token on
			// treni-top's monotonic clock. The two clocks are read in two
			// processes, and on a loaded VM they were seen 1.2 ms apart
			// (first_request, which ends when the engine made the token,
			// ending after the client read it): crossClockSlack allows that.
			if !ok || sp.Start < r.Start || sp.End > r.ColdEnd+crossClockSlack {
				t.Errorf("run %d: %s %+v (found %v) not inside the wake's window [%v, %v]", i, st, sp, ok, r.Start, r.ColdEnd)
			}
		}
		if _, ok := stageSpan(r, trace.StageProcessStart); ok {
			t.Errorf("run %d, a wake, has a process_start stage", i)
		}
		if sp, _ := stageSpan(r, trace.StageWeightsRestore); sp.Attrs["from"] != "files" {
			t.Errorf("run %d: a level-2 wake's weights_restore %v, want them read from the files", i, sp.Attrs)
		}
	}
	for _, want := range []string{"run 1: wake 1/2 (level 2): waking the target", "run 2: wake 2/2 (level 2): waking the target"} {
		if !strings.Contains(sc.stderr, want) {
			t.Errorf("transcript lacks %q", want)
		}
	}
	rep := sessions.BuildReport(sc.sess)
	if md := rep.Markdown(); !strings.Contains(md, "## Run 2: wake 2/2 (level 2)") || !strings.Contains(md, "(wake → first token)") {
		t.Errorf("report does not name the wake runs:\n%s", md)
	}
}
