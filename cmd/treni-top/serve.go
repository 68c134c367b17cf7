package main

import "github.com/spf13/cobra"

func newServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "serve --model DIR",
		Short:   "Run the built-in inference engine as an OpenAI-compatible server",
		Example: "  treni-top serve --model ./qwen3-tiny --addr 127.0.0.1:8000",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top serve'", "issue 4 (built-in engine server)")
		},
	}
}
