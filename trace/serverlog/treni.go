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
// other shape goes to trace.ParseStageLine, whose errors it returns.
func parseStageLine(line string) (trace.StageLine, error) {
	if sl, ok := fastStageLine(line); ok {
		return sl, nil
	}
	return trace.ParseStageLine(line)
}

// fastStageLine reads the engine's own shape of a stage line; false for
// anything else (which the JSON decoder then reads or refuses).
func fastStageLine(line string) (trace.StageLine, bool) {
	var sl trace.StageLine
	s, ok := strings.CutPrefix(strings.TrimSpace(line), `{"treni_stage":"`+trace.StageLineTag+`","stage":"`)
	if !ok {
		return sl, false
	}
	q := strings.IndexByte(s, '"')
	if q <= 0 {
		return sl, false
	}
	sl.Tag, sl.Stage, s = trace.StageLineTag, trace.Stage(s[:q]), s[q+1:]
	if !sl.Stage.Valid() {
		return sl, false
	}
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
		sl.Attrs = trace.Attrs{}
		if s, ok = flatAttrs(rest, sl.Attrs); !ok {
			return sl, false
		}
	}
	return sl, s == "}"
}

// intField reads `key` and the integer after it.
func intField(s, key string) (int64, string, bool) {
	s, ok := strings.CutPrefix(s, key)
	if !ok {
		return 0, s, false
	}
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i || s[i] == '0' && j-i > 1 { // JSON has no leading zeros
		return 0, s, false
	}
	n, err := strconv.ParseInt(s[:j], 10, 64)
	return n, s[j:], err == nil
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
// a and returns what follows the closing brace.
func flatAttrs(s string, a trace.Attrs) (string, bool) {
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
			a[key] = v == "true"
		case v[0] == '"':
			// A string: plain (no escape, no comma or brace inside).
			if len(v) < 2 || v[len(v)-1] != '"' || strings.ContainsAny(v[1:len(v)-1], `"\`) || !plainString(v[1:len(v)-1]) {
				return s, false
			}
			a[key] = v[1 : len(v)-1]
		default:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !jsonNumber(v) {
				return s, false
			}
			a[key] = f
		}
		if s[end] == '}' {
			return s[end+1:], true
		}
		s = s[end+1:]
	}
}
