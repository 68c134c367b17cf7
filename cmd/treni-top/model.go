package main

import "github.com/spf13/cobra"

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "model",
		Short:   "Create, inspect and tokenize with model directories (synth, inspect, tokenize)",
		Example: "  treni-top model synth --arch qwen3 --preset tiny --out ./qwen3-tiny",
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "synth",
		Short:   "Write a random-weight checkpoint of a real architecture in Hugging Face layout",
		Example: "  treni-top model synth --arch qwen3 --preset 0.6b --out ./qwen3-0.6b",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top model synth'", "issue 3 (model layer)")
		},
	}, &cobra.Command{
		Use:     "inspect DIR",
		Short:   "Describe a model directory: architecture, parameters, dtypes, shards, tokenizer",
		Example: "  treni-top model inspect ./qwen3-0.6b --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top model inspect'", "issue 3 (model layer)")
		},
	}, newModelTokenizeCmd())
	return cmd
}
