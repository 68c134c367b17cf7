package sessions

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// OutputTarget resolves an output path a user gave (report -o, import -o)
// for a writer that writes under a temporary name beside the file and
// renames it into place, so that a failure leaves nothing at the path:
//   - a path that does not exist, or a regular file, is the target itself;
//     a symlink to one resolves to the file it names, so that the rename
//     replaces that file and the link stays a link;
//   - an existing path that is not a regular file (/dev/null, a FIFO, a
//     terminal) is direct: it is opened and written in place, since a
//     rename would put a regular file where the device node was;
//   - a directory is an error.
func OutputTarget(path string) (target string, direct bool, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A dangling symlink is written through, as a plain create would.
		if dest, rerr := os.Readlink(path); rerr == nil {
			if !filepath.IsAbs(dest) {
				dest = filepath.Join(filepath.Dir(path), dest)
			}
			return dest, false, nil
		}
		return path, false, nil
	case err != nil:
		return "", false, fmt.Errorf("output %s: %w", path, err)
	case fi.IsDir():
		return "", false, fmt.Errorf("output %s is a directory: give a file name", path)
	case !fi.Mode().IsRegular():
		return path, true, nil
	}
	target, err = filepath.EvalSymlinks(path)
	if err != nil {
		return "", false, fmt.Errorf("output %s: %w", path, err)
	}
	return target, false, nil
}

// TempDirFor is where a temporary file for target goes: beside it, so
// that the rename stays on one file system, or the system's temporary
// directory for a direct target (a device's directory is no place for a
// file).
func TempDirFor(target string, direct bool) string {
	if direct {
		return os.TempDir()
	}
	return filepath.Dir(target)
}

// PlaceOutput puts the finished, closed temporary file tmp at target as
// OutputTarget resolved it: renamed there (readable as a created file is),
// or, for a direct target, copied into it and removed.
func PlaceOutput(tmp, target string, direct bool) error {
	if !direct {
		// CreateTemp makes the file readable by its owner only.
		if err := os.Chmod(tmp, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, target)
	}
	defer os.Remove(tmp)
	in, err := os.Open(tmp)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// WriteOutputFile has write write the output file path and returns how
// many bytes it wrote. The file is written beside its target (see
// OutputTarget) under a temporary name and renamed once write succeeded,
// so that a failure leaves nothing at path; a path that is not a regular
// file (/dev/null, a FIFO) is written in place.
func WriteOutputFile(path string, write func(io.Writer) error) (int64, error) {
	target, direct, err := OutputTarget(path)
	if err != nil {
		return 0, err
	}
	var f *os.File
	if direct {
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
	} else {
		f, err = os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*.tmp")
	}
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	cw := &countingWriter{w: f}
	err = errors.Join(write(cw), f.Close())
	if err == nil && !direct {
		err = PlaceOutput(f.Name(), target, false)
	}
	if err != nil {
		if !direct {
			os.Remove(f.Name())
		}
		return cw.n, fmt.Errorf("write %s: %w", path, err)
	}
	return cw.n, nil
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
