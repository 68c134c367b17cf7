package cpu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/model/synth"
	"github.com/treni-top/treni-top/engine/sched"
)

// goldenSpecs must match SPECS, SEED and PRESET in testdata/make_golden.py.
var goldenSpecs = []struct{ arch, dtype string }{{"qwen3", "bf16"}, {"qwen2", "f16"}, {"llama", "f32"}}

const (
	goldenSeed   = 4242
	goldenPreset = "tiny"
	// goldenRelTol bounds |ours − transformers| at transformers' top-8 ids,
	// as a fraction of the largest |logit| among them. Both sides compute
	// in float32 with different summation orders (and CUDA kernels on the
	// HF side); on these tiny shapes that is ~1e-6. A step whose top two
	// logits are closer than this is a tie: either token is accepted.
	goldenRelTol = 1e-4
)

type goldenFile struct {
	Format    string            `json:"format"`
	Arch      string            `json:"arch"`
	Preset    string            `json:"preset"`
	Seed      uint64            `json:"seed"`
	DType     string            `json:"dtype"`
	Vocab     int               `json:"vocab_size"`
	SHA256    map[string]string `json:"safetensors_sha256"`
	HFVersion string            `json:"transformers_version"`
	Device    string            `json:"device"`
	Prompts   []struct {
		Tokens      []int32     `json:"tokens"`
		TopIDs      [][]int     `json:"top_ids"`
		TopLogits   [][]float64 `json:"top_logits"`
		Greedy      []int32     `json:"greedy"`
		GreedyTop2I [][]int     `json:"greedy_top2_ids"`
		GreedyTop2V [][]float64 `json:"greedy_top2_logits"`
	} `json:"prompts"`
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func argmax2(v []float32) (i1, i2 int) {
	i1, i2 = 0, -1
	for i := 1; i < len(v); i++ {
		switch {
		case v[i] > v[i1]:
			i1, i2 = i, i1
		case i2 < 0 || v[i] > v[i2]:
			i2 = i
		}
	}
	return i1, i2
}

// TestGoldenTransformers compares the backend with Hugging Face transformers
// on the synth tiny checkpoints: top-8 logits at every prompt position and 32
// greedy tokens per prompt.
func TestGoldenTransformers(t *testing.T) {
	for _, spec := range goldenSpecs {
		t.Run(spec.arch, func(t *testing.T) {
			path := filepath.Join("testdata", "golden_"+spec.arch+".json")
			raw, err := os.ReadFile(path)
			if errors.Is(err, os.ErrNotExist) {
				t.Skipf("no %s: run engine/cpu/testdata/make_golden.py on a machine with torch and transformers (see its header) and commit its output", path)
			}
			if err != nil {
				t.Fatal(err)
			}
			var g goldenFile
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if len(g.Prompts) == 0 {
				t.Fatalf("%s has no prompts", path)
			}
			for i, p := range g.Prompts {
				if len(p.TopIDs) != len(p.Tokens) || len(p.TopLogits) != len(p.Tokens) || len(p.GreedyTop2I) != len(p.Greedy) || len(p.GreedyTop2V) != len(p.Greedy) || len(p.Greedy) != len(g.Prompts[0].Greedy) {
					t.Fatalf("%s prompt %d: inconsistent lengths", path, i)
				}
			}
			if g.Seed != goldenSeed || g.Preset != goldenPreset || g.DType != spec.dtype {
				t.Fatalf("%s was made with seed %d preset %s dtype %s; this test regenerates seed %d preset %s dtype %s", path, g.Seed, g.Preset, g.DType, goldenSeed, goldenPreset, spec.dtype)
			}
			dir := t.TempDir()
			ctx := context.Background()
			if _, err := synth.Write(ctx, synth.Options{Arch: spec.arch, Preset: goldenPreset, OutDir: dir, Seed: goldenSeed, DType: spec.dtype, Workers: 1}); err != nil {
				t.Fatalf("synth.Write: %v", err)
			}
			for name, want := range g.SHA256 {
				got, err := sha256File(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("synth wrote %s with sha256 %s, the golden was made from %s: synth's output changed; rerun make_golden.py", name, got, want)
				}
			}
			ck, err := model.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			const bs = 4
			maxLen := 0
			for _, p := range g.Prompts {
				maxLen = max(maxLen, len(p.Tokens)+len(p.Greedy))
			}
			perSeq := (maxLen + bs - 1) / bs
			b, err := New(ck, Options{NumBlocks: perSeq * len(g.Prompts), BlockSize: bs, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			V := b.VocabSize()
			if V != g.Vocab {
				t.Fatalf("vocab %d, golden %d", V, g.Vocab)
			}
			blocks := make([][]int32, len(g.Prompts))
			for i := range blocks {
				for j := 0; j < perSeq; j++ {
					// Interleaved, so neighbouring positions of a sequence are
					// never in neighbouring blocks.
					blocks[i] = append(blocks[i], int32(j*len(g.Prompts)+i))
				}
			}
			logits := make([][]float32, len(g.Prompts))
			for i := range logits {
				logits[i] = make([]float32, V)
			}

			// 1. Every prompt position: all prompts batched, one token each
			// per step (sequences drop out as their prompt ends).
			var maxAbs, maxRel float64
			for pos := 0; ; pos++ {
				var bt sched.Batch
				var who []int
				for i, p := range g.Prompts {
					if pos < len(p.Tokens) {
						bt.Seqs = append(bt.Seqs, sched.SeqChunk{SeqID: uint64(i), Tokens: p.Tokens[pos : pos+1], Pos: pos, Blocks: blocks[i], WantLogits: true})
						who = append(who, i)
					}
				}
				if len(who) == 0 {
					break
				}
				if err := b.Forward(ctx, &bt, logits[:len(who)]); err != nil {
					t.Fatal(err)
				}
				for k, i := range who {
					ids, vals := g.Prompts[i].TopIDs[pos], g.Prompts[i].TopLogits[pos]
					scale := 0.0
					for _, v := range vals {
						scale = math.Max(scale, math.Abs(v))
					}
					for j, id := range ids {
						d := math.Abs(float64(logits[k][id]) - vals[j])
						maxAbs, maxRel = math.Max(maxAbs, d), math.Max(maxRel, d/scale)
						if d > goldenRelTol*scale {
							t.Errorf("prompt %d pos %d token %d: logit %.7g, transformers %.7g (|diff| %.3g > %.0e × %.3g)", i, pos, id, logits[k][id], vals[j], d, goldenRelTol, scale)
						}
					}
				}
			}

			// 2. Greedy: each prompt as one prefill chunk (over the KV the
			// first pass wrote, which it overwrites with the same values),
			// then 32 decode steps of all prompts batched.
			seqs := make([]sched.SeqChunk, len(g.Prompts))
			for i, p := range g.Prompts {
				seqs[i] = sched.SeqChunk{SeqID: uint64(i), Tokens: p.Tokens, Blocks: blocks[i], WantLogits: true}
			}
			live := make([]bool, len(g.Prompts))
			for i := range live {
				live[i] = true
			}
			ties, compared := 0, 0
			for step := 0; step < len(g.Prompts[0].Greedy); step++ {
				bt := sched.Batch{Seqs: seqs}
				if err := b.Forward(ctx, &bt, logits); err != nil {
					t.Fatal(err)
				}
				for i := range seqs {
					p := &g.Prompts[i]
					a, a2 := argmax2(logits[i])
					want := int(p.Greedy[step])
					scale := math.Max(math.Abs(p.GreedyTop2V[step][0]), math.Abs(float64(logits[i][a])))
					if live[i] {
						compared++
						hfGap := p.GreedyTop2V[step][0] - p.GreedyTop2V[step][1]
						ourGap := float64(logits[i][a] - logits[i][a2])
						if gap := math.Min(hfGap, ourGap); gap <= goldenRelTol*scale {
							// The top two are within tolerance: either token is
							// right, and the sequences may diverge from here on,
							// so the comparison of this prompt stops.
							ties++
							live[i] = false
							if a != want && a != p.GreedyTop2I[step][1] {
								t.Errorf("prompt %d greedy step %d: tie (gap %.3g) between %d and %d, but we chose %d", i, step, gap, want, p.GreedyTop2I[step][1], a)
							} else {
								t.Logf("prompt %d greedy step %d: tie (gap %.3g), we chose %d, transformers %d; comparison stops", i, step, gap, a, want)
							}
						} else if a != want {
							t.Errorf("prompt %d greedy step %d: token %d (logit %.7g), transformers %d (logit %.7g, ours %.7g)", i, step, a, logits[i][a], want, p.GreedyTop2V[step][0], logits[i][want])
							live[i] = false
						}
					}
					seqs[i] = sched.SeqChunk{SeqID: uint64(i), Tokens: []int32{int32(a)}, Pos: seqs[i].Pos + len(seqs[i].Tokens), Blocks: blocks[i], WantLogits: true}
				}
			}
			t.Logf("%s vs transformers %s on %s: top-8 logits max abs error %.3g, max relative (to the row's max |logit|) %.3g (tolerance %.0e); greedy: %d steps compared, %d ties within tolerance",
				spec.arch, g.HFVersion, g.Device, maxAbs, maxRel, goldenRelTol, compared, ties)
		})
	}
}
