package sessions

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/trace"
)

// TestLiveCPURunNeverClaimsGPU: the TUI diagnoses a run again while it is
// in progress, so every prefix of a live run's events is a diagnosis a
// user sees. A real CPU run of the built-in engine (plain `treni-top run`
// on this 2-core VM, --device auto, recorded as it arrived) is fed one
// event at a time: no diagnosis ever names the HBM hypothesis, GPU-only
// advice or GPU evidence; the device is unknown until the engine names
// its backend, then the CPU, and the advice is in run's own form.
func TestLiveCPURunNeverClaimsGPU(t *testing.T) {
	s, err := Open(filepath.Join("testdata", "builtin-cpu-live.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	sawUnknown, sawCPU, sawB := false, false, false
	for i := 1; i <= len(s.Events); i++ {
		d := Diagnose(s.Events[:i])
		if d.Device == DeviceGPU {
			t.Fatalf("after event %d (%s): device gpu", i, describe(s.Events[i-1]))
		}
		sawUnknown = sawUnknown || d.Engine == EngineBuiltin
		sawCPU = sawCPU || d.Device == DeviceCPU
		for _, h := range d.Hypotheses {
			text := h.Title + " | " + h.NextKnob
			for _, e := range h.Evidence {
				text += " | " + e.Name + " " + e.Value
			}
			for _, w := range append([]string{"GPU memory", "treni-top serve"}, gpuOnly...) {
				if strings.Contains(text, w) {
					t.Fatalf("after event %d (%s): %s says %q: %s", i, describe(s.Events[i-1]), h.Code, w, text)
				}
			}
			if h.Code == "B" && h.TermMS > 0 {
				sawB = true
			}
		}
		if strings.Contains(d.Summary, "HBM") {
			t.Fatalf("after event %d: summary %q", i, d.Summary)
		}
	}
	final := Diagnose(s.Events)
	b, _ := final.Hypothesis("B")
	if !sawUnknown || !sawCPU || !sawB || final.Engine != EngineBuiltinCPU || !strings.Contains(b.Title, "host memory") ||
		!strings.Contains(b.NextKnob, "`treni-top run … --load=copy`") {
		t.Errorf("unknown device seen %v, cpu seen %v, a B term seen %v; final engine %q, B %q next %q", sawUnknown, sawCPU, sawB, final.Engine, b.Title, b.NextKnob)
	}
}

// describe names an event for a failure message.
func describe(e trace.Event) string {
	switch {
	case e.Stage != nil:
		return "stage " + string(e.Stage.Name)
	case e.Marker != nil:
		return "marker " + e.Marker.Name
	}
	return string(e.Kind)
}
