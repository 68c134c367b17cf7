package cuda

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/engine/cpu"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/sched"
)

// These two checks need inputs made outside Go (synth checkpoints of real
// Qwen3 shapes and transformers' logits on them), so they run only when
// scripts/gpu-cuda-greedy.sh points them at those files; without the
// variables, or without a GPU, they skip.
//
//	TRENI_HF_MODELS     name:modeldir:dumpdir,...  (dumps by testdata/hf_cuda_logits.py)
//	TRENI_GREEDY_MODELS name:modeldir,...
//	TRENI_GREEDY_BATCHES batch sizes, default "1,8"
//	TRENI_GREEDY_STEPS   decode steps after the prefill, default 64

// envList splits a comma list of colon-separated fields.
func envList(name string) [][]string {
	var out [][]string
	for _, it := range strings.Split(os.Getenv(name), ",") {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, strings.Split(it, ":"))
		}
	}
	return out
}

func gpuOrSkip(t *testing.T, env string) [][]string {
	t.Helper()
	l := envList(env)
	if len(l) == 0 {
		t.Skipf("%s not set (scripts/gpu-cuda-greedy.sh sets it)", env)
	}
	if _, err := LoadDriver(); err != nil {
		t.Skipf("no CUDA driver, GPU test skipped: %v", err)
	}
	return l
}

// gpuBackend is what the two checks need of the backend under test.
type gpuBackend interface {
	sched.Backend
	GraphLaunches() int
}

// openBackend opens dir and builds a CUDA backend over it (graphs on).
var openBackend = func(t *testing.T, dir string, nb, bs int) (*model.Checkpoint, gpuBackend, string) {
	t.Helper()
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	gb := newTestBackend(t, ck, BackendOptions{NumBlocks: nb, BlockSize: bs})
	t.Cleanup(func() { gb.Close() })
	return ck, gb, gb.Device().Name
}

// hfMeta is the meta.json hf_cuda_logits.py writes next to the logits:
// for each prompt and dtype, a raw little-endian float32 [T, vocab] file.
type hfMeta struct {
	Transformers string            `json:"transformers"`
	Torch        string            `json:"torch"`
	Vocab        int               `json:"vocab"`
	Prompts      [][]int32         `json:"prompts"`
	Files        map[string]string `json:"files"` // "<dtype>/<prompt index>" → file name
}

func readF32(t *testing.T, path string, n int) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 4*n {
		t.Fatalf("%s: %d bytes, want %d", path, len(b), 4*n)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// nearTie reports whether the top two of ref lie within the bf16 logits
// tolerance of each other: the same bound backendVsCPU uses, four times
// tolLogits × the row's RMS (a row within rel_l2 tolLogits has element
// errors of about tolLogits × RMS, and two of them move the gap).
func nearTie(ref []float32) (tie bool, gap, bound float32) {
	a, b := top2(ref)
	bound = float32(tolLogits * norm(ref) / math.Sqrt(float64(len(ref))) * 4)
	return a-b <= bound, a - b, bound
}

// TestGPUHFLogits compares the CUDA backend's logits at every prompt
// position with transformers' float32 run of the same checkpoint (and, as
// the yardstick, transformers' own bfloat16 run with the float32 one). Each
// prompt goes through three paths: one token per step from position 0
// (decode, graphs), the whole prompt in one prefill, and prefill chunks of
// 5 tokens (chunked prefill over a cache already holding earlier chunks).
func TestGPUHFLogits(t *testing.T) {
	for _, m := range gpuOrSkip(t, "TRENI_HF_MODELS") {
		if len(m) != 3 {
			t.Fatalf("TRENI_HF_MODELS entry %q: want name:modeldir:dumpdir", strings.Join(m, ":"))
		}
		t.Run(m[0], func(t *testing.T) { hfLogits(t, m[0], m[1], m[2]) })
	}
}

type rowErr struct {
	n                               int
	maxAbs, maxRel, relL2, sumRelL2 float64
	agree, ties, miss               int
}

func (r *rowErr) add(got []float32, ref []float64, refF []float32) {
	s := compare(got, ref)
	r.n++
	r.maxAbs = max(r.maxAbs, s.maxAbs)
	r.maxRel = max(r.maxRel, s.maxRel)
	r.relL2 = max(r.relL2, s.relL2)
	r.sumRelL2 += s.relL2
	if s.nan > 0 {
		r.relL2 = math.Inf(1)
	}
	if argmax(got) == argmax(refF) {
		r.agree++
	} else if tie, _, _ := nearTie(refF); tie {
		r.ties++
	} else {
		r.miss++
	}
}

func (r *rowErr) String() string {
	return fmt.Sprintf("rows=%-4d max_abs=%-8.3g max_rel=%-8.3g rel_l2 worst=%-8.3g mean=%-8.3g argmax agree %d/%d near-ties %d",
		r.n, r.maxAbs, r.maxRel, r.relL2, r.sumRelL2/float64(max(r.n, 1)), r.agree, r.n, r.ties)
}

func hfLogits(t *testing.T, name, dir, dump string) {
	var meta hfMeta
	b, err := os.ReadFile(filepath.Join(dump, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	const NB, BS = 64, 16
	_, gb, dev := openBackend(t, dir, NB, BS)
	V := gb.VocabSize()
	if V != meta.Vocab {
		t.Fatalf("vocab %d on the backend, %d in %s", V, meta.Vocab, dump)
	}
	t.Logf("HF %s: transformers %s, torch %s, %d prompts, vocab %d, device %s", name, meta.Transformers, meta.Torch, len(meta.Prompts), V, dev)
	ctx := context.Background()
	blocks := make([]int32, NB)
	for i := range blocks {
		blocks[i] = int32((i*37 + 5) % NB) // scrambled, a permutation since 37 ⊥ 64
	}
	paths := []string{"decode", "prefill", "chunk5"}
	errs := map[string]*rowErr{"bf16": {}}
	for _, p := range paths {
		errs[p] = &rowErr{}
	}
	out := [][]float32{make([]float32, V)}
	for pi, ids := range meta.Prompts {
		T := len(ids)
		if (T+BS-1)/BS > NB {
			t.Fatalf("prompt %d too long", pi)
		}
		ref := readF32(t, filepath.Join(dump, meta.Files[fmt.Sprintf("float32/%d", pi)]), T*V)
		bf := readF32(t, filepath.Join(dump, meta.Files[fmt.Sprintf("bfloat16/%d", pi)]), T*V)
		row := func(v []float32, p int) []float32 { return v[p*V : (p+1)*V] }
		for p := 0; p < T; p++ {
			errs["bf16"].add(row(bf, p), f64s(row(ref, p)), row(ref, p))
		}
		run := func(path string, chunk int) {
			for pos := 0; pos < T; pos += chunk {
				n := min(chunk, T-pos)
				for j := range out[0] {
					out[0][j] = float32(math.NaN())
				}
				bt := &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: uint64(pi + 1), Tokens: ids[pos : pos+n], Pos: pos, Blocks: blocks, WantLogits: true}}}
				if err := gb.Forward(ctx, bt, out); err != nil {
					t.Fatal(err)
				}
				last := pos + n - 1
				r := row(ref, last)
				before := errs[path].relL2
				errs[path].add(out[0], f64s(r), r)
				if errs[path].relL2 > tolLogits && before <= tolLogits {
					s := compare(out[0], f64s(r))
					t.Errorf("%s %s prompt %d pos %d: rel_l2 %.3g > %.0e (max_abs %.3g, %d NaN)", name, path, pi, last, s.relL2, tolLogits, s.maxAbs, s.nan)
				}
			}
		}
		run("decode", 1)
		run("prefill", T)
		run("chunk5", 5)
	}
	hb := errs["bf16"]
	t.Logf("HFERR %s %-24s %s", name, "HF bf16 vs HF fp32", hb)
	for _, p := range paths {
		e := errs[p]
		t.Logf("HFERR %s %-24s %s (%.2f× HF bf16's worst)", name, "cuda "+p+" vs HF fp32", e, e.relL2/hb.relL2)
		t.Logf("TABLE hf     %-5s %-8s rel_l2 worst %.3g mean %.3g, max_abs %.3g | HF bf16 vs fp32 worst %.3g mean %.3g | argmax = HF fp32 %d/%d (+%d near-ties) | tol %.0e",
			name, p, e.relL2, e.sumRelL2/float64(max(e.n, 1)), e.maxAbs, hb.relL2, hb.sumRelL2/float64(max(hb.n, 1)), e.agree, e.n, e.ties, tolLogits)
		if e.miss > 0 {
			t.Errorf("%s %s: %d positions whose argmax differs from HF fp32 outside a near-tie", name, p, e.miss)
		}
	}
	if gb.GraphLaunches() == 0 {
		t.Errorf("%s: no decode step replayed a graph", name)
	}
}

// TestGPUGreedyVsCPU runs greedy decoding for TRENI_GREEDY_STEPS (64)
// steps after the prefill on the CUDA backend (graphs on) and on engine/cpu,
// at batch 1 and batch 8 (eight prompts of different lengths prefilled in
// one mixed step, then decoded together), and requires the same token at
// every step. Both backends are fed the CPU's token, which up to the first
// disagreement is each one's own greedy choice. At a step whose tokens differ
// and whose CPU top two logits lie within the tolerance (nearTie), either
// token is accepted and that sequence is no longer compared; any other
// difference fails.
func TestGPUGreedyVsCPU(t *testing.T) {
	models := gpuOrSkip(t, "TRENI_GREEDY_MODELS")
	batches := []int{1, 8}
	if s := os.Getenv("TRENI_GREEDY_BATCHES"); s != "" {
		batches = nil
		for _, f := range strings.Split(s, ",") {
			var n int
			if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
				t.Fatalf("TRENI_GREEDY_BATCHES %q", s)
			}
			batches = append(batches, n)
		}
	}
	steps := 64
	if s := os.Getenv("TRENI_GREEDY_STEPS"); s != "" {
		if _, err := fmt.Sscan(s, &steps); err != nil {
			t.Fatalf("TRENI_GREEDY_STEPS %q", s)
		}
	}
	for _, m := range models {
		if len(m) != 2 {
			t.Fatalf("TRENI_GREEDY_MODELS entry %q: want name:modeldir", strings.Join(m, ":"))
		}
		t.Run(m[0], func(t *testing.T) { greedy(t, m[0], m[1], batches, steps) })
	}
}

func greedy(t *testing.T, name, dir string, batches []int, steps int) {
	maxB := 0
	for _, b := range batches {
		maxB = max(maxB, b)
	}
	const BS = 16
	perSeq := (48 + steps + 1 + BS - 1) / BS
	NB := perSeq * maxB
	if NB%7 == 0 {
		NB++ // the block stride below must be a permutation of the pool
	}
	ck, gb, _ := openBackend(t, dir, NB, BS)
	ref, err := cpu.New(ck, cpu.Options{NumBlocks: NB, BlockSize: BS})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	V := gb.VocabSize()
	ctx := context.Background()
	for _, B := range batches {
		t.Run(fmt.Sprintf("batch%d", B), func(t *testing.T) {
			seqs := make([]sched.SeqChunk, B)
			for i := range seqs {
				n := 6 + (i*13)%42 // prompt lengths 6..47
				toks := make([]int32, n)
				for j := range toks {
					toks[j] = int32((j*7919 + (i+1)*104729 + B*15485863) % V)
				}
				bl := make([]int32, perSeq)
				for j := range bl {
					bl[j] = int32(((i*perSeq + j) * 7) % NB) // scrambled across sequences
				}
				seqs[i] = sched.SeqChunk{SeqID: uint64(100*B + i), Tokens: toks, Pos: 0, Blocks: bl, WantLogits: true}
			}
			rows := func() [][]float32 {
				r := make([][]float32, B)
				for i := range r {
					r[i] = make([]float32, V)
				}
				return r
			}
			lc, lg := rows(), rows()
			live := make([]bool, B)
			stopAt := make([]int, B)
			for i := range live {
				live[i], stopAt[i] = true, -1
			}
			compared, tieAgree, tieStops, fails := 0, 0, 0, 0
			var worst, worstAbs float64
			var minGap, minBound, maxBound float32 = float32(math.Inf(1)), float32(math.Inf(1)), 0
			for step := 0; step <= steps; step++ {
				bt := &sched.Batch{Seqs: append([]sched.SeqChunk(nil), seqs...)}
				if err := ref.Forward(ctx, bt, lc); err != nil {
					t.Fatal(err)
				}
				if err := gb.Forward(ctx, bt, lg); err != nil {
					t.Fatal(err)
				}
				for i := range seqs {
					ac := argmax(lc[i])
					if live[i] {
						s := compare(lg[i], f64s(lc[i]))
						worst, worstAbs = max(worst, s.relL2), max(worstAbs, s.maxAbs)
						ag := argmax(lg[i])
						tie, gap, bound := nearTie(lc[i])
						minGap, minBound, maxBound = min(minGap, gap), min(minBound, bound), max(maxBound, bound)
						compared++
						switch {
						case ag == ac && tie:
							tieAgree++
						case ag != ac && tie:
							tieStops++
							live[i], stopAt[i] = false, step
							t.Logf("GREEDY %s batch %d seq %d step %d: near-tie (gap %.4g ≤ bound %.4g; this row's max |cuda−cpu| %.4g), cuda %d cpu %d; stop comparing", name, B, i, step, gap, bound, s.maxAbs, ag, ac)
						case ag != ac:
							fails++
							live[i], stopAt[i] = false, step
							t.Errorf("%s batch %d seq %d step %d: greedy token %d on cuda, %d on cpu (gap %.4g, rel_l2 %.3g)", name, B, i, step, ag, ac, gap, s.relL2)
						}
					}
					p := seqs[i].Pos + len(seqs[i].Tokens)
					seqs[i].Tokens, seqs[i].Pos = []int32{ac}, p
				}
			}
			full := 0
			for i := range live {
				if live[i] {
					full++
				}
			}
			t.Logf("GREEDY %s batch %d: %d steps (prefill + %d decode) × %d seqs: %d seqs identical to the end, %d stopped at a near-tie %v, %d mismatches; %d token comparisons, %d near-tie steps with the same token; worst logits vs cpu rel_l2 %.3g max_abs %.3g; near-tie bound %.3g..%.3g; smallest top-2 gap %.4g; %d graph steps so far",
				name, B, steps+1, steps, B, full, tieStops, stopAt, fails, compared, tieAgree, worst, worstAbs, minBound, maxBound, minGap, gb.GraphLaunches())
			t.Logf("TABLE greedy %-5s b%-2d %2d/%d seqs identical for all %d steps | %d stopped at near-ties (steps %v) | %d mismatches | worst rel_l2 vs cpu %.3g", name, B, full, B, steps+1, tieStops, stopAt, fails, worst)
		})
	}
}
