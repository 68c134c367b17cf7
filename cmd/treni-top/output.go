package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// writeOutput writes data to path, or to the command's stdout when path is
// empty or "-".
func writeOutput(cmd *cobra.Command, path string, data []byte) error {
	if path == "" || path == "-" {
		_, err := cmd.OutOrStdout().Write(data)
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return withExit(2, fmt.Errorf("write %s: %w", path, err))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d bytes)\n", path, len(data))
	return nil
}
