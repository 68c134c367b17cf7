package sessions

import (
	"strconv"
	"unicode/utf8"

	"github.com/treni-top/treni-top/trace"
)

// appendLogEvent appends the session line of a log event, byte for byte
// what encoding/json writes for it (with HTML escaping off, as the
// recorder sets): an import writes one per line of the log, and encoding
// them by reflection was the largest cost of importing a big log.
func appendLogEvent(dst []byte, e *trace.Event) []byte {
	l := e.Log
	dst = append(dst, `{"t":`...)
	dst = strconv.AppendInt(dst, int64(e.At), 10)
	dst = append(dst, `,"kind":"log"`...)
	if e.Run != 0 {
		dst = append(dst, `,"run":`...)
		dst = strconv.AppendInt(dst, int64(e.Run), 10)
	}
	dst = append(dst, `,"log":{"stream":`...)
	dst = appendJSONString(dst, l.Stream)
	if l.PID != 0 {
		dst = append(dst, `,"pid":`...)
		dst = strconv.AppendInt(dst, int64(l.PID), 10)
	}
	dst = append(dst, `,"text":`...)
	dst = appendJSONString(dst, l.Text)
	if l.Stage != "" {
		dst = append(dst, `,"stage":`...)
		dst = appendJSONString(dst, string(l.Stage))
	}
	return append(dst, "}}\n"...)
}

// jsonSafe marks the ASCII bytes a JSON string holds as they are.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// appendJSONString is encoding/json's string encoding without HTML
// escaping: quotes, backslashes and control bytes escaped, invalid UTF-8
// as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
