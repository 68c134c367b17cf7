package model

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// Summary is what `treni-top model inspect` reports about an opened
// checkpoint.
type Summary struct {
	Dir           string   `json:"dir"`
	Arch          Arch     `json:"arch"`
	Architectures []string `json:"architectures"`
	// Params counts the elements of every tensor in the files.
	Params int64 `json:"params"`
	// ConfigParams is what config.json implies (tied embeddings once).
	ConfigParams   int64            `json:"config_params"`
	BytesByDType   map[string]int64 `json:"bytes_by_dtype"`
	TensorsByDType map[string]int   `json:"tensors_by_dtype"`
	Shards         []File           `json:"shards"`
	// TokenizerFiles are the tokenizer files present in Dir.
	TokenizerFiles []string `json:"tokenizer_files"`
	Config         Config   `json:"config"`
	// Index is the tensor_index_build stage: files, tensors, bytes,
	// header bytes and its duration.
	Index IndexSummary `json:"index"`
}

// IndexSummary is IndexStats in units a script reads without conversion.
type IndexSummary struct {
	Files       int     `json:"files"`
	Tensors     int     `json:"tensors"`
	Bytes       int64   `json:"bytes"`
	HeaderBytes int64   `json:"header_bytes"`
	DurationMS  float64 `json:"duration_ms"`
	// Validated lists what the build checked, so the report says what a
	// clean result means.
	Validated []string `json:"validated"`
}

// TokenizerFileNames are the files a model directory's tokenizer may use.
var tokenizerFileNames = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model"}

// Summary describes the checkpoint.
func (c *Checkpoint) Summary() Summary {
	s := Summary{Dir: c.Dir, Arch: c.Config.Arch, Architectures: c.Config.Architectures, ConfigParams: c.Config.NumParams(),
		BytesByDType: map[string]int64{}, TensorsByDType: map[string]int{}, Shards: c.Files, Config: c.Config,
		TokenizerFiles: []string{}}
	for _, t := range c.Tensors {
		s.Params += int64(t.NumElements())
		s.BytesByDType[t.DType.String()] += int64(len(t.Data))
		s.TensorsByDType[t.DType.String()]++
	}
	for _, f := range tokenizerFileNames {
		if _, err := os.Stat(filepath.Join(c.Dir, f)); err == nil {
			s.TokenizerFiles = append(s.TokenizerFiles, f)
		}
	}
	s.Index = IndexSummary{Files: c.Stats.Files, Tensors: c.Stats.Tensors, Bytes: c.Stats.Bytes, HeaderBytes: c.Stats.HeaderBytes,
		DurationMS: float64(c.Stats.Duration.Microseconds()) / 1000,
		Validated: []string{"dtype sizes", "shape × dtype = byte length", "offsets inside the data section", "no overlapping tensors",
			"no duplicate names", "index weight_map agrees with shard headers", "every tensor the architecture needs, with its shape", "no unexpected tensors"}}
	return s
}

// WriteText prints the summary for a human.
func (s Summary) WriteText(w io.Writer) error {
	c := s.Config
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	p("directory", "%s", s.Dir)
	p("architecture", "%s (%s)", s.Arch, strings.Join(s.Architectures, ", "))
	p("parameters", "%s (%d)", humanCount(s.Params), s.Params)
	if s.ConfigParams != s.Params {
		p("", "config.json implies %d (tied lm_head stored in the files)", s.ConfigParams)
	}
	p("shape", "hidden %d, intermediate %d, %d layers, %d heads / %d kv heads × head_dim %d, vocab %d",
		c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim, c.VocabSize)
	var feats []string
	if c.TieWordEmbeddings {
		feats = append(feats, "tied embeddings")
	}
	if c.QKVBias {
		feats = append(feats, "qkv bias")
	}
	if c.QKNorm {
		feats = append(feats, "q/k norm")
	}
	if c.RopeScaling != nil {
		feats = append(feats, fmt.Sprintf("rope_scaling %s ×%g", c.RopeScaling.Type, c.RopeScaling.Factor))
	}
	p("features", "rope_theta %g, rms_norm_eps %g, max positions %d; %s", c.RopeTheta, c.RMSNormEps, c.MaxPositionEmbeddings, strings.Join(feats, ", "))
	p("special tokens", "bos %d, eos %v", c.BOSTokenID, c.EOSTokenIDs)
	dts := make([]string, 0, len(s.BytesByDType))
	for d := range s.BytesByDType {
		dts = append(dts, d)
	}
	sort.Strings(dts)
	for _, d := range dts {
		p("bytes "+d, "%s in %d tensors", humanBytes(s.BytesByDType[d]), s.TensorsByDType[d])
	}
	for i, f := range s.Shards {
		k := ""
		if i == 0 {
			k = "shards"
		}
		p(k, "%s  %s, %d tensors", filepath.Base(f.Path), humanBytes(f.Size), f.Tensors)
	}
	tok := "none"
	if len(s.TokenizerFiles) > 0 {
		tok = strings.Join(s.TokenizerFiles, ", ")
	}
	p("tokenizer", "%s", tok)
	p("index build", "%d files, %d tensors, %s of headers parsed in %.3f ms: valid", s.Index.Files, s.Index.Tensors, humanBytes(s.Index.HeaderBytes), s.Index.DurationMS)
	p("", "checked: %s", strings.Join(s.Index.Validated, "; "))
	return tw.Flush()
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
