// Package synth writes random-weight checkpoints of real architectures in
// exactly the Hugging Face layout — config.json, generation_config.json,
// safetensors sharded as save_pretrained shards them, tokenizer files — so
// the engine, the profiler and HF transformers itself can be exercised
// without downloading weights. Output is deterministic for a seed.
package synth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/treni-top/treni-top/engine/model"
)

// ErrBadPreset: an unknown preset name.
var ErrBadPreset = errors.New("unknown preset")

// ErrOutDirInUse: the output directory already holds a model and Force is
// not set.
var ErrOutDirInUse = errors.New("output directory already holds a model")

// MaxShardSize is save_pretrained's default max_shard_size, "5GB" (decimal).
const MaxShardSize = 5_000_000_000

// Options says what to write.
type Options struct {
	// Arch is qwen3, qwen2 or llama.
	Arch string
	// Preset is tiny, demo, 0.6b, 1.7b, 4b or 8b.
	Preset string
	// OutDir is created if needed.
	OutDir string
	// Seed selects the weights; the same seed gives the same bytes.
	Seed uint64
	// DType is bf16 (default), f16 or f32.
	DType string
	// TokenizerDir, when set, is copied (tokenizer.json and friends);
	// otherwise a small BPE tokenizer is trained on the embedded corpus.
	TokenizerDir string
	// FitVocab sizes the vocabulary (embedding and lm_head rows) to the
	// tokenizer, rounded up to 64, instead of the preset's real size: the
	// layers keep the real shape. With the small trained tokenizer, a real
	// preset then generates only ids that print text, so a streaming
	// client can time every token (most of 151,936 random ids print
	// nothing with an 8k-token tokenizer).
	FitVocab bool
	// Force lets Write replace a model already in OutDir.
	Force bool
	// Workers generating weights; <= 0 means GOMAXPROCS.
	Workers int
	// Progress, if set, is called from the writing goroutines with the
	// weight bytes written so far and the total.
	Progress func(done, total int64)
}

// Result describes what Write produced.
type Result struct {
	Dir    string
	Config model.Config
	// Files are the written file names, relative to Dir.
	Files []string
	// Shards are the safetensors file names.
	Shards []string
	Params int64
	// WeightBytes is the sum of tensor data bytes.
	WeightBytes int64
	// TokenizerSource is "trained" or the directory copied from.
	TokenizerSource string
	// Duration is the whole Write; WeightDuration only the safetensors.
	Duration, WeightDuration time.Duration
}

// WeightMBps is the weight write rate in MB/s (10^6 bytes).
func (r Result) WeightMBps() float64 {
	if r.WeightDuration <= 0 {
		return 0
	}
	return float64(r.WeightBytes) / 1e6 / r.WeightDuration.Seconds()
}

// shard is one safetensors file to write.
type shard struct {
	name    string
	tensors []model.TensorInfo // in file order (sorted by name)
	bytes   int64
}

// Write writes the checkpoint. On error or cancellation it removes the
// files it created.
func Write(ctx context.Context, o Options) (Result, error) {
	start := time.Now()
	if o.DType == "" {
		o.DType = "bf16"
	}
	d, err := prepare(o)
	if err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("create output directory: %w", err)
	}

	res := Result{Dir: o.OutDir, Config: d.cfg, Params: d.cfg.NumParams(), TokenizerSource: d.tok.source}
	out := &outFiles{dir: o.OutDir}
	if o.Force {
		// A previous model's shards would otherwise mix with ours.
		removeOldWeights(o.OutDir)
	}
	if err := out.writeWeights(ctx, o, d, &res); err != nil {
		out.cleanup()
		return Result{}, err
	}
	files := map[string][]byte{model.ConfigFile: d.cfgJSON, "generation_config.json": d.genJSON}
	for name, b := range d.tok.files {
		files[name] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := out.writeFile(n, files[n]); err != nil {
			out.cleanup()
			return Result{}, err
		}
	}
	res.Files = append(append([]string(nil), res.Shards...), names...)
	if len(res.Shards) > 1 {
		res.Files = append(res.Files, model.IndexFile)
	}
	sort.Strings(res.Files)
	res.Duration = time.Since(start)
	return res, nil
}

// draft is what Write checks and encodes before it writes anything.
type draft struct {
	dt               model.DType
	cfg              model.Config
	cfgJSON, genJSON []byte
	tok              *tokFiles
}

// prepare checks o (the preset, the dtype, the output directory unless
// o.Force) and the tokenizer, and encodes config.json, read back as the
// engine reads it, and generation_config.json.
func prepare(o Options) (draft, error) {
	arch := model.Arch(strings.ToLower(o.Arch))
	shape, err := PresetShape(arch, o.Preset)
	if err != nil {
		return draft{}, err
	}
	dt, err := model.ParseDType(o.DType)
	if err != nil {
		return draft{}, err
	}
	if o.OutDir == "" {
		return draft{}, errors.New("synth: no output directory given (--out DIR)")
	}
	if !o.Force {
		for _, f := range []string{model.ConfigFile, model.SingleWeightFile, model.IndexFile} {
			if _, err := os.Stat(filepath.Join(o.OutDir, f)); err == nil {
				return draft{}, fmt.Errorf("%s: %w (%s exists); pick an empty directory or pass --force", o.OutDir, ErrOutDirInUse, f)
			}
		}
	}
	tok, err := loadTokenizer(o.TokenizerDir)
	if err != nil {
		return draft{}, err
	}
	ids, err := tok.specialIDs(arch)
	if err != nil {
		return draft{}, err
	}
	if err := tok.adaptTrainedConfig(arch); err != nil {
		return draft{}, err
	}
	vocab, err := vocabSize(shape.Vocab, tok.size, o.FitVocab)
	if err != nil {
		return draft{}, fmt.Errorf("tokenizer from %s: %w (%s %s); use a matching tokenizer or --fit-vocab", tok.source, err, arch, o.Preset)
	}
	cfgJSON, err := configJSON(arch, shape, vocab, dt, ids)
	if err != nil {
		return draft{}, fmt.Errorf("encode config.json: %w", err)
	}
	cfg, err := model.ParseConfig(cfgJSON)
	if err != nil {
		return draft{}, fmt.Errorf("synth produced a config it cannot read back (a bug): %w", err)
	}
	genJSON, err := generationConfigJSON(arch, ids)
	if err != nil {
		return draft{}, fmt.Errorf("encode generation_config.json: %w", err)
	}
	return draft{dt: dt, cfg: cfg, cfgJSON: cfgJSON, genJSON: genJSON, tok: tok}, nil
}

// outFiles are the files Write has created in dir, for cleanup to remove
// on an error.
type outFiles struct {
	dir     string
	written []string
}

// cleanup removes every file written so far.
func (f *outFiles) cleanup() {
	for _, name := range f.written {
		_ = os.Remove(filepath.Join(f.dir, name))
	}
}

// writeFile writes b as dir/name, counting it as written first so that a
// half-written file is cleaned up too.
func (f *outFiles) writeFile(name string, b []byte) error {
	f.written = append(f.written, name)
	if err := os.WriteFile(filepath.Join(f.dir, name), b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// writeWeights writes d's weights as safetensors shards, and their index
// when there are several, recording them in res.
func (f *outFiles) writeWeights(ctx context.Context, o Options, d draft, res *Result) error {
	shards := planShards(d.cfg, d.dt)
	wstart := time.Now()
	var total int64
	for _, s := range shards {
		total += s.bytes
	}
	w := &weightWriter{ctx: ctx, table: newValueTable(d.dt), seed: o.Seed, workers: o.Workers, progress: o.Progress, total: total}
	for _, s := range shards {
		f.written = append(f.written, s.name)
		if err := w.writeShard(filepath.Join(f.dir, s.name), s); err != nil {
			return err
		}
		res.Shards = append(res.Shards, s.name)
	}
	res.WeightDuration = time.Since(wstart)
	res.WeightBytes = total
	if len(shards) > 1 {
		idx, err := indexJSON(shards, total)
		if err != nil {
			return err
		}
		if err := f.writeFile(model.IndexFile, idx); err != nil {
			return err
		}
	}
	return nil
}

func removeOldWeights(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".safetensors") || n == model.IndexFile {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
}

// planShards splits the state dict the way huggingface_hub's
// split_torch_state_dict_into_shards does: walk tensors in state-dict
// order, start a new shard when the next tensor would push the current one
// past MaxShardSize (a tensor larger than that gets a shard of its own).
// Within a file, tensors are sorted by name, as safetensors' serializer
// orders them.
func planShards(cfg model.Config, dt model.DType) []shard {
	var shards []shard
	var cur shard
	for _, ns := range model.StateDictOrder(cfg) {
		ti := model.TensorInfo{Name: ns.Name, DType: dt, Shape: ns.Shape}
		b := ti.Bytes()
		if len(cur.tensors) > 0 && cur.bytes+b > MaxShardSize {
			shards = append(shards, cur)
			cur = shard{}
		}
		cur.tensors = append(cur.tensors, ti)
		cur.bytes += b
	}
	shards = append(shards, cur)
	for i := range shards {
		sort.Slice(shards[i].tensors, func(a, b int) bool { return shards[i].tensors[a].Name < shards[i].tensors[b].Name })
		if len(shards) == 1 {
			shards[i].name = model.SingleWeightFile
		} else {
			shards[i].name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
	}
	return shards
}

// indexJSON is model.safetensors.index.json as transformers writes it
// (json.dumps(indent=2, sort_keys=True)).
func indexJSON(shards []shard, total int64) ([]byte, error) {
	wm := map[string]string{}
	for _, s := range shards {
		for _, t := range s.tensors {
			wm[t.Name] = s.name
		}
	}
	b, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": wm}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", model.IndexFile, err)
	}
	return append(b, '\n'), nil
}

// chunkElems is the unit of parallel generation (4 MB of f32).
const chunkElems = 1 << 20

type weightWriter struct {
	ctx      context.Context
	table    *valueTable
	seed     uint64
	workers  int
	progress func(done, total int64)
	total    int64
	done     atomic.Int64
}

// writeShard writes one safetensors file: the header, then every tensor's
// data generated in chunks by parallel workers and placed with WriteAt.
func (w *weightWriter) writeShard(path string, s shard) error {
	prefix, offsets, size := model.EncodeHeader(s.tensors, map[string]string{"format": "pt"})
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(prefix); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	type job struct {
		t     int
		first int64
		n     int64
	}
	var jobs []job
	for i, t := range s.tensors {
		ne := t.Bytes() / int64(t.DType.Size())
		for first := int64(0); first < ne; first += chunkElems {
			jobs = append(jobs, job{i, first, min(chunkElems, ne-first)})
		}
	}
	workers := w.workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	size2 := int64(w.table.size)
	for range min(workers, max(len(jobs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunkElems*size2)
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= int64(len(jobs)) {
					return
				}
				j := jobs[k]
				t := s.tensors[j.t]
				kind := fillNormal
				if isNorm(t.Name) {
					kind = fillOnes
				}
				b := buf[:j.n*size2]
				w.table.fillChunk(b, kind, splitmix64(w.seed)^fnv64(t.Name), j.first, j.n)
				if _, err := f.WriteAt(b, offsets[j.t]+j.first*size2); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("write %s: %w", path, err) })
					cancel()
					return
				}
				d := w.done.Add(int64(len(b)))
				if w.progress != nil {
					w.progress(d, w.total)
				}
			}
		}()
	}
	wg.Wait()
	cerr := f.Close()
	if firstErr != nil {
		return firstErr
	}
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("synth interrupted writing %s: %w", path, err)
	}
	if cerr != nil {
		return fmt.Errorf("close %s: %w", path, cerr)
	}
	// A zero-size last tensor would leave the file short; make the size
	// exact regardless.
	if st, err := os.Stat(path); err == nil && st.Size() != size {
		if err := os.Truncate(path, size); err != nil {
			return fmt.Errorf("size %s: %w", path, err)
		}
	}
	return nil
}

// isNorm: RMSNorm weights start at one, as transformers initialises them.
func isNorm(name string) bool {
	return strings.HasSuffix(name, "norm.weight")
}

// vocabSize is the vocabulary Write gives the model: the preset's (0 for
// tiny and demo) unless fit, else the tokenizer's id count rounded up to a
// multiple of 64 (the embedding rows kernels like to see).
func vocabSize(preset, tokenizer int, fit bool) (int, error) {
	if preset == 0 || fit {
		return (tokenizer + 63) / 64 * 64, nil
	}
	if tokenizer > preset {
		return 0, fmt.Errorf("%d token ids do not fit the preset's vocabulary of %d", tokenizer, preset)
	}
	return preset, nil
}
