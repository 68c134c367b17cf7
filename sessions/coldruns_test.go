package sessions

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// coldRunSeries is a `run --cold-runs 3` session whose third run failed
// before it became healthy: two complete runs, then a launch, two stages
// and the run_failed marker.
func coldRunSeries() []trace.Event {
	var evs []trace.Event
	for run := 0; run < 2; run++ {
		evs = append(evs, coldRun(run, time.Duration(run)*3*time.Second, 1, []float64{20, 21, 22})...)
	}
	third := coldRun(2, 6*time.Second, 1, nil)
	for _, e := range third {
		if e.At > 6*time.Second+d(100) {
			break
		}
		evs = append(evs, e)
	}
	evs = append(evs, trace.Event{At: 6*time.Second + d(120), Run: 2, Kind: trace.KindMarker, Marker: &trace.Marker{
		Name: trace.MarkerRunFailed, Attrs: trace.Attrs{"error": "target exited before it became healthy (exit status 1)"}}})
	for i, e := range evs {
		if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerRunStart {
			m := *e.Marker
			m.Attrs = trace.Attrs{"run": e.Run, "cold_runs": 3}
			evs[i].Marker = &m
		}
	}
	return evs
}

func TestColdRunSeriesTranscript(t *testing.T) {
	bus := trace.NewBus()
	sub := bus.Subscribe()
	var out strings.Builder
	done := make(chan error, 1)
	go func() { done <- PrintProgress(context.Background(), &out, sub) }()
	for _, e := range coldRunSeries() {
		bus.Emit(e)
	}
	bus.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"run 0  cold run 0: launching (1 of 3)",
		"run 1  cold run 1: launching (2 of 3)",
		"run 2  cold run 2: launching (3 of 3)",
		"run 2  run_failed: target exited before it became healthy (exit status 1)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("transcript lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFailedRunIsMarked: the failed run of a series is a run with its
// error, in the runs, the JSON report and the Markdown one; complete runs
// carry none.
func TestFailedRunIsMarked(t *testing.T) {
	s := &Session{Header: Header{ColdRuns: 3}, Events: coldRunSeries()}
	runs := s.Runs()
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
	if runs[0].Failed != "" || runs[1].Failed != "" {
		t.Errorf("complete runs marked failed: %q, %q", runs[0].Failed, runs[1].Failed)
	}
	if !strings.Contains(runs[2].Failed, "exit status 1") {
		t.Errorf("run 2 Failed %q", runs[2].Failed)
	}
	rep := BuildReport(s)
	if rep.Runs[2].Failed == "" {
		t.Error("the JSON report does not say run 2 failed")
	}
	md := rep.Markdown()
	if strings.Count(md, "This run failed") != 1 || !strings.Contains(md, "**This run failed: target exited before it became healthy (exit status 1).**") {
		t.Errorf("Markdown report:\n%s", md)
	}
}

// TestNeverLaunchedRun: a run that failed before its launch (its port was
// taken) has no cold window, the report says nothing was measured, and
// the diagnosis is the previous run's. Without its run_start (the check
// comes before it) it is still a run.
func TestNeverLaunchedRun(t *testing.T) {
	evs := coldRun(0, 0, 1, []float64{20, 21, 22})
	evs = append(evs,
		trace.Event{At: 3 * time.Second, Run: 1, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart}},
		trace.Event{At: 3*time.Second + d(2), Run: 1, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunFailed,
			Attrs: trace.Attrs{"error": "launch run 1: http://127.0.0.1:8000 is taken before the launch: port 8000 is held by pid 42 (vllm serve)"}}})
	s := &Session{Events: evs}
	runs := s.Runs()
	if len(runs) != 2 || runs[0].NeverLaunched() || !runs[1].NeverLaunched() || runs[1].ColdTotal() != 0 {
		t.Fatalf("runs %+v", runs)
	}
	md := BuildReport(s).Markdown()
	if !strings.Contains(md, "## Run 1: nothing measured\n\n**This run failed before anything was measured: launch run 1: http://127.0.0.1:8000 is taken") {
		t.Errorf("report:\n%s", md)
	}
	if d := Diagnose(evs); d.Run != 0 || d.ColdTotalMS == 0 {
		t.Errorf("diagnosis of run %d (cold %v ms), want run 0's", d.Run, d.ColdTotalMS)
	}
	if d := Diagnose(evs[len(evs)-2:]); !strings.Contains(d.Summary, "no cold run recorded yet") {
		t.Errorf("only a never-launched run: %q", d.Summary)
	}
	if runs := Analyze(evs[len(evs)-1:]); len(runs) != 1 || !runs[0].NeverLaunched() {
		t.Errorf("a run_failed marker alone: %+v", runs)
	}
}
