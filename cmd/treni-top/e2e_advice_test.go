//go:build linux

package main

// End-to-end tests of issue 41's "advice that can be followed" with the
// built binary: the advice of a plain run names run's own flags and
// --serve-arg reaches the engine; the built-in engine under another name
// (and with a model path that mentions another server) is recognised from
// its stage lines; a target that fails before it is healthy gets no
// ranked cause.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// TestE2EPlainRunAdvice: --serve-arg reaches the built-in engine (its
// warm-up passes show as the warmup stage), and every knob of the
// diagnosis is said the way a plain run takes it.
func TestE2EPlainRunAdvice(t *testing.T) {
	needBinary(t)
	sc := runScenario(t, "serve-arg", "--model", synthCheckpoint(t, "tiny"), "--device", "cpu", "--serve-arg=--warmup-passes=1")
	warm := false
	for _, sp := range sc.run.Spans {
		if sp.Name == trace.StageWarmup {
			n, _ := sp.Attrs.Float("passes")
			warm = n == 1
		}
	}
	if !warm {
		t.Errorf("no warmup stage of 1 pass: --serve-arg did not reach the engine\n%s", sc.stderr)
	}
	for _, d := range []sessions.Diagnosis{sc.diag, sc.live} {
		if d.Engine != sessions.EngineBuiltinCPU || d.Device != sessions.DeviceCPU {
			t.Errorf("engine %q device %q, want builtin-cpu on the cpu", d.Engine, d.Device)
		}
		for _, h := range d.Hypotheses {
			if strings.Contains(h.NextKnob, "treni-top serve") || strings.Contains(h.Title, "HBM") {
				t.Errorf("%s: %q / %q: a plain run on the CPU", h.Code, h.Title, h.NextKnob)
			}
		}
		if c, _ := d.Hypothesis("C"); !strings.Contains(c.NextKnob, "`treni-top run … --serve-arg=--warmup-passes=0`") {
			t.Errorf("C's knob %q does not say how to drop the warm-up pass", c.NextKnob)
		}
	}
}

// TestE2EBuiltinUnderAnotherName: `run -- /elsewhere/engine serve --model
// …/sglang-models/…` is the built-in engine: its stage lines win over the
// sglang in its model path, it gets no launcher process_start beside its
// own, and its advice names serve's flags.
func TestE2EBuiltinUnderAnotherName(t *testing.T) {
	needBinary(t)
	dir := t.TempDir()
	engine := filepath.Join(dir, "engine")
	if err := os.Link(e2e.bin, engine); err != nil {
		if err := os.Symlink(e2e.bin, engine); err != nil {
			t.Fatal(err)
		}
	}
	models := filepath.Join(dir, "sglang-models")
	if err := os.MkdirAll(models, 0o755); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(models, "tiny")
	if err := os.Symlink(synthCheckpoint(t, "tiny"), model); err != nil {
		t.Fatal(err)
	}
	sc := runScenario(t, "renamed", "--", engine, "serve", "--model", model, "--device", "cpu", "--addr", "127.0.0.1:0")
	starts := 0
	for _, sp := range sc.run.Spans {
		if sp.Name == trace.StageProcessStart {
			starts++
			if sp.Source != "engine" {
				t.Errorf("process_start from %q: the engine reports its own", sp.Source)
			}
		}
	}
	if starts != 1 {
		t.Errorf("%d process_start spans, want the engine's one", starts)
	}
	d := sc.diag
	if d.Engine != sessions.EngineBuiltinCPU {
		t.Fatalf("engine %q, want builtin-cpu\n%s", d.Engine, sc.stderr)
	}
	if c, _ := d.Hypothesis("C"); !strings.Contains(c.NextKnob, "`treni-top serve … --warmup-passes=1`") {
		t.Errorf("C's knob %q is not in serve's form", c.NextKnob)
	}
}

// TestE2EFailedBeforeHealthy: a target that exits with code 3 before it
// is healthy gets no dominant cause; the diagnosis says it failed, its exit
// code and its last output.
func TestE2EFailedBeforeHealthy(t *testing.T) {
	needBinary(t)
	code, stdout, stderr := treniRun(t, nil, "run", "--headless", "--json", "--no-record", "--timeout", "30s", "--grace", "2s",
		"--", "sh", "-c", "echo starting; echo boom >&2; exit 3")
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, stderr)
	}
	var rep struct {
		Diagnosis sessions.Diagnosis `json:"diagnosis"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("--json output is not a report: %v\n%s", err, stdout)
	}
	d := rep.Diagnosis
	if d.Dominant != "" || d.Failed == "" || d.ExitCode == nil || *d.ExitCode != 3 || !strings.Contains(strings.Join(d.LogTail, "\n"), "boom") {
		t.Fatalf("dominant %q failed %q exit %v tail %q", d.Dominant, d.Failed, d.ExitCode, d.LogTail)
	}
	for _, h := range d.Hypotheses {
		if h.Verdict != sessions.VerdictInsufficient || h.NextKnob != "" {
			t.Errorf("%s: %s, next %q on a run that never became healthy", h.Code, h.Verdict, h.NextKnob)
		}
	}
	if !strings.Contains(d.Summary, "exit code 3") || !strings.Contains(d.Summary, "boom") {
		t.Errorf("summary %q", d.Summary)
	}
}
