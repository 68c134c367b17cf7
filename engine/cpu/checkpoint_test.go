package cpu

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/model/synth"
	"github.com/treni-top/treni-top/engine/sched"
)

// writeCheckpoint writes m as a Hugging Face directory (config.json and one
// model.safetensors) so the test goes through model.Open and New exactly as
// the server does.
func writeCheckpoint(t *testing.T, dir string, a testArch, m *testModel) {
	t.Helper()
	c := m.cfg
	mdt := map[dtype]model.DType{dtBF16: model.BF16, dtF16: model.F16, dtF32: model.F32}[a.dt]
	cfg := map[string]any{
		"architectures":           []string{model.Arch(a.name).ClassName()},
		"model_type":              a.name,
		"hidden_size":             c.hidden,
		"intermediate_size":       c.inter,
		"num_hidden_layers":       c.layers,
		"num_attention_heads":     c.heads,
		"num_key_value_heads":     c.kvHeads,
		"head_dim":                c.headDim,
		"vocab_size":              c.vocab,
		"max_position_embeddings": 4096,
		"rms_norm_eps":            c.eps,
		"rope_theta":              1e6,
		"tie_word_embeddings":     c.tied,
		"bos_token_id":            1,
		"eos_token_id":            2,
		"torch_dtype":             mdt.TorchName(),
		"hidden_act":              "silu",
	}
	if a.name == "llama" {
		// Must match llama3InvFreq: the test then also checks
		// model.Config.InvFreq against this package's reading of HF.
		cfg["rope_theta"] = 500000.0
		cfg["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
			"high_freq_factor": 4.0, "original_max_position_embeddings": 64}
		cfg["attention_bias"] = a.qkvBias
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(m.tensors))
	for n := range m.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	infos := make([]model.TensorInfo, len(names))
	for i, n := range names {
		infos[i] = model.TensorInfo{Name: n, DType: mdt, Shape: m.tensors[n].shape}
	}
	prefix, offsets, size := model.EncodeHeader(infos, map[string]string{"format": "pt"})
	buf := make([]byte, size)
	copy(buf, prefix)
	for i, n := range names {
		copy(buf[offsets[i]:], m.tensors[n].data)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestNewFromCheckpoint runs each architecture from a real directory and
// compares a prefill and two decode steps with the reference.
func TestNewFromCheckpoint(t *testing.T) {
	for ai, a := range testArches {
		t.Run(a.name, func(t *testing.T) {
			m := tinyModel(a, uint64(200+ai))
			dir := t.TempDir()
			writeCheckpoint(t, dir, a, m)
			ck, err := model.Open(dir)
			if err != nil {
				t.Fatalf("model.Open: %v", err)
			}
			defer ck.Close()
			b, err := New(ck, Options{NumBlocks: 8, BlockSize: tBlockSize, Threads: 2})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer b.Close()
			if got, want := KVBytesPerBlock(ck.Config, tBlockSize)*8, b.KVBytes(); got != want {
				t.Errorf("KVBytesPerBlock × 8 = %d, KVBytes = %d", got, want)
			}
			toks := randTokens(rand.New(rand.NewPCG(3, uint64(ai))), 11)
			ref := m.reference(toks)
			blocks := []int32{5, 2, 7}
			var st errStats
			logits := [][]float32{make([]float32, b.VocabSize())}
			for _, r := range [][2]int{{0, 9}, {9, 10}, {10, 11}} {
				bt := sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: toks[r[0]:r[1]], Pos: r[0], Blocks: blocks, WantLogits: true}}}
				if err := b.Forward(context.Background(), &bt, logits); err != nil {
					t.Fatal(err)
				}
				st.compare(t, "pos "+itoa(r[1]-1), logits[0], ref[r[1]-1])
			}
			t.Logf("%s from %s: max abs error %.3g, relative %.3g", a.name, dir, st.maxAbs, st.maxRel)
		})
	}
	if _, err := New(nil, Options{NumBlocks: 1, BlockSize: 1}); err == nil {
		t.Error("New(nil): no error")
	}
}

// testModelFromCheckpoint wraps an opened checkpoint for the reference.
func testModelFromCheckpoint(ck *model.Checkpoint) *testModel {
	c := ck.Config
	m := &testModel{cfg: config{
		hidden: c.HiddenSize, inter: c.IntermediateSize, layers: c.NumLayers,
		heads: c.NumHeads, kvHeads: c.NumKVHeads, headDim: c.HeadDim, vocab: c.VocabSize,
		eps: c.RMSNormEps, qkvBias: c.QKVBias, oBias: c.OProjBias, qkNorm: c.QKNorm,
		tied: c.TieWordEmbeddings, invFreq: c.InvFreq(),
	}, tensors: map[string]rawTensor{}}
	for name, t := range ck.Tensors {
		dt := map[model.DType]dtype{model.BF16: dtBF16, model.F16: dtF16, model.F32: dtF32}[t.DType]
		m.tensors[name] = rawTensor{dt: dt, shape: t.Shape, data: t.Data}
	}
	return m
}

// TestSynthMatchesReference runs the synth tiny checkpoints the golden test
// uses against the float64 reference, so the path synth → model.Open → New
// is checked here even before the transformers goldens exist.
func TestSynthMatchesReference(t *testing.T) {
	for _, spec := range goldenSpecs {
		t.Run(spec.arch, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := synth.Write(context.Background(), synth.Options{Arch: spec.arch, Preset: goldenPreset, OutDir: dir, Seed: goldenSeed, DType: spec.dtype, Workers: 1}); err != nil {
				t.Fatalf("synth.Write: %v", err)
			}
			ck, err := model.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			m := testModelFromCheckpoint(ck)
			b, err := New(ck, Options{NumBlocks: 8, BlockSize: tBlockSize, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			toks := randTokens(rand.New(rand.NewPCG(9, 9)), 14)
			ref := m.reference(toks)
			var st errStats
			logits := [][]float32{make([]float32, b.VocabSize())}
			for _, r := range [][2]int{{0, 6}, {6, 13}, {13, 14}} {
				bt := sched.Batch{Seqs: []sched.SeqChunk{{SeqID: 1, Tokens: toks[r[0]:r[1]], Pos: r[0], Blocks: []int32{7, 0, 3, 5}, WantLogits: true}}}
				if err := b.Forward(context.Background(), &bt, logits); err != nil {
					t.Fatal(err)
				}
				st.compare(t, "pos "+itoa(r[1]-1), logits[0], ref[r[1]-1])
			}
			t.Logf("synth %s tiny (%s): max abs error %.3g, relative %.3g", spec.arch, spec.dtype, st.maxAbs, st.maxRel)
		})
	}
}
