package serverlog

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/treni-top/treni-top/trace"
)

// parseStageLine reads one of the built-in engine's JSON stage lines. The
// shape the engine writes (trace.StageLine.Marshal: treni_stage, stage,
// start_ns, end_ns, pid, attrs of numbers, strings and booleans) is read
// by hand, which a log of stage lines spends most of its import on; any
// other shape goes to trace.ParseStageLine, whose errors it returns. The
// result shares no memory with line (names come from in).
func parseStageLine(line string, in *interner) (trace.StageLine, error) {
	if sl, ok := fastStageLine(line, in); ok {
		return sl, nil
	}
	return trace.ParseStageLine(line)
}

// fastStageLine reads the engine's own shape of a stage line; false for
// anything else (which the JSON decoder then reads or refuses).
func fastStageLine(line string, in *interner) (trace.StageLine, bool) {
	var sl trace.StageLine
	s, ok := strings.CutPrefix(strings.TrimSpace(line), `{"treni_stage":"`+trace.StageLineTag+`","stage":"`)
	if !ok {
		return sl, false
	}
	q := strings.IndexByte(s, '"')
	if q <= 0 {
		return sl, false
	}
	sl.Tag = trace.StageLineTag
	if sl.Stage, ok = canonicalStage(s[:q]); !ok {
		return sl, false
	}
	s = s[q+1:]
	if sl.StartNS, s, ok = intField(s, `,"start_ns":`); !ok {
		return sl, false
	}
	if sl.EndNS, s, ok = intField(s, `,"end_ns":`); !ok || sl.EndNS < sl.StartNS {
		return sl, false
	}
	if strings.HasPrefix(s, `,"pid":`) {
		var pid int64
		if pid, s, ok = intField(s, `,"pid":`); !ok || pid < 0 || pid > 1<<31 {
			return sl, false
		}
		sl.PID = int(pid)
	}
	if rest, ok := strings.CutPrefix(s, `,"attrs":{`); ok {
		sl.Attrs = make(trace.Attrs, 4)
		if s, ok = flatAttrs(rest, sl.Attrs, in); !ok {
			return sl, false
		}
	}
	return sl, s == "}"
}

// canonicalStage is the taxonomy's own string for name: a stage line's
// span must not keep the line's memory alive.
func canonicalStage(name string) (trace.Stage, bool) {
	for _, st := range trace.Stages() {
		if string(st) == name {
			return st, true
		}
	}
	return "", false
}

// intField reads `key` and the integer after it (JSON's: no leading
// zero, within int64).
func intField(s, key string) (int64, string, bool) {
	s, ok := strings.CutPrefix(s, key)
	if !ok {
		return 0, s, false
	}
	neg := len(s) > 0 && s[0] == '-'
	i := 0
	if neg {
		i++
	}
	var u uint64
	j := i
	for ; j < len(s) && s[j] >= '0' && s[j] <= '9'; j++ {
		if j-i == 19 {
			return 0, s, false // beyond int64
		}
		u = u*10 + uint64(s[j]-'0')
	}
	switch {
	case j == i, s[i] == '0' && j-i > 1: // JSON has no leading zeros
		return 0, s, false
	case neg && u > 1<<63, !neg && u > 1<<63-1:
		return 0, s, false
	case neg:
		return -int64(u), s[j:], true // -(1<<63) wraps onto itself
	}
	return int64(u), s[j:], true
}

// plainString: valid UTF-8 without control bytes, so that JSON reads it
// as it is.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 {
			return false
		}
	}
	return utf8.ValidString(s)
}

// jsonNumber reports whether v is a number as JSON writes one.
func jsonNumber(v string) bool {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	digits := func() int {
		k := i
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		return i - k
	}
	switch n := digits(); {
	case n == 0, n > 1 && v[i-n] == '0':
		return false
	}
	if i < len(v) && v[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(v)
}

// flatAttrs reads `"k":v,…}` of numbers, plain strings and booleans into
// a (keys and strings through in) and returns what follows the closing
// brace.
func flatAttrs(s string, a trace.Attrs, in *interner) (string, bool) {
	if rest, ok := strings.CutPrefix(s, "}"); ok {
		return rest, true
	}
	for {
		if len(s) < 4 || s[0] != '"' {
			return s, false
		}
		q := strings.IndexByte(s[1:], '"')
		if q < 0 || strings.IndexByte(s[1:1+q], '\\') >= 0 || !strings.HasPrefix(s[2+q:], ":") {
			return s, false
		}
		key := s[1 : 1+q]
		if !plainString(key) {
			return s, false
		}
		s = s[3+q:]
		end := strings.IndexAny(s, ",}")
		if end <= 0 {
			return s, false
		}
		switch v := s[:end]; {
		case v == "true", v == "false":
			a[in.get(key)] = v == "true"
		case v[0] == '"':
			// A string: plain (no escape, no comma or brace inside).
			if len(v) < 2 || v[len(v)-1] != '"' || strings.ContainsAny(v[1:len(v)-1], `"\`) || !plainString(v[1:len(v)-1]) {
				return s, false
			}
			a[in.get(key)] = in.get(v[1 : len(v)-1])
		default:
			f, ok := smallInt(v)
			if !ok {
				var err error
				if f, err = strconv.ParseFloat(v, 64); err != nil || !jsonNumber(v) {
					return s, false
				}
			}
			a[in.get(key)] = f
		}
		if s[end] == '}' {
			return s[end+1:], true
		}
		s = s[end+1:]
	}
}

// smallInt reads a non-negative integer of at most 15 digits without a
// leading zero (byte counts, block counts): ParseFloat's reading of it,
// exactly, without ParseFloat.
func smallInt(v string) (float64, bool) {
	if len(v) == 0 || len(v) > 15 || v[0] == '0' && len(v) > 1 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return float64(n), true
}

// interner hands out one copy of each name (an attribute's key, a short
// string value) a parser meets, so that what it returns shares no memory
// with the lines it was fed: import reads a block of lines at once, and a
// span that kept one line's text would keep the block alive. It holds at
// most maxInterned names; past that, each is copied.
type interner map[string]string

const maxInterned = 1024

func (in *interner) get(s string) string {
	if c, ok := (*in)[s]; ok {
		return c
	}
	c := strings.Clone(s)
	if len(s) <= 64 && len(*in) < maxInterned {
		if *in == nil {
			*in = interner{}
		}
		(*in)[c] = c
	}
	return c
}
