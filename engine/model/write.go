package model

import (
	"encoding/binary"
	"strconv"
)

// TensorInfo describes a tensor to be written to a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
}

// Bytes is the tensor's data size.
func (t TensorInfo) Bytes() int64 { return numel(t.Shape) * int64(t.DType.Size()) }

// EncodeHeader lays tensors out back to back in the given order and returns
// the complete file prefix (8-byte little-endian length + JSON header,
// space-padded so the data section starts 8-byte aligned, as the reference
// implementation writes it), each tensor's absolute file offset, and the
// total file size. The JSON lists "__metadata__" first, then the tensors in
// data order, like safetensors' serializer.
func EncodeHeader(tensors []TensorInfo, metadata map[string]string) (prefix []byte, offsets []int64, fileSize int64) {
	b := make([]byte, 8, 64+len(tensors)*96)
	b = append(b, '{')
	if len(metadata) > 0 {
		b = append(b, `"__metadata__":{`...)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sortStrings(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, metadata[k])
		}
		b = append(b, '}')
	}
	rel := make([]int64, len(tensors))
	var pos int64
	for i, t := range tensors {
		if i > 0 || len(metadata) > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t.Name)
		b = append(b, `:{"dtype":"`...)
		b = append(b, t.DType.String()...)
		b = append(b, `","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, `],"data_offsets":[`...)
		rel[i] = pos
		b = strconv.AppendInt(b, pos, 10)
		b = append(b, ',')
		pos += t.Bytes()
		b = strconv.AppendInt(b, pos, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	binary.LittleEndian.PutUint64(b[:8], uint64(len(b)-8))
	offsets = make([]int64, len(tensors))
	for i := range rel {
		offsets[i] = int64(len(b)) + rel[i]
	}
	return b, offsets, int64(len(b)) + pos
}

// appendJSONString quotes s as JSON (strconv.Quote's \x escapes are not
// JSON, so control bytes get \u escapes here).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
