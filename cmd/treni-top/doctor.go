package main

import "github.com/spf13/cobra"

func newDoctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "doctor",
		Short:   "Report the NVIDIA driver, GPUs and CUDA libraries found, and what is missing",
		Example: "  treni-top doctor",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notLanded("'treni-top doctor'", "issue 9 (CUDA backend)")
		},
	}
}
