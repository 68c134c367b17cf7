package serverlog

import (
	"time"
)

// UntimedSpacing is the distance LineTimes puts between consecutive lines
// of a log that carries no timestamps at all: a span's length then counts
// its lines, not time.
const UntimedSpacing = time.Second

// LineTimes places every line of a log on one time axis for import. The
// lines' own timestamps (ParseTimestamp) are used where present, each
// parsed relative to the previous one so that year-less and zone-less
// stamps resolve near their neighbours; a stamp earlier than one before it
// (second-truncated stamps between millisecond ones) is raised to keep the
// axis monotonic; lines without one are placed evenly between their timed
// neighbours (before the first: at the first; after the last: at the
// last). A log with no timestamp at all is spaced UntimedSpacing apart.
//
// It returns the wall-clock time of offset zero (the first timestamp;
// ref when there is none), the offset of each line, and how many lines
// carried a timestamp. ref completes stamps that omit the year or zone,
// and is the process start for llama.cpp's elapsed-time prefix; zero means
// now.
func LineTimes(kind Kind, lines []string, ref time.Time) (time.Time, []time.Duration, int) {
	if ref.IsZero() {
		ref = time.Now()
	}
	at := make([]time.Duration, len(lines))
	stamps := make([]time.Time, len(lines))
	ok := make([]bool, len(lines))
	timed := 0
	prev := ref
	var maxT time.Time
	for i, l := range lines {
		r := prev
		if kind == KindLlamaCpp {
			r = ref
		}
		t, good := ParseTimestamp(kind, l, r)
		if !good {
			continue
		}
		if timed > 0 && t.Before(maxT) {
			t = maxT
		}
		stamps[i], ok[i] = t, true
		maxT, prev = t, t
		timed++
	}
	if timed == 0 {
		for i := range at {
			at[i] = time.Duration(i) * UntimedSpacing
		}
		return ref, at, 0
	}
	var start time.Time
	for i := range lines {
		if ok[i] {
			start = stamps[i]
			break
		}
	}
	last := -1
	for i := range lines {
		if !ok[i] {
			continue
		}
		at[i] = stamps[i].Sub(start)
		if last >= 0 && i-last > 1 {
			gap := at[i] - at[last]
			for k := last + 1; k < i; k++ {
				at[k] = at[last] + gap*time.Duration(k-last)/time.Duration(i-last)
			}
		}
		last = i
	}
	for k := last + 1; k < len(lines); k++ {
		at[k] = at[last]
	}
	return start, at, timed
}
