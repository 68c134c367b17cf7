package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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

// streamOutput has write write to path, or to the command's stdout when
// path is empty or "-". A file is written beside path under a temporary
// name and renamed once write succeeded, so that a failure leaves nothing
// at path (a device such as /dev/null is written in place instead:
// sessions.OutputTarget); a failed write to stdout leaves what was written.
func streamOutput(cmd *cobra.Command, path string, write func(io.Writer) error) error {
	if path == "" || path == "-" {
		if err := write(cmd.OutOrStdout()); err != nil {
			return withExit(2, err)
		}
		return nil
	}
	target, direct, err := sessions.OutputTarget(path)
	if err != nil {
		return withExit(2, err)
	}
	if direct {
		return writeInPlace(cmd, path, write)
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*.tmp")
	if err != nil {
		return withExit(2, fmt.Errorf("write %s: %w", path, err))
	}
	cw := &countingWriter{w: f}
	err = write(cw)
	if err == nil {
		if err = errors.Join(f.Close(), sessions.PlaceOutput(f.Name(), target, false)); err != nil {
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

// writeInPlace has write write into path, an existing file that is not a
// regular one (/dev/null, a FIFO, a terminal), opened as it is.
func writeInPlace(cmd *cobra.Command, path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return withExit(2, fmt.Errorf("write %s: %w", path, err))
	}
	cw := &countingWriter{w: f}
	if err := errors.Join(write(cw), f.Close()); err != nil {
		return withExit(2, fmt.Errorf("write %s: %w", path, err))
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
