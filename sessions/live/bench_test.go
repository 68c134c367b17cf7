package live

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/probe/load"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// stalledServer answers nothing until the request is cancelled: a bench
// against it can only end by being cut short.
func stalledServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// benchOn is a one-request bench on l's bus against url.
func benchOn(t *testing.T, l *sessions.Live, url string, clock trace.Clock) (*load.Bench, load.Plan) {
	c, err := load.NewClient(load.ClientConfig{BaseURL: url, Endpoint: "chat", Model: "m", MaxConns: 1}, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	plan, err := load.PlanOptions{NumRequests: 1, PromptTokens: 8, MaxTokens: 4, RepeatRuns: 1, Seed: load.DefaultSeed}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	return &load.Bench{Client: c, Clock: clock, Sink: l.Bus, Progress: &load.Progress{}}, plan
}

// TestDriveBenchUIQuits: quitting the UI cuts the bench short; a UI that
// failed is said on stderr and the session file is complete.
func TestDriveBenchUIQuits(t *testing.T) {
	clock := trace.NewClock()
	path := filepath.Join(t.TempDir(), "bench.jsonl")
	h := BenchHeader("test", "http://x", "m", clock)
	l, err := sessions.StartLive(h, sessions.LiveOptions{Record: path, UI: true, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	b, plan := benchOn(t, l, stalledServer(t).URL, clock)
	var stderr bytes.Buffer
	ui := func(ctx context.Context, sub *trace.Subscription) error { return errors.New("boom") }
	res := DriveBench(context.Background(), l, b, plan, ui, nil, &stderr)
	if !res.Cut || res.Err == nil || res.FileErr != nil {
		t.Errorf("result %+v: want a bench cut short and a complete file", res)
	}
	if !strings.Contains(stderr.String(), "treni-top: the TUI failed: boom") {
		t.Errorf("stderr %q lacks the UI's failure", stderr.String())
	}
	s, err := sessions.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Header.Target.Kind != sessions.TargetBench {
		t.Errorf("target %+v", s.Header.Target)
	}
}

// TestDriveBenchSignal: a signal (the context cancelled with its cause)
// marks the session interrupted as its last event.
func TestDriveBenchSignal(t *testing.T) {
	clock := trace.NewClock()
	path := filepath.Join(t.TempDir(), "bench.jsonl")
	o := BenchOptions{Record: path}
	l, err := StartBench(context.Background(), &o, BenchHeader("test", "http://x", "m", clock), clock, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	b, plan := benchOn(t, l.Live, stalledServer(t).URL, clock)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("interrupt signal received"))
	res := DriveBench(ctx, l.Live, b, plan, nil, nil, &bytes.Buffer{})
	if !res.Cut || res.FileErr != nil {
		t.Errorf("result %+v: want a bench cut short and a complete file", res)
	}
	s, err := sessions.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	last := s.Events[len(s.Events)-1]
	if last.Marker == nil || last.Marker.Name != trace.MarkerInterrupted || last.Marker.Attrs["cause"] != "interrupt signal received" {
		t.Errorf("last event %+v, want the interrupted marker with its cause", last)
	}
}
