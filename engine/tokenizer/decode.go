package tokenizer

import "unicode/utf8"

// Decode turns ids back into text like HF tokenizers' decode(ids,
// skip_special_tokens=False) with the ByteLevel decoder: the tokens' bytes
// are concatenated and invalid UTF-8 is replaced by U+FFFD per maximal
// invalid subsequence (Rust's String::from_utf8_lossy). Unknown ids are
// skipped.
func (t *Tokenizer) Decode(ids []int32) string {
	n := 0 // the pieces' lengths bound their decoded lengths
	for _, id := range ids {
		if id >= 0 && int(id) < len(t.present) {
			n += int(t.pieceOff[id+1] - t.pieceOff[id])
		}
	}
	buf := make([]byte, 0, n)
	for _, id := range ids {
		buf = t.appendBytes(buf, id)
	}
	return lossyUTF8(buf)
}

// appendBytes appends the bytes token id decodes to.
func (t *Tokenizer) appendBytes(buf []byte, id int32) []byte {
	if id < 0 || int(id) >= len(t.present) || t.present[id] == 0 {
		return buf
	}
	return appendByteLevelDecode(buf, t.pieces[t.pieceOff[id]:t.pieceOff[id+1]])
}

// DecodeBytes returns the raw bytes of ids, without UTF-8 repair.
func (t *Tokenizer) DecodeBytes(ids []int32) []byte {
	var buf []byte
	for _, id := range ids {
		buf = t.appendBytes(buf, id)
	}
	return buf
}

// lossyUTF8 converts b to a string, replacing each maximal invalid
// subsequence by one U+FFFD as Rust's from_utf8_lossy does (Go's own
// conversions differ: they replace every invalid byte or every run).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			out = append(out, b[i:i+w]...)
			i += w
			continue
		}
		out = append(out, "\uFFFD"...)
		i += invalidLen(b[i:])
	}
	return string(out)
}

// seqInfo returns the length of the UTF-8 sequence a lead byte starts and
// the valid range of its second byte; n is 0 for a byte that cannot lead.
func seqInfo(c byte) (n int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// validPrefixLen returns how many bytes of b, starting at a lead byte, form
// a valid (possibly incomplete) prefix of one UTF-8 sequence, and the full
// length that sequence needs.
func validPrefixLen(b []byte) (got, need int) {
	n, lo, hi := seqInfo(b[0])
	if n == 0 {
		return 1, 1
	}
	got = 1
	for got < n && got < len(b) {
		c := b[got]
		if got == 1 {
			if c < lo || c > hi {
				break
			}
		} else if c < 0x80 || c > 0xBF {
			break
		}
		got++
	}
	return got, n
}

// invalidLen is the length of the maximal invalid subsequence at b[0].
func invalidLen(b []byte) int {
	got, _ := validPrefixLen(b)
	return got
}

// StreamDecoder turns a stream of ids into text pieces without ever
// emitting part of a UTF-8 character: bytes of a character split across
// tokens are held until it is complete. The concatenation of all Push
// results and Flush equals Decode of all ids.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
}

// NewStreamDecoder starts a stream.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// Push adds one id and returns the text that is now final (may be "").
func (d *StreamDecoder) Push(id int32) string {
	d.pending = d.t.appendBytes(d.pending, id)
	cut := completePrefix(d.pending)
	if cut == 0 {
		return ""
	}
	s := lossyUTF8(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return s
}

// Flush returns the held bytes (an incomplete character becomes U+FFFD, as
// in Decode) and resets the stream.
func (d *StreamDecoder) Flush() string {
	s := lossyUTF8(d.pending)
	d.pending = d.pending[:0]
	return s
}

// completePrefix returns the length of the longest prefix of b whose lossy
// decoding cannot change with more bytes: everything except a trailing
// valid-but-incomplete sequence.
func completePrefix(b []byte) int {
	// An incomplete sequence is at most 3 bytes: look for its lead byte.
	for k := 1; k <= 3 && k <= len(b); k++ {
		i := len(b) - k
		c := b[i]
		if c < 0x80 {
			return len(b)
		}
		if c >= 0xC0 { // a lead (or invalid) byte
			got, need := validPrefixLen(b[i:])
			if got == k && got < need {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}
