package serve

import (
	"context"
	"fmt"
	"log"

	"github.com/treni-top/treni-top/engine/model"
)

// The served context and the KV pool's size.

// defaultMaxContext caps the default context: a KV pool sized for the
// model's full context (40,960 positions for Qwen3) would be mostly idle.
const defaultMaxContext = 8192

// contextLength is the served context: asked (> 0) up to the model's
// limit, else the model's limit capped at defaultMaxContext.
func contextLength(model, asked int) (int, error) {
	if asked > 0 {
		if model > 0 && asked > model {
			return 0, fmt.Errorf("--max-model-len %d is longer than the model's %d positions (max_position_embeddings in config.json); use at most %d", asked, model, model)
		}
		return asked, nil
	}
	if model <= 0 || model > defaultMaxContext {
		return defaultMaxContext, nil
	}
	return model, nil
}

// kvBlocks is the KV pool's size in blocks: o.KVBlocks, or o.KVBytes
// worth, or by default room for MaxBatch sequences of 2048 positions or
// one full context, whichever is larger.
func kvBlocks(o Options, cfg model.Config, maxSeq int) int {
	blocks := o.KVBlocks
	perPos := kvBytesPerPosition(cfg)
	if blocks <= 0 && o.KVBytes > 0 {
		blocks = int(o.KVBytes / (perPos * int64(o.BlockSize)))
	}
	if blocks <= 0 {
		blocks = max(o.MaxBatch*2048, maxSeq) / o.BlockSize
	}
	return blocks
}

// kvBytesPerPosition estimates the CPU backend's KV bytes per position (K
// and V, every layer, float32) to turn a byte budget into blocks.
func kvBytesPerPosition(c model.Config) int64 {
	v := int64(2) * int64(c.NumLayers) * int64(c.NumKVHeads) * int64(c.HeadDim) * 4
	if v <= 0 {
		return 1
	}
	return v
}

// fitContext is the served context length given the KV pool: a sequence
// can never hold more positions than the pool (blocks × blockSize), so a
// context longer than that would be advertised by /v1/models and accepted
// in requests that then stop early, silently, at the pool's end. A
// context the user asked for (--max-model-len) that the pool cannot hold
// is refused, as vLLM refuses it; the default is shortened, and the log
// says so.
func fitContext(maxSeq int, asked bool, blocks, blockSize int, lg *log.Logger) (int, error) {
	pool := blocks * blockSize
	if maxSeq <= pool {
		return maxSeq, nil
	}
	if asked {
		return 0, fmt.Errorf("--max-model-len %d is longer than the KV pool holds (%d blocks × %d positions = %d); give more KV blocks (--kv-blocks, --kv-gib) or a --max-model-len of at most %d",
			maxSeq, blocks, blockSize, pool, pool)
	}
	if pool < 2 {
		return 0, fmt.Errorf("a KV pool of %d blocks × %d positions holds %d position(s), too few for a prompt token and a generated one; give more KV blocks (--kv-blocks, --kv-gib)", blocks, blockSize, pool)
	}
	lg.Printf("context %d instead of %d: the KV pool of %d blocks × %d positions holds no more (give more KV blocks for a longer one)", pool, maxSeq, blocks, blockSize)
	return pool, nil
}

// touchPool allocates gib GiB and writes one byte per page, so the cost of
// faulting in a large first-time allocation shows up in kv_alloc. It
// gives up, with ctx's error, when ctx ends (it looks every 64 MiB).
func touchPool(ctx context.Context, gib float64) ([]byte, error) {
	b := make([]byte, int64(gib*(1<<30)))
	for i := 0; i < len(b); i += 4096 {
		if i&(64<<20-1) == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		b[i] = 1
	}
	return b, nil
}
