package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Arch is the decoder family. The three share one block structure (RMSNorm,
// GQA attention with RoPE, SwiGLU MLP) and differ in the flags of Config.
type Arch string

// The supported families.
const (
	ArchQwen3 Arch = "qwen3"
	ArchQwen2 Arch = "qwen2"
	ArchLlama Arch = "llama"
)

// Arches lists the supported families in a stable order (for help text).
func Arches() []Arch { return []Arch{ArchQwen3, ArchQwen2, ArchLlama} }

// archByClass maps config.json "architectures" entries to families.
func archByClass(class string) (Arch, bool) {
	switch class {
	case "Qwen3ForCausalLM":
		return ArchQwen3, true
	case "Qwen2ForCausalLM":
		return ArchQwen2, true
	case "LlamaForCausalLM":
		return ArchLlama, true
	}
	return "", false
}

// ClassName is the transformers class of the family ("Qwen3ForCausalLM").
func (a Arch) ClassName() string {
	switch a {
	case ArchQwen3:
		return "Qwen3ForCausalLM"
	case ArchQwen2:
		return "Qwen2ForCausalLM"
	case ArchLlama:
		return "LlamaForCausalLM"
	}
	return ""
}

// RopeScaling is the llama3 rope_scaling block of Llama 3.1/3.2 configs (the
// only scaling type this engine implements; others are refused by name).
type RopeScaling struct {
	// Type is "llama3".
	Type                          string
	Factor                        float64
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// Config is what the engine needs from config.json.
type Config struct {
	// Arch is the family derived from Architectures.
	Arch Arch
	// Architectures is config.json's "architectures" list verbatim.
	Architectures []string

	HiddenSize, IntermediateSize, NumLayers, NumHeads, NumKVHeads, HeadDim, VocabSize, MaxPositionEmbeddings int

	RMSNormEps, RopeTheta float64
	// RopeScaling is nil unless config.json has a llama3 rope_scaling.
	RopeScaling *RopeScaling
	// TieWordEmbeddings: the LM head reuses model.embed_tokens.weight and
	// the checkpoint has no lm_head.weight.
	TieWordEmbeddings bool
	// QKVBias: q/k/v projections have biases (qwen2, llama attention_bias).
	QKVBias bool
	// OProjBias: o_proj has a bias too (llama attention_bias only; Qwen2's
	// o_proj never has one).
	OProjBias bool
	// QKNorm: per-head RMSNorm over head_dim on q and k before RoPE (qwen3).
	QKNorm bool

	BOSTokenID int
	// EOSTokenIDs: config.json's eos_token_id may be an int or a list.
	EOSTokenIDs []int
	// TorchDType is "torch_dtype" (transformers 4) or "dtype" (5).
	TorchDType string
}

// rawConfig mirrors the config.json keys we read. Pointers tell "absent"
// from zero, because several defaults depend on absence.
type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumLayers             *int            `json:"num_hidden_layers"`
	NumHeads              *int            `json:"num_attention_heads"`
	NumKVHeads            *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	VocabSize             *int            `json:"vocab_size"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	HiddenAct             *string         `json:"hidden_act"`
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	TorchDType            *string         `json:"torch_dtype"`
	DType                 *string         `json:"dtype"`
}

type rawRope struct {
	RopeType                      string   `json:"rope_type"`
	Type                          string   `json:"type"`
	Factor                        *float64 `json:"factor"`
	LowFreqFactor                 *float64 `json:"low_freq_factor"`
	HighFreqFactor                *float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings *float64 `json:"original_max_position_embeddings"`
	RopeTheta                     *float64 `json:"rope_theta"`
}

// ParseConfig reads config.json. It accepts what transformers 4.x and 5.x
// write (rope_scaling/rope_theta or rope_parameters; torch_dtype or dtype)
// and refuses, by name, architectures and features it cannot run, so a
// model that would compute wrong logits never loads. Errors wrap ErrBadConfig,
// ErrUnknownArch or ErrUnsupported.
func ParseConfig(data []byte) (Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return Config{}, fmt.Errorf("%w: %v (is this a Hugging Face config.json?)", ErrBadConfig, err)
	}
	var c Config
	c.Architectures = r.Architectures
	if len(r.Architectures) == 0 {
		return Config{}, fmt.Errorf("%w: no \"architectures\" list (model_type %q); this engine runs Qwen3ForCausalLM, Qwen2ForCausalLM and LlamaForCausalLM", ErrUnknownArch, r.ModelType)
	}
	arch, ok := archByClass(r.Architectures[0])
	if !ok {
		return Config{}, fmt.Errorf("%w: %q (this engine runs Qwen3ForCausalLM, Qwen2ForCausalLM and LlamaForCausalLM)", ErrUnknownArch, r.Architectures[0])
	}
	c.Arch = arch
	// Part by part: a config with several faults is refused for the
	// first one found.
	for _, read := range []func(*rawConfig) error{c.readShape, c.readNormAndRope, c.readFeatures, c.readTokens} {
		if err := read(&r); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// positive is the value of the required key name, which must be > 0.
func positive(name string, p *int) (int, error) {
	if p == nil {
		return 0, fmt.Errorf("%w: %q is missing", ErrBadConfig, name)
	}
	if *p <= 0 {
		return 0, fmt.Errorf("%w: %q is %d, want > 0", ErrBadConfig, name, *p)
	}
	return *p, nil
}

// readShape reads the model's sizes: the required ones, the key/value
// heads and head_dim with transformers' defaults, and the context
// length, refusing sizes no real model has.
func (c *Config) readShape(r *rawConfig) error {
	var err error
	if c.HiddenSize, err = positive("hidden_size", r.HiddenSize); err != nil {
		return err
	}
	if c.IntermediateSize, err = positive("intermediate_size", r.IntermediateSize); err != nil {
		return err
	}
	if c.NumLayers, err = positive("num_hidden_layers", r.NumLayers); err != nil {
		return err
	}
	if c.NumHeads, err = positive("num_attention_heads", r.NumHeads); err != nil {
		return err
	}
	if c.VocabSize, err = positive("vocab_size", r.VocabSize); err != nil {
		return err
	}
	c.NumKVHeads = c.NumHeads // transformers' default when the key is absent
	if r.NumKVHeads != nil {
		if c.NumKVHeads, err = positive("num_key_value_heads", r.NumKVHeads); err != nil {
			return err
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("%w: num_attention_heads %d is not a multiple of num_key_value_heads %d", ErrBadConfig, c.NumHeads, c.NumKVHeads)
	}
	if r.HeadDim != nil {
		if c.HeadDim, err = positive("head_dim", r.HeadDim); err != nil {
			return err
		}
	} else {
		// Qwen2 and older Llama configs derive head_dim.
		if c.HiddenSize%c.NumHeads != 0 {
			return fmt.Errorf("%w: no head_dim and hidden_size %d is not a multiple of num_attention_heads %d", ErrBadConfig, c.HiddenSize, c.NumHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("%w: head_dim %d is odd; rotary embeddings need an even head_dim", ErrBadConfig, c.HeadDim)
	}
	// Guard against sizes whose products overflow int when shapes are
	// multiplied out (fuzzed configs reach these).
	const maxDim = 1 << 24
	for _, d := range []struct {
		n string
		v int
	}{{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize}, {"num_hidden_layers", c.NumLayers},
		{"num_attention_heads", c.NumHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.VocabSize}} {
		if d.v > maxDim {
			return fmt.Errorf("%w: %q is %d, larger than any real model (limit %d)", ErrBadConfig, d.n, d.v, maxDim)
		}
	}
	if c.NumLayers > 4096 || c.HeadDim > 4096 {
		return fmt.Errorf("%w: %d layers of head_dim %d is beyond any real model (limits 4096 each)", ErrBadConfig, c.NumLayers, c.HeadDim)
	}
	c.MaxPositionEmbeddings = 2048 // transformers' LlamaConfig default
	if r.MaxPositionEmbeddings != nil {
		if c.MaxPositionEmbeddings, err = positive("max_position_embeddings", r.MaxPositionEmbeddings); err != nil {
			return err
		}
	}
	return nil
}

// readNormAndRope reads rms_norm_eps and the rotary embedding: rope_theta
// and a scaling (llama3 only), with each family's defaults.
func (c *Config) readNormAndRope(r *rawConfig) error {
	c.RMSNormEps = 1e-6
	if c.Arch == ArchLlama {
		c.RMSNormEps = 1e-5 // LlamaConfig default (Qwen configs default to 1e-6)
	}
	if r.RMSNormEps != nil {
		c.RMSNormEps = *r.RMSNormEps
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return fmt.Errorf("%w: rms_norm_eps %g outside (0, 1)", ErrBadConfig, c.RMSNormEps)
	}
	c.RopeTheta = 10000
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	}
	// transformers 5 moves rope_theta and the scaling into rope_parameters;
	// 4.x writes rope_scaling. Either may be null.
	ropeRaw := r.RopeScaling
	if isNull(ropeRaw) && !isNull(r.RopeParameters) {
		ropeRaw = r.RopeParameters
	}
	if !isNull(ropeRaw) {
		var rr rawRope
		if err := json.Unmarshal(ropeRaw, &rr); err != nil {
			return fmt.Errorf("%w: rope_scaling: %v", ErrBadConfig, err)
		}
		if rr.RopeTheta != nil {
			c.RopeTheta = *rr.RopeTheta
		}
		typ := rr.RopeType
		if typ == "" {
			typ = rr.Type
		}
		switch typ {
		case "", "default":
			// plain RoPE
		case "llama3":
			rs, err := llama3Scaling(rr)
			if err != nil {
				return err
			}
			c.RopeScaling = rs
		default:
			return fmt.Errorf("%w: rope_scaling type %q (only llama3 is implemented)", ErrUnsupported, typ)
		}
	}
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("%w: rope_theta %g, want > 1", ErrBadConfig, c.RopeTheta)
	}
	return nil
}

// readFeatures reads what each family may switch on (tied embeddings,
// biases, q/k norms) and refuses what the engine does not implement.
func (c *Config) readFeatures(r *rawConfig) error {
	if r.TieWordEmbeddings != nil {
		c.TieWordEmbeddings = *r.TieWordEmbeddings // all three classes default to false
	}
	if r.HiddenAct != nil && *r.HiddenAct != "silu" {
		return fmt.Errorf("%w: hidden_act %q (only silu is implemented)", ErrUnsupported, *r.HiddenAct)
	}
	switch c.Arch {
	case ArchQwen3:
		c.QKNorm = true
		if r.AttentionBias != nil && *r.AttentionBias {
			c.QKVBias, c.OProjBias = true, true
		}
	case ArchQwen2:
		c.QKVBias = true
	case ArchLlama:
		if r.AttentionBias != nil && *r.AttentionBias {
			c.QKVBias, c.OProjBias = true, true
		}
		if r.MLPBias != nil && *r.MLPBias {
			return fmt.Errorf("%w: mlp_bias true", ErrUnsupported)
		}
	}
	if c.Arch != ArchLlama && r.UseSlidingWindow != nil && *r.UseSlidingWindow {
		return fmt.Errorf("%w: use_sliding_window true (sliding-window attention is not implemented)", ErrUnsupported)
	}
	return nil
}

// readTokens reads the BOS and EOS token ids and the weights' dtype.
func (c *Config) readTokens(r *rawConfig) error {
	c.BOSTokenID = -1
	if !isNull(r.BOSTokenID) {
		ids, err := intOrList(r.BOSTokenID)
		if err != nil || len(ids) == 0 {
			return fmt.Errorf("%w: bos_token_id %s is not an integer", ErrBadConfig, r.BOSTokenID)
		}
		c.BOSTokenID = ids[0]
	}
	if !isNull(r.EOSTokenID) {
		ids, err := intOrList(r.EOSTokenID)
		if err != nil {
			return fmt.Errorf("%w: eos_token_id %s is neither an integer nor a list of integers", ErrBadConfig, r.EOSTokenID)
		}
		c.EOSTokenIDs = ids
	}
	if r.TorchDType != nil {
		c.TorchDType = *r.TorchDType
	} else if r.DType != nil {
		c.TorchDType = *r.DType
	}
	return nil
}

func llama3Scaling(rr rawRope) (*RopeScaling, error) {
	if rr.Factor == nil || rr.LowFreqFactor == nil || rr.HighFreqFactor == nil || rr.OriginalMaxPositionEmbeddings == nil {
		return nil, fmt.Errorf("%w: llama3 rope_scaling needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings", ErrBadConfig)
	}
	rs := &RopeScaling{Type: "llama3", Factor: *rr.Factor, LowFreqFactor: *rr.LowFreqFactor, HighFreqFactor: *rr.HighFreqFactor,
		OriginalMaxPositionEmbeddings: int(*rr.OriginalMaxPositionEmbeddings)}
	if float64(rs.OriginalMaxPositionEmbeddings) != *rr.OriginalMaxPositionEmbeddings || rs.OriginalMaxPositionEmbeddings <= 0 {
		return nil, fmt.Errorf("%w: rope_scaling original_max_position_embeddings %g is not a positive integer", ErrBadConfig, *rr.OriginalMaxPositionEmbeddings)
	}
	// HF divides by (high - low) and by low: equal or non-positive factors
	// would make NaN frequencies.
	if !(rs.Factor > 0) || !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor) || math.IsInf(rs.Factor, 0) || math.IsInf(rs.HighFreqFactor, 0) {
		return nil, fmt.Errorf("%w: llama3 rope_scaling needs factor > 0 and high_freq_factor > low_freq_factor > 0 (got %g, %g, %g)", ErrBadConfig, rs.Factor, rs.LowFreqFactor, rs.HighFreqFactor)
	}
	return rs, nil
}

func isNull(m json.RawMessage) bool {
	t := bytes.TrimSpace(m)
	return len(t) == 0 || string(t) == "null"
}

// intOrList decodes 5 or [5, 6].
func intOrList(m json.RawMessage) ([]int, error) {
	t := bytes.TrimSpace(m)
	if strings.HasPrefix(string(t), "[") {
		var ids []int
		if err := json.Unmarshal(t, &ids); err != nil {
			return nil, err
		}
		return ids, nil
	}
	var id int
	if err := json.Unmarshal(t, &id); err != nil {
		return nil, err
	}
	return []int{id}, nil
}

// InvFreq returns the RoPE inverse frequencies for HeadDim, neox style
// (rotate_half pairs i and i+HeadDim/2 share InvFreq()[i]), len HeadDim/2:
// 1/theta^(2i/HeadDim), then llama3 scaling exactly as transformers'
// _compute_llama3_parameters. Computed in float64; transformers computes in
// float32, so values agree to float32 precision.
func (c Config) InvFreq() []float64 {
	half := c.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
	}
	rs := c.RopeScaling
	if rs == nil || rs.Type != "llama3" {
		return inv
	}
	old := float64(rs.OriginalMaxPositionEmbeddings)
	lowWavelen := old / rs.LowFreqFactor
	highWavelen := old / rs.HighFreqFactor
	for i, f := range inv {
		wavelen := 2 * math.Pi / f
		switch {
		case wavelen < highWavelen: // high frequency: unchanged
		case wavelen > lowWavelen: // low frequency: scaled down by factor
			inv[i] = f / rs.Factor
		default: // medium: interpolate between the two
			smooth := (old/wavelen - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
			inv[i] = (1-smooth)*f/rs.Factor + smooth*f
		}
	}
	return inv
}
