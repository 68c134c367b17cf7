// Package regfile opens the engine's input files (checkpoint JSON and
// weights, tokenizer files) so that anything other than a regular file is
// refused at once instead of blocking: opening a named pipe for reading
// waits for a writer, forever and deaf to signals, which would hang
// `serve` in loading (issue 42). It is a leaf: engine/model and
// engine/tokenizer both use it.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped by every refusal of a file that is not a
// regular file (a FIFO, a directory, a device, a socket).
var ErrNotRegular = errors.New("not a regular file")

// Open opens path for reading and refuses anything that is not a regular
// file (a symlink to one is fine: Hugging Face's cache links every file
// to its blob). The open itself does not block: the file is opened
// non-blocking and checked with fstat on the descriptor, which also
// leaves no window between a check and the open. O_NONBLOCK has no
// effect on reads of a regular file. A refusal wraps ErrNotRegular and
// says what the file is; other errors are the open's own.
func Open(path string) (*os.File, fs.FileInfo, error) {
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
		return nil, nil, fmt.Errorf("%w: it is %s", ErrNotRegular, Kind(st.Mode()))
	}
	return f, st, nil
}

// ReadFile is os.ReadFile through Open, refusing a file larger than limit
// bytes before reading it. The errors of the open keep their type
// (errors.Is(err, fs.ErrNotExist) still works).
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d expected of it; is it the right file?", path, st.Size(), limit)
	}
	// Sized from the stat, as os.ReadFile does, so a read allocates the
	// file once (a tokenizer cache hit must not allocate 2-4x what it keeps).
	b := make([]byte, 0, st.Size()+1)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, fmt.Errorf("%s grew past %d bytes while it was read", path, limit)
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// Kind names a non-regular file type for an error message.
func Kind(m fs.FileMode) string {
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
