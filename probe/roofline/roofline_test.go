package roofline

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// configJSON is a config.json of the given shape, as save_pretrained
// writes it.
func configJSON(typ string, layers, hidden, inter, heads, kv, headDim, vocab int, tied bool) string {
	t := "false"
	if tied {
		t = "true"
	}
	return `{"architectures": ["X"], "model_type": "` + typ + `", "num_hidden_layers": ` + strconv.Itoa(layers) +
		`, "hidden_size": ` + strconv.Itoa(hidden) + `, "intermediate_size": ` + strconv.Itoa(inter) +
		`, "num_attention_heads": ` + strconv.Itoa(heads) + `, "num_key_value_heads": ` + strconv.Itoa(kv) +
		`, "head_dim": ` + strconv.Itoa(headDim) + `, "vocab_size": ` + strconv.Itoa(vocab) +
		`, "tie_word_embeddings": ` + t + `, "torch_dtype": "bfloat16", "rope_scaling": null}`
}

// The parameter counts of the real checkpoints whose shapes the synth
// presets carry (engine/model/synth's test holds the same numbers, from
// the checkpoints' own safetensors).
func TestParamsOfRealShapes(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  string
		want float64
	}{
		{"Qwen3-4B", configJSON("qwen3", 36, 2560, 9728, 32, 8, 128, 151936, true), 4022468096},
		{"Qwen3-0.6B", configJSON("qwen3", 28, 1024, 3072, 16, 8, 128, 151936, true), 596049920},
		{"Qwen3-8B", configJSON("qwen3", 36, 4096, 12288, 32, 8, 128, 151936, false), 8190735360},
		{"Qwen2.5-3B (q/k/v biases)", configJSON("qwen2", 36, 2048, 11008, 16, 2, 128, 151936, true), 3085938688},
		{"Llama-3.2-3B", configJSON("llama", 28, 3072, 8192, 24, 8, 128, 128256, true), 3212749824},
	} {
		m, err := ParseModel([]byte(c.cfg))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := m.Params(); got != c.want {
			t.Errorf("%s: %.0f parameters, want %.0f", c.name, got, c.want)
		}
	}
}

func TestParseModelDefaultsAndErrors(t *testing.T) {
	// No head_dim: hidden ÷ heads; no num_key_value_heads: one per head;
	// no tie_word_embeddings: untied; no dtype: 16 bits.
	m, err := ParseModel([]byte(`{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
		"num_attention_heads": 4, "vocab_size": 100}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.HeadDim != 16 || m.KVHeads != 4 || m.Tied || m.DTypeBytes != 2 || m.QKVBias || m.QKNorm {
		t.Errorf("defaults: %+v", m)
	}
	for _, c := range []struct{ cfg, want string }{
		{`[1, 2]`, "not a JSON object"},
		{`{"num_hidden_layers": 2}`, "lacks hidden_size, intermediate_size, num_attention_heads, vocab_size"},
		{`{"model_type": "mixtral", "num_local_experts": 8, "num_hidden_layers": 2}`, "mixture-of-experts"},
		{configJSON("qwen3", 2, 64, 128, 4, 3, 16, 100, true), "4 attention heads and 3 KV heads"},
		{strings.Replace(configJSON("qwen3", 2, 64, 128, 4, 2, 16, 100, true), `"bfloat16"`, `"float8_e4m3fn"`, 1), `dtype "float8_e4m3fn"`},
		{configJSON("qwen3", 0, 64, 128, 4, 2, 16, 100, true), "num_hidden_layers is 0; want 1 to 16777216"},
		{configJSON("qwen3", 2, 64, 128, 4, 2, 16, 1<<40, true), "vocab_size is 1099511627776; want 1 to 16777216"},
	} {
		_, err := ParseModel([]byte(c.cfg))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.cfg, err, c.want)
		}
	}
}

func TestReadModelFromFolder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(configJSON("qwen3", 36, 2560, 9728, 32, 8, 128, 151936, true)), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ReadModel(dir)
	if err != nil || m.Layers != 36 || !m.QKNorm {
		t.Fatalf("ReadModel(dir) = %+v, %v", m, err)
	}
	if _, err := ReadModel(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "give the checkpoint folder") {
		t.Errorf("missing config: %v", err)
	}
}

func TestParseFloors(t *testing.T) {
	nested := `{"usable": true, "floors": {"device": "NVIDIA H200", "d2d_gb_per_s": 4168.5, "gemm_bf16": {"tflops": 790.2, "m": 8192}}}`
	r, err := ParseFloors([]byte(nested))
	if err != nil || r.MatmulTFLOPS != 790.2 || r.MemoryGBps != 4168.5 || r.Device != "NVIDIA H200" {
		t.Fatalf("nested floors: %+v, %v", r, err)
	}
	top := `{"device": "x", "d2d_gb_per_s": 2900, "gemm_bf16": {"tflops": 700}}`
	if r, err := ParseFloors([]byte(top)); err != nil || r.MatmulTFLOPS != 700 {
		t.Fatalf("top-level floors: %+v, %v", r, err)
	}
	for _, c := range []struct{ in, want string }{
		{`{"floors": {"d2d_gb_per_s": 2900}}`, "no gemm_bf16"},
		{`{"floors": {"d2d_gb_per_s": 2900, "gemm_bf16_error": "cuBLASLt not found"}}`, "not measured: cuBLASLt not found"},
		{`{"floors": {"gemm_bf16": {"tflops": 700}}}`, "memory rate 0"},
		{`nope`, "not a treni-top doctor"},
	} {
		if _, err := ParseFloors([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.in, err, c.want)
		}
	}
}

// A shape small enough to count by hand, on a card of 1 FLOP/s and
// 0.72 bytes/s so that one decode step is bound by arithmetic and the
// next by bytes.
func TestBurstByHand(t *testing.T) {
	m := Model{Layers: 1, Hidden: 2, Intermediate: 2, Heads: 1, KVHeads: 1, HeadDim: 2, Vocab: 4, Tied: true, DTypeBytes: 2}
	// One layer: q 2·2, k and v 2·2 each, o 2·2, gate/up/down 2·2 each
	// = 28 projection weights; 2 norms of 2. Step weights: 28 + 4 + the
	// final norm 2 + the output projection 4·2 = 42 values, 84 bytes.
	if got := m.StepWeightBytes(); got != 84 {
		t.Fatalf("step weight bytes %g, want 84", got)
	}
	// K and V, 1 layer, 1 head of 2, 2 bytes: 8 bytes a position.
	if got := m.KVBytesPerToken(); got != 8 {
		t.Fatalf("KV bytes a token %g, want 8", got)
	}
	r := Rates{MatmulTFLOPS: 1e-12, MemoryGBps: 0.72e-9}
	b, err := Burst(m, r, Batch{Streams: 2, PromptTokens: 3, OutputTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Prefill, per stream: 3 tokens × 2 × 28 = 168 projection FLOPs, one
	// logits row 2 × 4 × 2 = 16, attention 4 × 1 × 2 × (1+2+3) = 48:
	// 232; two streams 464 FLOP = 464 s (its bytes, 84 + 2·3·8 = 132,
	// take 183 s).
	near(t, "prefill TFLOP", b.PrefillTFLOP, 464e-12)
	near(t, "prefill ms", b.PrefillMS, 464e3)
	// Step 1: context 4 a stream. FLOPs 2 × (56 + 16 + 4·2·4) = 208 → 208 s;
	// bytes 84 + 2·4·8 = 148 → 205.6 s: arithmetic sets it.
	// Step 2: context 5. FLOPs 2 × (56 + 16 + 40) = 224 → 224 s; bytes
	// 84 + 80 = 164 → 227.8 s: bytes set it.
	if b.DecodeSteps != 2 || b.DecodeComputeSteps != 1 {
		t.Errorf("decode steps %d (%d bound by arithmetic), want 2 (1)", b.DecodeSteps, b.DecodeComputeSteps)
	}
	near(t, "decode ms", b.DecodeMS, (208+164/0.72)*1e3)
	near(t, "decode KV GB", b.DecodeKVGB, 144e-9)
	near(t, "total ms", b.TotalMS, (464+208+164/0.72)*1e3)
	near(t, "tok/s", b.OutputTokPerS, 6/(464+208+164/0.72))
}

// The workload on the H200 floors: numbers computed by
// hand from Qwen3-4B's shape.
func TestBurstQwen3_4B(t *testing.T) {
	m, err := ParseModel([]byte(configJSON("qwen3", 36, 2560, 9728, 32, 8, 128, 151936, true)))
	if err != nil {
		t.Fatal(err)
	}
	// Tied: a step reads every parameter once, 4,022,468,096 × 2 bytes.
	near(t, "step weight bytes", m.StepWeightBytes(), 2*4022468096)
	// 2 (K, V) × 36 layers × 8 heads × 128 × 2 bytes.
	near(t, "KV bytes a token", m.KVBytesPerToken(), 147456)
	r := Rates{MatmulTFLOPS: 790, MemoryGBps: 4168}
	b, err := Burst(m, r, Batch{Streams: 64, PromptTokens: 1024, OutputTokens: 128})
	if err != nil {
		t.Fatal(err)
	}
	// 64 × (1024 × 2 × 36 × 100,925,440 + 2 × 151936 × 2560 + 4 × 36 × 32 × 128 × 1024·1025/2).
	near(t, "prefill TFLOP", b.PrefillTFLOP, 496086296821760/1e12)
	near(t, "prefill ms", b.PrefillMS, 496086296821760/790e12*1e3)
	// 127 steps, each 8.045 GB of weights + 64 × (1024 + j) × 147,456
	// bytes of KV: Σj (1024 + j) = 127·1024 + 127·128/2.
	kv := 64 * 147456 * (127*1024 + 127*128/2.0)
	near(t, "decode KV GB", b.DecodeKVGB, kv/1e9)
	near(t, "decode ms", b.DecodeMS, (127*2*4022468096+kv)/4168e9*1e3)
	if b.DecodeComputeSteps != 0 {
		t.Errorf("%d decode steps bound by arithmetic; at 64 streams every step is bound by bytes", b.DecodeComputeSteps)
	}
	near(t, "tok/s", b.OutputTokPerS, 64*128/((496086296821760/790e12)+(127*2*4022468096+kv)/4168e9))
}

func TestBurstRejectsBadInput(t *testing.T) {
	m := Model{Layers: 1, Hidden: 2, Intermediate: 2, Heads: 1, KVHeads: 1, HeadDim: 2, Vocab: 4, DTypeBytes: 2}
	if _, err := Burst(m, Rates{MatmulTFLOPS: 1, MemoryGBps: 1}, Batch{Streams: 0, PromptTokens: 1, OutputTokens: 1}); err == nil {
		t.Error("no error for 0 streams")
	}
	if _, err := Burst(m, Rates{MatmulTFLOPS: math.Inf(1), MemoryGBps: 1}, Batch{1, 1, 1}); err == nil {
		t.Error("no error for an infinite rate")
	}
	if _, err := Burst(Model{}, Rates{MatmulTFLOPS: 1, MemoryGBps: 1}, Batch{1, 1, 1}); err == nil {
		t.Error("no error for an empty model")
	}
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Abs(want) {
		t.Errorf("%s = %.12g, want %.12g", what, got, want)
	}
}
