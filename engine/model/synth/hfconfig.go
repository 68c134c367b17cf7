package synth

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/treni-top/treni-top/engine/model"
)

// transformersVersion is what the written configs claim, matching the era
// of the real configs they copy (Qwen3 shipped with 4.51).
const transformersVersion = "4.51.0"

// pyFloat marshals like Python's repr of a float (1000000.0, 1e-06, 0.02),
// so config.json reads exactly as transformers writes it and no consumer
// mistakes rope_theta or factor for an integer.
type pyFloat float64

// MarshalJSON renders Python float repr.
func (f pyFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	a := math.Abs(v)
	switch {
	case v == math.Trunc(v) && a < 1e16:
		return []byte(strconv.FormatFloat(v, 'f', -1, 64) + ".0"), nil
	case a >= 1e-4 && a < 1e16:
		return []byte(strconv.FormatFloat(v, 'f', -1, 64)), nil
	}
	return []byte(strconv.FormatFloat(v, 'e', -1, 64)), nil
}

// tokenIDs are the special-token ids the configs need, taken from the
// tokenizer so that config and tokenizer agree.
type tokenIDs struct {
	bos        int
	eos        []int // config.json eos_token_id
	genEOS     []int // generation_config.json eos_token_id
	pad        int   // -1 when none
	configEOS1 bool  // write eos_token_id as an int (Qwen) rather than a list
}

// configJSON is config.json as transformers' save_pretrained writes it for
// the family (keys sorted, two-space indent).
func configJSON(arch model.Arch, s Shape, vocab int, dt model.DType, ids tokenIDs) ([]byte, error) {
	m := map[string]any{
		"architectures":           []string{arch.ClassName()},
		"attention_dropout":       pyFloat(0),
		"bos_token_id":            ids.bos,
		"hidden_act":              "silu",
		"hidden_size":             s.Hidden,
		"initializer_range":       pyFloat(0.02),
		"intermediate_size":       s.Intermediate,
		"max_position_embeddings": s.MaxPos,
		"model_type":              string(arch),
		"num_attention_heads":     s.Heads,
		"num_hidden_layers":       s.Layers,
		"num_key_value_heads":     s.KVHeads,
		"rms_norm_eps":            pyFloat(s.RMSNormEps),
		"rope_theta":              pyFloat(s.RopeTheta),
		"tie_word_embeddings":     s.Tied,
		"torch_dtype":             dt.TorchName(),
		"transformers_version":    transformersVersion,
		"use_cache":               true,
		"vocab_size":              vocab,
	}
	if ids.configEOS1 && len(ids.eos) == 1 {
		m["eos_token_id"] = ids.eos[0]
	} else {
		m["eos_token_id"] = ids.eos
	}
	switch arch {
	case model.ArchQwen3:
		m["attention_bias"] = false
		m["head_dim"] = s.HeadDim
		m["max_window_layers"] = s.Layers
		m["rope_scaling"] = nil
		m["sliding_window"] = nil
		m["use_sliding_window"] = false
	case model.ArchQwen2:
		m["max_window_layers"] = s.Layers
		m["sliding_window"] = s.MaxPos
		m["use_sliding_window"] = false
	case model.ArchLlama:
		m["attention_bias"] = false
		m["head_dim"] = s.HeadDim
		m["mlp_bias"] = false
		m["pretraining_tp"] = 1
		if rs := s.RopeScaling; rs != nil {
			m["rope_scaling"] = map[string]any{
				"factor":                           pyFloat(rs.Factor),
				"high_freq_factor":                 pyFloat(rs.HighFreqFactor),
				"low_freq_factor":                  pyFloat(rs.LowFreqFactor),
				"original_max_position_embeddings": rs.OriginalMaxPositionEmbeddings,
				"rope_type":                        rs.Type,
			}
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// generationConfigJSON mirrors the real models' generation_config.json.
func generationConfigJSON(arch model.Arch, ids tokenIDs) ([]byte, error) {
	m := map[string]any{
		"bos_token_id":         ids.bos,
		"eos_token_id":         ids.genEOS,
		"transformers_version": transformersVersion,
	}
	switch arch {
	case model.ArchQwen3:
		m["do_sample"] = true
		m["temperature"] = pyFloat(0.6)
		m["top_k"] = 20
		m["top_p"] = pyFloat(0.95)
	case model.ArchQwen2:
		m["do_sample"] = true
		m["repetition_penalty"] = pyFloat(1.05)
		m["temperature"] = pyFloat(0.7)
		m["top_k"] = 20
		m["top_p"] = pyFloat(0.8)
	case model.ArchLlama:
		m["do_sample"] = true
		m["temperature"] = pyFloat(0.6)
		m["top_p"] = pyFloat(0.9)
	}
	if ids.pad >= 0 {
		m["pad_token_id"] = ids.pad
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
