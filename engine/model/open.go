package model

import (
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// OpenRegular opens path for reading and refuses anything that is not a
// regular file (a symlink to one is fine: Hugging Face's cache links
// every file to its blob). The open itself must not block: opening a
// named pipe for reading waits for a writer, forever and deaf to
// signals, so the file is opened non-blocking and checked with fstat on
// the descriptor, which also leaves no window between a check and the
// open. O_NONBLOCK has no effect on reads of a regular file. Errors wrap
// ErrNotRegular (as a *TensorError naming the file) or the open's error.
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, tensorErr(path, "", fmt.Errorf("%w: it is %s; the model directory must hold regular files (or symlinks to them)", ErrNotRegular, fileKind(st.Mode())))
	}
	return f, st, nil
}

// maxJSONFile caps config.json and the index: real ones are kilobytes
// (a 1,000-shard index is a few megabytes), and a larger file is not one
// of them.
const maxJSONFile = 64 << 20

// readRegular is os.ReadFile through OpenRegular, refusing files larger
// than limit before reading them.
func readRegular(path string, limit int64) ([]byte, error) {
	f, st, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a model's JSON file may have; is it the right file?", path, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// fileKind names a non-regular file type for an error message.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeIrregular != 0:
		return "a file of an unknown type"
	}
	return "not a regular file (mode " + m.String() + ")"
}
