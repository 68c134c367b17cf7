package sessions

import (
	"math/bits"
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
		if i+8 <= len(s) {
			// Eight bytes at once, on to the first that is not plain
			// ASCII: most of a log is.
			if m := escapeMask(load8(s, i)); m == 0 {
				i += 8
				continue
			} else if skip := bits.TrailingZeros64(m) / 8; skip > 0 {
				i += skip
			}
		}
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

// load8 is the eight bytes of s at i, the first in the lowest byte.
func load8(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// escapeMask has the high bit set of the first of the eight bytes of w
// (the lowest) that is not plain ASCII for a JSON string: a control byte,
// a quote, a backslash, or a byte of a multi-byte UTF-8 sequence; 0 when
// there is none. Each is tested for all eight bytes at once (the
// byte-wise "has less than" and "has zero" tricks); the tricks may also
// mark bytes after the first, never one before it.
func escapeMask(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	ctl := (w - 0x20*ones) & ^w
	q := w ^ '"'*ones
	quote := (q - ones) & ^q
	bs := w ^ '\\'*ones
	backslash := (bs - ones) & ^bs
	return (w | ctl | quote | backslash) & highs
}
