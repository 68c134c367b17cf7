package tokenizer

import (
	"slices"
	"unicode/utf8"
)

// The GPT-2 byte-level alphabet: every byte maps to one printable rune so
// that BPE pieces are valid strings. Bytes that are printable Latin-1 map to
// themselves; the others are shifted to U+0100 upwards in byte order. The
// tables are computed once and never written afterwards.
var byteToRune, runeToByte = byteLevelTables()

// byteLevelTables builds the byte→rune table and its inverse (indexed by
// rune, -1 where a rune is not in the alphabet; all alphabet runes are below
// U+0144).
func byteLevelTables() ([256]rune, [324]int16) {
	var b2r [256]rune
	var r2b [324]int16
	for i := range r2b {
		r2b[i] = -1
	}
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		if printable(b) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = int16(b)
	}
	return b2r, r2b
}

// byteLevelEncode maps raw bytes to their byte-level string form.
func byteLevelEncode(s string) string {
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, byteToRune[s[i]])
	}
	return string(out)
}

// appendByteLevelDecode appends the bytes of a piece as the HF ByteLevel
// decoder gives them: each rune of the alphabet is its byte, and if any
// rune of the piece is outside the alphabet, the piece's own UTF-8 bytes
// are used unchanged. The alphabet's runes are below U+0144, so they are
// one byte or two (a lead byte 0xC2..0xC5) in UTF-8.
func appendByteLevelDecode(buf []byte, piece string) []byte {
	start := len(buf)
	buf = slices.Grow(buf, len(piece)) // a piece decodes to at most its length
	out := buf[start : start+len(piece)]
	n := 0
	for i := 0; i < len(piece); n++ {
		r := rune(piece[i])
		i++
		if r >= utf8.RuneSelf {
			if r < 0xC2 || r > 0xC5 || i >= len(piece) || piece[i]&0xC0 != 0x80 {
				return append(buf[:start], piece...)
			}
			r = (r&0x1F)<<6 | rune(piece[i]&0x3F)
			i++
		}
		if int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return append(buf[:start], piece...)
		}
		out[n] = byte(runeToByte[r])
	}
	return buf[:start+n]
}
