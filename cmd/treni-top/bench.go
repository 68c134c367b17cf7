package main

import "github.com/spf13/cobra"

func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "bench --url URL",
		Short:   "Run serving workloads against an OpenAI-compatible server",
		Example: "  treni-top bench --url http://127.0.0.1:8000 --workload baseline",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top bench'", "issue 8 (bench)")
		},
	}
}
