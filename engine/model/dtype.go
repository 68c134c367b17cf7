package model

import "fmt"

// DType is the element type of a tensor as stored in a safetensors file.
// Only the float types a decoder checkpoint uses are supported; anything else
// is refused at index build with ErrBadDType.
type DType uint8

// The supported element types. The zero value is invalid on purpose so that
// a forgotten field shows up as an error, not as a silent BF16.
const (
	BF16 DType = iota + 1
	F16
	F32
)

// Size is the element size in bytes (0 for an invalid DType).
func (d DType) Size() int {
	switch d {
	case BF16, F16:
		return 2
	case F32:
		return 4
	}
	return 0
}

// String is the safetensors spelling: "BF16", "F16", "F32".
func (d DType) String() string {
	switch d {
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	case F32:
		return "F32"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// TorchName is the config.json spelling ("bfloat16", "float16", "float32").
func (d DType) TorchName() string {
	switch d {
	case BF16:
		return "bfloat16"
	case F16:
		return "float16"
	case F32:
		return "float32"
	}
	return ""
}

// ParseDType accepts the safetensors spelling ("BF16"), the torch spelling
// ("bfloat16") and the short CLI spelling ("bf16").
func ParseDType(s string) (DType, error) {
	switch s {
	case "BF16", "bf16", "bfloat16":
		return BF16, nil
	case "F16", "f16", "fp16", "float16":
		return F16, nil
	case "F32", "f32", "fp32", "float32":
		return F32, nil
	}
	return 0, fmt.Errorf("dtype %q: %w (use bf16, f16 or f32)", s, ErrBadDType)
}

// dtypeFromSafetensors maps the header's dtype string. Known-but-unsupported
// types get their own message so the user learns it is not a typo.
func dtypeFromSafetensors(s string) (DType, error) {
	switch s {
	case "BF16":
		return BF16, nil
	case "F16":
		return F16, nil
	case "F32":
		return F32, nil
	case "F64", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64":
		return 0, fmt.Errorf("dtype %s is valid safetensors but not supported by this engine (convert the checkpoint to bf16, f16 or f32): %w", s, ErrBadDType)
	}
	return 0, fmt.Errorf("unknown dtype %q: %w", s, ErrBadDType)
}
