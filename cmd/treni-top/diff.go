package main

import "github.com/spf13/cobra"

func newDiffCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "diff BASE... --against NEW...",
		Short:   "Compare sessions and flag cold-start regressions beyond noise",
		Example: "  treni-top diff base1.jsonl base2.jsonl --against new1.jsonl new2.jsonl",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top diff'", "issue 2")
		},
	}
}
