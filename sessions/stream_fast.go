package sessions

import (
	"bytes"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/treni-top/treni-top/trace"
)

// Most of a long session is samples and log lines, and decoding them by
// reflection was most of the time a Chrome export or a replay took.
// decodeFast reads those two kinds by hand when a line has exactly the
// shape the recorder writes (fields in order, no escapes in the strings,
// finite numbers) and declines anything else, which encoding/json then
// decodes: for every line it accepts, the event is the one encoding/json
// gives (FuzzDecodeFast).

// maxInterned bounds the names a Stream interns: the sources, metrics
// and log streams of a session are a few dozen.
const maxInterned = 4096

// decodeFast decodes a sample or log line whose head (offset, kind, run)
// was read, into e; false when the line is not in the recorder's shape.
func (s *Stream) decodeFast(line []byte, at time.Duration, kind trace.Kind, run int) (trace.Event, bool) {
	rest, ok := afterHead(line)
	if !ok {
		return trace.Event{}, false
	}
	switch kind {
	case trace.KindSample:
		sm, ok := s.fastSample(rest)
		return trace.Event{At: at, Kind: kind, Run: run, Sample: sm}, ok
	case trace.KindLog:
		l, ok := s.fastLog(rest)
		return trace.Event{At: at, Kind: kind, Run: run, Log: l}, ok
	}
	return trace.Event{}, false
}

// afterHead skips the head lineHead read (`{"t":N,"kind":"K"` and an
// optional `,"run":R`) and returns what follows; false when a number in
// it is not one JSON allows (a leading zero).
func afterHead(b []byte) ([]byte, bool) {
	b, ok := jsonInt(b[len(`{"t":`):])
	if !ok {
		return nil, false
	}
	b = b[len(`,"kind":"`):]
	b = b[bytes.IndexByte(b, '"')+1:]
	if rest, ok := bytes.CutPrefix(b, []byte(`,"run":`)); ok {
		return jsonInt(rest)
	}
	return b, true
}

// jsonInt skips the integer at the start of b, which leadingInt read,
// when JSON allows it: no leading zero.
func jsonInt(b []byte) ([]byte, bool) {
	b = bytes.TrimPrefix(b, []byte("-"))
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || i > 1 && b[0] == '0' {
		return nil, false
	}
	return b[i:], true
}

// fastSample reads `,"sample":{"source":"S","values":{"k":v,…}}}`.
func (s *Stream) fastSample(b []byte) (*trace.Sample, bool) {
	b, ok := bytes.CutPrefix(b, []byte(`,"sample":{"source":`))
	if !ok {
		return nil, false
	}
	src, b, ok := s.fastString(b)
	if !ok {
		return nil, false
	}
	if b, ok = bytes.CutPrefix(b, []byte(`,"values":{`)); !ok {
		return nil, false
	}
	vals := map[string]float64{}
	for len(b) > 0 && b[0] != '}' {
		if len(vals) > 0 {
			if b[0] != ',' {
				return nil, false
			}
			b = b[1:]
		}
		var k string
		if k, b, ok = s.fastString(b); !ok || len(b) == 0 || b[0] != ':' {
			return nil, false
		}
		var v float64
		if v, b, ok = fastNumber(b[1:]); !ok {
			return nil, false
		}
		vals[k] = v
	}
	if !endsObjects(b, 3) {
		return nil, false
	}
	return &trace.Sample{Source: src, Values: vals}, true
}

// fastLog reads `,"log":{"stream":"S"[,"pid":N],"text":"T"[,"stage":"G"]}}`.
func (s *Stream) fastLog(b []byte) (*trace.Log, bool) {
	b, ok := bytes.CutPrefix(b, []byte(`,"log":{"stream":`))
	if !ok {
		return nil, false
	}
	l := &trace.Log{}
	if l.Stream, b, ok = s.fastString(b); !ok {
		return nil, false
	}
	if rest, ok := bytes.CutPrefix(b, []byte(`,"pid":`)); ok {
		pid, _, ok := leadingInt(rest)
		if !ok {
			return nil, false
		}
		if rest, ok = jsonInt(rest); !ok {
			return nil, false
		}
		l.PID, b = int(pid), rest
	}
	if b, ok = bytes.CutPrefix(b, []byte(`,"text":`)); !ok {
		return nil, false
	}
	if l.Text, b, ok = plainString(b); !ok {
		return nil, false
	}
	if rest, ok := bytes.CutPrefix(b, []byte(`,"stage":`)); ok {
		var st string
		if st, b, ok = s.fastString(rest); !ok || st == "" {
			return nil, false
		}
		l.Stage = trace.Stage(st)
	}
	if !endsObjects(b, 2) {
		return nil, false
	}
	return l, true
}

// endsObjects: b is n closing braces, then at most trailing blanks.
func endsObjects(b []byte, n int) bool {
	for ; n > 0; n-- {
		if len(b) == 0 || b[0] != '}' {
			return false
		}
		b = b[1:]
	}
	return len(bytes.Trim(b, " \t\r")) == 0
}

// fastString reads a plain string (plainString) and interns it: the same
// few names recur on every line.
func (s *Stream) fastString(b []byte) (string, []byte, bool) {
	q, rest, ok := plainBytes(b)
	if !ok {
		return "", nil, false
	}
	if v, ok := s.interned[string(q)]; ok {
		return v, rest, true
	}
	v := string(q)
	if len(s.interned) < maxInterned {
		if s.interned == nil {
			s.interned = map[string]string{}
		}
		s.interned[v] = v
	}
	return v, rest, true
}

// plainString reads a JSON string that needs no unescaping.
func plainString(b []byte) (string, []byte, bool) {
	q, rest, ok := plainBytes(b)
	return string(q), rest, ok
}

// plainBytes reads a quoted JSON string at the start of b whose bytes are
// its value: valid UTF-8 without a backslash or control character.
func plainBytes(b []byte) ([]byte, []byte, bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	ascii := true
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(b[1:i]) {
				return nil, nil, false // encoding/json would replace the bad bytes
			}
			return b[1:i], b[i+1:], true
		case c == '\\' || c < 0x20:
			return nil, nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, nil, false
}

// fastNumber reads a JSON number at the start of b as encoding/json reads
// it into a float64: its grammar checked, then strconv.ParseFloat; a
// number beyond float64's range is declined (encoding/json refuses it).
func fastNumber(b []byte) (float64, []byte, bool) {
	i := 0
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
		return 0, nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == j {
			return 0, nil, false
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
			return 0, nil, false
		}
	}
	v, err := strconv.ParseFloat(string(b[:i]), 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, nil, false
	}
	return v, b[i:], true
}
