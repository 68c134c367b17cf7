package model

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// headerEntry is one tensor record of a safetensors header, before it is
// checked against the file and the architecture.
type headerEntry struct {
	Name  string
	DType string
	Shape []int
	// Begin and End are data_offsets, relative to the data section.
	Begin, End int64
}

// maxHeaderBytes is the safetensors format's own cap on the JSON header
// (100 MB); anything larger is not a real checkpoint.
const maxHeaderBytes = 100 << 20

// parseHeader parses a safetensors JSON header. It is a hand-written
// recursive-descent parser for exactly the format's schema — an object of
// tensor records plus an optional "__metadata__" string map — because it
// runs on the cold path of every load, avoids reflection and the
// map[string]any detour of encoding/json, and rejects anything outside the
// schema with a precise message. FuzzParseHeader checks it against
// encoding/json. Errors wrap ErrBadHeader or ErrDuplicateTensor.
func parseHeader(b []byte) ([]headerEntry, map[string]string, error) {
	p := hparser{b: b}
	entries, meta, err := p.header()
	if err != nil {
		return nil, nil, err
	}
	return entries, meta, nil
}

type hparser struct {
	b []byte
	i int
}

func (p *hparser) fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s at byte %d", ErrBadHeader, fmt.Sprintf(format, args...), p.i)
}

func (p *hparser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *hparser) expect(c byte) error {
	p.ws()
	if p.i >= len(p.b) {
		return p.fail("unexpected end, want %q", c)
	}
	if p.b[p.i] != c {
		return p.fail("got %q, want %q", p.b[p.i], c)
	}
	p.i++
	return nil
}

// peek returns the next non-space byte, or 0 at the end.
func (p *hparser) peek() byte {
	p.ws()
	if p.i >= len(p.b) {
		return 0
	}
	return p.b[p.i]
}

func (p *hparser) header() ([]headerEntry, map[string]string, error) {
	if err := p.expect('{'); err != nil {
		return nil, nil, err
	}
	var entries []headerEntry
	var meta map[string]string
	seen := make(map[string]struct{})
	if p.peek() == '}' {
		p.i++
	} else {
		for {
			key, err := p.str()
			if err != nil {
				return nil, nil, err
			}
			if err := p.expect(':'); err != nil {
				return nil, nil, err
			}
			if _, dup := seen[key]; dup {
				return nil, nil, fmt.Errorf("%w: key %q appears twice in one header", ErrDuplicateTensor, key)
			}
			seen[key] = struct{}{}
			if key == "__metadata__" {
				if meta, err = p.metadata(); err != nil {
					return nil, nil, err
				}
			} else {
				e, err := p.entry()
				if err != nil {
					return nil, nil, fmt.Errorf("tensor %q: %w", key, err)
				}
				e.Name = key
				entries = append(entries, e)
			}
			p.ws()
			if p.i >= len(p.b) {
				return nil, nil, p.fail("unexpected end of header object")
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == '}' {
				p.i++
				break
			}
			return nil, nil, p.fail("got %q, want ',' or '}'", p.b[p.i])
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, nil, p.fail("trailing data after header object")
	}
	return entries, meta, nil
}

func (p *hparser) metadata() (map[string]string, error) {
	if p.peek() == 'n' {
		return nil, p.literal("null")
	}
	if err := p.expect('{'); err != nil {
		return nil, err
	}
	m := make(map[string]string)
	if p.peek() == '}' {
		p.i++
		return m, nil
	}
	for {
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if err := p.expect(':'); err != nil {
			return nil, err
		}
		if p.peek() != '"' {
			return nil, p.fail("__metadata__ value of %q must be a string", k)
		}
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		m[k] = v
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return m, nil
		default:
			return nil, p.fail("want ',' or '}' in __metadata__")
		}
	}
}

func (p *hparser) entry() (headerEntry, error) {
	var e headerEntry
	if err := p.expect('{'); err != nil {
		return e, err
	}
	var haveDType, haveShape, haveOffsets bool
	if p.peek() != '}' {
		for {
			k, err := p.str()
			if err != nil {
				return e, err
			}
			if err := p.expect(':'); err != nil {
				return e, err
			}
			switch k {
			case "dtype":
				if haveDType {
					return e, p.fail("dtype given twice")
				}
				if p.peek() != '"' {
					return e, p.fail("dtype must be a string")
				}
				if e.DType, err = p.str(); err != nil {
					return e, err
				}
				haveDType = true
			case "shape":
				if haveShape {
					return e, p.fail("shape given twice")
				}
				if e.Shape, err = p.uints(-1); err != nil {
					return e, err
				}
				haveShape = true
			case "data_offsets":
				if haveOffsets {
					return e, p.fail("data_offsets given twice")
				}
				offs, err := p.uints(2)
				if err != nil {
					return e, err
				}
				e.Begin, e.End = int64(offs[0]), int64(offs[1])
				haveOffsets = true
			default:
				// Unknown fields are tolerated, as the reference
				// implementation's serde model does.
				if err := p.skip(0); err != nil {
					return e, err
				}
			}
			c := p.peek()
			if c == ',' {
				p.i++
				continue
			}
			if c == '}' {
				break
			}
			return e, p.fail("want ',' or '}' in tensor record")
		}
	}
	p.i++ // '}'
	switch {
	case !haveDType:
		return e, p.fail("tensor record has no dtype")
	case !haveShape:
		return e, p.fail("tensor record has no shape")
	case !haveOffsets:
		return e, p.fail("tensor record has no data_offsets")
	}
	if e.End < e.Begin {
		return e, p.fail("data_offsets [%d, %d] end before they begin", e.Begin, e.End)
	}
	return e, nil
}

// uints parses an array of non-negative integers; n >= 0 demands that
// exact length. Values are capped at 2^53 so later int64 arithmetic
// (shape products, offsets) cannot overflow silently.
func (p *hparser) uints(n int) ([]int, error) {
	if err := p.expect('['); err != nil {
		return nil, err
	}
	out := []int{}
	if p.peek() == ']' {
		p.i++
	} else {
		for {
			p.ws()
			start := p.i
			for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
				p.i++
			}
			digits := p.b[start:p.i]
			if len(digits) == 0 {
				return nil, p.fail("want a non-negative integer")
			}
			if len(digits) > 1 && digits[0] == '0' {
				return nil, p.fail("integer with leading zero")
			}
			if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
				return nil, p.fail("want an integer, got a fraction or exponent")
			}
			v, err := strconv.ParseInt(string(digits), 10, 64)
			if err != nil || v > 1<<53 {
				return nil, p.fail("integer %s is too large", digits)
			}
			out = append(out, int(v))
			c := p.peek()
			if c == ',' {
				p.i++
				continue
			}
			if c == ']' {
				p.i++
				break
			}
			return nil, p.fail("want ',' or ']' in integer array")
		}
	}
	if n >= 0 && len(out) != n {
		return nil, p.fail("want %d integers, got %d", n, len(out))
	}
	return out, nil
}

func (p *hparser) literal(s string) error {
	p.ws()
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return p.fail("want %s", s)
	}
	p.i += len(s)
	return nil
}

// skip skips any JSON value (for unknown fields).
func (p *hparser) skip(depth int) error {
	if depth > 64 {
		return p.fail("nesting too deep")
	}
	switch c := p.peek(); {
	case c == '"':
		_, err := p.str()
		return err
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		p.i++
		if p.peek() == closer {
			p.i++
			return nil
		}
		for {
			if c == '{' {
				if _, err := p.str(); err != nil {
					return err
				}
				if err := p.expect(':'); err != nil {
					return err
				}
			}
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			n := p.peek()
			if n == ',' {
				p.i++
				continue
			}
			if n == closer {
				p.i++
				return nil
			}
			return p.fail("want ',' or %q", closer)
		}
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return p.fail("want a JSON value")
}

// number validates a JSON number per RFC 8259.
func (p *hparser) number() error {
	b, i := p.b, p.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		p.i = i
		return p.fail("malformed number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == j {
			p.i = i
			return p.fail("malformed number")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == j {
			p.i = i
			return p.fail("malformed number")
		}
	}
	p.i = i
	return nil
}

// str parses a JSON string. The fast path (no escapes, the common case for
// tensor names) returns a copy of the bytes without a builder.
func (p *hparser) str() (string, error) {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", p.fail("want a string")
	}
	p.i++
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.b[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", p.fail("string is not valid UTF-8")
			}
			return string(s), nil
		}
		if c == '\\' {
			return p.strSlow(start)
		}
		if c < 0x20 {
			return "", p.fail("control character in string")
		}
		p.i++
	}
	return "", p.fail("unterminated string")
}

func (p *hparser) strSlow(start int) (string, error) {
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(buf) {
				return "", p.fail("string is not valid UTF-8")
			}
			return string(buf), nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", p.fail("unterminated escape")
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.fail("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate must be followed by a low one; a lone
				// surrogate becomes U+FFFD, as encoding/json does.
				r2 := rune(-1)
				if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					var ok2 bool
					if r2, ok2 = p.hex4(); !ok2 {
						return "", p.fail("bad \\u escape")
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						buf = utf8.AppendRune(buf, d)
						continue
					}
					p.i = save
				}
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.fail("bad escape \\%c", e)
		}
	}
	return "", p.fail("unterminated string")
}

func (p *hparser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}
