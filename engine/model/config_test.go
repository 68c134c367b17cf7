package model

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// llama31Config is Llama-3.1-8B's config.json as published.
const llama31Config = `{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256}`

func TestParseConfigLlama31(t *testing.T) {
	c, err := ParseConfig([]byte(llama31Config))
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != ArchLlama || c.HeadDim != 128 || c.NumKVHeads != 8 || c.VocabSize != 128256 || c.TieWordEmbeddings || c.QKVBias || c.QKNorm {
		t.Fatalf("%+v", c)
	}
	if c.BOSTokenID != 128000 || !slices.Equal(c.EOSTokenIDs, []int{128001, 128008, 128009}) {
		t.Fatalf("bos %d eos %v", c.BOSTokenID, c.EOSTokenIDs)
	}
	want := RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	if c.RopeScaling == nil || *c.RopeScaling != want {
		t.Fatalf("rope scaling %+v", c.RopeScaling)
	}
	if c.RMSNormEps != 1e-5 || c.RopeTheta != 500000 || c.TorchDType != "bfloat16" {
		t.Fatalf("%+v", c)
	}
	// Llama-3.1-8B has 8,030,261,248 parameters.
	if n := c.NumParams(); n != 8030261248 {
		t.Fatalf("NumParams %d", n)
	}
}

// TestInvFreqLlama3 checks the llama3 scaling against values computed by
// hand from transformers' _compute_llama3_parameters for Llama-3.1-8B
// (theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192):
//
//	inv[i]   = 500000^(-2i/128);  wavelen = 2π/inv[i]
//	low_wavelen = 8192/1 = 8192;  high_wavelen = 8192/4 = 2048
//	i=28: wavelen 1956.50 < 2048       → unchanged: 0.0032114459947525913
//	i=29: wavelen 2401.74 (medium)     → s = (8192/2401.74 − 1)/3 = 0.80363
//	      (1−s)·inv/8 + s·inv          = 0.002166570763503359
//	i=30: wavelen 2948.30 (medium)     → s = 0.59284 → 0.0013718935677611381
//	i=34: wavelen 6695.11 (medium)     → s = 0.07452 → 0.00017850781276799638
//	i=35: wavelen 8218.72 > 8192       → inv/8 = 0.0007644969883171747/8 = 9.556212353964683e-05
//	i=63: inv/8 = 2.455140791131609e-06/8 = 3.068925988914511e-07
func TestInvFreqLlama3(t *testing.T) {
	c, err := ParseConfig([]byte(llama31Config))
	if err != nil {
		t.Fatal(err)
	}
	inv := c.InvFreq()
	if len(inv) != 64 {
		t.Fatalf("len %d", len(inv))
	}
	want := map[int]float64{
		0:  1.0,
		28: 0.0032114459947525913,
		29: 0.002166570763503359,
		30: 0.0013718935677611381,
		34: 0.00017850781276799638,
		35: 9.556212353964683e-05,
		63: 3.068925988914511e-07,
	}
	for i, w := range want {
		if math.Abs(inv[i]-w) > 1e-12*math.Max(1, w)+w*1e-12 {
			t.Errorf("inv[%d] = %.17g, want %.17g", i, inv[i], w)
		}
	}
	c.RopeScaling = nil
	plain := c.InvFreq()
	if plain[35] != 0.0007644969883171747 && math.Abs(plain[35]-0.0007644969883171747) > 1e-15 {
		t.Errorf("unscaled inv[35] = %g", plain[35])
	}
}

func TestParseConfigQwen(t *testing.T) {
	qwen2 := `{"architectures":["Qwen2ForCausalLM"],"hidden_size":896,"intermediate_size":4864,"num_hidden_layers":24,
	"num_attention_heads":14,"num_key_value_heads":2,"vocab_size":151936,"rope_theta":1000000.0,"tie_word_embeddings":true,
	"bos_token_id":151643,"eos_token_id":151643,"use_sliding_window":false,"sliding_window":32768,"rope_scaling":null}`
	c, err := ParseConfig([]byte(qwen2))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeadDim != 64 || !c.QKVBias || c.QKNorm || c.OProjBias || !slices.Equal(c.EOSTokenIDs, []int{151643}) || c.RopeScaling != nil {
		t.Fatalf("%+v", c)
	}
	// Qwen2.5-0.5B: 494,032,768 parameters.
	if n := c.NumParams(); n != 494032768 {
		t.Fatalf("NumParams %d", n)
	}
	// transformers 5 spelling: rope_parameters and dtype.
	qwen3v5 := `{"architectures":["Qwen3ForCausalLM"],"hidden_size":1024,"intermediate_size":3072,"num_hidden_layers":28,
	"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,"tie_word_embeddings":true,
	"rope_parameters":{"rope_type":"default","rope_theta":1000000.0},"dtype":"bfloat16"}`
	c, err = ParseConfig([]byte(qwen3v5))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 1e6 || !c.QKNorm || c.QKVBias || c.TorchDType != "bfloat16" || c.BOSTokenID != -1 {
		t.Fatalf("%+v", c)
	}
	// Qwen3-0.6B: 596,049,920 parameters.
	if n := c.NumParams(); n != 596049920 {
		t.Fatalf("NumParams %d", n)
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := `"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4`
	cases := []struct {
		json string
		want error
	}{
		{`nope`, ErrBadConfig},
		{`{` + base + `}`, ErrUnknownArch},
		{`{"architectures":["GPT2LMHeadModel"],` + base + `}`, ErrUnknownArch},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":8}`, ErrBadConfig},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"num_key_value_heads":3}`, ErrBadConfig},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"head_dim":3}`, ErrBadConfig},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"rope_scaling":{"type":"yarn","factor":4}}`, ErrUnsupported},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"rope_scaling":{"rope_type":"llama3","factor":8}}`, ErrBadConfig},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"hidden_act":"gelu"}`, ErrUnsupported},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"mlp_bias":true}`, ErrUnsupported},
		{`{"architectures":["Qwen2ForCausalLM"],` + base + `,"use_sliding_window":true}`, ErrUnsupported},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"eos_token_id":"x"}`, ErrBadConfig},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"rope_theta":0}`, ErrBadConfig},
	}
	for _, tc := range cases {
		_, err := ParseConfig([]byte(tc.json))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.json, err, tc.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(llama31Config))
	f.Add([]byte(`{"architectures":["Qwen3ForCausalLM"],"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"head_dim":4}`))
	f.Add([]byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"eos_token_id":[1,2]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		// A config that parses must be usable: shapes computable, RoPE
		// frequencies finite and non-negative
		// (an absurd factor may underflow one to zero, never to NaN).
		if c.HeadDim <= 0 || c.NumHeads%c.NumKVHeads != 0 {
			t.Fatalf("accepted inconsistent config %+v", c)
		}
		for _, v := range c.InvFreq() {
			if !(v >= 0) || math.IsInf(v, 0) {
				t.Fatalf("InvFreq produced %v for %+v", v, c)
			}
		}
		_ = ExpectedTensors(c)
	})
}
