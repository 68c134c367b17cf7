package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions"
)

// writeOutput writes data to path, or to the command's stdout when path is
// empty or "-".
func writeOutput(cmd *cobra.Command, path string, data []byte) error {
	return streamOutput(cmd, path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// streamOutput has write write to path (sessions.WriteOutputFile: a
// failure leaves nothing at path), or to the command's stdout when path is
// empty or "-" (a failed write there leaves what was written).
func streamOutput(cmd *cobra.Command, path string, write func(io.Writer) error) error {
	if path == "" || path == "-" {
		if err := write(cmd.OutOrStdout()); err != nil {
			return withExit(2, err)
		}
		return nil
	}
	n, err := sessions.WriteOutputFile(path, write)
	if err != nil {
		return withExit(2, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d bytes)\n", path, n)
	return nil
}
