package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/sessions/otelexport/otlptest"
	"github.com/treni-top/treni-top/trace"
)

// TestE2ERunExportsLiveAndReadsServerMetrics runs the built binary as a
// user would, with only OTEL_EXPORTER_OTLP_ENDPOINT set: the run exports
// its trace live (a root span, one span per stage and per request of the
// recorded run, counted by a collector built from the official OTLP types),
// and the runner scrapes the built-in engine's own /metrics into samples of
// source "server" in the session.
func TestE2ERunExportsLiveAndReadsServerMetrics(t *testing.T) {
	needBinary(t)
	dir := synthCheckpoint(t, "tiny")
	col, spans := otlptest.SpanCounter(t)
	rec := filepath.Join(t.TempDir(), "otel.jsonl")
	args := append([]string{"run", "--headless", "--record", rec}, commonRunArgs...)
	args = append(args, "--", e2e.bin, "serve", "--device", "cpu", "--model", dir, "--addr", freeLocalAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2e.bin, args...)
	cmd.Env = append(childEnv(), "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 15 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("treni-top %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	s, err := sessions.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	runs := s.Runs()
	if len(runs) != 1 {
		t.Fatalf("%d runs recorded, want 1", len(runs))
	}
	r := runs[0]
	if want := int64(1 + len(r.Spans) + len(r.Requests)); spans.Load() != want {
		t.Errorf("collector got %d spans, want %d (root + %d stages + %d requests)\nstderr:\n%s",
			spans.Load(), want, len(r.Spans), len(r.Requests), stderr.String())
	}
	server := 0
	for _, e := range s.Events {
		if e.Kind == trace.KindSample && e.Sample.Source == trace.SourceServer {
			server++
		}
	}
	if server == 0 {
		t.Errorf("no samples of the engine's own /metrics in the session\nstderr:\n%s", stderr.String())
	}
}
