package main

import "github.com/spf13/cobra"

func newReplayCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "replay FILE",
		Short:   "Replay a recorded session in the TUI at its recorded pace",
		Example: "  treni-top replay session.jsonl --speed 4",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top replay'", "issue 2")
		},
	}
}
