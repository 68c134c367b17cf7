package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/treni-top/treni-top/engine/model"
)

// Where every weight lives on the device, and the copies that put it there
// (the copies themselves: staged.go, or mapped.go for the mapped path).

// uploadStats describes the weight upload.
type uploadStats struct {
	bytes, converted int64
	tensors, chunks  int
	registered       bool
	fallback         string // why the staged path was not taken
}

// copyJob is one tensor's bytes headed for the device.
type copyJob struct {
	src  []byte // in the checkpoint's mmap (the mapped path reads these)
	file string
	off  int64 // src's offset in file (the staged path reads these)
	n    int
	dst  DevicePtr
}

// layout places every weight on the device and returns the copies still
// to do. Matrices go into one allocation at 256-byte aligned offsets, q/k/v
// and gate/up fused by placing their rows back to back; bf16 matrices are
// left to the caller as copy jobs (staged or mapped, see upload.go). finish,
// which the caller runs once those copies are under way, converts and
// copies the rest on the host: the norm weights and biases (f32, one copy)
// and the matrices of f16/f32 checkpoints. Nothing here reads weight bytes.
func (b *Backend) layout(ck *model.Checkpoint) (st uploadStats, jobs []copyJob, finish func(*uploadStats) error, err error) {
	p, err := b.planWeights(ck)
	if err != nil {
		return st, nil, nil, err
	}
	inv := b.cfg.InvFreq()
	if err := b.bindWeights(p, len(inv)); err != nil {
		return st, nil, nil, err
	}
	// Matrices: bf16 left to the caller's copy jobs, others to finish.
	var convert []placedMat
	for _, m := range p.mats {
		dst := b.weights + DevicePtr(m.off)
		st.tensors++
		if m.t.DType == model.BF16 {
			jobs = append(jobs, copyJob{src: m.t.Data, file: m.t.File, off: m.t.Offset, n: len(m.t.Data), dst: dst})
			st.bytes += int64(len(m.t.Data))
			continue
		}
		convert = append(convert, m)
	}
	finish = func(st *uploadStats) error { return b.copyHostWeights(p, inv, convert, st) }
	return st, jobs, finish, nil
}

// weightPlan is where layout puts every weight, before any device memory
// is allocated: the matrices at offsets in one allocation (wsize bytes),
// the small f32 vectors (norm weights, biases; smallsN elements) at
// offsets in another, uploaded in one copy by finish. Only their places
// are decided here, so that no byte of the weight files is read before
// the bulk upload has started (on a cold page cache, faulting these
// scattered tensors in through the mapping took 0.8 s on the H100 host).
type weightPlan struct {
	mats    []placedMat
	wsize   int64
	smallsN int         // f32 elements
	refs    []smallRef  // the device pointers that address a small vector
	parts   []smallPart // the tensors that make up the small vectors
	embed   int64       // offset of model.embed_tokens.weight
	lmHead  int64       // offset of the LM head (embed when tied)
	layers  []layerOffs // each layer's matrices
}

// placedMat is a matrix and its offset in the weight allocation.
type placedMat struct {
	t   *model.Tensor
	off int64
}

// smallRef is a device pointer to set to a small vector at off (f32
// elements into the small vectors' allocation).
type smallRef struct {
	dst *DevicePtr
	off int
}

// smallPart is a tensor copied, as f32, to off in the small vectors.
type smallPart struct {
	t   *model.Tensor
	off int
}

// layerOffs are a layer's matrices' offsets in the weight allocation.
type layerOffs struct{ qkv, o, gu, down int64 }

// place puts t, as bf16, at the next 256-byte aligned offset.
func (p *weightPlan) place(t *model.Tensor) int64 {
	off := p.wsize
	p.wsize += (int64(len(t.Data)/t.DType.Size())*2 + 255) &^ 255
	p.mats = append(p.mats, placedMat{t, off})
	return off
}

// placeFused puts the parts of a fused matrix back to back with no gap
// (each part's row count times the row size is a multiple of 2 bytes;
// alignment only matters at the start).
func (p *weightPlan) placeFused(ts ...*model.Tensor) int64 {
	off := p.wsize
	for _, t := range ts {
		p.mats = append(p.mats, placedMat{t, p.wsize})
		p.wsize += int64(len(t.Data)/t.DType.Size()) * 2
	}
	p.wsize = (p.wsize + 255) &^ 255
	return off
}

// addSmall places ts back to back as one small vector that dst will
// address.
func (p *weightPlan) addSmall(dst *DevicePtr, ts ...*model.Tensor) {
	p.refs = append(p.refs, smallRef{dst, p.smallsN})
	for _, t := range ts {
		p.parts = append(p.parts, smallPart{t, p.smallsN})
		p.smallsN += len(t.Data) / t.DType.Size()
	}
	p.smallsN = (p.smallsN + 63) &^ 63 // 256-byte alignment
}

// planWeights checks that ck holds every tensor of b's config with its
// shape and places them (weightPlan). The small vectors' places point
// into b.layers, which it makes unless a level-2 wake lays the weights
// out again over the same layers (their KV pointers kept).
func (b *Backend) planWeights(ck *model.Checkpoint) (*weightPlan, error) {
	c := b.cfg
	H := c.HiddenSize
	p := &weightPlan{}
	embedT, err := checkedTensor(ck, "model.embed_tokens.weight", c.VocabSize, H)
	if err != nil {
		return nil, err
	}
	p.embed = p.place(embedT)
	p.lmHead = p.embed
	if !c.TieWordEmbeddings {
		lm, err := checkedTensor(ck, "lm_head.weight", c.VocabSize, H)
		if err != nil {
			return nil, err
		}
		p.lmHead = p.place(lm)
	}
	fn, err := checkedTensor(ck, "model.norm.weight", H)
	if err != nil {
		return nil, err
	}
	p.addSmall(&b.finalNorm, fn)
	p.layers = make([]layerOffs, c.NumLayers)
	if len(b.layers) != c.NumLayers {
		b.layers = make([]devLayer, c.NumLayers)
	} // a level-2 wake lays the weights out again over the same layers, KV pointers kept
	for i := 0; i < c.NumLayers; i++ {
		if err := b.planLayer(ck, p, i); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// planLayer places layer i's matrices and small vectors.
func (b *Backend) planLayer(ck *model.Checkpoint, p *weightPlan, i int) error {
	c := b.cfg
	H, I := c.HiddenSize, c.IntermediateSize
	pre := fmt.Sprintf("model.layers.%d.", i)
	var ts [7]*model.Tensor
	for j, spec := range []struct {
		name       string
		rows, cols int
	}{
		{"self_attn.q_proj.weight", b.qDim, H}, {"self_attn.k_proj.weight", b.kvDim, H}, {"self_attn.v_proj.weight", b.kvDim, H},
		{"self_attn.o_proj.weight", H, b.qDim}, {"mlp.gate_proj.weight", I, H}, {"mlp.up_proj.weight", I, H},
		{"mlp.down_proj.weight", H, I},
	} {
		var err error
		if ts[j], err = checkedTensor(ck, pre+spec.name, spec.rows, spec.cols); err != nil {
			return err
		}
	}
	p.layers[i] = layerOffs{qkv: p.placeFused(ts[0], ts[1], ts[2]), o: p.place(ts[3]), gu: p.placeFused(ts[4], ts[5]), down: p.place(ts[6])}
	l := &b.layers[i]
	// Each small vector: the device pointer it sets and its parts, with
	// their shapes; the optional ones only where the config has them.
	type small struct {
		dst   *DevicePtr
		parts []string
		size  []int
	}
	smalls := []small{{&l.attnNorm, []string{"input_layernorm.weight"}, []int{H}}, {&l.mlpNorm, []string{"post_attention_layernorm.weight"}, []int{H}}}
	if c.QKVBias {
		smalls = append(smalls, small{&l.qkvBias, []string{"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}, []int{b.qDim, b.kvDim, b.kvDim}})
	}
	if c.OProjBias {
		smalls = append(smalls, small{&l.oBias, []string{"self_attn.o_proj.bias"}, []int{H}})
	}
	if c.QKNorm {
		smalls = append(smalls, small{&l.qNorm, []string{"self_attn.q_norm.weight"}, []int{c.HeadDim}}, small{&l.kNorm, []string{"self_attn.k_norm.weight"}, []int{c.HeadDim}})
	}
	for _, s := range smalls {
		ts := make([]*model.Tensor, len(s.parts))
		for k, name := range s.parts {
			var err error
			if ts[k], err = checkedTensor(ck, pre+name, s.size[k]); err != nil {
				return err
			}
		}
		p.addSmall(s.dst, ts...)
	}
	return nil
}

// bindWeights allocates the device memory p plans (the matrices' and the
// small vectors', with the RoPE inverse frequencies, nInv float64s, after
// them) and points the backend's weights into it. A level-2 wake keeps
// the small vectors' allocation, which must still fit.
func (b *Backend) bindWeights(p *weightPlan, nInv int) error {
	var err error
	if b.weights, err = b.allocWeights(p.wsize); err != nil {
		return fmt.Errorf("cuda: weights need %d bytes of device memory: %w", p.wsize, err)
	}
	b.weightsBytes = p.wsize
	b.embed, b.lmHead = b.weights+DevicePtr(p.embed), b.weights+DevicePtr(p.lmHead)
	for i := range b.layers {
		l := &b.layers[i]
		l.qkv, l.o = b.weights+DevicePtr(p.layers[i].qkv), b.weights+DevicePtr(p.layers[i].o)
		l.gu, l.down = b.weights+DevicePtr(p.layers[i].gu), b.weights+DevicePtr(p.layers[i].down)
	}
	switch n := p.smallsN*4 + nInv*8; {
	case b.smalls == 0:
		if b.smalls, err = b.c.Alloc(n); err != nil {
			return err
		}
		b.smallsBytes = n
	case n != b.smallsBytes: // a level-2 wake: the same checkpoint, the same sizes
		return fmt.Errorf("cuda: the checkpoint's norm weights and biases now take %d bytes, %d when it was loaded; restart the server", n, b.smallsBytes)
	}
	for _, r := range p.refs {
		*r.dst = b.smalls + DevicePtr(r.off*4)
	}
	b.invFreq = b.smalls + DevicePtr(p.smallsN*4)
	return nil
}

// copyHostWeights is layout's finish: it copies the small vectors (as
// f32, in one copy) and the RoPE inverse frequencies, and converts the
// matrices that are not bf16 on the host and copies them, adding those
// to st.
func (b *Backend) copyHostWeights(p *weightPlan, inv []float64, convert []placedMat, st *uploadStats) error {
	smalls := make([]float32, p.smallsN)
	for _, part := range p.parts {
		copy(smalls[part.off:], toF32(part.t))
	}
	if err := b.c.CopyHtoD(b.smalls, unsafe.Pointer(&smalls[0]), len(smalls)*4); err != nil {
		return err
	}
	if err := b.c.CopyHtoD(b.invFreq, unsafe.Pointer(&inv[0]), len(inv)*8); err != nil {
		return err
	}
	for _, m := range convert {
		conv := toBF16(m.t)
		if err := b.c.CopyHtoD(b.weights+DevicePtr(m.off), unsafe.Pointer(&conv[0]), len(conv)*2); err != nil {
			return fmt.Errorf("cuda: upload %s: %w", m.t.Name, err)
		}
		st.bytes += int64(len(conv) * 2)
		st.converted += int64(len(conv) * 2)
	}
	return nil
}

// checkedTensor is ck's tensor name, which must have shape.
func checkedTensor(ck *model.Checkpoint, name string, shape ...int) (*model.Tensor, error) {
	t, ok := ck.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("cuda: checkpoint %s has no tensor %s", ck.Dir, name)
	}
	n := 1
	for _, s := range shape {
		n *= s
	}
	if len(t.Shape) != len(shape) || t.DType.Size() == 0 || len(t.Data) != n*t.DType.Size() {
		return nil, fmt.Errorf("cuda: tensor %s has shape %v (%s, %d bytes), want %v", name, t.Shape, t.DType, len(t.Data), shape)
	}
	for i := range shape {
		if t.Shape[i] != shape[i] {
			return nil, fmt.Errorf("cuda: tensor %s has shape %v, want %v", name, t.Shape, shape)
		}
	}
	return t, nil
}

// toF32 converts a small tensor (norm weight, bias) to float32.
func toF32(t *model.Tensor) []float32 {
	n := len(t.Data) / t.DType.Size()
	out := make([]float32, n)
	for i := range out {
		switch t.DType {
		case model.F32:
			out[i] = math.Float32frombits(uint32(t.Data[4*i]) | uint32(t.Data[4*i+1])<<8 | uint32(t.Data[4*i+2])<<16 | uint32(t.Data[4*i+3])<<24)
		case model.BF16:
			out[i] = math.Float32frombits((uint32(t.Data[2*i]) | uint32(t.Data[2*i+1])<<8) << 16)
		case model.F16:
			out[i] = halfToFloat(uint16(t.Data[2*i]) | uint16(t.Data[2*i+1])<<8)
		}
	}
	return out
}

// toBF16 converts an f16 or f32 matrix to bf16 (round to nearest even).
func toBF16(t *model.Tensor) []uint16 {
	f := toF32(t)
	out := make([]uint16, len(f))
	for i, v := range f {
		u := math.Float32bits(v)
		if u&0x7fffffff > 0x7f800000 {
			out[i] = 0x7fc0
			continue
		}
		u += 0x7fff + (u>>16)&1
		out[i] = uint16(u >> 16)
	}
	return out
}

// halfToFloat converts one IEEE binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}
