package model

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseHeader(t *testing.T) {
	h := `{"__metadata__":{"format":"pt"},"a\u00e9\ud83d\ude00":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12],"extra":{"x":[1,-2.5e3,true,null]}},` +
		` "b" : { "shape" : [] , "data_offsets" : [12,16], "dtype":"F32" } }`
	es, meta, err := parseHeader([]byte(h))
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "pt" || len(es) != 2 {
		t.Fatalf("meta %v entries %v", meta, es)
	}
	if es[0].Name != "aé😀" || es[0].DType != "BF16" || !slices.Equal(es[0].Shape, []int{2, 3}) || es[0].Begin != 0 || es[0].End != 12 {
		t.Fatalf("%+v", es[0])
	}
	if es[1].Name != "b" || len(es[1].Shape) != 0 || es[1].End != 16 {
		t.Fatalf("%+v", es[1])
	}
	bad := []string{
		``, `{`, `[]`, `{"a":1}`, `{"a":{"dtype":"BF16","shape":[1]}}`, `{"a":{"dtype":"BF16","shape":[-1],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"BF16","shape":[1.5],"data_offsets":[0,2]}}`, `{"a":{"dtype":"BF16","shape":[1],"data_offsets":[2,0]}}`,
		`{"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2,4]}}`, `{"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}} x`,
		`{"a":{"dtype":7,"shape":[1],"data_offsets":[0,2]}}`, `{"__metadata__":{"k":1}}`, "{\"a\n\":{}}",
		`{"a":{"dtype":"BF16","shape":[01],"data_offsets":[0,2]}}`, `{"a":{"dtype":"BF16","shape":[99999999999999999999],"data_offsets":[0,2]}}`,
	}
	for _, b := range bad {
		if _, _, err := parseHeader([]byte(b)); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%q: err = %v, want ErrBadHeader", b, err)
		}
	}
	if _, _, err := parseHeader([]byte(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}`)); !errors.Is(err, ErrDuplicateTensor) {
		t.Errorf("duplicate key: err = %v", err)
	}
}

func TestEncodeHeaderRoundTrip(t *testing.T) {
	ts := []TensorInfo{{"x\"y\n", BF16, []int{3, 5}}, {"z", F32, []int{7}}, {"e", F16, []int{0, 4}}}
	prefix, offs, size := EncodeHeader(ts, map[string]string{"format": "pt"})
	if len(prefix)%8 != 0 {
		t.Fatalf("data section not 8-byte aligned: prefix %d bytes", len(prefix))
	}
	if size != int64(len(prefix))+30+28 || offs[1] != int64(len(prefix))+30 {
		t.Fatalf("size %d offsets %v", size, offs)
	}
	es, meta, err := parseHeader(prefix[8:])
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "pt" || len(es) != 3 || es[0].Name != "x\"y\n" || es[2].Begin != es[2].End {
		t.Fatalf("%v %+v", meta, es)
	}
}

// stdHeader is the reference: the same schema decoded with encoding/json.
func stdHeader(b []byte) ([]headerEntry, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, false
	}
	var out []headerEntry
	for k, v := range m {
		if k == "__metadata__" {
			var md map[string]string
			if json.Unmarshal(v, &md) != nil {
				return nil, false
			}
			continue
		}
		var e struct {
			DType   *string `json:"dtype"`
			Shape   *[]int  `json:"shape"`
			Offsets *[]int  `json:"data_offsets"`
		}
		if json.Unmarshal(v, &e) != nil || e.DType == nil || e.Shape == nil || e.Offsets == nil || len(*e.Offsets) != 2 {
			return nil, false
		}
		out = append(out, headerEntry{Name: k, DType: *e.DType, Shape: *e.Shape, Begin: int64((*e.Offsets)[0]), End: int64((*e.Offsets)[1])})
	}
	return out, true
}

// FuzzParseHeader: never panics, and whatever the hand parser accepts,
// encoding/json accepts with the same entries.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`))
	f.Add([]byte(`{"a\u00e9":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":[{"y":null}]}}`))
	f.Add([]byte(`{}`))
	prefix, _, _ := EncodeHeader([]TensorInfo{{"model.embed_tokens.weight", BF16, []int{16, 8}}, {"model.norm.weight", BF16, []int{8}}}, map[string]string{"format": "pt"})
	f.Add(prefix[8:])
	f.Fuzz(func(t *testing.T, data []byte) {
		es, _, err := parseHeader(data)
		if err != nil {
			if !errors.Is(err, ErrBadHeader) && !errors.Is(err, ErrDuplicateTensor) {
				t.Fatalf("error without a sentinel: %v", err)
			}
			return
		}
		ref, ok := stdHeader(data)
		if !ok {
			t.Fatalf("hand parser accepted what encoding/json rejects: %q", data)
		}
		if len(ref) != len(es) {
			t.Fatalf("%d entries, encoding/json %d", len(es), len(ref))
		}
		byName := map[string]headerEntry{}
		for _, e := range ref {
			byName[e.Name] = e
		}
		for _, e := range es {
			r, ok := byName[e.Name]
			if !ok || r.DType != e.DType || !slices.Equal(r.Shape, e.Shape) || r.Begin != e.Begin || r.End != e.End {
				t.Fatalf("entry %+v, encoding/json %+v", e, r)
			}
		}
	})
}

// writeHeaderOnly writes a sparse safetensors file: the real header, then
// a hole up to the full size, so a 4B-shaped checkpoint costs no disk.
func writeHeaderOnly(tb testing.TB, path string, ts []TensorInfo) {
	tb.Helper()
	prefix, _, size := EncodeHeader(ts, map[string]string{"format": "pt"})
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := f.Write(prefix); err != nil {
		tb.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// qwen3_4B is Qwen3-4B's shape.
var qwen3_4B = map[string]any{
	"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728,
	"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
	"tie_word_embeddings": true, "rope_theta": 1000000.0, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
	"bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
}

// BenchmarkIndexBuild opens a Qwen3-4B-shaped checkpoint (two 5 GB-capped
// shards as save_pretrained writes them, header-only sparse files): mmap,
// header parse and validation — the tensor_index_build stage. Target < 5 ms.
func BenchmarkIndexBuild(b *testing.B) {
	dir := b.TempDir()
	cfgJSON := mustJSON(b, qwen3_4B)
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), cfgJSON, 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := ParseConfig(cfgJSON)
	if err != nil {
		b.Fatal(err)
	}
	var shards [][]TensorInfo
	var cur []TensorInfo
	var curBytes int64
	wm := map[string]string{}
	for _, ns := range StateDictOrder(cfg) {
		ti := TensorInfo{ns.Name, BF16, ns.Shape}
		if curBytes+ti.Bytes() > 5_000_000_000 && len(cur) > 0 {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, ti)
		curBytes += ti.Bytes()
	}
	shards = append(shards, cur)
	for i, s := range shards {
		name := "model-0000" + string(rune('1'+i)) + "-of-0000" + string(rune('0'+len(shards))) + ".safetensors"
		writeHeaderOnly(b, filepath.Join(dir, name), s)
		for _, ti := range s {
			wm[ti.Name] = name
		}
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), mustJSON(b, map[string]any{"weight_map": wm}), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := OpenWithConfig(dir, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if c.Stats.Tensors != 398 {
			b.Fatalf("%d tensors", c.Stats.Tensors)
		}
		c.Close()
	}
}
