package model

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/treni-top/treni-top/engine/regfile"
)

// OpenRegular opens a checkpoint file for reading through regfile.Open,
// which refuses anything that is not a regular file without blocking (a
// named pipe would otherwise hang the load, deaf to signals). Errors wrap
// ErrNotRegular (as a *TensorError naming the file) or the open's error.
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	f, st, err := regfile.Open(path)
	if errors.Is(err, regfile.ErrNotRegular) {
		return nil, nil, tensorErr(path, "", fmt.Errorf("%w; the model directory must hold regular files (or symlinks to them)", err))
	}
	return f, st, err
}

// maxJSONFile caps config.json and the index: real ones are kilobytes
// (a 1,000-shard index is a few megabytes), and a larger file is not one
// of them.
const maxJSONFile = 64 << 20

// readRegular reads a model JSON file through OpenRegular's refusal,
// refusing files larger than limit before reading them.
func readRegular(path string, limit int64) ([]byte, error) {
	b, err := regfile.ReadFile(path, limit)
	if errors.Is(err, regfile.ErrNotRegular) {
		return nil, tensorErr(path, "", fmt.Errorf("%w; the model directory must hold regular files (or symlinks to them)", err))
	}
	return b, err
}
