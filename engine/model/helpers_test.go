package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// tinyConfig is a config.json for a 2-layer toy of each family.
func tinyConfig(arch Arch, tied bool) map[string]any {
	m := map[string]any{
		"architectures":           []string{arch.ClassName()},
		"model_type":              string(arch),
		"hidden_size":             8,
		"intermediate_size":       16,
		"num_hidden_layers":       2,
		"num_attention_heads":     2,
		"num_key_value_heads":     1,
		"head_dim":                4,
		"vocab_size":              16,
		"max_position_embeddings": 64,
		"rms_norm_eps":            1e-6,
		"rope_theta":              10000.0,
		"tie_word_embeddings":     tied,
		"bos_token_id":            1,
		"eos_token_id":            []int{2, 3},
		"torch_dtype":             "bfloat16",
		"hidden_act":              "silu",
	}
	if arch == ArchLlama {
		m["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
			"high_freq_factor": 4.0, "original_max_position_embeddings": 16}
	}
	return m
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// infos lists the tensors cfg needs, in dtype dt.
func infos(t testing.TB, cfgJSON []byte, dt DType) []TensorInfo {
	t.Helper()
	cfg, err := ParseConfig(cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	var out []TensorInfo
	for _, ns := range StateDictOrder(cfg) {
		out = append(out, TensorInfo{Name: ns.Name, DType: dt, Shape: ns.Shape})
	}
	return out
}

// writeST writes a safetensors file whose data bytes are a counter, so
// every tensor's bytes are distinct and checkable.
func writeST(t testing.TB, path string, ts []TensorInfo) {
	t.Helper()
	prefix, _, size := EncodeHeader(ts, map[string]string{"format": "pt"})
	buf := make([]byte, size)
	copy(buf, prefix)
	for i := len(prefix); i < len(buf); i++ {
		buf[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeRawST writes a file from a literal header and dataLen data bytes.
func writeRawST(t testing.TB, path, header string, dataLen int) {
	t.Helper()
	b := make([]byte, 8, 8+len(header)+dataLen)
	n := len(header)
	for i := 0; i < 8; i++ {
		b[i] = byte(n >> (8 * i))
	}
	b = append(b, header...)
	b = append(b, make([]byte, dataLen)...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeCkpt writes config.json and the tensors, split into nShards
// (1 = single model.safetensors).
func writeCkpt(t testing.TB, dir string, cfg map[string]any, ts []TensorInfo, nShards int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), mustJSON(t, cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if nShards <= 1 {
		writeST(t, filepath.Join(dir, SingleWeightFile), ts)
		return
	}
	wm := map[string]string{}
	per := (len(ts) + nShards - 1) / nShards
	for s := 0; s < nShards; s++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, nShards)
		part := ts[s*per : min((s+1)*per, len(ts))]
		for _, ti := range part {
			wm[ti.Name] = name
		}
		writeST(t, filepath.Join(dir, name), part)
	}
	idx := map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": wm}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), mustJSON(t, idx), 0o644); err != nil {
		t.Fatal(err)
	}
}

func jsonUnmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
