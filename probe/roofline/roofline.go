// Package roofline computes the fastest a batch of generation requests can
// be served on one GPU: the batch's arithmetic over the card's measured
// matrix rate and its bytes over the card's measured memory rate, step by
// step (docs/BENCH_SCHEMA.md, "Bound").
//
// The rates are floors measured on the same machine (`treni-top doctor
// --floors --json`: cuBLASLt's bf16 GEMM rate and the device copy rate),
// the model's shape comes from its Hugging Face config.json, and the batch
// is what the bench sent and the server counted. Nothing here depends on
// which server ran the batch, so the bound holds for vLLM as for the
// built-in engine.
package roofline

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Model is what the bound needs of a dense decoder-only transformer.
type Model struct {
	// Type is config.json's model_type (qwen3, qwen2, llama, …).
	Type         string `json:"type"`
	Layers       int    `json:"layers"`
	Hidden       int    `json:"hidden"`
	Intermediate int    `json:"intermediate"`
	Heads        int    `json:"heads"`
	KVHeads      int    `json:"kv_heads"`
	HeadDim      int    `json:"head_dim"`
	Vocab        int    `json:"vocab"`
	// Tied: the output projection is the embedding matrix.
	Tied bool `json:"tied"`
	// QKVBias: the q, k and v projections have biases (Qwen2).
	QKVBias bool `json:"qkv_bias"`
	// QKNorm: per-head RMSNorm of q and k (Qwen3).
	QKNorm bool `json:"qk_norm"`
	// DTypeBytes is the weights' (and the KV cache's) element size.
	DTypeBytes int `json:"dtype_bytes"`
}

// rawConfig is the part of a Hugging Face config.json the bound reads.
type rawConfig struct {
	ModelType         string  `json:"model_type"`
	NumLayers         *int    `json:"num_hidden_layers"`
	HiddenSize        *int    `json:"hidden_size"`
	IntermediateSize  *int    `json:"intermediate_size"`
	NumHeads          *int    `json:"num_attention_heads"`
	NumKVHeads        *int    `json:"num_key_value_heads"`
	HeadDim           *int    `json:"head_dim"`
	VocabSize         *int    `json:"vocab_size"`
	TieWordEmbeddings *bool   `json:"tie_word_embeddings"`
	AttentionBias     *bool   `json:"attention_bias"`
	TorchDType        *string `json:"torch_dtype"`
	DType             *string `json:"dtype"`
	// Mixture-of-experts configs name their experts; a dense bound would
	// count every expert in every step.
	NumExperts      *int `json:"num_experts"`
	NumLocalExperts *int `json:"num_local_experts"`
}

// ReadModel reads the model's shape from path: a config.json, or the
// checkpoint folder holding one.
func ReadModel(path string) (Model, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Model{}, fmt.Errorf("read the model's config: %w (give the checkpoint folder or its config.json)", err)
	}
	m, err := ParseModel(data)
	if err != nil {
		return Model{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ParseModel reads the model's shape from config.json's bytes.
func ParseModel(data []byte) (Model, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return Model{}, fmt.Errorf("config.json is not a JSON object: %w", err)
	}
	if r.NumExperts != nil || r.NumLocalExperts != nil {
		return Model{}, errors.New("a mixture-of-experts model: the bound covers dense models only")
	}
	m := Model{Type: r.ModelType}
	var missing []string
	need := func(name string, p *int, dst *int) {
		if p == nil {
			missing = append(missing, name)
			return
		}
		*dst = *p
	}
	need("num_hidden_layers", r.NumLayers, &m.Layers)
	need("hidden_size", r.HiddenSize, &m.Hidden)
	need("intermediate_size", r.IntermediateSize, &m.Intermediate)
	need("num_attention_heads", r.NumHeads, &m.Heads)
	need("vocab_size", r.VocabSize, &m.Vocab)
	if len(missing) > 0 {
		return Model{}, fmt.Errorf("config.json lacks %s", strings.Join(missing, ", "))
	}
	m.KVHeads = m.Heads
	if r.NumKVHeads != nil {
		m.KVHeads = *r.NumKVHeads
	}
	if m.Heads > 0 {
		m.HeadDim = m.Hidden / m.Heads
	}
	if r.HeadDim != nil {
		m.HeadDim = *r.HeadDim
	}
	// Qwen2, Qwen3 and Llama configs default to untied output weights.
	m.Tied = r.TieWordEmbeddings != nil && *r.TieWordEmbeddings
	// Qwen2 always has q/k/v biases; others when attention_bias says so
	// (Llama's also puts one on o_proj: hidden values, negligible here).
	m.QKVBias = m.Type == "qwen2" || (r.AttentionBias != nil && *r.AttentionBias)
	m.QKNorm = m.Type == "qwen3"
	dt := ""
	if r.TorchDType != nil {
		dt = *r.TorchDType
	} else if r.DType != nil {
		dt = *r.DType
	}
	switch dt {
	case "bfloat16", "float16", "":
		m.DTypeBytes = 2 // served in 16 bits when config.json does not say
	case "float32":
		m.DTypeBytes = 4
	default:
		return Model{}, fmt.Errorf("config.json's dtype %q: the bound knows bfloat16, float16 and float32", dt)
	}
	return m, m.Validate()
}

// maxSize bounds every size of a model: far beyond any real one, and
// small enough that no product of sizes the bound takes overflows.
const maxSize = 1 << 24

// Validate checks that every size is positive and sane, and the heads
// divide evenly.
func (m Model) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"num_hidden_layers", m.Layers}, {"hidden_size", m.Hidden}, {"intermediate_size", m.Intermediate},
		{"num_attention_heads", m.Heads}, {"num_key_value_heads", m.KVHeads}, {"head_dim", m.HeadDim},
		{"vocab_size", m.Vocab}, {"dtype bytes", m.DTypeBytes}} {
		if f.v <= 0 || f.v > maxSize {
			return fmt.Errorf("model %s is %d; want 1 to %d", f.name, f.v, maxSize)
		}
	}
	if m.Heads%m.KVHeads != 0 {
		return fmt.Errorf("model has %d attention heads and %d KV heads; want a multiple", m.Heads, m.KVHeads)
	}
	return nil
}

// layerMatmulParams are one layer's projection weights: q, k, v, o and
// the gated MLP's gate, up and down.
func (m Model) layerMatmulParams() float64 {
	q := float64(m.Heads) * float64(m.HeadDim)
	kv := float64(m.KVHeads) * float64(m.HeadDim)
	h, f := float64(m.Hidden), float64(m.Intermediate)
	return h*q + 2*h*kv + q*h + 3*h*f
}

// layerOtherParams are one layer's norms and biases.
func (m Model) layerOtherParams() float64 {
	p := 2 * float64(m.Hidden) // input and post-attention RMSNorm
	if m.QKNorm {
		p += 2 * float64(m.HeadDim)
	}
	if m.QKVBias {
		p += (float64(m.Heads) + 2*float64(m.KVHeads)) * float64(m.HeadDim)
	}
	return p
}

// Params is every parameter of the checkpoint: the embedding, each
// layer, the final norm and, unless tied, the output projection.
func (m Model) Params() float64 {
	emb := float64(m.Vocab) * float64(m.Hidden)
	p := emb + float64(m.Layers)*(m.layerMatmulParams()+m.layerOtherParams()) + float64(m.Hidden)
	if !m.Tied {
		p += emb
	}
	return p
}

// StepWeightBytes is what one forward step must read of the weights:
// every layer, the final norm and the output projection. The embedding
// table is gathered (one row a token), not read, unless it is also the
// output projection.
func (m Model) StepWeightBytes() float64 {
	p := float64(m.Layers)*(m.layerMatmulParams()+m.layerOtherParams()) + float64(m.Hidden) + float64(m.Vocab)*float64(m.Hidden)
	return p * float64(m.DTypeBytes)
}

// KVBytesPerToken is one position's keys and values over all layers.
func (m Model) KVBytesPerToken() float64 {
	return 2 * float64(m.Layers) * float64(m.KVHeads) * float64(m.HeadDim) * float64(m.DTypeBytes)
}

// tokenFLOPs are the projections' and the output projection's FLOPs for
// one token whose logits are computed (2 a multiply-add).
func (m Model) tokenFLOPs(logits bool) float64 {
	f := 2 * float64(m.Layers) * m.layerMatmulParams()
	if logits {
		f += 2 * float64(m.Vocab) * float64(m.Hidden)
	}
	return f
}

// attentionFLOPs are one query's attention over ctx positions, all
// layers: q·kᵀ and the weighted sum of v, 2 FLOPs a multiply-add each.
func (m Model) attentionFLOPs(ctx float64) float64 {
	return 4 * float64(m.Layers) * float64(m.Heads) * float64(m.HeadDim) * ctx
}

// Rates are the card's measured ceilings.
type Rates struct {
	// MatmulTFLOPS is the bf16 matrix rate (10¹² FLOP/s).
	MatmulTFLOPS float64 `json:"matmul_tflops"`
	// MemoryGBps is the device memory rate (10⁹ bytes/s), counted as the
	// device copy counts it: bytes read plus bytes written.
	MemoryGBps float64 `json:"memory_gb_per_s"`
	// Device names the card, when the floors said.
	Device string `json:"device,omitempty"`
}

// Validate checks that both rates are positive and finite.
func (r Rates) Validate() error {
	if !(r.MatmulTFLOPS > 0) || math.IsInf(r.MatmulTFLOPS, 0) {
		return fmt.Errorf("matrix rate %g TFLOP/s; want > 0 (treni-top doctor --floors measures it as gemm_bf16.tflops)", r.MatmulTFLOPS)
	}
	if !(r.MemoryGBps > 0) || math.IsInf(r.MemoryGBps, 0) {
		return fmt.Errorf("memory rate %g GB/s; want > 0 (treni-top doctor --floors measures it as d2d_gb_per_s)", r.MemoryGBps)
	}
	return nil
}

// rawFloors is the part of `treni-top doctor --floors --json` the bound
// reads; the floors sit under "floors" there, or at the top level.
type rawFloors struct {
	Device string  `json:"device"`
	D2D    float64 `json:"d2d_gb_per_s"`
	Gemm   *struct {
		TFLOPS float64 `json:"tflops"`
	} `json:"gemm_bf16"`
	GemmError string     `json:"gemm_bf16_error"`
	Floors    *rawFloors `json:"floors"`
}

// ReadFloors reads the rates from a `treni-top doctor --floors --json`
// report.
func ReadFloors(path string) (Rates, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Rates{}, fmt.Errorf("read the floors: %w (write them with treni-top doctor --floors --json > FILE on the server's machine)", err)
	}
	r, err := ParseFloors(data)
	if err != nil {
		return Rates{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ParseFloors reads the rates from a doctor --floors --json report's bytes.
func ParseFloors(data []byte) (Rates, error) {
	var f rawFloors
	if err := json.Unmarshal(data, &f); err != nil {
		return Rates{}, fmt.Errorf("not a treni-top doctor --floors --json report: %w", err)
	}
	if f.Floors != nil {
		f = *f.Floors
	}
	if f.Gemm == nil {
		why := "it has no gemm_bf16 (written by an older treni-top?)"
		if f.GemmError != "" {
			why = "the GEMM was not measured: " + f.GemmError
		}
		return Rates{}, fmt.Errorf("no matrix rate in the floors: %s", why)
	}
	r := Rates{MatmulTFLOPS: f.Gemm.TFLOPS, MemoryGBps: f.D2D, Device: f.Device}
	return r, r.Validate()
}

// Batch is a set of equal requests that arrive together: Streams prompts
// of PromptTokens each, each generating OutputTokens.
type Batch struct {
	Streams      int `json:"streams"`
	PromptTokens int `json:"prompt_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Bound is the fastest the batch can be served: every prompt prefilled
// (its FLOPs over the matrix rate, or its bytes over the memory rate if
// those take longer), then every decode step of the whole batch, the last
// prompt's decode starting after its prefill. A decode step reads every
// weight once and each stream's keys and values so far; it takes those
// bytes over the memory rate, or its FLOPs over the matrix rate if longer.
type Bound struct {
	Batch
	Rates
	// PrefillTFLOP is the prefill's arithmetic: the projections of every
	// prompt token, causal attention over each prompt, and one row of
	// logits a prompt (its first output token).
	PrefillTFLOP float64 `json:"prefill_tflop"`
	PrefillMS    float64 `json:"prefill_ms"`
	// DecodeSteps is OutputTokens − 1: the first token comes from the
	// prefill.
	DecodeSteps int `json:"decode_steps"`
	// StepWeightGB is what a step reads of the weights; DecodeKVGB the
	// keys and values all steps read together.
	StepWeightGB float64 `json:"step_weight_gb"`
	DecodeKVGB   float64 `json:"decode_kv_gb"`
	DecodeMS     float64 `json:"decode_ms"`
	// DecodeComputeSteps counts steps whose FLOPs, not bytes, set their
	// time.
	DecodeComputeSteps int     `json:"decode_compute_steps"`
	TotalMS            float64 `json:"total_ms"`
	// OutputTokPerS is Streams × OutputTokens over TotalMS.
	OutputTokPerS float64 `json:"output_tok_per_s"`
}

// Burst is the bound of b on a card of rates r serving m.
func Burst(m Model, r Rates, b Batch) (Bound, error) {
	if err := m.Validate(); err != nil {
		return Bound{}, err
	}
	if err := r.Validate(); err != nil {
		return Bound{}, err
	}
	if b.Streams < 1 || b.PromptTokens < 1 || b.OutputTokens < 1 {
		return Bound{}, fmt.Errorf("batch of %d streams, %d prompt tokens, %d output tokens; want each ≥ 1", b.Streams, b.PromptTokens, b.OutputTokens)
	}
	flopRate := r.MatmulTFLOPS * 1e12
	byteRate := r.MemoryGBps * 1e9
	s, p := float64(b.Streams), float64(b.PromptTokens)
	w := m.StepWeightBytes()
	kv := m.KVBytesPerToken()
	out := Bound{Batch: b, Rates: r, DecodeSteps: b.OutputTokens - 1, StepWeightGB: w / 1e9}

	// Prefill: positions 0…P−1 of each prompt, query i attending to the
	// i+1 positions up to itself: P(P+1)/2 query-key pairs.
	flops := s * (p*m.tokenFLOPs(false) + 2*float64(m.Vocab)*float64(m.Hidden) + m.attentionFLOPs(p*(p+1)/2))
	bytes := w + s*p*kv // the weights once, every prompt position's K and V written
	out.PrefillTFLOP = flops / 1e12
	out.PrefillMS = 1e3 * math.Max(flops/flopRate, bytes/byteRate)

	// Decode step j (1…O−1) feeds each stream's token j−1 of its output,
	// at position P+j−1: it attends to P+j positions, its own included.
	var kvBytes float64
	for j := 1; j <= out.DecodeSteps; j++ {
		ctx := p + float64(j)
		stepKV := s * ctx * kv
		stepFlops := s * (m.tokenFLOPs(true) + m.attentionFLOPs(ctx))
		tb, tf := (w+stepKV)/byteRate, stepFlops/flopRate
		if tf > tb {
			out.DecodeComputeSteps++
		}
		out.DecodeMS += 1e3 * math.Max(tb, tf)
		kvBytes += stepKV
	}
	out.DecodeKVGB = kvBytes / 1e9
	out.TotalMS = out.PrefillMS + out.DecodeMS
	out.OutputTokPerS = s * float64(b.OutputTokens) / (out.TotalMS / 1e3)
	return out, nil
}
