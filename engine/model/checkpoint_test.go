package model

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/treni-top/treni-top/trace"
	"golang.org/x/sys/unix"
)

var allSentinels = []error{ErrBadConfig, ErrUnknownArch, ErrUnsupported, ErrNoWeights, ErrBadIndex, ErrBadHeader,
	ErrHeaderPastEOF, ErrTruncated, ErrBadDType, ErrByteLength, ErrOverlap, ErrBadOffset, ErrNotCovered, ErrNotRegular,
	ErrDuplicateTensor, ErrMissingTensor, ErrUnexpectedTensor, ErrWrongShape, ErrNoTensor}

func TestOpenValid(t *testing.T) {
	for _, arch := range Arches() {
		for _, tied := range []bool{true, false} {
			for _, dt := range []DType{BF16, F16, F32} {
				for _, shards := range []int{1, 3} {
					name := string(arch) + "/" + dt.String()
					if tied {
						name += "/tied"
					}
					if shards > 1 {
						name += "/sharded"
					}
					t.Run(name, func(t *testing.T) {
						dir := t.TempDir()
						cfg := tinyConfig(arch, tied)
						ts := infos(t, mustJSON(t, cfg), dt)
						writeCkpt(t, dir, cfg, ts, shards)
						c, err := Open(dir)
						if err != nil {
							t.Fatal(err)
						}
						defer c.Close()
						if got, want := len(c.Tensors), len(ts); got != want {
							t.Fatalf("tensors %d, want %d", got, want)
						}
						if c.Stats.Files != shards || len(c.WeightFiles()) != shards {
							t.Fatalf("files %d / %v, want %d", c.Stats.Files, c.WeightFiles(), shards)
						}
						var total int64
						for _, ti := range ts {
							tt, err := c.Tensor(ti.Name)
							if err != nil {
								t.Fatal(err)
							}
							if tt.DType != dt || len(tt.Data) != tt.NumElements()*dt.Size() {
								t.Fatalf("%s: dtype %v len %d", ti.Name, tt.DType, len(tt.Data))
							}
							// Data must be the file bytes at Offset.
							raw, err := os.ReadFile(tt.File)
							if err != nil {
								t.Fatal(err)
							}
							if !bytes.Equal(raw[tt.Offset:tt.Offset+int64(len(tt.Data))], tt.Data) {
								t.Fatalf("%s: Data is not the file bytes at Offset %d", ti.Name, tt.Offset)
							}
							total += int64(len(tt.Data))
						}
						if c.Stats.Bytes != total {
							t.Fatalf("Stats.Bytes %d, want %d", c.Stats.Bytes, total)
						}
						_, hasHead := c.Tensors[NameLMHead]
						if hasHead == tied {
							t.Fatalf("lm_head present=%v with tied=%v", hasHead, tied)
						}
						if arch == ArchQwen2 {
							if _, err := c.Tensor(LayerTensorName(1, SuffixVBias)); err != nil {
								t.Fatal(err)
							}
						}
						if arch == ArchQwen3 {
							if tn, err := c.Tensor(LayerTensorName(1, SuffixKNorm)); err != nil || tn.Shape[0] != 4 {
								t.Fatal(err)
							}
						}
						n, err := c.Prefetch(context.Background(), 2)
						if err != nil {
							t.Fatal(err)
						}
						var fileBytes int64
						for _, f := range c.Files {
							fileBytes += f.Size
						}
						if n != fileBytes {
							t.Fatalf("Prefetch %d bytes, want %d", n, fileBytes)
						}
						if err := c.Close(); err != nil {
							t.Fatal(err)
						}
						if err := c.Close(); err != nil {
							t.Fatal("second Close:", err)
						}
					})
				}
			}
		}
	}
}

func TestShardedMatchesSingle(t *testing.T) {
	cfg := tinyConfig(ArchQwen3, false)
	ts := infos(t, mustJSON(t, cfg), BF16)
	d1, d2 := t.TempDir(), t.TempDir()
	writeCkpt(t, d1, cfg, ts, 1)
	writeCkpt(t, d2, cfg, ts, 4)
	a, err := Open(d1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(d2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(b.Files) != 4 {
		t.Fatalf("%d files", len(b.Files))
	}
	for name, ta := range a.Tensors {
		tb := b.Tensors[name]
		if tb == nil || tb.DType != ta.DType || len(tb.Data) != len(ta.Data) {
			t.Fatalf("%s differs between single and sharded", name)
		}
	}
}

func TestTensorUnknownName(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(ArchLlama, true)
	writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), BF16), 1)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Tensor("model.layers.9.mlp.up_proj.weight")
	var te *TensorError
	if !errors.Is(err, ErrNoTensor) || !errors.As(err, &te) || te.Tensor != "model.layers.9.mlp.up_proj.weight" {
		t.Fatalf("err = %v", err)
	}
}

func TestTiedCheckpointMayKeepLMHead(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(ArchQwen3, true)
	ts := infos(t, mustJSON(t, cfg), BF16)
	ts = append(ts, TensorInfo{Name: NameLMHead, DType: BF16, Shape: []int{16, 8}})
	writeCkpt(t, dir, cfg, ts, 1)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestMalformed builds one broken checkpoint per failure class and checks
// that each yields its own sentinel, and no other, and names the culprit.
func TestMalformed(t *testing.T) {
	q := LayerTensorName(0, SuffixQ)
	gate := LayerTensorName(1, SuffixGate)
	cases := []struct {
		name   string
		want   error
		tensor string // the tensor the error must name ("" = the file)
		file   string // base name the error must mention
		build  func(t *testing.T, dir string)
	}{
		{"truncated", ErrTruncated, "", SingleWeightFile, func(t *testing.T, dir string) {
			good(t, dir)
			p := filepath.Join(dir, SingleWeightFile)
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-3); err != nil {
				t.Fatal(err)
			}
		}},
		{"header past EOF", ErrHeaderPastEOF, "", SingleWeightFile, func(t *testing.T, dir string) {
			good(t, dir)
			p := filepath.Join(dir, SingleWeightFile)
			b, _ := os.ReadFile(p)
			binary.LittleEndian.PutUint64(b, uint64(len(b)))
			os.WriteFile(p, b, 0o644)
		}},
		{"shorter than prefix", ErrHeaderPastEOF, "", SingleWeightFile, func(t *testing.T, dir string) {
			good(t, dir)
			os.WriteFile(filepath.Join(dir, SingleWeightFile), []byte{1, 2, 3}, 0o644)
		}},
		{"bad JSON", ErrBadHeader, "", SingleWeightFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			writeRawST(t, filepath.Join(dir, SingleWeightFile), `{"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]`, 2)
		}},
		{"bad dtype", ErrBadDType, "x", SingleWeightFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			writeRawST(t, filepath.Join(dir, SingleWeightFile), `{"x":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,2]}}`, 2)
		}},
		{"byte length", ErrByteLength, "x", SingleWeightFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			writeRawST(t, filepath.Join(dir, SingleWeightFile), `{"x":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,6]}}`, 8)
		}},
		{"overlap", ErrOverlap, "b", SingleWeightFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			writeRawST(t, filepath.Join(dir, SingleWeightFile),
				`{"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}}`, 8)
		}},
		{"trailing bytes", ErrNotCovered, "", SingleWeightFile, func(t *testing.T, dir string) {
			good(t, dir)
			appendBytes(t, filepath.Join(dir, SingleWeightFile), []byte("tail"))
		}},
		{"gap between tensors", ErrBadOffset, "b", SingleWeightFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			writeRawST(t, filepath.Join(dir, SingleWeightFile),
				`{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}`, 12)
		}},
		{"first tensor after the start", ErrBadOffset, "a", SingleWeightFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			writeRawST(t, filepath.Join(dir, SingleWeightFile), `{"a":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}}`, 8)
		}},
		{"weights are a named pipe", ErrNotRegular, "", SingleWeightFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			mkfifo(t, filepath.Join(dir, SingleWeightFile))
		}},
		{"weights are a directory", ErrNotRegular, "", SingleWeightFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			if err := os.Mkdir(filepath.Join(dir, SingleWeightFile), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"config is a named pipe", ErrNotRegular, "", ConfigFile, func(t *testing.T, dir string) {
			mkfifo(t, filepath.Join(dir, ConfigFile))
		}},
		{"index is a named pipe", ErrNotRegular, "", IndexFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			mkfifo(t, filepath.Join(dir, IndexFile))
		}},
		{"shard is a named pipe", ErrNotRegular, "", "model-00002-of-00002.safetensors", func(t *testing.T, dir string) {
			cfg := tinyConfig(ArchQwen3, true)
			writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), BF16), 2)
			p := filepath.Join(dir, "model-00002-of-00002.safetensors")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			mkfifo(t, p)
		}},
		{"wrong shape", ErrWrongShape, gate, SingleWeightFile, func(t *testing.T, dir string) {
			cfg := tinyConfig(ArchQwen3, true)
			ts := infos(t, mustJSON(t, cfg), BF16)
			for i := range ts {
				if ts[i].Name == gate {
					ts[i].Shape = []int{ts[i].Shape[1], ts[i].Shape[0]} // transposed
				}
			}
			writeCkpt(t, dir, cfg, ts, 1)
		}},
		{"missing tensor", ErrMissingTensor, q, "", func(t *testing.T, dir string) {
			cfg := tinyConfig(ArchQwen3, true)
			ts := infos(t, mustJSON(t, cfg), BF16)
			var kept []TensorInfo
			for _, ti := range ts {
				if ti.Name != q {
					kept = append(kept, ti)
				}
			}
			writeCkpt(t, dir, cfg, kept, 1)
		}},
		{"unexpected tensor", ErrUnexpectedTensor, "model.layers.0.self_attn.rotary_emb.inv_freq", SingleWeightFile, func(t *testing.T, dir string) {
			cfg := tinyConfig(ArchQwen3, true)
			ts := append(infos(t, mustJSON(t, cfg), BF16), TensorInfo{Name: "model.layers.0.self_attn.rotary_emb.inv_freq", DType: F32, Shape: []int{2}})
			writeCkpt(t, dir, cfg, ts, 1)
		}},
		{"bias in qwen3", ErrUnexpectedTensor, LayerTensorName(0, SuffixQBias), SingleWeightFile, func(t *testing.T, dir string) {
			// Qwen2 weights under a Qwen3 config: the first bias is the
			// unexpected tensor reported (the q_norm is missing too).
			cfg := tinyConfig(ArchQwen3, true)
			ts := append(infos(t, mustJSON(t, cfg), BF16), TensorInfo{Name: LayerTensorName(0, SuffixQBias), DType: BF16, Shape: []int{8}})
			writeCkpt(t, dir, cfg, ts, 1)
		}},
		{"unknown architecture", ErrUnknownArch, "", "", func(t *testing.T, dir string) {
			cfg := tinyConfig(ArchQwen3, true)
			cfg["architectures"] = []string{"MistralForCausalLM"}
			writeConfig(t, dir, cfg)
		}},
		{"config not JSON", ErrBadConfig, "", "config.json", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ConfigFile), []byte("{hidden_size: 8"), 0o644)
		}},
		{"no weights", ErrNoWeights, "", "", func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
		}},
		{"duplicate across shards", ErrDuplicateTensor, NameFinalNorm, "model-00002-of-00002.safetensors", func(t *testing.T, dir string) {
			cfg := tinyConfig(ArchQwen3, true)
			ts := infos(t, mustJSON(t, cfg), BF16)
			writeConfig(t, dir, cfg)
			writeST(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), ts)
			writeST(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), ts[len(ts)-1:])
			wm := map[string]string{}
			for _, ti := range ts {
				wm[ti.Name] = "model-00001-of-00002.safetensors"
			}
			wm["unused"] = "model-00002-of-00002.safetensors"
			os.WriteFile(filepath.Join(dir, IndexFile), mustJSON(t, map[string]any{"weight_map": wm}), 0o644)
		}},
		{"index names wrong shard", ErrBadIndex, NameEmbed, "model-00001-of-00002.safetensors", func(t *testing.T, dir string) {
			cfg := tinyConfig(ArchQwen3, true)
			writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), BF16), 2)
			var idx weightIndex
			b, _ := os.ReadFile(filepath.Join(dir, IndexFile))
			jsonUnmarshal(t, b, &idx)
			idx.WeightMap[NameEmbed] = "model-00002-of-00002.safetensors"
			os.WriteFile(filepath.Join(dir, IndexFile), mustJSON(t, idx), 0o644)
		}},
		{"index escapes directory", ErrBadIndex, NameEmbed, IndexFile, func(t *testing.T, dir string) {
			writeConfig(t, dir, tinyConfig(ArchQwen3, true))
			os.WriteFile(filepath.Join(dir, IndexFile), mustJSON(t, map[string]any{"weight_map": map[string]string{NameEmbed: "../x.safetensors"}}), 0o644)
		}},
	}
	seen := map[error]string{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.build(t, dir)
			c, err := Open(dir)
			if err == nil {
				c.Close()
				t.Fatal("Open succeeded on a broken checkpoint")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			for _, s := range allSentinels {
				if s != tc.want && errors.Is(err, s) {
					t.Fatalf("err %v also matches %v; causes must be distinct", err, s)
				}
			}
			var te *TensorError
			if tc.tensor != "" {
				if !errors.As(err, &te) || te.Tensor != tc.tensor {
					t.Fatalf("err %v does not name tensor %q", err, tc.tensor)
				}
			}
			if tc.file != "" && !strings.Contains(err.Error(), tc.file) {
				t.Fatalf("err %v does not name file %s", err, tc.file)
			}
			if prev, ok := seen[tc.want]; ok && tc.want != ErrUnexpectedTensor && tc.want != ErrHeaderPastEOF && tc.want != ErrBadIndex &&
				tc.want != ErrBadOffset && tc.want != ErrNotRegular {
				t.Fatalf("cases %q and %q share a sentinel", prev, tc.name)
			}
			seen[tc.want] = tc.name
		})
	}
}

// mkfifo makes a named pipe at path: opening it for reading blocks until
// a writer comes, which is what Open must never do.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Skipf("cannot make a named pipe here: %v", err)
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSparseTailRefusedUnread: a valid checkpoint followed by a sparse
// 50 GiB tail (issue 42: it was read in full, 18 s and 24.6 GB RSS) is
// refused as the reference library refuses it, from the header alone: no
// page of the tail is in the page cache afterwards, so none was read.
func TestSparseTailRefusedUnread(t *testing.T) {
	dir := t.TempDir()
	good(t, dir)
	p := filepath.Join(dir, SingleWeightFile)
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	const tail = 50 << 30
	if err := os.Truncate(p, st.Size()+tail); err != nil {
		t.Skipf("cannot make a sparse 50 GiB file here: %v", err)
	}
	c, err := Open(dir)
	if err == nil {
		c.Close()
		t.Fatal("Open accepted 50 GiB of bytes after the last tensor")
	}
	if !errors.Is(err, ErrNotCovered) || !strings.Contains(err.Error(), "file not fully covered") {
		t.Fatalf("err = %v, want %v", err, ErrNotCovered)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(int64(tail))) {
		t.Errorf("err %v does not say how many bytes follow the tensors (%d)", err, int64(tail))
	}
	// Page-cache residency of the tail, past the readahead window of the
	// header's page: mincore on a fresh mapping of the file.
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off := (st.Size() + 64<<20) &^ int64(os.Getpagesize()-1)
	m, err := unix.Mmap(int(f.Fd()), off, tail-(64<<20), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	if resident != 0 {
		t.Fatalf("%d pages of the tail are in the page cache after Open: it was read", resident)
	}
}

func good(t *testing.T, dir string) {
	cfg := tinyConfig(ArchQwen3, true)
	writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), BF16), 1)
}

func writeConfig(t *testing.T, dir string, cfg map[string]any) {
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), mustJSON(t, cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzOpenFile feeds arbitrary bytes as model.safetensors: Open must
// return an error or a valid index, never panic, and every tensor's Data
// must lie inside the file.
func FuzzOpenFile(f *testing.F) {
	cfg := tinyConfig(ArchQwen3, true)
	ts := infos(f, mustJSON(f, cfg), BF16)
	prefix, _, size := EncodeHeader(ts, nil)
	good := make([]byte, size)
	copy(good, prefix)
	f.Add(good)
	f.Add(good[:len(good)/2])
	raw := `{"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(raw)))
	f.Add(append(append(b, raw...), make([]byte, 8)...))
	cfgJSON := mustJSON(f, cfg)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), cfgJSON, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, SingleWeightFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Open(dir)
		if err != nil {
			return
		}
		defer c.Close()
		for _, tt := range c.Tensors {
			if tt.Offset < 8 || tt.Offset+int64(len(tt.Data)) > int64(len(data)) {
				t.Fatalf("%s: Data [%d, +%d) outside a %d-byte file", tt.Name, tt.Offset, len(tt.Data), len(data))
			}
		}
	})
}

func TestPrefetchCancelAndStageLine(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(ArchQwen2, false)
	writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), F32), 2)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Prefetch(ctx, 4); !errors.Is(err, context.Canceled) {
		t.Fatalf("Prefetch on a cancelled context: %v", err)
	}
	l := c.Stats.StageLine()
	if l.Stage != "tensor_index_build" || l.EndNS < l.StartNS || l.Attrs["tensors"] != c.Stats.Tensors {
		t.Fatalf("%+v", l)
	}
	if _, err := trace.ParseStageLine(string(l.Marshal())); err != nil {
		t.Fatal(err)
	}
}

// TestResidencyAfterPrefetch: Residency covers every mapped byte and, once
// Prefetch has read them, finds them all in the page cache. Before that it
// is whatever the cache holds (the files were just written, so usually
// resident), never more than the total.
func TestResidencyAfterPrefetch(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(ArchQwen2, false)
	writeCkpt(t, dir, cfg, infos(t, mustJSON(t, cfg), F32), 2)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var size int64
	for _, f := range c.WeightFiles() {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		size += st.Size()
	}
	res, total, err := c.Residency()
	if err != nil {
		t.Fatal(err)
	}
	if total != size || res < 0 || res > total {
		t.Fatalf("resident %d of %d, files hold %d", res, total, size)
	}
	if _, err := c.Prefetch(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if res, total, err = c.Residency(); err != nil || res != total {
		t.Fatalf("after Prefetch: resident %d of %d (%v)", res, total, err)
	}
	c.Close()
	if res, total, err = c.Residency(); err != nil || res != 0 || total != 0 {
		t.Fatalf("after Close: resident %d of %d (%v)", res, total, err)
	}
}
