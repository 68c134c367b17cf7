package model

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/treni-top/treni-top/trace"
	"golang.org/x/sys/unix"
)

// File names of a Hugging Face model directory.
const (
	ConfigFile       = "config.json"
	SingleWeightFile = "model.safetensors"
	IndexFile        = "model.safetensors.index.json"
)

// Tensor is one weight, viewed in place in its file's read-only mapping.
type Tensor struct {
	// Name is the state-dict name ("model.layers.0.self_attn.q_proj.weight").
	Name  string
	DType DType
	// Shape is [out, in] for linear weights, as torch stores them.
	Shape []int
	// Data is a slice of the read-only mmap, len == NumElements()*DType.Size().
	// Writing to it faults; it is invalid after Checkpoint.Close. Its address
	// is aligned only as the file aligns it (save_pretrained's files align
	// every tensor to 8 bytes).
	Data []byte
	// File is the path of the safetensors file holding the tensor.
	File string
	// Offset is the absolute file offset of Data (for O_DIRECT or
	// cuFile-style readers that bypass the mapping).
	Offset int64
}

// NumElements is the product of Shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File describes one safetensors file of a checkpoint.
type File struct {
	// Path is the file's path (Dir joined with its name).
	Path string `json:"path"`
	// Size is the file size in bytes.
	Size int64 `json:"size"`
	// Tensors is how many tensors its header lists.
	Tensors int `json:"tensors"`
	// ModTime is the file's modification time when it was opened, so
	// that a reload (Reload, after a sleep) can tell the file changed.
	ModTime time.Time `json:"-"`
}

// IndexStats is what the index build found and what it cost: the
// tensor_index_build stage.
type IndexStats struct {
	Files   int
	Tensors int
	// Bytes is the sum of all tensors' data bytes.
	Bytes int64
	// HeaderBytes is the sum of the 8-byte prefixes and JSON headers read.
	HeaderBytes int64
	// Duration covers mapping the files, parsing every header and
	// validating the index against the architecture.
	Duration time.Duration
	// Start is when the index build began (wall clock), so the caller can
	// report the stage as the interval [Start, Start+Duration).
	Start time.Time
}

// Checkpoint is an opened model directory: its config and a validated index
// of every tensor, backed by one read-only mapping per file.
type Checkpoint struct {
	Dir     string
	Config  Config
	Tensors map[string]*Tensor
	Files   []File
	Stats   IndexStats

	mu   sync.Mutex
	maps [][]byte // the mapped weight files
	// owned is anonymous memory holding the weights after CopyToMemory.
	owned [][]byte
	// released is the load mode whose weights ReleaseWeights dropped
	// ("" while they are held); Reload takes them the same way.
	released string
}

type weightIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// Open reads dir/config.json, maps every safetensors file once (single
// model.safetensors, or the shards named by model.safetensors.index.json),
// parses each header once from the mapping, and validates the whole index
// against the architecture. Nothing is read twice and no weight byte is
// touched: bringing weights into RAM is Prefetch's job (page_cache stage).
// On error nothing stays mapped. Errors wrap the sentinels of errors.go and,
// for a file or tensor, a *TensorError naming it.
func Open(dir string) (*Checkpoint, error) {
	cfgPath := filepath.Join(dir, ConfigFile)
	raw, err := readRegular(cfgPath, maxJSONFile)
	if errors.Is(err, ErrNotRegular) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open model directory %s: %w (a Hugging Face model directory has config.json next to its safetensors files)", dir, err)
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	return OpenWithConfig(dir, cfg)
}

// OpenWithConfig is Open with an already parsed config (the engine parses
// config.json in runtime_init and builds the index as its own stage).
func OpenWithConfig(dir string, cfg Config) (*Checkpoint, error) {
	start := time.Now()
	c := &Checkpoint{Dir: dir, Config: cfg, Tensors: make(map[string]*Tensor)}
	if err := c.build(); err != nil {
		_ = c.Close()
		return nil, err
	}
	c.Stats.Start = start
	c.Stats.Duration = time.Since(start)
	return c, nil
}

func (c *Checkpoint) build() error {
	names, wmap, err := c.weightFileNames()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := c.mapFile(filepath.Join(c.Dir, name), name, wmap); err != nil {
			return err
		}
	}
	if wmap != nil {
		// Every tensor the index promises must be in the shard it names.
		missing := make([]string, 0)
		for t := range wmap {
			if _, ok := c.Tensors[t]; !ok {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return tensorErr(filepath.Join(c.Dir, IndexFile), missing[0],
				fmt.Errorf("%w: weight_map places it in %s but that file's header lacks it", ErrBadIndex, wmap[missing[0]]))
		}
	}
	return c.validateArch()
}

// weightFileNames returns the safetensors file names (relative to Dir) and,
// for a sharded checkpoint, the index's weight_map.
func (c *Checkpoint) weightFileNames() ([]string, map[string]string, error) {
	idxPath := filepath.Join(c.Dir, IndexFile)
	raw, err := readRegular(idxPath, maxJSONFile)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(c.Dir, SingleWeightFile)); err != nil {
			return nil, nil, fmt.Errorf("%s: %w: neither %s nor %s is readable (%v)", c.Dir, ErrNoWeights, SingleWeightFile, IndexFile, err)
		}
		return []string{SingleWeightFile}, nil, nil
	}
	if errors.Is(err, ErrNotRegular) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", idxPath, err)
	}
	var idx weightIndex
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, nil, tensorErr(idxPath, "", fmt.Errorf("%w: %v", ErrBadIndex, err))
	}
	if len(idx.WeightMap) == 0 {
		return nil, nil, tensorErr(idxPath, "", fmt.Errorf("%w: empty or missing weight_map", ErrBadIndex))
	}
	seen := make(map[string]bool)
	var names []string
	for t, f := range idx.WeightMap {
		// A shard name is a plain file name in the same directory; refuse
		// paths so an index cannot make us map files elsewhere.
		if f == "" || filepath.Base(f) != f || f == "." || f == ".." {
			return nil, nil, tensorErr(idxPath, t, fmt.Errorf("%w: shard %q is not a file name in the model directory", ErrBadIndex, f))
		}
		if !seen[f] {
			seen[f] = true
			names = append(names, f)
		}
	}
	sort.Strings(names)
	return names, idx.WeightMap, nil
}

// mapFile maps one safetensors file, parses its header from the mapping
// and adds its tensors to the index.
func (c *Checkpoint) mapFile(path, name string, wmap map[string]string) error {
	f, st, err := OpenRegular(path)
	if errors.Is(err, ErrNotRegular) {
		return err
	}
	if err != nil {
		return fmt.Errorf("open weights: %w", err)
	}
	defer f.Close()
	size := st.Size()
	if size < 8 {
		return tensorErr(path, "", fmt.Errorf("%w: file is %d bytes, shorter than the 8-byte header length", ErrHeaderPastEOF, size))
	}
	if int64(int(size)) != size {
		return tensorErr(path, "", fmt.Errorf("file of %d bytes cannot be mapped on this platform", size))
	}
	mm, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %s: %w", path, err)
	}
	c.mu.Lock()
	c.maps = append(c.maps, mm)
	c.mu.Unlock()

	hlen := binary.LittleEndian.Uint64(mm[:8])
	if hlen > uint64(size-8) {
		return tensorErr(path, "", fmt.Errorf("%w: header length %d, but the file has %d bytes after the prefix (truncated download?)", ErrHeaderPastEOF, hlen, size-8))
	}
	if hlen > maxHeaderBytes {
		return tensorErr(path, "", fmt.Errorf("%w: header of %d bytes exceeds the format's %d-byte limit", ErrBadHeader, hlen, maxHeaderBytes))
	}
	dataStart := int64(8 + hlen)
	entries, _, err := parseHeader(mm[8:dataStart])
	if err != nil {
		return tensorErr(path, "", err)
	}
	c.Stats.HeaderBytes += dataStart
	dataLen := size - dataStart

	for i := range entries {
		e := &entries[i]
		dt, err := dtypeFromSafetensors(e.DType)
		if err != nil {
			return tensorErr(path, e.Name, err)
		}
		n, ok := shapeBytes(e.Shape, dt.Size())
		if !ok || n != e.End-e.Begin {
			return tensorErr(path, e.Name, fmt.Errorf("%w: shape %v × %s (%d bytes each) vs data_offsets [%d, %d] (%d bytes)",
				ErrByteLength, e.Shape, dt, dt.Size(), e.Begin, e.End, e.End-e.Begin))
		}
		if e.End > dataLen {
			return tensorErr(path, e.Name, fmt.Errorf("%w: data_offsets end at %d but the data section has %d bytes (file %d bytes)",
				ErrTruncated, e.End, dataLen, size))
		}
		if prev, dup := c.Tensors[e.Name]; dup {
			return tensorErr(path, e.Name, fmt.Errorf("%w: also in %s", ErrDuplicateTensor, prev.File))
		}
		if wmap != nil {
			if want, ok := wmap[e.Name]; !ok {
				return tensorErr(path, e.Name, fmt.Errorf("%w: the shard holds it but weight_map does not list it", ErrBadIndex))
			} else if want != name {
				return tensorErr(path, e.Name, fmt.Errorf("%w: weight_map places it in %s, found in %s", ErrBadIndex, want, name))
			}
		}
		off := dataStart + e.Begin
		c.Tensors[e.Name] = &Tensor{Name: e.Name, DType: dt, Shape: e.Shape,
			Data: mm[off : off+n : off+n], File: path, Offset: off}
		c.Stats.Bytes += n
	}
	if err := checkCoverage(path, entries, dataLen); err != nil {
		return err
	}
	c.Files = append(c.Files, File{Path: path, Size: size, Tensors: len(entries), ModTime: st.ModTime()})
	c.Stats.Files++
	c.Stats.Tensors += len(entries)
	return nil
}

// checkCoverage checks that the tensors cover the data section exactly,
// as the reference safetensors library does (Metadata::validate, then the
// end of the last tensor against the buffer's length): in data_offsets
// order each tensor begins where the one before it ends, the first at 0,
// and the last ends where the file ends. Bytes that belong to no tensor
// would be read at load for nothing: a 1.3 MB checkpoint with a sparse
// 50 GiB tail was read in full (18 s, 24.6 GB RSS). Only the header is
// looked at here; no data byte is touched.
func checkCoverage(path string, entries []headerEntry, dataLen int64) error {
	order := make([]*headerEntry, len(entries))
	for i := range entries {
		order[i] = &entries[i]
	}
	slices.SortFunc(order, func(a, b *headerEntry) int {
		if a.Begin != b.Begin {
			return cmp.Compare(a.Begin, b.Begin)
		}
		return cmp.Compare(a.End, b.End)
	})
	var end int64
	prev := ""
	for _, e := range order {
		switch {
		case e.Begin < end && e.End > e.Begin:
			return tensorErr(path, e.Name, fmt.Errorf("%w: bytes [%d, %d) overlap %q, which ends at %d",
				ErrOverlap, e.Begin, e.End, prev, end))
		case e.Begin < end:
			return tensorErr(path, e.Name, fmt.Errorf("%w: the empty tensor sits at %d, inside %q, which ends at %d",
				ErrBadOffset, e.Begin, prev, end))
		case e.Begin > end:
			return tensorErr(path, e.Name, fmt.Errorf("%w: its data_offsets begin at %d, but the tensors before it end at %d: %d bytes belong to no tensor",
				ErrBadOffset, e.Begin, end, e.Begin-end))
		}
		end, prev = e.End, e.Name
	}
	if end != dataLen {
		return tensorErr(path, "", fmt.Errorf("%w: the tensors' data ends at byte %d of the data section, and %d bytes follow it to the end of the file "+
			"(the reference safetensors library refuses this file too; a file with something appended, or a broken copy?)", ErrNotCovered, end, dataLen-end))
	}
	return nil
}

// shapeBytes is prod(shape)*elem with overflow detection.
func shapeBytes(shape []int, elem int) (int64, bool) {
	n := uint64(elem)
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<62 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// validateArch checks the index against the tensors config.json implies:
// each present with its shape, nothing else.
func (c *Checkpoint) validateArch() error {
	want := StateDictOrder(c.Config)
	wantSet := make(map[string][]int, len(want))
	for _, w := range want {
		wantSet[w.Name] = w.Shape
		t, ok := c.Tensors[w.Name]
		if !ok {
			return tensorErr(c.Dir, w.Name, fmt.Errorf("%w: %s with hidden_size %d, %d layers needs it (config.json and weights disagree?)",
				ErrMissingTensor, c.Config.Arch, c.Config.HiddenSize, c.Config.NumLayers))
		}
		if !slices.Equal(t.Shape, w.Shape) {
			return tensorErr(t.File, w.Name, fmt.Errorf("%w: shape %v, config.json implies %v", ErrWrongShape, t.Shape, w.Shape))
		}
	}
	var extra []string
	for name, t := range c.Tensors {
		if _, ok := wantSet[name]; ok {
			continue
		}
		// Some exporters keep lm_head.weight in tied checkpoints; it is
		// the same matrix as the embedding, so tolerate it when it fits.
		if name == NameLMHead && c.Config.TieWordEmbeddings && slices.Equal(t.Shape, []int{c.Config.VocabSize, c.Config.HiddenSize}) {
			continue
		}
		extra = append(extra, name)
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		t := c.Tensors[extra[0]]
		return tensorErr(t.File, t.Name, fmt.Errorf("%w: %s does not use it (%d unexpected in all; wrong config.json for these weights?)",
			ErrUnexpectedTensor, c.Config.Arch, len(extra)))
	}
	return nil
}

// Tensor returns the named tensor; the error names it.
func (c *Checkpoint) Tensor(name string) (*Tensor, error) {
	if t, ok := c.Tensors[name]; ok {
		return t, nil
	}
	return nil, tensorErr(c.Dir, name, ErrNoTensor)
}

// WeightFiles returns the paths of the safetensors files, in index order.
func (c *Checkpoint) WeightFiles() []string {
	out := make([]string, len(c.Files))
	for i, f := range c.Files {
		out[i] = f.Path
	}
	return out
}

// Residency reports how many bytes of the mapped weight files are in the
// page cache, by mincore, without touching them: a backend that reads the
// files itself (the CUDA backend's staged upload) checks the cache instead
// of populating it through the mapping, which would build page-table
// entries for every page and count the weights in the process's RSS.
func (c *Checkpoint) Residency() (resident, total int64, err error) {
	c.mu.Lock()
	maps := slices.Clone(c.maps)
	c.mu.Unlock()
	page := unix.Getpagesize()
	var vec []byte
	for _, m := range maps {
		if len(m) == 0 {
			continue
		}
		n := (len(m) + page - 1) / page
		if cap(vec) < n {
			vec = make([]byte, n)
		}
		vec = vec[:n]
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			return 0, 0, fmt.Errorf("page-cache residency of the weights in %s (mincore): %w", c.Dir, e)
		}
		for j, v := range vec {
			if v&1 == 0 {
				continue
			}
			if j == n-1 {
				resident += int64(len(m) - j*page)
			} else {
				resident += int64(page)
			}
		}
		total += int64(len(m))
	}
	return resident, total, nil
}

// prefetchChunk is the unit of work of one Prefetch worker: large enough
// to amortise scheduling, small enough to balance two shards over 16 cores.
const prefetchChunk = 16 << 20

// prefetchCheck is how often (in bytes touched) a Prefetch worker looks at
// its context: a MiB is ~10 ms even from a 100 MB/s disk. A page fault on
// storage that stopped answering cannot be interrupted.
const prefetchCheck = 1 << 20

// Prefetch populates the page cache with every mapped byte: madvise
// WILLNEED on each mapping so the kernel starts readahead, then workers
// touch one byte per page in parallel so the call returns only when the
// bytes are resident. It returns the bytes covered. This is the page_cache
// stage. workers <= 0 means GOMAXPROCS. It stops early with ctx's error.
func (c *Checkpoint) Prefetch(ctx context.Context, workers int) (int64, error) {
	c.mu.Lock()
	maps := slices.Clone(c.maps)
	c.mu.Unlock()
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type chunk struct{ m, lo, hi int }
	var chunks []chunk
	var total int64
	for i, m := range maps {
		// WILLNEED is advisory; failure only loses readahead.
		_ = unix.Madvise(m, unix.MADV_WILLNEED)
		for lo := 0; lo < len(m); lo += prefetchChunk {
			chunks = append(chunks, chunk{i, lo, min(lo+prefetchChunk, len(m))})
		}
		total += int64(len(m))
	}
	page := unix.Getpagesize()
	var next atomic.Int64
	var sink atomic.Uint64
	var wg sync.WaitGroup
	for w := 0; w < min(workers, max(len(chunks), 1)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s uint64
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= len(chunks) {
					break
				}
				ch := chunks[k]
				m := maps[ch.m]
				for off := ch.lo; off < ch.hi; off += page {
					// A chunk from slow storage takes long; look at
					// ctx every MiB so a stop is not held for it.
					if off&(prefetchCheck-1) == 0 && ctx.Err() != nil {
						break
					}
					s += uint64(m[off])
				}
			}
			sink.Add(s) // keeps the loads observable
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("prefetch %s: %w", c.Dir, err)
	}
	return total, nil
}

// Close unmaps every file (and frees the memory CopyToMemory filled). Tensor data is invalid afterwards. Calling it
// twice is harmless.
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := errors.Join(munmapAll(c.maps), munmapAll(c.owned))
	c.maps, c.owned = nil, nil
	if err != nil {
		return fmt.Errorf("unmap %s: %w", c.Dir, err)
	}
	return nil
}

// munmapAll unmaps every mapping of ms (the files' or the owned copies')
// and joins the errors.
func munmapAll(ms [][]byte) error {
	var errs []error
	for _, m := range ms {
		if err := unix.Munmap(m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StageLine renders the index build as the engine's tensor_index_build
// stage line, with what it found as attributes.
func (s IndexStats) StageLine() trace.StageLine {
	return trace.NewStageLine(trace.StageTensorIndexBuild, s.Start, s.Start.Add(s.Duration), trace.Attrs{
		"files": s.Files, "tensors": s.Tensors, "bytes": s.Bytes, "header_bytes": s.HeaderBytes,
	})
}
