package main

import "github.com/spf13/cobra"

func newRunCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "run [flags] [-- CMD ARGS...]",
		Short:   "Launch a target (built-in engine or any server command) and trace its cold start",
		Example: "  treni-top run -- vllm serve Qwen/Qwen3-4B",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top run'", "issue 5 (launcher)")
		},
	}
}
