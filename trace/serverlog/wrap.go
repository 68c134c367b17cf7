package serverlog

import (
	"strings"
	"time"
)

// Real logs rarely arrive as the server wrote them: the tool that collected
// them puts its own prefix before every line. Unwrap strips those prefixes
// before a line reaches kind detection, the timestamp readers or a parser,
// and keeps the collector's timestamp for lines that carry none of their
// own.

// Wrapper names, as Unwrapped.Wrapper and the session notes spell them.
const (
	WrapCompose    = "docker compose"          // "svc-1  | line"
	WrapDockerTime = "docker logs -t"          // "2024-05-01T10:00:00.123456789Z line"
	WrapKubectl    = "kubectl logs --prefix"   // "[pod/name/container] line"
	WrapSyslog     = "journald/syslog"         // "May  1 10:00:00 host unit[pid]: line"
	WrapJournalISO = "journalctl -o short-iso" // "2024-05-01T10:00:00+0000 host unit[pid]: line"
	WrapDesktop    = "docker desktop"          // "2025-03-05 09:00:48 line" (local time)
	WrapPython     = "python logging"          // "2025-03-07 23:50:27,531 - name - INFO - line"
	WrapQuote      = "quoted (> )"             // "> line", as pasted into a reply
)

// Unwrapped is a log line without its collectors' prefixes.
type Unwrapped struct {
	// Line is what the server wrote.
	Line string
	// Wrapper names the outermost prefix that was stripped ("" for none).
	Wrapper string
	// At is the collector's timestamp (docker logs -t, journald), when one
	// of the prefixes carried it.
	At    time.Time
	HasAt bool
	// YearLess: At came from a stamp without a year (syslog's), placed
	// near the reference time; a line's own dated stamp is then the better
	// clock of the two.
	YearLess bool
	// Host is the host a syslog prefix names.
	Host string
	// Unit is the name a prefix gives the program (a journald unit, a
	// compose service, a kubectl container): a hint of the server's kind.
	Unit string
}

// maxWrappers bounds how many nested prefixes are stripped from one line
// (kubectl over docker compose over journald is already three).
const maxWrappers = 4

// Unwrap strips the collectors' prefixes from line: docker compose's
// "service  | ", docker logs -t's RFC 3339 timestamp, kubectl logs
// --prefix's "[pod/name/container] " and journald's or syslog's "Mon DD
// HH:MM:SS host unit[pid]: " (year-less stamps are placed near ref, read
// in ref's location), nested in any order. A line without any comes back
// unchanged. Unwrap never allocates for a line it does not change.
func Unwrap(line string, ref time.Time) Unwrapped {
	u := Unwrapped{Line: line}
	for i := 0; i < maxWrappers; i++ {
		rest, name, at, hasAt, host := stripOne(u.Line, ref)
		if name == "" {
			break
		}
		if u.Unit == "" {
			u.Unit = unitOf(name, u.Line, rest)
		}
		if u.Wrapper == "" {
			u.Wrapper = name
		}
		if hasAt && !u.HasAt {
			u.At, u.HasAt, u.YearLess = at, true, name == WrapSyslog
		}
		if host != "" && u.Host == "" {
			u.Host = host
		}
		u.Line = rest
	}
	return u
}

// unitOf is the program name a stripped prefix carried.
func unitOf(wrapper, line, rest string) string {
	prefix := line[:len(line)-len(rest)]
	switch wrapper {
	case WrapCompose:
		return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(prefix), "|"))
	case WrapKubectl:
		return strings.Trim(prefix, "[] ")
	case WrapSyslog, WrapJournalISO:
		f := strings.Fields(prefix)
		if len(f) > 0 {
			u := strings.TrimSuffix(f[len(f)-1], ":")
			if b := strings.IndexByte(u, '['); b > 0 {
				u = u[:b]
			}
			return u
		}
	}
	return ""
}

// stripOne strips one prefix, if the line starts with one.
func stripOne(l string, ref time.Time) (rest, name string, at time.Time, hasAt bool, host string) {
	if l == "" {
		return l, "", time.Time{}, false, ""
	}
	switch c := l[0]; {
	case c == '>':
		if strings.HasPrefix(l, "> ") {
			return l[2:], WrapQuote, time.Time{}, false, ""
		}
	case c == '[':
		if r, ok := stripKubectl(l); ok {
			return r, WrapKubectl, time.Time{}, false, ""
		}
	case c >= '0' && c <= '9':
		if r, t, ok := stripDockerTime(l); ok {
			return r, WrapDockerTime, t, true, ""
		}
		if r, t, h, ok := stripJournalISO(l); ok {
			return r, WrapJournalISO, t, true, h
		}
		if r, t, ok := stripPythonLogging(l, ref); ok {
			return r, WrapPython, t, true, ""
		}
		if r, t, ok := stripDesktop(l, ref); ok {
			return r, WrapDesktop, t, true, ""
		}
	case c >= 'A' && c <= 'Z':
		if r, t, h, ok := stripSyslog(l, ref); ok {
			return r, WrapSyslog, t, true, h
		}
	}
	if r, ok := stripComposePrefix(l); ok {
		return r, WrapCompose, time.Time{}, false, ""
	}
	return l, "", time.Time{}, false, ""
}

// stripComposePrefix cuts "name  | " or "name-1 | " (docker compose logs:
// the service or container name, padded with spaces, then a bar). The name
// is one word of letters, digits, '-', '_' and '.', and at least one space
// separates it from the bar, which keeps a server's own "a|b" text intact.
func stripComposePrefix(l string) (string, bool) {
	i := 0
	for i < len(l) && i < 64 && isNameByte(l[i]) {
		i++
	}
	if i == 0 || i >= len(l) || l[i] != ' ' {
		return l, false
	}
	j := i
	for j < len(l) && l[j] == ' ' {
		j++
	}
	if j >= len(l) || l[j] != '|' || j-i > 40 {
		return l, false
	}
	j++
	if j < len(l) && l[j] == ' ' {
		j++
	}
	return l[j:], true
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// stripDockerTime cuts docker logs -t's "2024-05-01T10:00:00.123456789Z "
// (RFC 3339 with nanoseconds, UTC or an offset, one space). A stamp
// followed by a level word after more spaces is a server's own (TGI pads
// its level: "…Z  INFO"), and stays.
func stripDockerTime(l string) (string, time.Time, bool) {
	s, e, ok := findRFC3339(l, 0)
	if !ok || s != 0 || e >= len(l) || l[e] != ' ' || ownLevelAfter(l[e:]) {
		return l, time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, l[:e])
	if err != nil {
		return l, time.Time{}, false
	}
	return l[e+1:], t, true
}

// ownLevelAfter reports "  INFO …": spaces, then a tracing level word.
func ownLevelAfter(s string) bool {
	t := strings.TrimLeft(s, " ")
	if len(s)-len(t) < 2 {
		return false
	}
	for _, lvl := range []string{"TRACE ", "DEBUG ", "INFO ", "WARN ", "ERROR "} {
		if strings.HasPrefix(t, lvl) {
			return true
		}
	}
	return false
}

// dateTimeAt reads "YYYY-MM-DD HH:MM:SS" at the start of l in ref's
// location.
func dateTimeAt(l string, ref time.Time) (time.Time, bool) {
	if len(l) < 19 || l[4] != '-' || l[7] != '-' || l[10] != ' ' || l[13] != ':' || l[16] != ':' || !isDigits(l[:4]) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05", l[:19], loc(ref))
	return t, err == nil
}

// stripDesktop cuts Docker Desktop's log view "2025-03-05 09:00:48 "
// (local time, one space, then the line).
func stripDesktop(l string, ref time.Time) (string, time.Time, bool) {
	if len(l) < 21 || l[19] != ' ' {
		return l, time.Time{}, false
	}
	t, ok := dateTimeAt(l, ref)
	if !ok {
		return l, time.Time{}, false
	}
	return l[20:], t, true
}

// stripPythonLogging cuts the prefix of a Python program that relays a
// server's output through its own logger: "2025-03-07 23:50:27,531 -
// name - INFO - ". A library's own asctime lines inside a server log
// ("… ,969 - INFO - file.py:1 - msg") have no logger name and stay.
func stripPythonLogging(l string, ref time.Time) (string, time.Time, bool) {
	if len(l) < 32 || l[19] != ',' || !isDigits(l[20:23]) || !strings.HasPrefix(l[23:], " - ") {
		return l, time.Time{}, false
	}
	t, ok := dateTimeAt(l, ref)
	if !ok {
		return l, time.Time{}, false
	}
	rest := l[26:]
	sep := strings.Index(rest, " - ")
	if sep <= 0 || sep > 64 || strings.ContainsRune(rest[:sep], ' ') {
		return l, time.Time{}, false
	}
	rest = rest[sep+3:]
	for _, lvl := range []string{"DEBUG - ", "INFO - ", "WARNING - ", "ERROR - ", "CRITICAL - "} {
		if strings.HasPrefix(rest, lvl) {
			ms := int(l[20]-'0')*100 + int(l[21]-'0')*10 + int(l[22]-'0')
			return rest[len(lvl):], t.Add(time.Duration(ms) * time.Millisecond), true
		}
	}
	return l, time.Time{}, false
}

// stripKubectl cuts kubectl logs --prefix's "[pod/name/container] ".
func stripKubectl(l string) (string, bool) {
	if !strings.HasPrefix(l, "[pod/") {
		return l, false
	}
	end := strings.IndexByte(l, ']')
	if end < 0 || end > 300 || strings.Count(l[1:end], "/") != 2 || strings.ContainsRune(l[1:end], ' ') {
		return l, false
	}
	rest := l[end+1:]
	return strings.TrimPrefix(rest, " "), true
}

// syslogMonths are the month abbreviations of a syslog stamp.
const syslogMonths = "JanFebMarAprMayJunJulAugSepOctNovDec"

// stripSyslog cuts "May  1 10:00:00[.ffffff] host unit[pid]: " (journalctl's
// default short format and classic syslog). The stamp has no year: it is
// the one that puts it nearest ref.
func stripSyslog(l string, ref time.Time) (string, time.Time, string, bool) {
	if len(l) < 16 || l[3] != ' ' || l[6] != ' ' || l[9] != ':' || l[12] != ':' {
		return l, time.Time{}, "", false
	}
	mi := strings.Index(syslogMonths, l[:3])
	if mi < 0 || mi%3 != 0 {
		return l, time.Time{}, "", false
	}
	day := strings.TrimLeft(l[4:6], " ")
	if !isDigits(day) || !isDigits(l[7:9]) || !isDigits(l[10:12]) || !isDigits(l[13:15]) {
		return l, time.Time{}, "", false
	}
	n := 15
	frac := ""
	if n < len(l) && l[n] == '.' {
		k := n + 1
		for k < len(l) && l[k] >= '0' && l[k] <= '9' {
			k++
		}
		frac, n = l[n:k], k
	}
	rest, host, ok := stripHostUnit(l[n:])
	if !ok {
		return l, time.Time{}, "", false
	}
	layout := "Jan _2 15:04:05"
	stamp := l[:3] + " " + l[4:6] + " " + l[7:15]
	if frac != "" {
		layout += "." + strings.Repeat("0", len(frac)-1)
		stamp += frac
	}
	t, err := time.ParseInLocation(layout, stamp, loc(ref))
	if err != nil {
		return l, time.Time{}, "", false
	}
	return rest, nearestYear(t, ref), host, true
}

// stripJournalISO cuts journalctl -o short-iso's "2024-05-01T10:00:00+0000
// host unit[pid]: " (and short-iso-precise's fractional seconds).
func stripJournalISO(l string) (string, time.Time, string, bool) {
	if len(l) < 25 || l[4] != '-' || l[10] != 'T' {
		return l, time.Time{}, "", false
	}
	sp := strings.IndexByte(l, ' ')
	if sp < 24 || sp > 40 {
		return l, time.Time{}, "", false
	}
	// The host and unit first: they are cheap to test, and a server's own
	// RFC 3339 line (TGI's "…Z  INFO") has none.
	rest, host, ok := stripHostUnit(l[sp:])
	if !ok {
		return l, time.Time{}, "", false
	}
	stamp := l[:sp]
	var t time.Time
	var err error
	for _, layout := range []string{"2006-01-02T15:04:05.999999999-0700", time.RFC3339Nano} {
		if t, err = time.Parse(layout, stamp); err == nil {
			return rest, t, host, true
		}
	}
	return l, time.Time{}, "", false
}

// stripHostUnit cuts " host unit[pid]: " (or " host unit: ") after a
// syslog stamp.
func stripHostUnit(s string) (rest, host string, ok bool) {
	if len(s) < 4 || s[0] != ' ' {
		return s, "", false
	}
	s = s[1:]
	sp := strings.IndexByte(s, ' ')
	if sp <= 0 || sp > 64 {
		return s, "", false
	}
	host = s[:sp]
	s = s[sp+1:]
	colon := strings.Index(s, ": ")
	if colon <= 0 || colon > 96 {
		if strings.HasSuffix(s, ":") && len(s) <= 96 {
			colon = len(s) - 1
		} else {
			return s, "", false
		}
	}
	unit := s[:colon]
	if strings.ContainsAny(unit, " \t") {
		return s, "", false
	}
	if b := strings.IndexByte(unit, '['); b >= 0 && (!strings.HasSuffix(unit, "]") || !isDigits(unit[b+1:len(unit)-1])) {
		return s, "", false
	}
	rest = s[colon+1:]
	return strings.TrimPrefix(rest, " "), host, true
}
