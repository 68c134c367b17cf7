package main

import "github.com/spf13/cobra"

// newModelTokenizeCmd is `treni-top model tokenize`.
func newModelTokenizeCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "tokenize DIR TEXT...",
		Short:   "Tokenize text with a model directory's tokenizer (ids and pieces)",
		Example: "  treni-top model tokenize ./qwen3-tiny 'Hello, world!' --json",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top model tokenize'", "issue 3 (tokenizer)")
		},
	}
}
