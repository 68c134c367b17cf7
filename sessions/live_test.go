package sessions

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// TestPrintProgressMarkers: the headless transcript prints the markers a
// live run printed and a replay used to drop (run_failed, gpu_status,
// attached, a crash's log tail, residency, a late server kind, the waits
// for health).
func TestPrintProgressMarkers(t *testing.T) {
	bus := trace.NewBus()
	sub := bus.Subscribe()
	mk := func(at float64, name string, attrs trace.Attrs) {
		bus.Emit(trace.Event{At: d(at), Run: 1, Kind: trace.KindMarker, Marker: &trace.Marker{Name: name, Attrs: attrs}})
	}
	mk(0, trace.MarkerGPUStatus, trace.Attrs{"status": "no NVIDIA GPU: no driver"})
	mk(1, trace.MarkerAttached, nil)
	mk(2, trace.MarkerResidency, trace.Attrs{"resident_bytes": 512.0 * (1 << 20), "total_bytes": 1024.0 * (1 << 20), "when": "before"})
	mk(3, trace.MarkerKindDetected, trace.Attrs{"server_kind": "vllm"})
	mk(4, trace.MarkerTargetCrashed, trace.Attrs{"log_tail": "CUDA out of memory\nexiting"})
	mk(5, trace.MarkerRunFailed, trace.Attrs{"error": "the target exited before it was healthy"})
	mk(6, trace.MarkerHealthWait, trace.Attrs{"url": "http://127.0.0.1:1/health", "reason": "connection refused", "timeout_s": 90.0})
	mk(7, trace.MarkerHealthWait, trace.Attrs{"url": "", "reason": "no URL to poll: pass --url"})
	bus.Close()
	var out bytes.Buffer
	if err := PrintProgress(context.Background(), &out, sub); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"gpu: no NVIDIA GPU: no driver", "attaching: no cold start to trace (treni-top did not start this server)", "weights residency (before): 50.0% of 1.00 GiB",
		"server kind detected from its output: vllm", "    | CUDA out of memory", "run_failed: the target exited before it was healthy",
		"no healthy answer at http://127.0.0.1:1/health yet: connection refused; waiting for a server to come up (until --timeout 1m30s)",
		"waiting: no URL to poll: pass --url",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("transcript lacks %q:\n%s", want, out.String())
		}
	}
}

// TestLiveRecordsEveryEvent: the file, the in-memory copy and the
// transcript all see every event emitted between StartLive and Finish.
func TestLiveRecordsEveryEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	var out syncBuffer
	h := NewHeader("test", time.Unix(0, 0), Target{Kind: TargetBuiltin})
	l, err := StartLive(h, LiveOptions{Record: path, Label: "x", Progress: &out, KeepEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	evs := coldRun(1, 0, 1, []float64{20, 21, 22})
	r := runnerFunc(func(context.Context) error {
		for _, e := range evs {
			l.Bus.Emit(e)
		}
		return nil
	})
	sess, runErr, fileErr := l.Drive(context.Background(), r, nil)
	if runErr != nil || fileErr != nil {
		t.Fatal(runErr, fileErr)
	}
	if len(sess.Events) != len(evs) {
		t.Errorf("in memory %d events, want %d", len(sess.Events), len(evs))
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Events) != len(evs) || l.Path() != path {
		t.Errorf("file has %d events, want %d (path %q)", len(f.Events), len(evs), l.Path())
	}
	if !strings.Contains(out.String(), "cold run 1: launching") || !strings.Contains(out.String(), "request warm_3") {
		t.Errorf("transcript:\n%s", out.String())
	}
	if _, err := StartLive(h, LiveOptions{Record: path, NoRecord: true}); err == nil {
		t.Error("--record with --no-record accepted")
	}
}

type runnerFunc func(context.Context) error

func (f runnerFunc) Run(ctx context.Context) error { return f(ctx) }
func (runnerFunc) Quit()                           {}

// syncBuffer is a bytes.Buffer safe for the printer goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReplayPlay: Play delivers every event of the session, in order, then
// closes the subscription; stop joins the replayer.
func TestReplayPlay(t *testing.T) {
	evs := coldRun(1, 0, 1, []float64{20, 21, 22})
	rp := NewReplayer(evs, ReplayOptions{Fast: true})
	sub, stop := rp.Play(context.Background())
	defer stop()
	n := 0
	for e := range sub.Events() {
		if e.At != evs[n].At || e.Kind != evs[n].Kind {
			t.Fatalf("event %d: %v %s, want %v %s", n, e.At, e.Kind, evs[n].At, evs[n].Kind)
		}
		n++
	}
	if n != len(evs) {
		t.Fatalf("got %d events, want %d", n, len(evs))
	}
}

// quitRunner emits one event and runs until Quit.
type quitRunner struct {
	bus  *trace.Bus
	quit chan struct{}
}

func (q *quitRunner) Run(ctx context.Context) error {
	q.bus.Emit(trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart}})
	select {
	case <-q.quit:
	case <-ctx.Done():
	}
	return nil
}

func (q *quitRunner) Quit() { close(q.quit) }

// TestLiveDriveWithUI: the UI sees the session from its first event; when
// it returns the runner is told to quit and joined, and a UI failure is the
// run's error.
func TestLiveDriveWithUI(t *testing.T) {
	h := NewHeader("test", time.Unix(0, 0), Target{Kind: TargetBuiltin})
	l, err := StartLive(h, LiveOptions{NoRecord: true, UI: true})
	if err != nil {
		t.Fatal(err)
	}
	r := &quitRunner{bus: l.Bus, quit: make(chan struct{})}
	var first trace.Event
	ui := func(ctx context.Context, sub *trace.Subscription) error {
		first = <-sub.Events()
		return errors.New("no terminal")
	}
	_, runErr, fileErr := l.Drive(context.Background(), r, ui)
	if first.Marker == nil || first.Marker.Name != trace.MarkerRunStart {
		t.Errorf("the UI's first event is %+v, want run_start", first)
	}
	if runErr == nil || !strings.Contains(runErr.Error(), "terminal UI: no terminal") || fileErr != nil {
		t.Errorf("runErr %v fileErr %v", runErr, fileErr)
	}
	l2, _ := StartLive(h, LiveOptions{NoRecord: true})
	if _, runErr, _ := l2.Drive(context.Background(), &quitRunner{bus: l2.Bus, quit: make(chan struct{})}, ui); runErr == nil {
		t.Error("a UI without LiveOptions.UI was accepted")
	}
}

// TestLiveDriveInterrupted: a context that ends on a signal (its cause)
// finishes the session with an interrupted marker as its last event, a
// complete file, and a report that says so.
func TestLiveDriveInterrupted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	clock := trace.NewClock()
	l, err := StartLive(NewHeader("test", clock.Start(), Target{Kind: TargetBuiltin}), LiveOptions{Record: path, KeepEvents: true, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	evs := coldRun(0, 0, 1, []float64{20, 21})
	r := runnerFunc(func(context.Context) error {
		for _, e := range evs {
			l.Bus.Emit(e)
		}
		cancel(errors.New("interrupt signal received"))
		return nil
	})
	if _, runErr, fileErr := l.Drive(ctx, r, nil); runErr != nil || fileErr != nil {
		t.Fatal(runErr, fileErr)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	last := s.Events[len(s.Events)-1]
	if s.Truncated || len(s.Events) != len(evs)+1 || last.Kind != trace.KindMarker || last.Marker.Name != trace.MarkerInterrupted {
		t.Fatalf("file: truncated %v, %d events (want %d), last %+v", s.Truncated, len(s.Events), len(evs)+1, last)
	}
	if cause, _ := last.Marker.Attrs.String("cause"); cause != "interrupt signal received" {
		t.Errorf("cause %q", cause)
	}
	if md := BuildReport(s).Markdown(); !strings.Contains(md, "interrupted (interrupt signal received)") {
		t.Errorf("report does not say the session was interrupted:\n%s", md)
	}
	if err := Failure(s.Events); err != nil {
		t.Errorf("an interrupted session is not a failure of the target: %v", err)
	}
}

// TestFailure: a crashed target and a failed run are failures, named as
// the TUI numbers runs; a target treni-top stopped is not.
func TestFailure(t *testing.T) {
	ok := coldRun(0, 0, 1, warm5)
	if err := Failure(ok); err != nil {
		t.Fatalf("a run stopped as asked: %v", err)
	}
	crashed := coldRun(0, 0, 1, warm5)
	crashed = append(crashed, coldRun(1, 3*time.Second, 1, warm5)...)
	for i, e := range crashed {
		if e.Run == 1 && e.Kind == trace.KindProcess && e.Process.Action == trace.ProcessExit {
			p := *e.Process
			p.Expected, p.ExitCode = false, 137
			crashed[i].Process = &p
		}
	}
	if err := Failure(crashed); err == nil || !strings.Contains(err.Error(), "crashed in run 2 of 2 (exit code 137)") {
		t.Errorf("crash in the second run: %v", err)
	}
	failed := append(coldRun(0, 0, 1, nil), trace.Event{At: time.Second, Kind: trace.KindMarker,
		Marker: &trace.Marker{Name: trace.MarkerRunFailed, Attrs: trace.Attrs{"error": "target not healthy after 10m0s"}}})
	if err := Failure(failed); err == nil || err.Error() != "the cold run failed: target not healthy after 10m0s" {
		t.Errorf("failed run: %v", err)
	}
}

// A session recorded under the default directory becomes latest.jsonl
// there, replaced by the next one; a --record elsewhere leaves it alone,
// and a user's own file of that name is never overwritten.
func TestLatestLink(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	dir := filepath.Join(data, "treni-top", "sessions")
	latest := filepath.Join(dir, LatestName)
	record := func(o LiveOptions, at int64) string {
		l, err := StartLive(NewHeader("test", time.Unix(at, 0), Target{Kind: TargetBuiltin}), o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Finish(); err != nil {
			t.Fatal(err)
		}
		return l.Path()
	}
	first := record(LiveOptions{Label: "one"}, 1)
	if got, err := os.Readlink(latest); err != nil || got != filepath.Base(first) {
		t.Fatalf("latest → %q (%v), want %s", got, err, filepath.Base(first))
	}
	second := record(LiveOptions{Label: "two"}, 2)
	record(LiveOptions{Record: filepath.Join(t.TempDir(), "elsewhere.jsonl")}, 3)
	if got, _ := os.Readlink(latest); got != filepath.Base(second) {
		t.Fatalf("latest → %q, want %s", got, filepath.Base(second))
	}
	if s, err := Open(latest); err != nil || s.Header.Created.Unix() != 2 {
		t.Fatalf("latest reads %v", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".latest-*")); len(leftovers) != 0 {
		t.Fatalf("temporary links left: %v", leftovers)
	}
	os.Remove(latest)
	if err := os.WriteFile(latest, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := LinkLatest(second); err == nil {
		t.Fatal("a regular latest.jsonl was replaced")
	}
	if b, _ := os.ReadFile(latest); string(b) != "mine" {
		t.Fatalf("the user's file now holds %q", b)
	}
}
