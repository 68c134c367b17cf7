package model

import "strconv"

// Tensor names exactly as transformers' state dicts spell them.
const (
	NameEmbed     = "model.embed_tokens.weight"
	NameFinalNorm = "model.norm.weight"
	NameLMHead    = "lm_head.weight"
)

// Per-layer suffixes for LayerTensorName.
const (
	SuffixInputNorm    = "input_layernorm.weight"
	SuffixPostAttnNorm = "post_attention_layernorm.weight"
	SuffixQ            = "self_attn.q_proj.weight"
	SuffixK            = "self_attn.k_proj.weight"
	SuffixV            = "self_attn.v_proj.weight"
	SuffixO            = "self_attn.o_proj.weight"
	SuffixQBias        = "self_attn.q_proj.bias"
	SuffixKBias        = "self_attn.k_proj.bias"
	SuffixVBias        = "self_attn.v_proj.bias"
	SuffixOBias        = "self_attn.o_proj.bias"
	SuffixQNorm        = "self_attn.q_norm.weight"
	SuffixKNorm        = "self_attn.k_norm.weight"
	SuffixGate         = "mlp.gate_proj.weight"
	SuffixUp           = "mlp.up_proj.weight"
	SuffixDown         = "mlp.down_proj.weight"
)

// LayerTensorName is "model.layers.<layer>.<suffix>".
func LayerTensorName(layer int, suffix string) string {
	return "model.layers." + strconv.Itoa(layer) + "." + suffix
}

// NamedShape is one tensor the architecture needs.
type NamedShape struct {
	Name  string
	Shape []int
}

// StateDictOrder lists every tensor the architecture needs in the order
// transformers registers them (the order of model.state_dict(), which is the
// order save_pretrained fills shards in). Shapes are [out, in] like
// torch.nn.Linear. Tied checkpoints have no lm_head.weight.
func StateDictOrder(c Config) []NamedShape {
	h, q, kv := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	out := make([]NamedShape, 0, 3+c.NumLayers*16)
	out = append(out, NamedShape{NameEmbed, []int{c.VocabSize, h}})
	for l := 0; l < c.NumLayers; l++ {
		add := func(suffix string, shape ...int) {
			out = append(out, NamedShape{LayerTensorName(l, suffix), shape})
		}
		// Module registration order: q, k, v, o (weight then bias), then
		// q_norm, k_norm (Qwen3Attention), then mlp, then the two norms.
		add(SuffixQ, q, h)
		if c.QKVBias {
			add(SuffixQBias, q)
		}
		add(SuffixK, kv, h)
		if c.QKVBias {
			add(SuffixKBias, kv)
		}
		add(SuffixV, kv, h)
		if c.QKVBias {
			add(SuffixVBias, kv)
		}
		add(SuffixO, h, q)
		if c.OProjBias {
			add(SuffixOBias, h)
		}
		if c.QKNorm {
			add(SuffixQNorm, c.HeadDim)
			add(SuffixKNorm, c.HeadDim)
		}
		add(SuffixGate, c.IntermediateSize, h)
		add(SuffixUp, c.IntermediateSize, h)
		add(SuffixDown, h, c.IntermediateSize)
		add(SuffixInputNorm, h)
		add(SuffixPostAttnNorm, h)
	}
	out = append(out, NamedShape{NameFinalNorm, []int{h}})
	if !c.TieWordEmbeddings {
		out = append(out, NamedShape{NameLMHead, []int{c.VocabSize, h}})
	}
	return out
}

// ExpectedTensors maps every tensor name the architecture needs to its
// shape ([out, in] like torch.nn.Linear).
func ExpectedTensors(c Config) map[string][]int {
	order := StateDictOrder(c)
	m := make(map[string][]int, len(order))
	for _, t := range order {
		m[t.Name] = t.Shape
	}
	return m
}

// NumParams is the parameter count the config implies (tied embeddings
// counted once, as transformers' num_parameters does).
func (c Config) NumParams() int64 {
	var n int64
	for _, t := range StateDictOrder(c) {
		n += numel(t.Shape)
	}
	return n
}

func numel(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}
