package main

import "github.com/spf13/cobra"

func newImportCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "import FILE -o SESSION",
		Short:   "Turn an existing server log into a session",
		Example: "  treni-top import --kind vllm vllm.log -o vllm.jsonl",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top import'", "issue 5 (import)")
		},
	}
}
