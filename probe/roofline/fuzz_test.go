package roofline

import (
	"math"
	"testing"
)

// Any config.json either parses into a model whose bound is finite and
// positive for any batch, or is refused with an error; never a panic.
func FuzzParseModel(f *testing.F) {
	f.Add([]byte(configJSON("qwen3", 36, 2560, 9728, 32, 8, 128, 151936, true)))
	f.Add([]byte(configJSON("qwen2", 2, 64, 128, 4, 2, 16, 100, false)))
	f.Add([]byte(`{"num_hidden_layers": 1, "hidden_size": 1, "intermediate_size": 1, "num_attention_heads": 1, "vocab_size": 1, "dtype": "float32"}`))
	f.Add([]byte(`{"num_hidden_layers": -1}`))
	f.Add([]byte(configJSON("llama", 16777216, 16777216, 16777216, 16777216, 16777216, 16777216, 16777216, false)))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseModel(data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("ParseModel accepted an invalid model %+v: %v", m, err)
		}
		b, err := Burst(m, Rates{MatmulTFLOPS: 790, MemoryGBps: 4168}, Batch{Streams: 2, PromptTokens: 3, OutputTokens: 4})
		if err != nil {
			t.Fatalf("Burst refused a valid model %+v: %v", m, err)
		}
		if !(b.OutputTokPerS > 0) || math.IsInf(b.OutputTokPerS, 0) {
			t.Fatalf("model %+v: bound %g tok/s", m, b.OutputTokPerS)
		}
	})
}

// Any floors file either gives two positive finite rates or an error.
func FuzzParseFloors(f *testing.F) {
	f.Add([]byte(`{"floors": {"device": "NVIDIA H200", "d2d_gb_per_s": 4168.5, "gemm_bf16": {"tflops": 790.2}}}`))
	f.Add([]byte(`{"d2d_gb_per_s": 1e400, "gemm_bf16": {"tflops": 1}}`))
	f.Add([]byte(`{"floors": {"floors": {"d2d_gb_per_s": 1, "gemm_bf16": {"tflops": 1}}}}`))
	f.Add([]byte(`{"floors": null, "gemm_bf16_error": "x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseFloors(data)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("ParseFloors accepted invalid rates %+v: %v", r, err)
		}
	})
}
