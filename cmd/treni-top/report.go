package main

import "github.com/spf13/cobra"

func newReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "report FILE",
		Short:   "Print a session's stage table and cold/warm request summary (md, json, chrome)",
		Example: "  treni-top report session.jsonl --format md",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top report'", "issue 2")
		},
	}
}
