package load

// A zero-allocation reader of OpenAI streaming chunks. The load client reads
// up to 100,000 chunks a second, and encoding/json's reflection costs a few
// microseconds and several allocations per chunk, which on a 2-core machine
// is a large share of a core taken from the server under test. This walker
// looks only at what the timing needs — does a choice carry a token
// (text, delta.content, delta.reasoning_content, delta.reasoning,
// delta.tool_calls: a non-empty string, array or object), finish_reason,
// usage, error — and skips everything else without decoding it.

// chunk is what one SSE data payload says.
type chunk struct {
	// tokens is the number of choices carrying a token.
	tokens   int
	finished bool
	// usage is set when the chunk carries a usage object.
	usage            bool
	promptTokens     int
	completionTokens int
	// errored is set when the chunk carries a non-empty "error".
	errored bool
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// str reads a string and returns its raw contents (escapes not decoded).
func (s *scanner) str() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
		case '"':
			s.i++
			return s.b[start : s.i-1], true
		default:
			s.i++
		}
	}
	return nil, false
}

// skip skips one value of any type.
func (s *scanner) skip() bool {
	switch s.peek() {
	case '"':
		_, ok := s.str()
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	case 0:
		return false
	default: // number, true, false, null
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return s.i > start
	}
}

// nonEmpty skips a value and reports whether it carries something: not
// null, "", [] or {} (the prober's rule, DESIGN §4).
func (s *scanner) nonEmpty() (bool, bool) {
	start := s.peek()
	from := s.i
	if !s.skip() {
		return false, false
	}
	v := s.b[from:s.i]
	switch start {
	case '"':
		return len(v) > 2, true
	case '[', '{':
		for _, c := range v[1 : len(v)-1] {
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				return true, true
			}
		}
		return false, true
	case 'n':
		return false, true
	}
	return true, true
}

// integer reads a non-negative integer, or null as 0.
func (s *scanner) integer() (int, bool) {
	if s.peek() == 'n' {
		return 0, s.skip()
	}
	n, digits := 0, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
		digits++
	}
	if digits == 0 {
		return 0, s.skip()
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.skip() // 12.0: keep the integer part
	}
	return n, true
}

// members iterates an object: call first with first=true after the '{'
// check; it returns the next key, or done at '}'.
func (s *scanner) key(first bool) (key []byte, done, ok bool) {
	if s.eat('}') {
		return nil, true, true
	}
	if !first && !s.eat(',') {
		return nil, false, false
	}
	k, ok := s.str()
	if !ok || !s.eat(':') {
		return nil, false, false
	}
	return k, false, true
}

// parseChunk reads one chunk. It returns false for a payload that is not a
// JSON object it can walk (the caller counts it as malformed).
func parseChunk(b []byte, out *chunk) bool {
	*out = chunk{}
	s := scanner{b: b}
	if !s.eat('{') {
		return false
	}
	for first := true; ; first = false {
		k, done, ok := s.key(first)
		if !ok {
			return false
		}
		if done {
			break
		}
		switch string(k) {
		case "choices":
			if !s.choices(out) {
				return false
			}
		case "usage":
			if s.peek() == 'n' {
				if !s.skip() {
					return false
				}
				continue
			}
			if !s.usage(out) {
				return false
			}
		case "error":
			ne, ok := s.nonEmpty()
			if !ok {
				return false
			}
			out.errored = out.errored || ne
		default:
			if !s.skip() {
				return false
			}
		}
	}
	s.ws()
	return s.i == len(s.b)
}

func (s *scanner) choices(out *chunk) bool {
	if s.peek() == 'n' {
		return s.skip()
	}
	if !s.eat('[') {
		return false
	}
	if s.eat(']') {
		return true
	}
	for {
		if !s.eat('{') {
			return false
		}
		has := false
		for first := true; ; first = false {
			k, done, ok := s.key(first)
			if !ok {
				return false
			}
			if done {
				break
			}
			switch string(k) {
			case "text":
				ne, ok := s.nonEmpty()
				if !ok {
					return false
				}
				has = has || ne
			case "delta", "message":
				if s.peek() == 'n' {
					if !s.skip() {
						return false
					}
					continue
				}
				if !s.eat('{') {
					return false
				}
				for f2 := true; ; f2 = false {
					k2, done2, ok := s.key(f2)
					if !ok {
						return false
					}
					if done2 {
						break
					}
					switch string(k2) {
					case "content", "reasoning_content", "reasoning", "tool_calls":
						ne, ok := s.nonEmpty()
						if !ok {
							return false
						}
						has = has || ne
					default:
						if !s.skip() {
							return false
						}
					}
				}
			case "finish_reason":
				if s.peek() == '"' {
					v, ok := s.str()
					if !ok {
						return false
					}
					out.finished = out.finished || len(v) > 0
				} else if !s.skip() {
					return false
				}
			default:
				if !s.skip() {
					return false
				}
			}
		}
		if has {
			out.tokens++
		}
		if s.eat(']') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

func (s *scanner) usage(out *chunk) bool {
	if !s.eat('{') {
		return false
	}
	out.usage = true
	for first := true; ; first = false {
		k, done, ok := s.key(first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(k) {
		case "prompt_tokens":
			if out.promptTokens, ok = s.integer(); !ok {
				return false
			}
		case "completion_tokens":
			if out.completionTokens, ok = s.integer(); !ok {
				return false
			}
		default:
			if !s.skip() {
				return false
			}
		}
	}
}
