package serverlog

import (
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// TestOllamaEngineMemoryPlan: Ollama's own engine logs where the weights,
// KV cache and compute graph go before loading; model_load ("llama runner
// started in") carries them. The lines are real (ollama/ollama#11090 and
// #12027, testdata/SOURCES.md), put in one sequence here.
func TestOllamaEngineMemoryPlan(t *testing.T) {
	_, spans := feedAll(KindOllama,
		`time=2025-07-18T14:51:00.217Z level=INFO source=ggml.go:362 msg="offloaded 41/41 layers to GPU"`,
		`time=2025-07-18T14:51:00.217Z level=INFO source=ggml.go:365 msg="model weights" buffer=CUDA1 size="11.9 GiB"`,
		`time=2025-07-18T14:51:00.217Z level=INFO source=ggml.go:365 msg="model weights" buffer=CPU size="680.0 MiB"`,
		`time=2025-07-18T14:51:00.217Z level=INFO source=ggml.go:365 msg="model weights" buffer=CUDA0 size="11.5 GiB"`,
		`time=2025-08-24T08:26:00.310Z level=INFO source=backend.go:321 msg="kv cache" device=CUDA0 size="936.0 MiB"`,
		`time=2025-08-24T08:26:08.833Z level=INFO source=server.go:1272 msg="llama runner started in 9.16 seconds"`,
	)
	s := spanOf(t, spans, trace.StageModelLoad)
	for k, want := range map[string]float64{
		trace.AttrBytes: (11.9 + 11.5) * giB, "host_bytes": 680 * miB, "kv_bytes": 936 * miB,
		"layers_offloaded": 41, "layers_total": 41,
	} {
		if got, ok := s.Attrs.Float(k); !ok || got != want {
			t.Errorf("attrs[%s] = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if d := s.Duration(); d != 9160*time.Millisecond {
		t.Errorf("model_load %v, want the stated 9.16 s", d)
	}
}

// TestVLLMInitEngineLeavesTheGapUnattributed: vLLM's "init engine … took"
// is a figure over compile, KV and graphs; the seconds after it before the
// API server starts belong to no stage, so the report's unattributed time
// shows them. The 2026 wording adds "(compilation: … s)".
func TestVLLMInitEngineLeavesTheGapUnattributed(t *testing.T) {
	lines := []string{
		"INFO 06-02 11:03:18 [kv_cache_utils.py:637] GPU KV cache size: 1,131,008 tokens",
		"INFO 06-02 11:03:55 [gpu_model_runner.py:1933] Graph capturing finished in 37 secs, took 0.45 GiB",
		"(EngineCore pid=1) INFO 06-02 11:03:55 [core.py:307] init engine (profile, create kv cache, warmup model) took 90.84 s (compilation: 45.81 s)",
	}
	for range 30 {
		lines = append(lines, "INFO 06-02 11:03:56 [serving_chat.py:117] Using default chat sampling params from model")
	}
	lines = append(lines, "INFO 06-02 11:04:26 [api_server.py:1336] Starting vLLM API server on http://0.0.0.0:8000",
		"INFO:     Application startup complete.")
	_, spans := feedAll(KindVLLM, lines...)
	g := spanOf(t, spans, trace.StageGraphCapture)
	if v, _ := g.Attrs.Float("init_engine_s"); v != 90.84 {
		t.Errorf("init_engine_s %v", v)
	}
	if v, _ := g.Attrs.Float("compilation_s"); v != 45.81 {
		t.Errorf("compilation_s %v", v)
	}
	h := spanOf(t, spans, trace.StageHTTPReady)
	for _, s := range spans {
		if s.Name != trace.StageHTTPReady && s.End > g.End {
			t.Errorf("%s [%v, %v] covers the gap after init engine (%v → %v)", s.Name, s.Start, s.End, g.End, h.Start)
		}
	}
	if gap := h.Start - g.End; gap < 30*time.Second {
		t.Errorf("gap before the API server %v, want the 30+ lines' seconds left to nobody", gap)
	}
}
