package cpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/treni-top/treni-top/engine/sched"
)

// Benchmark shapes. Weights are bf16 made in memory (never written to
// disk): qwen3-0.6b is Qwen3-0.6B's shape (tied 151936-token head), demo is
// the synth demo preset (Qwen3 layers, 10 of them, the 4096-token tokenizer).
var benchShapes = []struct {
	name                                             string
	hidden, inter, layers, heads, kvHeads, hd, vocab int
}{
	{"demo", 1024, 3072, 10, 16, 8, 128, 4096},
	{"qwen3-0.6b", 1024, 3072, 28, 16, 8, 128, 151936},
}

// benchSource fills bf16 weights with a cheap xorshift pattern of normal
// numbers of magnitude ~0.03–0.06 (random normals would take tens of seconds
// for 0.6B parameters and the values do not change the speed).
func benchSource(c config) source {
	var state uint64 = 0x9e3779b97f4a7c15
	fill := func(n int) []byte {
		buf := make([]byte, 2*n)
		for i := 0; i+8 <= len(buf); i += 8 {
			state ^= state << 13
			state ^= state >> 7
			state ^= state << 17
			// Keep sign and mantissa bits, force exponent 122 (2^-5).
			binary.LittleEndian.PutUint64(buf[i:], state&0x807f807f807f807f|0x3d003d003d003d00)
		}
		return buf
	}
	ones := func(n int) []byte {
		buf := make([]byte, 2*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(buf[2*i:], 0x3f80) // 1.0
		}
		return buf
	}
	return func(name string) (rawTensor, bool, error) {
		H, I, q, kv := c.hidden, c.inter, c.heads*c.headDim, c.kvHeads*c.headDim
		var shape []int
		vec := false
		switch {
		case name == "model.embed_tokens.weight", name == "lm_head.weight":
			shape = []int{c.vocab, H}
		case name == "model.norm.weight":
			shape, vec = []int{H}, true
		default:
			var l int
			var suffix string
			if _, err := fmt.Sscanf(name, "model.layers.%d.%s", &l, &suffix); err != nil {
				return rawTensor{}, false, nil
			}
			switch suffix {
			case "input_layernorm.weight", "post_attention_layernorm.weight":
				shape, vec = []int{H}, true
			case "self_attn.q_norm.weight", "self_attn.k_norm.weight":
				shape, vec = []int{c.headDim}, true
			case "self_attn.q_proj.weight":
				shape = []int{q, H}
			case "self_attn.k_proj.weight", "self_attn.v_proj.weight":
				shape = []int{kv, H}
			case "self_attn.o_proj.weight":
				shape = []int{H, q}
			case "mlp.gate_proj.weight", "mlp.up_proj.weight":
				shape = []int{I, H}
			case "mlp.down_proj.weight":
				shape = []int{H, I}
			default:
				return rawTensor{}, false, nil
			}
		}
		n := 1
		for _, d := range shape {
			n *= d
		}
		if vec {
			return rawTensor{dt: dtBF16, shape: shape, data: ones(n)}, true, nil
		}
		return rawTensor{dt: dtBF16, shape: shape, data: fill(n)}, true, nil
	}
}

const benchBlockSize = 16

func newBenchBackend(b *testing.B, i int) *Backend {
	b.Helper()
	s := benchShapes[i]
	c := config{hidden: s.hidden, inter: s.inter, layers: s.layers, heads: s.heads, kvHeads: s.kvHeads,
		headDim: s.hd, vocab: s.vocab, eps: 1e-6, qkNorm: true, tied: true, invFreq: ropeInvFreq(s.hd, 1e6)}
	// 16 sequences × 256 positions; the pool is mapped lazily, so only what
	// the benchmark writes becomes resident.
	be, err := newBackend(c, benchSource(c), Options{NumBlocks: 16 * 256 / benchBlockSize, BlockSize: benchBlockSize})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	return be
}

// benchDecode times decode steps of batch sequences, each one token at
// position ctxLen over an existing (zero) context of ctxLen positions, so the
// attention cost of a realistic context is included.
func benchDecode(b *testing.B, batch int) {
	const ctxLen = 128
	for i, s := range benchShapes {
		b.Run(s.name, func(b *testing.B) {
			be := newBenchBackend(b, i)
			bt := sched.Batch{}
			logits := make([][]float32, batch)
			perSeq := 256 / benchBlockSize
			for j := 0; j < batch; j++ {
				blocks := make([]int32, perSeq)
				for k := range blocks {
					blocks[k] = int32(j*perSeq + k)
				}
				bt.Seqs = append(bt.Seqs, sched.SeqChunk{SeqID: uint64(j), Tokens: []int32{int32(j)}, Pos: ctxLen, Blocks: blocks, WantLogits: true})
				logits[j] = make([]float32, be.VocabSize())
			}
			// Real (non-zero, resident) KV for the context, so attention
			// reads memory as it would in serving rather than the kernel's
			// shared zero page.
			used := batch * perSeq * be.blockStride
			for k := range be.kv.f[:used] {
				be.kv.f[k] = float32(k%7) * 0.01
			}
			ctx := context.Background()
			if err := be.Forward(ctx, &bt, logits); err != nil { // warm-up: page in, grow scratch
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for b.Loop() {
				if err := be.Forward(ctx, &bt, logits); err != nil {
					b.Fatal(err)
				}
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(batch*b.N)/sec, "tok/s")
			b.ReportMetric(sec/float64(b.N)*1e3, "ms/step")
			b.ReportMetric((processCPU()-cpu0).Seconds()/float64(b.N)*1e3, "cpu-ms/step")
			b.ReportMetric(float64(be.WeightBytesPerToken())/1e6, "MBweights/step")
		})
	}
}

// BenchmarkDecodeBatch1 is single-stream decode.
func BenchmarkDecodeBatch1(b *testing.B) { benchDecode(b, 1) }

// BenchmarkDecodeBatch16 is 16 streams decoding in one step: the weights are
// read once for all 16 tokens.
func BenchmarkDecodeBatch16(b *testing.B) { benchDecode(b, 16) }

// BenchmarkPrefill128 is one 128-token prompt in one step (TTFT's compute).
func BenchmarkPrefill128(b *testing.B) {
	for i, s := range benchShapes {
		b.Run(s.name, func(b *testing.B) {
			be := newBenchBackend(b, i)
			toks := make([]int32, 128)
			for j := range toks {
				toks[j] = int32(j * 7 % s.vocab)
			}
			blocks := make([]int32, 128/benchBlockSize)
			for j := range blocks {
				blocks[j] = int32(j)
			}
			bt := sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: toks, Blocks: blocks, WantLogits: true}}}
			logits := [][]float32{make([]float32, be.VocabSize())}
			ctx := context.Background()
			if err := be.Forward(ctx, &bt, logits); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for b.Loop() {
				if err := be.Forward(ctx, &bt, logits); err != nil {
					b.Fatal(err)
				}
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(128*b.N)/sec, "tok/s")
			b.ReportMetric(sec/float64(b.N)*1e3, "ms/prompt")
			b.ReportMetric((processCPU()-cpu0).Seconds()/float64(b.N)*1e3, "cpu-ms/prompt")
		})
	}
}

// BenchmarkMemcpyBandwidth is the machine's copy bandwidth on a buffer far
// larger than the caches (MB/s counts bytes copied, i.e. read once and
// written once). Decode's floor is weight bytes per step ÷ this.
func BenchmarkMemcpyBandwidth(b *testing.B) {
	const n = 512 << 20
	src := make([]byte, n)
	dst := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	b.SetBytes(n)
	b.ResetTimer()
	for b.Loop() {
		copy(dst, src)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkReadBandwidth is the single-pass read bandwidth of one core over
// a large buffer (the access pattern of a weight stream), for comparison
// with the copy figure.
func BenchmarkReadBandwidth(b *testing.B) {
	const n = 512 << 20
	buf := make([]uint64, n/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	b.SetBytes(n)
	b.ResetTimer()
	var sink uint64
	for b.Loop() {
		var s0, s1, s2, s3 uint64
		for i := 0; i+4 <= len(buf); i += 4 {
			s0 += buf[i]
			s1 += buf[i+1]
			s2 += buf[i+2]
			s3 += buf[i+3]
		}
		sink += s0 + s1 + s2 + s3
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	if sink == 1 {
		b.Log(sink)
	}
}
