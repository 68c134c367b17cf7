package cpu

import (
	"errors"
	"fmt"
	"math"
)

// errShape marks a tensor whose dtype, shape or byte length does not fit
// what the architecture needs.
var errShape = errors.New("tensor has the wrong dtype, shape or size")

// config is the subset of the checkpoint's config that the forward pass
// needs, in the units the kernels use.
type config struct {
	hidden, inter, layers, heads, kvHeads, headDim, vocab int
	eps                                                   float64
	qkvBias, oBias, qkNorm, tied                          bool
	// invFreq are the RoPE inverse frequencies (len headDim/2), with any
	// scaling (llama3) already applied by the model layer.
	invFreq []float64
}

func (c *config) validate() error {
	switch {
	case c.hidden <= 0, c.inter <= 0, c.layers <= 0, c.heads <= 0, c.kvHeads <= 0, c.headDim <= 0, c.vocab <= 0:
		return fmt.Errorf("cpu: config has a non-positive size (hidden %d, intermediate %d, layers %d, heads %d, kv heads %d, head dim %d, vocab %d)",
			c.hidden, c.inter, c.layers, c.heads, c.kvHeads, c.headDim, c.vocab)
	case c.heads%c.kvHeads != 0:
		return fmt.Errorf("cpu: %d attention heads are not a multiple of %d KV heads", c.heads, c.kvHeads)
	case c.headDim%2 != 0:
		return fmt.Errorf("cpu: head dim %d is odd; rotary embedding needs pairs", c.headDim)
	case len(c.invFreq) != c.headDim/2:
		return fmt.Errorf("cpu: %d RoPE frequencies for head dim %d (want %d)", len(c.invFreq), c.headDim, c.headDim/2)
	case !(c.eps > 0):
		return fmt.Errorf("cpu: RMSNorm epsilon %g is not positive", c.eps)
	}
	return nil
}

// ropeInvFreq is the plain (unscaled) RoPE frequency table, theta^(-2i/d).
// Tests and benchmarks use it; real checkpoints get theirs from
// model.Config.InvFreq, which also applies llama3 scaling.
func ropeInvFreq(headDim int, theta float64) []float64 {
	f := make([]float64, headDim/2)
	for i := range f {
		f[i] = 1 / math.Pow(theta, float64(2*i)/float64(headDim))
	}
	return f
}

// rawTensor is one tensor as the checkpoint stores it.
type rawTensor struct {
	dt    dtype
	shape []int
	data  []byte
}

// source looks a tensor up by its Hugging Face name. ok is false when the
// checkpoint has no such tensor (lm_head of a tied model).
type source func(name string) (t rawTensor, ok bool, err error)

type layerWeights struct {
	attnNorm, mlpNorm   []float32
	q, k, v, o          mat
	qBias, kBias, vBias []float32
	oBias               []float32
	qNorm, kNorm        []float32
	gate, up, down      mat
}

type weights struct {
	embed     mat
	lmHead    mat // the embedding when the model ties them
	finalNorm []float32
	layers    []layerWeights
}

// bytesPerToken is the weight bytes one decode step streams: every layer
// matrix plus the lm_head (the embedding lookup reads one row).
func (w *weights) bytesPerToken() int64 {
	n := w.lmHead.bytes()
	for i := range w.layers {
		l := &w.layers[i]
		for _, m := range []*mat{&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down} {
			n += m.bytes()
		}
	}
	return n
}

func getTensor(src source, name string) (rawTensor, error) {
	t, ok, err := src(name)
	if err != nil {
		return t, fmt.Errorf("cpu: tensor %s: %w", name, err)
	}
	if !ok {
		return t, fmt.Errorf("cpu: checkpoint has no tensor %s", name)
	}
	return t, nil
}

func loadMat(src source, name string, rows, cols int) (mat, error) {
	t, err := getTensor(src, name)
	if err != nil {
		return mat{}, err
	}
	if len(t.shape) != 2 || t.shape[0] != rows || t.shape[1] != cols {
		return mat{}, fmt.Errorf("cpu: tensor %s has shape %v, want [%d %d]: %w", name, t.shape, rows, cols, errShape)
	}
	m, err := newMat(t.dt, rows, cols, t.data)
	if err != nil {
		return m, fmt.Errorf("cpu: tensor %s (%s, %d bytes): %w", name, t.dt, len(t.data), err)
	}
	return m, nil
}

// loadVec reads a small vector (norm weight, bias) and converts it to
// float32: these are a few KB per layer, so a copy is cheaper than converting
// in every step.
func loadVec(src source, name string, n int) ([]float32, error) {
	t, err := getTensor(src, name)
	if err != nil {
		return nil, err
	}
	if len(t.shape) != 1 || t.shape[0] != n {
		return nil, fmt.Errorf("cpu: tensor %s has shape %v, want [%d]: %w", name, t.shape, n, errShape)
	}
	m, err := newMat(t.dt, 1, n, t.data)
	if err != nil {
		return nil, fmt.Errorf("cpu: tensor %s (%s, %d bytes): %w", name, t.dt, len(t.data), err)
	}
	out := make([]float32, n)
	copy(out, m.row(0, out))
	return out, nil
}

func loadWeights(c *config, src source) (*weights, error) {
	w := &weights{layers: make([]layerWeights, c.layers)}
	var err error
	if w.embed, err = loadMat(src, "model.embed_tokens.weight", c.vocab, c.hidden); err != nil {
		return nil, err
	}
	if w.finalNorm, err = loadVec(src, "model.norm.weight", c.hidden); err != nil {
		return nil, err
	}
	if c.tied {
		w.lmHead = w.embed
	} else if w.lmHead, err = loadMat(src, "lm_head.weight", c.vocab, c.hidden); err != nil {
		return nil, err
	}
	qDim, kvDim := c.heads*c.headDim, c.kvHeads*c.headDim
	for i := range w.layers {
		l := &w.layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		mats := []struct {
			m          *mat
			name       string
			rows, cols int
		}{
			{&l.q, "self_attn.q_proj.weight", qDim, c.hidden},
			{&l.k, "self_attn.k_proj.weight", kvDim, c.hidden},
			{&l.v, "self_attn.v_proj.weight", kvDim, c.hidden},
			{&l.o, "self_attn.o_proj.weight", c.hidden, qDim},
			{&l.gate, "mlp.gate_proj.weight", c.inter, c.hidden},
			{&l.up, "mlp.up_proj.weight", c.inter, c.hidden},
			{&l.down, "mlp.down_proj.weight", c.hidden, c.inter},
		}
		for _, m := range mats {
			if *m.m, err = loadMat(src, p+m.name, m.rows, m.cols); err != nil {
				return nil, err
			}
		}
		vecs := []struct {
			v    *[]float32
			name string
			n    int
			want bool
		}{
			{&l.attnNorm, "input_layernorm.weight", c.hidden, true},
			{&l.mlpNorm, "post_attention_layernorm.weight", c.hidden, true},
			{&l.qBias, "self_attn.q_proj.bias", qDim, c.qkvBias},
			{&l.kBias, "self_attn.k_proj.bias", kvDim, c.qkvBias},
			{&l.vBias, "self_attn.v_proj.bias", kvDim, c.qkvBias},
			{&l.oBias, "self_attn.o_proj.bias", c.hidden, c.oBias},
			{&l.qNorm, "self_attn.q_norm.weight", c.headDim, c.qkNorm},
			{&l.kNorm, "self_attn.k_norm.weight", c.headDim, c.qkNorm},
		}
		for _, v := range vecs {
			if !v.want {
				continue
			}
			if *v.v, err = loadVec(src, p+v.name, v.n); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}
