package sessions

import (
	"strings"
	"testing"
)

// TestDiagnoseLazyLoaderOnGPU pins the diagnosis of two real sessions:
// Ollama v0.9.6 with its CUDA backend on an H100, a 0.6B-shaped model
// (0.99 GB), traced by treni-top run warm and with --evict-page-cache
// (docs/gpu-runs/2026-11-25-h100-ollama). Ollama loads the model inside
// its first request, so the load's stages sit inside first_request and the
// first request's memory jump is the model itself: D must not claim the
// first request (it did before the lazy-load rule, term 86%), the runner's
// start and its metadata/vocabulary read are E's, and the evicted run's
// disk read is A's. On this machine the disk read (0.45 s more upload than
// warm) is smaller than the runner's start and metadata read, so E stays
// dominant and A contributes. With a 1.7B-shaped model (3.09 GB) the disk
// read is the largest term when evicted: A dominant (48%), E contributes.
func TestDiagnoseLazyLoaderOnGPU(t *testing.T) {
	for _, c := range []struct {
		file        string
		dominant    string
		contributes []string
		ruledOutD   bool
		minEShare   float64
		evidenceInE string
	}{
		{"ollama-gpu-0.6b-warm.jsonl.gz", "E", nil, true, 0.5, "first request before its load began"},
		{"ollama-gpu-0.6b-evicted.jsonl.gz", "E", []string{"A"}, true, 0.4, "model metadata and vocabulary"},
		// 1.7B-shaped (3.09 GB): evicted, the disk read is the largest term.
		{"ollama-gpu-1.7b-warm.jsonl.gz", "E", []string{"B"}, true, 0.4, "first request before its load began"},
		{"ollama-gpu-1.7b-evicted.jsonl.gz", "A", []string{"E"}, true, 0.25, "model metadata and vocabulary"},
	} {
		s, err := Open("testdata/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		d := Diagnose(s.Events)
		if d.Dominant != c.dominant {
			t.Errorf("%s: dominant %q, want %q\n%s", c.file, d.Dominant, c.dominant, dump(d))
			continue
		}
		e, _ := d.Hypothesis("E")
		if e.Score < c.minEShare || !strings.Contains(dump(d), c.evidenceInE) {
			t.Errorf("%s: E score %.2f (want ≥ %.2f) or evidence %q missing\n%s", c.file, e.Score, c.minEShare, c.evidenceInE, dump(d))
		}
		for _, code := range c.contributes {
			if h, _ := d.Hypothesis(code); h.Verdict != VerdictContributes {
				t.Errorf("%s: %s is %q, want contributes", c.file, code, h.Verdict)
			}
		}
		if dd, _ := d.Hypothesis("D"); c.ruledOutD && dd.Verdict != VerdictRuledOut {
			t.Errorf("%s: D is %q (term %.0f ms), want ruled out: the first request's memory jump is the lazily loaded model", c.file, dd.Verdict, dd.TermMS)
		}
		if d.Engine != EngineOllama || !strings.Contains(d.Summary, "OLLAMA_KEEP_ALIVE") {
			t.Errorf("%s: engine %q, summary %q: want Ollama's own knob", c.file, d.Engine, d.Summary)
		}
	}
}
