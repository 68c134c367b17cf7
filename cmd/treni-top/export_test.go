package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/sessions/otelexport/otlptest"
)

const exportFixture = "../../sessions/otelexport/testdata/h200-builtin.jsonl"

// TestExportCommand sends the fixture with only OTEL_EXPORTER_OTLP_ENDPOINT
// set and checks the span count the collector decoded and the trace ID
// printed for scripts.
func TestExportCommand(t *testing.T) {
	col, spans := otlptest.SpanCounter(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.URL)
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"export", exportFixture})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("export: %v\n%s", err, errOut.String())
	}
	s, err := sessions.Open(exportFixture)
	if err != nil {
		t.Fatal(err)
	}
	run := s.Runs()[0]
	want := int64(1 + len(run.Spans) + len(run.Requests)) // root, stages, requests
	if n := spans.Load(); n != want {
		t.Errorf("collector got %d spans, want %d", n, want)
	}
	if !strings.HasPrefix(out.String(), "run 0: trace ") || len(strings.TrimSpace(strings.TrimPrefix(out.String(), "run 0: trace "))) != 32 {
		t.Errorf("stdout %q", out.String())
	}
	if !strings.Contains(errOut.String(), fmt.Sprintf("exported %d of %d spans", want, want)) {
		t.Errorf("stderr %q", errOut.String())
	}
	// --trace-ids prints the same IDs without sending anything.
	before := spans.Load()
	ids := newRootCmd()
	var idsOut bytes.Buffer
	ids.SetOut(&idsOut)
	ids.SetArgs([]string{"export", exportFixture, "--trace-ids"})
	if err := ids.Execute(); err != nil || idsOut.String() != out.String() || spans.Load() != before {
		t.Errorf("--trace-ids: %v, %q (export printed %q), spans sent %d", err, idsOut.String(), out.String(), spans.Load()-before)
	}
}

func TestExportCommandErrors(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	for _, args := range [][]string{
		{"export", exportFixture},
		{"export", exportFixture, "--otlp", "127.0.0.1:4318"},
		{"export", exportFixture, "--otlp", "http://127.0.0.1:1", "--otlp-header", "novalue"},
		{"export", "/nonexistent.jsonl", "--otlp", "http://127.0.0.1:1"},
	} {
		if code := execute(args); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
