package main

import "github.com/spf13/cobra"

func newModelCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "model",
		Short:   "Create, inspect and tokenize with model directories (synth, inspect, tokenize)",
		Example: "  treni-top model synth --arch qwen3 --preset tiny --out ./qwen3-tiny",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top model'", "issue 3 (model layer)")
		},
	}
}
