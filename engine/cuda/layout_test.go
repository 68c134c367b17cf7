package cuda

import (
	"fmt"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/engine/model"
)

// planFor is a backend with ck's config and dimensions, as Load sets them,
// and its weight plan; planWeights touches no device.
func planFor(t *testing.T, ck *model.Checkpoint) (*Backend, *weightPlan, error) {
	t.Helper()
	c := ck.Config
	b := &Backend{cfg: c}
	b.qDim, b.kvDim = c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	p, err := b.planWeights(ck)
	return b, p, err
}

// TestPlanWeights: every matrix is placed once, as bf16, at a 256-byte
// aligned offset inside the allocation, q/k/v and gate/up back to back;
// every norm weight and bias lands in the small vectors once, each
// vector 256-byte aligned, and its device pointer is one of the layer's.
func TestPlanWeights(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen2", "llama"} {
		t.Run(arch, func(t *testing.T) {
			ck := synthCheckpoint(t, arch, "tiny", 1, "")
			defer ck.Close()
			c := ck.Config
			b, p, err := planFor(t, ck)
			if err != nil {
				t.Fatal(err)
			}
			bf16 := func(tn *model.Tensor) int64 { return int64(len(tn.Data)/tn.DType.Size()) * 2 }
			at := map[string]int64{}
			var end int64
			for _, m := range p.mats {
				if _, dup := at[m.t.Name]; dup {
					t.Errorf("%s placed twice", m.t.Name)
				}
				at[m.t.Name] = m.off
				if m.off < end {
					t.Errorf("%s at %d overlaps the matrix before it (ends at %d)", m.t.Name, m.off, end)
				}
				end = m.off + bf16(m.t)
			}
			if want := 1 + 7*c.NumLayers; len(p.mats) != want {
				t.Errorf("%d matrices placed, want %d", len(p.mats), want)
			}
			if p.wsize < end || p.wsize%256 != 0 {
				t.Errorf("allocation of %d bytes for matrices ending at %d", p.wsize, end)
			}
			if p.embed != at["model.embed_tokens.weight"] || p.lmHead != p.embed {
				t.Errorf("embed at %d, LM head at %d (tied), placed at %d", p.embed, p.lmHead, at["model.embed_tokens.weight"])
			}
			for i, lo := range p.layers {
				pre := fmt.Sprintf("model.layers.%d.", i)
				name := func(s string) string { return pre + s }
				for off, parts := range map[int64][]string{
					lo.qkv: {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
					lo.o:   {"self_attn.o_proj.weight"}, lo.gu: {"mlp.gate_proj.weight", "mlp.up_proj.weight"}, lo.down: {"mlp.down_proj.weight"},
				} {
					if off%256 != 0 {
						t.Errorf("layer %d: %s at %d, not 256-byte aligned", i, parts[0], off)
					}
					for _, s := range parts {
						if at[name(s)] != off {
							t.Errorf("layer %d: %s at %d, want %d", i, s, at[name(s)], off)
						}
						off += bf16(ck.Tensors[name(s)])
					}
				}
			}
			// The small vectors: each part once, in order, inside its vector.
			smalls := 1 + c.NumLayers*2
			if c.QKVBias {
				smalls += c.NumLayers
			}
			if c.OProjBias {
				smalls += c.NumLayers
			}
			if c.QKNorm {
				smalls += 2 * c.NumLayers
			}
			if len(p.refs) != smalls {
				t.Errorf("%d small vectors, want %d", len(p.refs), smalls)
			}
			layerPtrs := map[*DevicePtr]bool{&b.finalNorm: true}
			for i := range b.layers {
				l := &b.layers[i]
				for _, d := range []*DevicePtr{&l.attnNorm, &l.mlpNorm, &l.qkvBias, &l.oBias, &l.qNorm, &l.kNorm} {
					layerPtrs[d] = true
				}
			}
			for _, r := range p.refs {
				if !layerPtrs[r.dst] || r.off%64 != 0 {
					t.Errorf("small vector at element %d for a pointer that is not the backend's (or not 256-byte aligned)", r.off)
				}
			}
			seen := map[string]bool{}
			next := 0
			for _, part := range p.parts {
				if len(part.t.Shape) != 1 || seen[part.t.Name] || part.off < next {
					t.Errorf("small part %s (shape %v) at element %d: twice, not a vector, or overlapping", part.t.Name, part.t.Shape, part.off)
				}
				seen[part.t.Name] = true
				next = part.off + len(part.t.Data)/part.t.DType.Size()
			}
			if p.smallsN < next {
				t.Errorf("small vectors of %d elements, parts end at %d", p.smallsN, next)
			}
			for n, tn := range ck.Tensors {
				if _, ok := at[n]; !ok && !seen[n] {
					t.Errorf("tensor %s (shape %v) placed nowhere", n, tn.Shape)
				}
			}
		})
	}
}

// TestPlanWeightsRefuses names the tensor that is missing or misshapen.
func TestPlanWeightsRefuses(t *testing.T) {
	ck := synthCheckpoint(t, "qwen2", "tiny", 1, "")
	defer ck.Close()
	ck.Config.TieWordEmbeddings = false
	if _, _, err := planFor(t, ck); err == nil || !strings.Contains(err.Error(), "no tensor lm_head.weight") {
		t.Errorf("untied without an LM head: %v", err)
	}
	ck.Config.TieWordEmbeddings = true
	tensors := ck.Tensors
	for _, name := range []string{"model.layers.1.self_attn.v_proj.bias", "model.layers.0.mlp.down_proj.weight", "model.norm.weight"} {
		ck.Tensors = map[string]*model.Tensor{}
		for n, tn := range tensors {
			if n != name {
				ck.Tensors[n] = tn
			}
		}
		if _, _, err := planFor(t, ck); err == nil || !strings.Contains(err.Error(), "has no tensor "+name) {
			t.Errorf("without %s: %v", name, err)
		}
	}
	ck.Tensors = map[string]*model.Tensor{}
	for n, tn := range tensors {
		ck.Tensors[n] = tn
	}
	short := *tensors["model.layers.0.self_attn.q_proj.bias"]
	short.Shape = []int{short.Shape[0] / 2}
	short.Data = short.Data[:len(short.Data)/2]
	ck.Tensors[short.Name] = &short
	if _, _, err := planFor(t, ck); err == nil || !strings.Contains(err.Error(), "tensor "+short.Name+" has shape") {
		t.Errorf("a short q_proj bias: %v", err)
	}
	ck.Tensors = tensors
}
