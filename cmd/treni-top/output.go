package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// writeOutput writes data to path, or to the command's stdout when path is
// empty or "-".
func writeOutput(cmd *cobra.Command, path string, data []byte) error {
	return streamOutput(cmd, path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// streamOutput has write write to path, or to the command's stdout when
// path is empty or "-". A file is written beside path under a temporary
// name and renamed once write succeeded, so that a failure leaves nothing
// at path; a failed write to stdout leaves what was written.
func streamOutput(cmd *cobra.Command, path string, write func(io.Writer) error) error {
	if path == "" || path == "-" {
		if err := write(cmd.OutOrStdout()); err != nil {
			return withExit(2, err)
		}
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return withExit(2, fmt.Errorf("write %s: %w", path, err))
	}
	cw := &countingWriter{w: f}
	err = write(cw)
	if err == nil {
		if err = errors.Join(f.Chmod(0o644), f.Close(), os.Rename(f.Name(), path)); err != nil {
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return withExit(2, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d bytes)\n", path, cw.n)
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
