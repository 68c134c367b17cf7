package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/model/synth"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Create, inspect and tokenize with model directories (synth, inspect, tokenize)",
		Example: `  treni-top model synth --arch qwen3 --preset tiny --out ./qwen3-tiny
  treni-top model inspect ./qwen3-tiny`,
	}
	cmd.AddCommand(newModelSynthCmd(), newModelInspectCmd(), newModelTokenizeCmd())
	return cmd
}

// newModelSynthCmd is `treni-top model synth`.
func newModelSynthCmd() *cobra.Command {
	var o synth.Options
	cmd := &cobra.Command{
		Use:   "synth --arch ARCH --preset PRESET --out DIR",
		Short: "Write a random-weight checkpoint of a real architecture in Hugging Face layout",
		Long: `Write a random-weight checkpoint in exactly the Hugging Face layout:
config.json, generation_config.json, safetensors (sharded at 5 GB like
save_pretrained, with model.safetensors.index.json), and tokenizer files.

Presets carry the real models' shapes:
  qwen3: 0.6b 1.7b 4b 8b = Qwen3-0.6B/1.7B/4B/8B
  qwen2: 0.6b 1.7b 4b 8b = Qwen2.5-0.5B/1.5B/3B/7B
  llama: 0.6b 1.7b = Llama-3.2-1B, 4b = Llama-3.2-3B, 8b = Llama-3.1-8B
  tiny: a few MB for tests; demo: ~160M parameters, the built-in engine's default.
Weights are drawn like transformers' init (normal, std 0.02; norms at one) and
are the same bytes for the same --seed. Without --tokenizer a small byte-level
BPE tokenizer is trained on text shipped in the binary; tiny and demo then take
its vocabulary size, the real presets keep the real vocabulary size (with
--fit-vocab they take the tokenizer's too, keeping their layer shapes).`,
		Example: `  treni-top model synth --arch qwen3 --preset 0.6b --out ./qwen3-0.6b
  treni-top model synth --arch llama --preset tiny --out ./llama-tiny --seed 7 --dtype f32
  treni-top model synth --arch qwen3 --preset 4b --out ./q4b --tokenizer ./Qwen3-4B`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Arch == "" || o.Preset == "" || o.OutDir == "" {
				return withExit(2, errors.New("model synth needs --arch, --preset and --out (see --help)"))
			}
			res, err := synth.Write(cmd.Context(), o)
			if err != nil {
				if errors.Is(err, model.ErrUnknownArch) || errors.Is(err, synth.ErrBadPreset) || errors.Is(err, model.ErrBadDType) || errors.Is(err, synth.ErrOutDirInUse) {
					return withExit(2, err)
				}
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s: %s %s, %d parameters, %s weights in %d shard(s)\n",
				res.Dir, res.Config.Arch, o.Preset, res.Params, res.Config.TorchDType, len(res.Shards))
			fmt.Fprintf(out, "weights: %.1f MB in %.2f s (%.0f MB/s); tokenizer: %s; total %.2f s\n",
				float64(res.WeightBytes)/1e6, res.WeightDuration.Seconds(), res.WeightMBps(), res.TokenizerSource, res.Duration.Seconds())
			fmt.Fprintf(out, "files: %s\n", strings.Join(res.Files, ", "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Arch, "arch", "", "architecture: qwen3, qwen2 or llama")
	f.StringVar(&o.Preset, "preset", "", "size: tiny, demo, 0.6b, 1.7b, 4b or 8b")
	f.StringVar(&o.OutDir, "out", "", "output directory (created if missing)")
	f.Uint64Var(&o.Seed, "seed", 0, "weight seed; the same seed writes the same bytes")
	f.StringVar(&o.DType, "dtype", "bf16", "weight dtype: bf16, f16 or f32")
	f.BoolVar(&o.FitVocab, "fit-vocab", false, "size the vocabulary to the tokenizer (real layer shapes, fewer embedding rows), so every generated token prints text with the small trained tokenizer")
	f.StringVar(&o.TokenizerDir, "tokenizer", "", "copy tokenizer.json and tokenizer_config.json from this directory instead of training a small tokenizer")
	f.BoolVar(&o.Force, "force", false, "replace a model already in --out")
	return cmd
}

// newModelInspectCmd is `treni-top model inspect`.
func newModelInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect DIR",
		Short: "Describe a model directory: architecture, parameters, dtypes, shards, tokenizer",
		Long: `Open a Hugging Face model directory the way the built-in engine does
(config.json, every safetensors header, full validation of the tensor index)
and describe it: architecture, parameter count, bytes per dtype, shards,
tokenizer files, and what the index build found and how long it took (the
tensor_index_build stage). A malformed checkpoint exits 2 with an error that
names the file and the tensor.`,
		Example: `  treni-top model inspect ./qwen3-0.6b
  treni-top model inspect ./qwen3-0.6b --json | jq .index`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := model.Open(args[0])
			if err != nil {
				return withExit(2, err)
			}
			defer c.Close()
			s := c.Summary()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			return s.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
