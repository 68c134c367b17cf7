package serverlog

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Timestamp shapes that need a regexp; the common prefixes are cut by hand.
var (
	reRFC3339   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)`)
	reUnixStamp = regexp.MustCompile(`\btimestamp=(\d{10})\b`)
	rePyAsctime = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) `)
	reGoLog     = regexp.MustCompile(`^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?) `)
)

// ParseTimestamp reads the time a log line carries, in the format of kind
// (KindAuto or KindUnknown try every format):
//
//   - vLLM: "INFO 02-16 16:40:17" or "… 16:40:17.843" after any
//     "(Worker_TP0 pid=…)" tags; the year is the one that puts the line
//     nearest ref (pass the previous line's time, or the file's date). Also
//     Python's "2026-05-19 02:11:47,969" asctime from libraries it loads.
//   - SGLang: "[2025-01-23 19:34:55 TP0]".
//   - TGI: RFC 3339 "2024-01-15T08:47:15.882960Z", also after a wrapper's
//     prefix and inside --json-output lines.
//   - Ollama: slog "time=2024-11-08T01:05:27.403+05:30", gin
//     "[GIN] 2026/05/05 - 01:30:24", and its C++ runner's "timestamp=1731008127".
//   - llama.cpp: 2026 builds' "0.07.611.221 I " prefix is minutes, seconds,
//     milliseconds and microseconds since the process started: the result
//     is ref plus that, so pass the process start as ref. Older builds print
//     no time at all.
//   - treni: the stage lines' end_ns, RFC 3339, slog time=, or Go's
//     log package "2006/01/02 15:04:05".
//
// Times without a zone are read in ref's location. It returns false when
// the line carries no time it understands.
func ParseTimestamp(kind Kind, line string, ref time.Time) (time.Time, bool) {
	switch kind {
	case KindVLLM:
		return vllmTime(line, ref)
	case KindSGLang:
		return sglangTime(line, ref)
	case KindTGI:
		return rfc3339In(line, 200)
	case KindOllama:
		// The runner's own llama.cpp lines count from the runner's start,
		// which Ollama does not log: only their absolute stamps count.
		if t, ok := ollamaTime(line, ref); ok {
			return t, ok
		}
		return unixStamp(line, ref)
	case KindLlamaCpp:
		return llamaTime(line, ref)
	case KindTreni:
		return treniTime(line, ref)
	}
	for _, f := range []func(string, time.Time) (time.Time, bool){vllmTime, sglangTime, ollamaTime, treniTime, llamaTime} {
		if t, ok := f(line, ref); ok {
			return t, ok
		}
	}
	return rfc3339In(line, 200)
}

// stripVLLMTags cuts the "(Proc pid=N) " tags vLLM puts before lines of
// its worker and engine processes; worker is the first tag naming a
// tensor-parallel worker ("" for the engine core and API server).
func stripVLLMTags(l string) (worker, rest string) {
	rest = l
	for len(rest) > 0 && rest[0] == '(' {
		i := strings.Index(rest, ") ")
		if i < 0 {
			if strings.HasSuffix(rest, ")") && strings.Contains(rest, " pid=") {
				return worker, ""
			}
			break
		}
		tag := rest[1:i]
		if !strings.Contains(tag, " pid=") {
			break
		}
		if worker == "" && strings.Contains(tag, "Worker") {
			worker = tag
		}
		rest = strings.TrimLeft(rest[i+2:], " ")
	}
	return worker, rest
}

// vllmLevelDate splits "INFO 02-16 16:40:17.843 [file.py:1] msg" (or the
// ≤0.7 form "… file.py:1] msg") into its date-time text and message.
func vllmLevelDate(s string) (stamp, msg string, ok bool) {
	sp := strings.IndexByte(s, ' ')
	if sp < 4 || sp > 8 {
		return "", "", false
	}
	switch s[:sp] {
	case "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "WARN":
	default:
		return "", "", false
	}
	r := s[sp+1:]
	// MM-DD HH:MM:SS
	if len(r) < 14 || r[2] != '-' || r[5] != ' ' || r[8] != ':' || r[11] != ':' || !isDigits(r[:2]) || !isDigits(r[3:5]) ||
		!isDigits(r[6:8]) || !isDigits(r[9:11]) || !isDigits(r[12:14]) {
		return "", "", false
	}
	n := 14
	if len(r) > n && r[n] == '.' {
		n++
		for n < len(r) && r[n] >= '0' && r[n] <= '9' {
			n++
		}
	}
	stamp = r[:n]
	msg = r[n:]
	if j := strings.Index(msg, "] "); j >= 0 && j < 80 {
		msg = msg[j+2:]
	} else {
		msg = strings.TrimLeft(msg, " ")
	}
	return stamp, msg, true
}

func vllmTime(line string, ref time.Time) (time.Time, bool) {
	_, rest := stripVLLMTags(line)
	stamp, _, ok := vllmLevelDate(rest)
	if !ok {
		if !pyAsctimeLike(rest) {
			return time.Time{}, false
		}
		if m := rePyAsctime.FindStringSubmatch(rest); m != nil {
			t, err := time.ParseInLocation("2006-01-02 15:04:05", m[1], loc(ref))
			if err != nil {
				return time.Time{}, false
			}
			ms, _ := strconv.Atoi(m[2])
			return t.Add(time.Duration(ms) * time.Millisecond), true
		}
		return time.Time{}, false
	}
	t, ok := monthDayTime(stamp, ref)
	if !ok {
		return time.Time{}, false
	}
	return nearestYear(t, ref), true
}

// monthDayTime reads "MM-DD HH:MM:SS[.fff…]" (vllmLevelDate checked the
// shape) in ref's location; nearestYear then picks the year.
func monthDayTime(s string, ref time.Time) (time.Time, bool) {
	num := func(a, b int) int { return int(s[a]-'0')*10 + int(s[b]-'0') }
	mo, d, h, mi, se := num(0, 1), num(3, 4), num(6, 7), num(9, 10), num(12, 13)
	if mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 59 {
		return time.Time{}, false
	}
	ns := 0
	if len(s) > 15 {
		frac := s[15:]
		if len(frac) > 9 {
			frac = frac[:9]
		}
		for i := 0; i < 9; i++ {
			ns *= 10
			if i < len(frac) {
				ns += int(frac[i] - '0')
			}
		}
	}
	// A leap year, so that Feb 29 reads; nearestYear picks the real one.
	const leap = 2000
	if d > daysIn(time.Month(mo), leap) {
		return time.Time{}, false
	}
	return time.Date(leap, time.Month(mo), d, h, mi, se, ns, loc(ref)), true
}

// daysIn is the number of days of month m in year y.
func daysIn(m time.Month, y int) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// pyAsctimeLike is a cheap test for Python's "2026-05-19 02:11:47,969 "
// before its regexp runs.
func pyAsctimeLike(s string) bool {
	return len(s) > 24 && s[4] == '-' && s[10] == ' ' && s[19] == ','
}

// nearestYear puts a year-less time into the year that brings it nearest
// to ref without going more than a month past it: with ref the previous
// line, a log crossing New Year keeps going forward; with ref the file's
// date, a May log read in November stays in the same year.
func nearestYear(t, ref time.Time) time.Time {
	if ref.IsZero() {
		ref = time.Now()
	}
	const ahead = 31 * 24 * time.Hour
	best := t
	var bestD time.Duration = -1
	for y := ref.Year() - 1; y <= ref.Year()+1; y++ {
		c := time.Date(y, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
		d := c.Sub(ref)
		if d > ahead {
			continue
		}
		if d < 0 {
			d = -d
		}
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func loc(ref time.Time) *time.Location {
	if ref.IsZero() {
		return time.Local
	}
	return ref.Location()
}

func sglangTime(line string, ref time.Time) (time.Time, bool) {
	if strings.HasPrefix(line, "(") {
		_, line = stripVLLMTags(line)
	}
	if !sglangPrefix(line) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05", line[1:20], loc(ref))
	return t, err == nil
}

// rfc3339In finds an RFC 3339 time within the first n bytes of line.
func rfc3339In(line string, n int) (time.Time, bool) {
	if len(line) > n {
		line = line[:n]
	}
	if !strings.Contains(line, "T") {
		return time.Time{}, false
	}
	// A stamp at the start of the line (TGI's) is the regexp's leftmost
	// match: read without it.
	s := line[:rfc3339Prefix(line)]
	if s == "" {
		s = reRFC3339.FindString(line)
	}
	if s == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

func ollamaTime(line string, ref time.Time) (time.Time, bool) {
	if strings.HasPrefix(line, "time=") {
		end := strings.IndexByte(line, ' ')
		if end < 0 {
			end = len(line)
		}
		t, err := time.Parse(time.RFC3339Nano, strings.Trim(line[5:end], `"`))
		return t, err == nil
	}
	if strings.HasPrefix(line, "[GIN] ") && len(line) >= 27 {
		t, err := time.ParseInLocation("2006/01/02 - 15:04:05", line[6:27], loc(ref))
		return t, err == nil
	}
	if len(line) > 20 && line[4] == '/' && line[10] == ' ' {
		return goLogTime(line, ref) // Ollama before slog (2023–24)
	}
	return time.Time{}, false
}

// goLogTime reads Go's log package "2006/01/02 15:04:05[.000]".
func goLogTime(line string, ref time.Time) (time.Time, bool) {
	m := reGoLog.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	layout := "2006/01/02 15:04:05"
	if dot := strings.IndexByte(m[1], '.'); dot >= 0 {
		layout += "." + strings.Repeat("0", len(m[1])-dot-1)
	}
	t, err := time.ParseInLocation(layout, m[1], loc(ref))
	return t, err == nil
}

// llamaElapsed reads llama.cpp's "M.SS.mmm.uuu L " prefix (time since the
// process started) and returns it with the rest of the line.
func llamaElapsed(line string) (time.Duration, string, bool) {
	sp := strings.IndexByte(line, ' ')
	if sp < 10 || sp > 20 || len(line) < sp+3 || line[sp+2] != ' ' {
		return 0, line, false
	}
	switch line[sp+1] {
	case 'I', 'W', 'E', 'D', 'N':
	default:
		return 0, line, false
	}
	parts := strings.Split(line[:sp], ".")
	if len(parts) != 4 {
		return 0, line, false
	}
	// Minutes (up to a year's worth: a bound that keeps the sum far from
	// overflowing), then two digits of seconds and three of milliseconds
	// and of microseconds.
	var v [4]int64
	for i, s := range parts {
		if !isDigits(s) || len(s) > llamaElapsedDigits[i] || (i > 0 && len(s) != llamaElapsedDigits[i]) {
			return 0, line, false
		}
		v[i], _ = strconv.ParseInt(s, 10, 64)
	}
	d := time.Duration(v[0])*time.Minute + time.Duration(v[1])*time.Second + time.Duration(v[2])*time.Millisecond + time.Duration(v[3])*time.Microsecond
	return d, line[sp+3:], true
}

// leadingDigits parses up to 12 digits at the start of s (Unix seconds).
func leadingDigits(s string) (int64, string, bool) {
	i := 0
	for i < len(s) && i < 12 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, s, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	return n, s[i:], err == nil
}

// llamaElapsedDigits are the widths of llama.cpp's elapsed-time fields:
// at most 6 digits of minutes, then exactly 2, 3 and 3.
var llamaElapsedDigits = [4]int{6, 2, 3, 3}

func llamaTime(line string, ref time.Time) (time.Time, bool) {
	if d, _, ok := llamaElapsed(line); ok {
		if ref.IsZero() {
			return time.Time{}, false
		}
		return ref.Add(d), true
	}
	return unixStamp(line, ref)
}

// unixStamp reads the C++ runner's "timestamp=1731008127" (seconds), or
// the old llama.cpp server's JSON lines' "timestamp":1711089418.
func unixStamp(line string, ref time.Time) (time.Time, bool) {
	if strings.HasPrefix(line, "{") {
		if i := strings.Index(line, `"timestamp":`); i >= 0 {
			if n, _, ok := leadingDigits(line[i+len(`"timestamp":`):]); ok {
				return time.Unix(n, 0).In(loc(ref)), true
			}
		}
	}
	if strings.Contains(line, "timestamp=") {
		if m := reUnixStamp.FindStringSubmatch(line); m != nil {
			s, err := strconv.ParseInt(m[1], 10, 64)
			if err == nil {
				return time.Unix(s, 0).In(loc(ref)), true
			}
		}
	}
	return time.Time{}, false
}

func treniTime(line string, ref time.Time) (time.Time, bool) {
	if strings.HasPrefix(strings.TrimSpace(line), "{") && strings.Contains(line, `"treni_stage"`) {
		if i := strings.Index(line, `"end_ns":`); i >= 0 {
			j := i + len(`"end_ns":`)
			k := j
			for k < len(line) && line[k] >= '0' && line[k] <= '9' {
				k++
			}
			if ns, err := strconv.ParseInt(line[j:k], 10, 64); err == nil && k > j {
				return time.Unix(0, ns).In(loc(ref)), true
			}
		}
	}
	if strings.HasPrefix(line, "time=") {
		return ollamaTime(line, ref)
	}
	if t, ok := goLogTime(line, ref); ok {
		return t, true
	}
	if len(line) >= 20 && line[4] == '-' && line[10] == 'T' {
		return rfc3339In(line, 40)
	}
	return time.Time{}, false
}

// rfc3339Prefix is the length of the text reRFC3339 matches at the start
// of s, or 0 when it matches none there.
func rfc3339Prefix(s string) int {
	const shape = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(shape)+1 {
		return 0
	}
	for i := 0; i < len(shape); i++ {
		if c := s[i]; shape[i] == 'd' && (c < '0' || c > '9') || shape[i] != 'd' && c != shape[i] {
			return 0
		}
	}
	n := len(shape)
	if s[n] == '.' {
		k := n + 1
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k > n+1 {
			n = k
		}
	}
	switch {
	case n < len(s) && s[n] == 'Z':
		return n + 1
	case n+6 <= len(s) && (s[n] == '+' || s[n] == '-') && isDigits(s[n+1:n+3]) && s[n+3] == ':' && isDigits(s[n+4:n+6]):
		return n + 6
	}
	return 0
}
