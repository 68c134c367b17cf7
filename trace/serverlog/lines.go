package serverlog

import (
	"strings"
	"time"
)

// LineTime says where a line's offset came from.
type LineTime uint8

// How a line was placed on the time axis.
const (
	// TimeNone: the line carries no time; it takes the previous timed
	// line's offset (order, not time).
	TimeNone LineTime = iota
	// TimeOwn: the server's own timestamp on the line.
	TimeOwn
	// TimeWrapper: the collector's timestamp (docker logs -t, journald),
	// for a line that carries none of its own.
	TimeWrapper
	// TimeRejected: the line's timestamp is impossible (before 2000, or
	// after the log was written); the line is placed as if it had none.
	TimeRejected
)

// earliestPlausible is the earliest time a server log of this kind can
// carry: none of these servers existed before it, and a clock that says
// 1970 has not been set.
var earliestPlausible = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// futureSlack is how far past the log's reference time (its file's
// modification time) a timestamp may lie: clocks of two machines disagree,
// and a file copied keeps its own time, but a log cannot say what happened
// days after it was written (a line that jumps to year 9999).
const futureSlack = 48 * time.Hour

// LineClock places the lines of a log on one time axis as they are read,
// for import, without looking ahead: a line's own timestamp (ParseTimestamp)
// where it has one, else its collector's (Unwrapped.At), else the previous
// timed line's offset. Untimed lines therefore keep their order but no
// time of their own: durations never come from counting lines. Offset zero
// is the first timed line; a stamp earlier than one before it is raised
// to keep the axis monotonic; an impossible stamp is ignored and counted.
//
// Year-less and zone-less stamps resolve near the previous line's, and the
// first line that carries both its own stamp and its collector's fixes the
// difference between the two clocks (the server's local zone against the
// collector's UTC, rounded to 15 minutes; for llama.cpp, whose stamps count
// from its start, exactly), so lines timed by either stay on one axis.
type LineClock struct {
	kind Kind
	ref  time.Time

	prev    time.Time // the previous own stamp, as read (year inference)
	maxT    time.Time
	start   time.Time
	started bool
	lastAt  time.Duration

	skew    time.Duration // own − collector
	skewSet bool
	// toOwn: the collector's stamps are moved onto the server's clock
	// (theirs has no year), instead of the server's onto the collector's.
	toOwn bool

	// The last own stamp's text, the previous stamp it was read against,
	// and its reading: lines of one second share it (untimed lines in
	// between do not change it), and reading it again is most of a line's
	// cost.
	lastKey          string
	lastRef, lastOwn time.Time
	lastOK           bool
	noStampCache     bool // read every stamp (tests compare)

	// Own, Wrapped, Untimed and Rejected count the lines placed by each
	// LineTime.
	Own, Wrapped, Untimed, Rejected int
	// FirstRejected is the first line whose timestamp was ignored.
	FirstRejected string
}

// NewLineClock makes a clock for a log of kind (a concrete kind: detect
// first). ref is when the log was written (its file's modification time;
// zero means now): it completes year-less stamps and bounds plausible ones.
func NewLineClock(kind Kind, ref time.Time) *LineClock {
	now := time.Now()
	if ref.IsZero() || ref.After(now.Add(futureSlack)) {
		ref = now
	}
	return &LineClock{kind: kind, ref: ref, prev: ref}
}

// Start is the wall-clock time of offset zero, once a timed line was seen.
func (c *LineClock) Start() (time.Time, bool) { return c.start, c.started }

// Timed is how many lines carried a time (their own or a collector's).
func (c *LineClock) Timed() int { return c.Own + c.Wrapped }

// Place returns the offset of one unwrapped line and how it was timed.
func (c *LineClock) Place(u Unwrapped) (time.Duration, LineTime) {
	return c.PlacePrepared(u, Prepared{})
}

// PlacePrepared is Place for a line a Preparer read (pre, of u.Line): the
// built-in engine's stage line, already read, gives its stamp without a
// second reading.
func (c *LineClock) PlacePrepared(u Unwrapped, pre Prepared) (time.Duration, LineTime) {
	r := c.prev
	if c.kind == KindLlamaCpp {
		r = c.ref
	}
	var own time.Time
	var hasOwn bool
	key, yearLess := stampKey(c.kind, u.Line)
	// The reading depends on the previous stamp: a year-less one's year
	// on its time (the cached reading holds while the previous stamp is
	// still the one it was read against, or the cached reading itself,
	// which reads the same), a zone-less one's zone on its location.
	if c.kind == KindTreni && pre.ok && pre.fast && pre.stage.EndNS > 0 {
		// treniTime's reading: the line's first "end_ns", which the
		// engine's shape puts before anything else that could hold it
		// (its stage name is the taxonomy's), as a positive integer.
		own, hasOwn = time.Unix(0, pre.stage.EndNS).In(loc(r)), true
	} else if key != "" && !c.noStampCache && key == c.lastKey && (r == c.lastRef || r == c.lastOwn || !yearLess && loc(r) == loc(c.lastRef)) {
		own, hasOwn = c.lastOwn, c.lastOK
	} else {
		own, hasOwn = ParseTimestamp(c.kind, u.Line, r)
		if key != "" {
			c.lastKey, c.lastRef, c.lastOwn, c.lastOK = key, r, own, hasOwn
		}
	}
	how := TimeNone
	var t time.Time
	switch {
	case hasOwn:
		if !c.plausible(own) {
			how = TimeRejected
			break
		}
		c.prev = own
		if u.HasAt && c.plausible(u.At) && !c.skewSet {
			c.skew, c.skewSet = clockSkew(c.kind, own.Sub(u.At))
			c.toOwn = u.YearLess && c.kind != KindVLLM && c.kind != KindLlamaCpp
		}
		t, how = own, TimeOwn
		if !c.toOwn {
			t = own.Add(-c.skew)
		}
	case u.HasAt:
		at := u.At
		if c.toOwn {
			at = at.Add(c.skew)
		}
		if !c.plausible(at) {
			how = TimeRejected
			break
		}
		t, how = at, TimeWrapper
	}
	switch how {
	case TimeOwn:
		c.Own++
	case TimeWrapper:
		c.Wrapped++
	case TimeRejected:
		c.Rejected++
		if c.FirstRejected == "" {
			c.FirstRejected = strings.Clone(u.Line)
		}
		return c.lastAt, how
	default:
		c.Untimed++
		return c.lastAt, how
	}
	if !c.started {
		c.start, c.maxT, c.started = t, t, true
	}
	if t.Before(c.maxT) {
		t = c.maxT
	}
	c.maxT = t
	c.lastAt = t.Sub(c.start)
	return c.lastAt, how
}

// stampKey is the text of a line's own stamp where it alone decides the
// reading given the previous stamp (vLLM's, year-less; SGLang's and
// Ollama's gin lines, zone-less), else "".
func stampKey(kind Kind, line string) (key string, yearLess bool) {
	switch kind {
	case KindVLLM:
		_, rest := stripVLLMTags(line)
		if stamp, _, ok := vllmLevelDate(rest); ok {
			return stamp, true
		}
	case KindSGLang:
		if sglangPrefix(line) {
			return line[1:20], false
		}
	case KindOllama:
		if strings.HasPrefix(line, "[GIN] ") && len(line) >= 27 {
			return line[:27], false
		}
	}
	return "", false
}

// plausible: t lies between 2000 and shortly after the log was written.
// llama.cpp's stamps count from the process start and are placed on ref,
// so only their distance from it is bounded (by llamaElapsed).
func (c *LineClock) plausible(t time.Time) bool {
	if c.kind == KindLlamaCpp {
		return true
	}
	return !t.Before(earliestPlausible) && !t.After(c.ref.Add(futureSlack))
}

// clockSkew turns the difference between a line's own stamp and its
// collector's into the correction for every own stamp: a whole number of
// quarter hours (a time zone, or a year-less stamp placed in another
// year), or for llama.cpp the exact difference (its stamps are relative).
func clockSkew(kind Kind, d time.Duration) (time.Duration, bool) {
	if kind == KindLlamaCpp {
		return d, true
	}
	return d.Round(15 * time.Minute), true
}
