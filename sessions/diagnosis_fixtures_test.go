package sessions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureVerdicts pins the diagnosis of every real server log in
// ../shared/fixtures/serverlogs (docs/DIAGNOSIS.md explains each one
// against its log). "" means no dominant term may be called: the evidence
// is insufficient or no term reaches DominantShare.
var fixtureVerdicts = map[string]string{
	"llamacpp/b3892-2024-10-metal-m3max-starcoder15b-hf-download.log":                       "",
	"llamacpp/b6699-2025-10-cuda-rtx3070-gpt-oss-20b-cpu-moe.log":                           "",
	"ollama/v0.2x-2026-05-llamarunner-qwen2.5-coder-7b-rtx3060.log":                         "E",
	"ollama/v0.3.x-2024-11-cpp-runner-granite-8b-m1pro-partial-offload-debug.log":           "",
	"sglang/v0.4.1-docs-send_request-llama3.1-8b-80gb.log":                                  "E",
	"sglang/v0.5.x-2026-05-docs-ci-llama3.1-8b-lora-nocudagraph.log":                        "E",
	"sglang/v0.5.x-nightly-2026-08-qwen3-30b-a3b-fp8-h100-engine-startup-timings.log":       "C",
	"tgi/v1.3.x-gpt2-wrapped-by-py-tgi.log":                                                 "",
	"tgi/v2.0.x-image-2025-mistral-7b-g5-a10g-hyperpod.log":                                 "",
	"tgi/v3.3.x-gemma3-27b-tp2-rtxa6000.log":                                                "",
	"vllm/series-upb-h100nvl-opt6.7b/v0.11.0-v1-debug.log":                                  "C",
	"vllm/series-upb-h100nvl-opt6.7b/v0.3.1.log":                                            "",
	"vllm/series-upb-h100nvl-opt6.7b/v0.4.0.log":                                            "",
	"vllm/series-upb-h100nvl-opt6.7b/v0.5.0.log":                                            "C",
	"vllm/series-upb-h100nvl-opt6.7b/v0.6.0.log":                                            "C",
	"vllm/series-upb-h100nvl-opt6.7b/v0.8.0-v1-debug.log":                                   "C",
	"vllm/v0.10.0-v1engine-llama2-7b-a100-debug-upb-profiler-patched.log":                   "C",
	"vllm/v0.10.x-v1engine-qwen3-235b-fp8-tp8-l40s-multiworker.log":                         "A",
	"vllm/v0.2x-dev-2026-05-v1engine-glm5.1-fp8-tp8-h200-runai-streamer-eager.log":          "",
	"vllm/v0.6.1-v0engine-llama3.1-swallow-8b-offline.log":                                  "",
	"vllm/v0.8.5.post1-v1engine-qwen2.5-1.5b-serve.log":                                     "A",
	"vllm/v0.9.0.1-v1engine-deepseek-r1-qwen1.5b-colab-a100-default-loader-warmcompile.log": "C",
}

func TestDiagnoseServerLogFixtures(t *testing.T) {
	root := filepath.Join("..", "..", "shared", "fixtures", "serverlogs")
	seen := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		want, ok := fixtureVerdicts[filepath.ToSlash(rel)]
		if !ok {
			t.Errorf("%s: new fixture without a pinned verdict; add it here and to docs/DIAGNOSIS.md", rel)
			return nil
		}
		seen++
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		s, err := Import(f, ImportOptions{Source: rel})
		if err != nil {
			t.Errorf("%s: import: %v", rel, err)
			return nil
		}
		dg := Diagnose(s.Events)
		if dg.Dominant != want {
			t.Errorf("%s: dominant %q, want %q\n%s", rel, dg.Dominant, want, dump(dg))
		}
		if want == "" && !strings.Contains(dg.Summary, "insufficient evidence") && !strings.Contains(dg.Summary, "no single dominant") {
			t.Errorf("%s: undecided but the summary says %q", rel, dg.Summary)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s (CI keeps ../shared beside the clone): %v", root, err)
	}
	if seen != len(fixtureVerdicts) {
		t.Fatalf("saw %d fixtures, pinned %d", seen, len(fixtureVerdicts))
	}
}
