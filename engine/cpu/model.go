package cpu

import (
	"errors"
	"fmt"

	"github.com/treni-top/treni-top/engine/model"
)

// New builds a CPU backend over an opened checkpoint. The weights stay in
// the checkpoint's mmapped bytes in their stored dtype and are converted in
// the matmul inner loop; the backend copies only norm weights and biases (a
// few KB per layer) to float32. The checkpoint must stay open until the
// backend is closed.
func New(ck *model.Checkpoint, opts Options) (*Backend, error) {
	if ck == nil {
		return nil, errors.New("cpu: nil checkpoint")
	}
	c := ck.Config
	switch c.Arch {
	case model.ArchQwen3, model.ArchQwen2, model.ArchLlama:
	default:
		return nil, fmt.Errorf("cpu: architecture %q is not supported (qwen3, qwen2, llama)", c.Arch)
	}
	cfg := config{
		hidden: c.HiddenSize, inter: c.IntermediateSize, layers: c.NumLayers,
		heads: c.NumHeads, kvHeads: c.NumKVHeads, headDim: c.HeadDim, vocab: c.VocabSize,
		eps: c.RMSNormEps, qkvBias: c.QKVBias, oBias: c.OProjBias, qkNorm: c.QKNorm,
		tied: c.TieWordEmbeddings, invFreq: c.InvFreq(),
	}
	src := func(name string) (rawTensor, bool, error) {
		t, ok := ck.Tensors[name]
		if !ok {
			return rawTensor{}, false, nil
		}
		var dt dtype
		switch t.DType {
		case model.BF16:
			dt = dtBF16
		case model.F16:
			dt = dtF16
		case model.F32:
			dt = dtF32
		default:
			return rawTensor{}, true, fmt.Errorf("dtype %s: %w", t.DType, errShape)
		}
		return rawTensor{dt: dt, shape: t.Shape, data: t.Data}, true, nil
	}
	b, err := newBackend(cfg, src, opts)
	if err != nil {
		return nil, fmt.Errorf("%w (checkpoint %s)", err, ck.Dir)
	}
	b.sl.ck = ck // a level-2 sleep releases its weights, a wake reloads them
	return b, nil
}

// KVBytesPerBlock is the KV storage one block of blockSize positions takes
// for checkpoint config c (float32 K and V for every layer and KV head), so
// a server can size NumBlocks from a memory budget before calling New.
func KVBytesPerBlock(c model.Config, blockSize int) int64 {
	return int64(blockSize) * int64(c.NumLayers) * int64(c.NumKVHeads) * int64(c.HeadDim) * 2 * 4
}
