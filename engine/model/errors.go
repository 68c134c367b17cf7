package model

import (
	"errors"
	"fmt"

	"github.com/treni-top/treni-top/engine/regfile"
)

// Sentinel errors of the index build and config parse. Every failure wraps
// exactly one of them, so callers and tests tell causes apart with errors.Is,
// and a *TensorError (errors.As) carries the file and tensor it concerns.
var (
	// ErrBadConfig: config.json is not valid JSON or has impossible values.
	ErrBadConfig = errors.New("invalid config.json")
	// ErrUnknownArch: config.json names an architecture this engine lacks.
	ErrUnknownArch = errors.New("unsupported model architecture")
	// ErrUnsupported: a config feature this engine does not implement
	// (another rope_scaling type, sliding window, MLP bias, activation).
	ErrUnsupported = errors.New("unsupported model feature")
	// ErrNoWeights: neither model.safetensors nor an index is present.
	ErrNoWeights = errors.New("no safetensors weights found")
	// ErrBadIndex: model.safetensors.index.json is malformed or disagrees
	// with the shards' headers.
	ErrBadIndex = errors.New("invalid model.safetensors.index.json")
	// ErrBadHeader: a safetensors header is not the JSON the format defines.
	ErrBadHeader = errors.New("malformed safetensors header")
	// ErrHeaderPastEOF: the header length prefix points past the end of
	// the file (a truncated download or not a safetensors file).
	ErrHeaderPastEOF = errors.New("safetensors header length runs past end of file")
	// ErrTruncated: a tensor's data runs past the end of the file.
	ErrTruncated = errors.New("tensor data runs past end of file (truncated file)")
	// ErrBadDType: a dtype that is unknown or not supported.
	ErrBadDType = errors.New("unsupported dtype")
	// ErrByteLength: shape × dtype size disagrees with the data offsets.
	ErrByteLength = errors.New("tensor byte length does not match its shape and dtype")
	// ErrOverlap: two tensors share bytes of the data section.
	ErrOverlap = errors.New("tensors overlap in the data section")
	// ErrBadOffset: a tensor does not begin where the one before it (in
	// data order) ends, or the first does not begin at the start of the
	// data section: the reference safetensors library's InvalidOffset
	// ("invalid offset for tensor"). The bytes in between would be read
	// at load for nothing.
	ErrBadOffset = errors.New("invalid offset for tensor")
	// ErrNotCovered: bytes follow the last tensor's data. The reference
	// library refuses such a file (MetadataIncompleteBuffer, worded
	// "incomplete metadata, file not fully covered"): the data section
	// must end where the file ends.
	ErrNotCovered = errors.New("incomplete metadata, file not fully covered")
	// ErrNotRegular: config.json, the index or a weight file is not a
	// regular file (a named pipe, a directory, a device, a socket), which
	// could block the load forever or be read without end.
	ErrNotRegular = regfile.ErrNotRegular
	// ErrDuplicateTensor: the same name appears twice (in one header or in
	// two shards).
	ErrDuplicateTensor = errors.New("duplicate tensor")
	// ErrMissingTensor: the architecture needs a tensor the checkpoint lacks.
	ErrMissingTensor = errors.New("missing tensor")
	// ErrUnexpectedTensor: the checkpoint has a tensor the architecture
	// does not use (usually a config that does not match the weights).
	ErrUnexpectedTensor = errors.New("unexpected tensor")
	// ErrWrongShape: a tensor's shape differs from what config.json implies.
	ErrWrongShape = errors.New("tensor shape does not match config.json")
	// ErrNoTensor: Checkpoint.Tensor was asked for a name it does not hold.
	ErrNoTensor = errors.New("no such tensor")
)

// TensorError says which file and tensor a validation failure concerns.
// Err is one of the sentinels above (possibly wrapped with detail).
type TensorError struct {
	// File is the path of the safetensors file (or index) at fault.
	File string
	// Tensor is the tensor name, empty when the failure concerns the file.
	Tensor string
	// Err is the cause; errors.Is reaches the sentinel through it.
	Err error
}

// Error names the file and tensor first, because that is what the user
// needs to find the broken shard.
func (e *TensorError) Error() string {
	if e.Tensor == "" {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s: tensor %q: %v", e.File, e.Tensor, e.Err)
}

// Unwrap gives errors.Is access to the sentinel.
func (e *TensorError) Unwrap() error { return e.Err }

func tensorErr(file, tensor string, err error) error {
	return &TensorError{File: file, Tensor: tensor, Err: err}
}
