package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A hand-written reader for the two large parts of tokenizer.json, the
// vocabulary object and the merges array (together ~99% of an 11 MB file),
// which encoding/json decodes several times slower through reflection.
// Everything else is sliced out raw and given to encoding/json. Any input
// this reader does not understand makes it give up (errFastJSON) and the
// caller falls back to encoding/json for the whole file, which then also
// produces the user-facing error message.

var errFastJSON = errors.New("fast JSON path declined")

type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *jsonScanner) expect(c byte) error {
	if s.peek() != c {
		return errFastJSON
	}
	s.i++
	return nil
}

// str decodes a JSON string (the scanner is at its opening quote).
func (s *jsonScanner) str() (string, error) {
	if s.peek() != '"' {
		return "", errFastJSON
	}
	s.i++
	start := s.i
	ascii := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(v) {
				return "", errFastJSON // encoding/json would substitute U+FFFD
			}
			return string(v), nil
		case c == '\\':
			return s.strEscaped(start)
		case c < 0x20:
			return "", errFastJSON
		case c >= 0x80:
			ascii = false
		}
		s.i++
	}
	return "", errFastJSON
}

// strEscaped finishes a string that contains escapes.
func (s *jsonScanner) strEscaped(start int) (string, error) {
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !utf8.Valid(out) {
				return "", errFastJSON
			}
			return string(out), nil
		case c < 0x20:
			return "", errFastJSON
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return "", errFastJSON
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", errFastJSON
			}
			if utf16.IsSurrogate(r) {
				if s.i+1 >= len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
					return "", errFastJSON
				}
				s.i += 2
				r2, ok := s.hex4()
				if !ok {
					return "", errFastJSON
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					return "", errFastJSON
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", errFastJSON
		}
	}
	return "", errFastJSON
}

func (s *jsonScanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// integer reads a JSON integer.
func (s *jsonScanner) integer() (int64, error) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, errFastJSON
		}
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	if err != nil {
		return 0, errFastJSON
	}
	return v, nil
}

// raw skips one value and returns its bytes.
func (s *jsonScanner) raw() (json.RawMessage, error) {
	s.ws()
	start := s.i
	if err := s.skip(); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// skip passes over one value of any kind.
func (s *jsonScanner) skip() error {
	switch c := s.peek(); {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		s.i++
		if s.peek() == closing {
			s.i++
			return nil
		}
		for {
			if c == '{' {
				if _, err := s.str(); err != nil {
					return err
				}
				if err := s.expect(':'); err != nil {
					return err
				}
			}
			if err := s.skip(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case closing:
				s.i++
				return nil
			default:
				return errFastJSON
			}
		}
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
				s.i += len(lit)
				return nil
			}
		}
		return errFastJSON
	case c == '-' || (c >= '0' && c <= '9'):
		start := s.i
		for s.i < len(s.b) && bytes.IndexByte([]byte("+-.eE0123456789"), s.b[s.i]) >= 0 {
			s.i++
		}
		if _, err := strconv.ParseFloat(string(s.b[start:s.i]), 64); err != nil {
			return errFastJSON
		}
		return nil
	}
	return errFastJSON
}

// object calls f for each key of an object; f must consume the value.
func (s *jsonScanner) object(f func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := f(k); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errFastJSON
		}
	}
}

// array calls f for each element; f must consume it.
func (s *jsonScanner) array(f func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := f(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return errFastJSON
		}
	}
}

// fastDecodeFile fills f and the merges the way json.Unmarshal plus
// parseMerges would, or returns errFastJSON.
func fastDecodeFile(data []byte, f *fileJSON) (merges [][2]string, err error) {
	s := &jsonScanner{b: data}
	rest := map[string]json.RawMessage{}
	var model map[string]json.RawMessage
	// encoding/json matches keys case-insensitively and merges duplicate
	// objects; rather than imitate that, such files take the slow path.
	seen := map[string]bool{}
	err = s.object(func(key string) error {
		if key != "model" {
			if strings.EqualFold(key, "model") {
				return errFastJSON
			}
			r, err := s.raw()
			rest[key] = r
			return err
		}
		if s.peek() != '{' || seen["model"] {
			return errFastJSON
		}
		seen["model"] = true
		model = map[string]json.RawMessage{}
		f.Model.Vocab = nil
		merges = nil
		return s.object(func(mk string) error {
			if (strings.EqualFold(mk, "vocab") || strings.EqualFold(mk, "merges")) && (seen[mk] || (mk != "vocab" && mk != "merges")) {
				return errFastJSON
			}
			seen[mk] = true
			switch mk {
			case "vocab":
				v := make(map[string]int64, len(data)/64)
				err := s.object(func(piece string) error {
					id, err := s.integer()
					v[piece] = id
					return err
				})
				f.Model.Vocab = v
				return err
			case "merges":
				var m [][2]string
				err := s.array(func() error {
					if s.peek() == '"' {
						l, err := s.str()
						if err != nil {
							return err
						}
						if strings.HasPrefix(l, "#version") {
							return nil
						}
						a, b, ok := cutSpace(l)
						if !ok {
							return errFastJSON
						}
						m = append(m, [2]string{a, b})
						return nil
					}
					var p [2]string
					n := 0
					err := s.array(func() error {
						if n >= 2 {
							return errFastJSON
						}
						v, err := s.str()
						p[n] = v
						n++
						return err
					})
					if err != nil || n != 2 {
						return errFastJSON
					}
					m = append(m, p)
					return nil
				})
				merges = m
				return err
			}
			r, err := s.raw()
			model[mk] = r
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	if s.peek() != 0 {
		return nil, errFastJSON
	}
	if model == nil {
		return nil, errFastJSON
	}
	// The small parts go through encoding/json as one object each.
	vocab := f.Model.Vocab
	if err := json.Unmarshal(rebuild(rest), f); err != nil {
		return nil, errFastJSON
	}
	delete(model, "vocab")
	delete(model, "merges")
	if err := json.Unmarshal(rebuild(model), &f.Model); err != nil {
		return nil, errFastJSON
	}
	f.Model.Vocab = vocab
	return merges, nil
}

// rebuild renders a map of raw values as one JSON object.
func rebuild(m map[string]json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for k, v := range m {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(jstr(k))
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// cutSpace splits a legacy "a b" merge at its only space.
func cutSpace(l string) (string, string, bool) {
	k := -1
	for i := 0; i < len(l); i++ {
		if l[i] == ' ' {
			if k >= 0 {
				return "", "", false
			}
			k = i
		}
	}
	if k < 0 {
		return "", "", false
	}
	return l[:k], l[k+1:], true
}
