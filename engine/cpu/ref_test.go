package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
)

// This file holds the test fixtures: a random in-memory checkpoint of each
// architecture, and a float64 reference forward pass written as plainly as
// possible (one sequence, contiguous KV, no batching, no tiling) to check
// the backend against.

type testArch struct {
	name    string
	dt      dtype
	qkvBias bool
	oBias   bool // llama attention_bias
	qkNorm  bool
	tied    bool
	headDim int // deliberately ≠ hidden/heads for qwen3, as in real Qwen3
	invFreq func(headDim int) []float64
}

// llama3InvFreq applies llama3 rope scaling the way HF does, so the Llama
// fixture exercises non-uniform frequencies.
func llama3InvFreq(headDim int) []float64 {
	f := ropeInvFreq(headDim, 500000)
	const factor, lowFF, highFF, orig = 8.0, 1.0, 4.0, 64.0
	lowWL, highWL := orig/lowFF, orig/highFF
	for i, v := range f {
		wl := 2 * math.Pi / v
		switch {
		case wl < highWL:
		case wl > lowWL:
			f[i] = v / factor
		default:
			sm := (orig/wl - lowFF) / (highFF - lowFF)
			f[i] = (1-sm)*v/factor + sm*v
		}
	}
	return f
}

var testArches = []testArch{
	{name: "qwen3", dt: dtBF16, qkNorm: true, tied: true, headDim: 32, invFreq: func(d int) []float64 { return ropeInvFreq(d, 1e6) }},
	{name: "qwen2", dt: dtF16, qkvBias: true, tied: false, headDim: 16, invFreq: func(d int) []float64 { return ropeInvFreq(d, 1e6) }},
	{name: "llama", dt: dtF32, qkvBias: true, oBias: true, tied: false, headDim: 16, invFreq: llama3InvFreq},
}

// testModel is an in-memory checkpoint.
type testModel struct {
	cfg     config
	tensors map[string]rawTensor
}

func (m *testModel) source() source {
	return func(name string) (rawTensor, bool, error) {
		t, ok := m.tensors[name]
		return t, ok, nil
	}
}

// f32ToBF16 rounds to nearest even, as torch does.
func f32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// f32ToF16 handles the normal range and flushes tiny values to zero, which
// is all the fixtures need (weights are O(0.01–1)).
func f32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int(u>>23&0xff) - 127 + 15
	man := u & 0x7fffff
	if exp <= 0 {
		return sign
	}
	// Round to nearest even on the 13 dropped bits.
	man += 0xfff + (man>>13)&1
	if man&0x800000 != 0 {
		man = 0
		exp++
	}
	if exp >= 31 {
		return sign | 0x7c00
	}
	return sign | uint16(exp)<<10 | uint16(man>>13)
}

func encode(dt dtype, vals []float32) []byte {
	out := make([]byte, len(vals)*dt.size())
	for i, v := range vals {
		switch dt {
		case dtF32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		case dtBF16:
			binary.LittleEndian.PutUint16(out[2*i:], f32ToBF16(v))
		case dtF16:
			binary.LittleEndian.PutUint16(out[2*i:], f32ToF16(v))
		}
	}
	return out
}

// newTestModel makes a random model: tiny by default, any shape for the
// benchmarks. Weights are scaled by 1/sqrt(fan-in) so activations stay O(1)
// through the layers and the logits are far from degenerate.
func newTestModel(a testArch, hidden, inter, layers, heads, kvHeads, vocab int, seed uint64) *testModel {
	c := config{
		hidden: hidden, inter: inter, layers: layers, heads: heads, kvHeads: kvHeads,
		headDim: a.headDim, vocab: vocab, eps: 1e-6,
		qkvBias: a.qkvBias, oBias: a.oBias, qkNorm: a.qkNorm, tied: a.tied,
		invFreq: a.invFreq(a.headDim),
	}
	m := &testModel{cfg: c, tensors: map[string]rawTensor{}}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	put := func(name string, shape []int, scale, offset float64) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(offset + scale*rng.NormFloat64())
		}
		m.tensors[name] = rawTensor{dt: a.dt, shape: shape, data: encode(a.dt, vals)}
	}
	qDim, kvDim := heads*a.headDim, kvHeads*a.headDim
	put("model.embed_tokens.weight", []int{vocab, hidden}, 1, 0)
	put("model.norm.weight", []int{hidden}, 0.1, 1)
	if !a.tied {
		put("lm_head.weight", []int{vocab, hidden}, 1/math.Sqrt(float64(hidden)), 0)
	}
	for i := 0; i < layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		put(p+"input_layernorm.weight", []int{hidden}, 0.1, 1)
		put(p+"post_attention_layernorm.weight", []int{hidden}, 0.1, 1)
		put(p+"self_attn.q_proj.weight", []int{qDim, hidden}, 2/math.Sqrt(float64(hidden)), 0)
		put(p+"self_attn.k_proj.weight", []int{kvDim, hidden}, 2/math.Sqrt(float64(hidden)), 0)
		put(p+"self_attn.v_proj.weight", []int{kvDim, hidden}, 1/math.Sqrt(float64(hidden)), 0)
		put(p+"self_attn.o_proj.weight", []int{hidden, qDim}, 1/math.Sqrt(float64(qDim)), 0)
		put(p+"mlp.gate_proj.weight", []int{inter, hidden}, 1/math.Sqrt(float64(hidden)), 0)
		put(p+"mlp.up_proj.weight", []int{inter, hidden}, 1/math.Sqrt(float64(hidden)), 0)
		put(p+"mlp.down_proj.weight", []int{hidden, inter}, 1/math.Sqrt(float64(inter)), 0)
		if a.qkvBias {
			put(p+"self_attn.q_proj.bias", []int{qDim}, 0.5, 0)
			put(p+"self_attn.k_proj.bias", []int{kvDim}, 0.5, 0)
			put(p+"self_attn.v_proj.bias", []int{kvDim}, 0.5, 0)
		}
		if a.oBias {
			put(p+"self_attn.o_proj.bias", []int{hidden}, 0.5, 0)
		}
		if a.qkNorm {
			put(p+"self_attn.q_norm.weight", []int{a.headDim}, 0.1, 1)
			put(p+"self_attn.k_norm.weight", []int{a.headDim}, 0.1, 1)
		}
	}
	return m
}

// decode64 reads a stored tensor as float64, independently of the backend's
// conversion code (f16 via the textbook formula).
func decode64(t rawTensor) []float64 {
	n := len(t.data) / t.dt.size()
	out := make([]float64, n)
	for i := range out {
		switch t.dt {
		case dtF32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(t.data[4*i:])))
		case dtBF16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.data[2*i:])) << 16))
		case dtF16:
			h := binary.LittleEndian.Uint16(t.data[2*i:])
			sign := 1.0
			if h&0x8000 != 0 {
				sign = -1
			}
			e := int(h>>10) & 0x1f
			m := float64(h & 0x3ff)
			switch {
			case e == 0:
				out[i] = sign * m * math.Pow(2, -24)
			case e == 31:
				out[i] = math.Inf(int(sign))
			default:
				out[i] = sign * (1 + m/1024) * math.Pow(2, float64(e-15))
			}
		}
	}
	return out
}

// reference is the float64 forward pass of one whole sequence. It returns
// the logits at every position.
func (m *testModel) reference(tokens []int32) [][]float64 {
	c := m.cfg
	w := func(name string) []float64 { return decode64(m.tensors[name]) }
	H, hd := c.hidden, c.headDim
	qDim, kvDim := c.heads*hd, c.kvHeads*hd
	n := len(tokens)

	// matvec: y = W x for torch Linear layout W [out, in].
	matvec := func(W []float64, x []float64, out int) []float64 {
		y := make([]float64, out)
		for r := 0; r < out; r++ {
			var s float64
			for k := range x {
				s += W[r*len(x)+k] * x[k]
			}
			y[r] = s
		}
		return y
	}
	norm := func(x, wt []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		sc := 1 / math.Sqrt(ss/float64(len(x))+c.eps)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * sc * wt[i]
		}
		return y
	}
	rope := func(v []float64, pos int) {
		half := hd / 2
		for i := 0; i < half; i++ {
			a := float64(pos) * c.invFreq[i]
			x1, x2 := v[i], v[i+half]
			v[i] = x1*math.Cos(a) - x2*math.Sin(a)
			v[i+half] = x2*math.Cos(a) + x1*math.Sin(a)
		}
	}

	emb := w("model.embed_tokens.weight")
	x := make([][]float64, n)
	for i, tok := range tokens {
		x[i] = append([]float64(nil), emb[int(tok)*H:(int(tok)+1)*H]...)
	}
	for li := 0; li < c.layers; li++ {
		p := fmt.Sprintf("model.layers.%d.", li)
		wq, wk, wv, wo := w(p+"self_attn.q_proj.weight"), w(p+"self_attn.k_proj.weight"), w(p+"self_attn.v_proj.weight"), w(p+"self_attn.o_proj.weight")
		keys := make([][]float64, n)
		vals := make([][]float64, n)
		qs := make([][]float64, n)
		for i := 0; i < n; i++ {
			h := norm(x[i], w(p+"input_layernorm.weight"))
			q, k, v := matvec(wq, h, qDim), matvec(wk, h, kvDim), matvec(wv, h, kvDim)
			if c.qkvBias {
				for j, b := range w(p + "self_attn.q_proj.bias") {
					q[j] += b
				}
				for j, b := range w(p + "self_attn.k_proj.bias") {
					k[j] += b
				}
				for j, b := range w(p + "self_attn.v_proj.bias") {
					v[j] += b
				}
			}
			for hh := 0; hh < c.heads; hh++ {
				if c.qkNorm {
					copy(q[hh*hd:(hh+1)*hd], norm(q[hh*hd:(hh+1)*hd], w(p+"self_attn.q_norm.weight")))
				}
				rope(q[hh*hd:(hh+1)*hd], i)
			}
			for g := 0; g < c.kvHeads; g++ {
				if c.qkNorm {
					copy(k[g*hd:(g+1)*hd], norm(k[g*hd:(g+1)*hd], w(p+"self_attn.k_norm.weight")))
				}
				rope(k[g*hd:(g+1)*hd], i)
			}
			qs[i], keys[i], vals[i] = q, k, v
		}
		group := c.heads / c.kvHeads
		for i := 0; i < n; i++ {
			att := make([]float64, qDim)
			for hh := 0; hh < c.heads; hh++ {
				g := hh / group
				q := qs[i][hh*hd : (hh+1)*hd]
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					var d float64
					for e := 0; e < hd; e++ {
						d += q[e] * keys[j][g*hd+e]
					}
					sc[j] = d / math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for e := 0; e < hd; e++ {
						att[hh*hd+e] += sc[j] / sum * vals[j][g*hd+e]
					}
				}
			}
			o := matvec(wo, att, H)
			if c.oBias {
				for j, b := range w(p + "self_attn.o_proj.bias") {
					o[j] += b
				}
			}
			for e := range x[i] {
				x[i][e] += o[e]
			}
			h := norm(x[i], w(p+"post_attention_layernorm.weight"))
			gate, up := matvec(w(p+"mlp.gate_proj.weight"), h, c.inter), matvec(w(p+"mlp.up_proj.weight"), h, c.inter)
			act := make([]float64, c.inter)
			for e := range act {
				act[e] = gate[e] / (1 + math.Exp(-gate[e])) * up[e]
			}
			d := matvec(w(p+"mlp.down_proj.weight"), act, H)
			for e := range x[i] {
				x[i][e] += d[e]
			}
		}
	}
	head := "lm_head.weight"
	if c.tied {
		head = "model.embed_tokens.weight"
	}
	lm := w(head)
	out := make([][]float64, n)
	for i := range x {
		out[i] = matvec(lm, norm(x[i], w("model.norm.weight")), c.vocab)
	}
	return out
}
