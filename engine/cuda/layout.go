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
	c := b.cfg
	H, I := c.HiddenSize, c.IntermediateSize
	get := func(name string, shape ...int) (*model.Tensor, error) {
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

	// Lay out the matrix allocation.
	type mat struct {
		t   *model.Tensor
		off int64
	}
	var mats []mat
	var wsize int64
	place := func(t *model.Tensor) int64 {
		off := wsize
		wsize += (int64(len(t.Data)/t.DType.Size())*2 + 255) &^ 255
		mats = append(mats, mat{t, off})
		return off
	}
	// Fused matrices need their parts contiguous: place them with no gap
	// (each part's row count times the row size is a multiple of 2 bytes;
	// alignment only matters at the start).
	placeFused := func(ts ...*model.Tensor) int64 {
		off := wsize
		for _, t := range ts {
			mats = append(mats, mat{t, wsize})
			wsize += int64(len(t.Data)/t.DType.Size()) * 2
		}
		wsize = (wsize + 255) &^ 255
		return off
	}
	// Small f32 vectors (norm weights, biases), uploaded in one copy by
	// finish: only their places are decided here, so that no byte of the
	// weight files is read before the bulk upload has started (on a cold
	// page cache, faulting these scattered tensors in through the mapping
	// took 0.8 s on the H100 host).
	smallsN := 0 // f32 elements
	type smallRef struct {
		dst *DevicePtr
		off int
	}
	type smallPart struct {
		t   *model.Tensor
		off int
	}
	var refs []smallRef
	var parts []smallPart
	addSmall := func(dst *DevicePtr, ts ...*model.Tensor) {
		refs = append(refs, smallRef{dst, smallsN})
		for _, t := range ts {
			parts = append(parts, smallPart{t, smallsN})
			smallsN += len(t.Data) / t.DType.Size()
		}
		smallsN = (smallsN + 63) &^ 63 // 256-byte alignment
	}

	embedT, err := get("model.embed_tokens.weight", c.VocabSize, H)
	if err != nil {
		return st, nil, nil, err
	}
	embedOff := place(embedT)
	lmOff := embedOff
	if !c.TieWordEmbeddings {
		lm, err := get("lm_head.weight", c.VocabSize, H)
		if err != nil {
			return st, nil, nil, err
		}
		lmOff = place(lm)
	}
	fn, err := get("model.norm.weight", H)
	if err != nil {
		return st, nil, nil, err
	}
	addSmall(&b.finalNorm, fn)
	type layerOffs struct{ qkv, o, gu, down int64 }
	offs := make([]layerOffs, c.NumLayers)
	if len(b.layers) != c.NumLayers {
		b.layers = make([]devLayer, c.NumLayers)
	} // a level-2 wake lays the weights out again over the same layers, KV pointers kept
	for i := 0; i < c.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		var ts [7]*model.Tensor
		for j, spec := range []struct {
			name       string
			rows, cols int
		}{
			{"self_attn.q_proj.weight", b.qDim, H}, {"self_attn.k_proj.weight", b.kvDim, H}, {"self_attn.v_proj.weight", b.kvDim, H},
			{"self_attn.o_proj.weight", H, b.qDim}, {"mlp.gate_proj.weight", I, H}, {"mlp.up_proj.weight", I, H},
			{"mlp.down_proj.weight", H, I},
		} {
			if ts[j], err = get(p+spec.name, spec.rows, spec.cols); err != nil {
				return st, nil, nil, err
			}
		}
		offs[i] = layerOffs{qkv: placeFused(ts[0], ts[1], ts[2]), o: place(ts[3]), gu: placeFused(ts[4], ts[5]), down: place(ts[6])}
		l := &b.layers[i]
		an, err := get(p+"input_layernorm.weight", H)
		if err != nil {
			return st, nil, nil, err
		}
		addSmall(&l.attnNorm, an)
		mn, err := get(p+"post_attention_layernorm.weight", H)
		if err != nil {
			return st, nil, nil, err
		}
		addSmall(&l.mlpNorm, mn)
		if c.QKVBias {
			qb, err := get(p+"self_attn.q_proj.bias", b.qDim)
			if err != nil {
				return st, nil, nil, err
			}
			kb, err := get(p+"self_attn.k_proj.bias", b.kvDim)
			if err != nil {
				return st, nil, nil, err
			}
			vb, err := get(p+"self_attn.v_proj.bias", b.kvDim)
			if err != nil {
				return st, nil, nil, err
			}
			addSmall(&l.qkvBias, qb, kb, vb)
		}
		if c.OProjBias {
			ob, err := get(p+"self_attn.o_proj.bias", H)
			if err != nil {
				return st, nil, nil, err
			}
			addSmall(&l.oBias, ob)
		}
		if c.QKNorm {
			qn, err := get(p+"self_attn.q_norm.weight", c.HeadDim)
			if err != nil {
				return st, nil, nil, err
			}
			kn, err := get(p+"self_attn.k_norm.weight", c.HeadDim)
			if err != nil {
				return st, nil, nil, err
			}
			addSmall(&l.qNorm, qn)
			addSmall(&l.kNorm, kn)
		}
	}

	if b.weights, err = b.allocWeights(wsize); err != nil {
		return st, nil, nil, fmt.Errorf("cuda: weights need %d bytes of device memory: %w", wsize, err)
	}
	b.weightsBytes = wsize
	b.embed, b.lmHead = b.weights+DevicePtr(embedOff), b.weights+DevicePtr(lmOff)
	for i := range b.layers {
		l := &b.layers[i]
		l.qkv, l.o = b.weights+DevicePtr(offs[i].qkv), b.weights+DevicePtr(offs[i].o)
		l.gu, l.down = b.weights+DevicePtr(offs[i].gu), b.weights+DevicePtr(offs[i].down)
	}
	inv := c.InvFreq()
	switch n := smallsN*4 + len(inv)*8; {
	case b.smalls == 0:
		if b.smalls, err = b.c.Alloc(n); err != nil {
			return st, nil, nil, err
		}
		b.smallsBytes = n
	case n != b.smallsBytes: // a level-2 wake: the same checkpoint, the same sizes
		return st, nil, nil, fmt.Errorf("cuda: the checkpoint's norm weights and biases now take %d bytes, %d when it was loaded; restart the server", n, b.smallsBytes)
	}
	for _, r := range refs {
		*r.dst = b.smalls + DevicePtr(r.off*4)
	}
	b.invFreq = b.smalls + DevicePtr(smallsN*4)

	// Matrices: bf16 left to the caller's copy jobs, others to finish.
	var convert []*model.Tensor
	var convertDst []DevicePtr
	for _, m := range mats {
		dst := b.weights + DevicePtr(m.off)
		st.tensors++
		if m.t.DType == model.BF16 {
			jobs = append(jobs, copyJob{src: m.t.Data, file: m.t.File, off: m.t.Offset, n: len(m.t.Data), dst: dst})
			st.bytes += int64(len(m.t.Data))
			continue
		}
		convert, convertDst = append(convert, m.t), append(convertDst, dst)
	}
	finish = func(st *uploadStats) error {
		smalls := make([]float32, smallsN)
		for _, p := range parts {
			copy(smalls[p.off:], toF32(p.t))
		}
		if err := b.c.CopyHtoD(b.smalls, unsafe.Pointer(&smalls[0]), len(smalls)*4); err != nil {
			return err
		}
		if err := b.c.CopyHtoD(b.invFreq, unsafe.Pointer(&inv[0]), len(inv)*8); err != nil {
			return err
		}
		for i, t := range convert {
			conv := toBF16(t)
			if err := b.c.CopyHtoD(convertDst[i], unsafe.Pointer(&conv[0]), len(conv)*2); err != nil {
				return fmt.Errorf("cuda: upload %s: %w", t.Name, err)
			}
			st.bytes += int64(len(conv) * 2)
			st.converted += int64(len(conv) * 2)
		}
		return nil
	}
	return st, jobs, finish, nil
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
