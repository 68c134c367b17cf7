package main

import "github.com/spf13/cobra"

func newAttachCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "attach URL",
		Short:   "Profile a running server: samplers and warm probes, no cold stages",
		Example: "  treni-top attach http://127.0.0.1:8000 --pid 4242",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top attach'", "issue 5 (attach)")
		},
	}
}
