package trace

import (
	"sort"
	"time"
)

// Interval is a half-open time interval [Start, End) on the session clock.
type Interval struct {
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
}

// Duration is End − Start, or zero for an empty or inverted interval.
func (iv Interval) Duration() time.Duration {
	if iv.End <= iv.Start {
		return 0
	}
	return iv.End - iv.Start
}

// Clip returns the part of iv inside w (possibly empty).
func (iv Interval) Clip(w Interval) Interval {
	if iv.Start < w.Start {
		iv.Start = w.Start
	}
	if iv.End > w.End {
		iv.End = w.End
	}
	if iv.End < iv.Start {
		iv.End = iv.Start
	}
	return iv
}

// Overlaps reports whether the two intervals share any time.
func (iv Interval) Overlaps(o Interval) bool {
	return iv.Start < o.End && o.Start < iv.End
}

// Union merges overlapping and touching intervals into a sorted list of
// disjoint ones. Empty intervals are dropped. The input is not modified.
func Union(ivs []Interval) []Interval {
	in := make([]Interval, 0, len(ivs))
	for _, iv := range ivs {
		if iv.End > iv.Start {
			in = append(in, iv)
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].Start < in[j].Start })
	var out []Interval
	for _, iv := range in {
		if n := len(out); n > 0 && iv.Start <= out[n-1].End {
			if iv.End > out[n-1].End {
				out[n-1].End = iv.End
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// Covered is the total length of the union of the intervals.
func Covered(ivs []Interval) time.Duration {
	var d time.Duration
	for _, iv := range Union(ivs) {
		d += iv.Duration()
	}
	return d
}

// Gaps returns the parts of window that no interval covers.
func Gaps(ivs []Interval, window Interval) []Interval {
	var gaps []Interval
	cur := window.Start
	for _, iv := range Union(ivs) {
		iv = iv.Clip(window)
		if iv.Duration() == 0 {
			continue
		}
		if iv.Start > cur {
			gaps = append(gaps, Interval{cur, iv.Start})
		}
		if iv.End > cur {
			cur = iv.End
		}
	}
	if cur < window.End {
		gaps = append(gaps, Interval{cur, window.End})
	}
	return gaps
}

// StageShare is one stage's place in a cold start.
type StageShare struct {
	Name  Stage         `json:"name"`
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	// Duration is the union of this stage's spans inside the window (several
	// spans of one name, e.g. per shard, count once where they overlap).
	Duration time.Duration `json:"duration"`
	// Share is Duration ÷ the window's length. Shares of overlapping stages
	// add up to more than 1; Exclusive does not.
	Share float64 `json:"share"`
	// Exclusive is the time only this stage covers.
	Exclusive time.Duration `json:"exclusive"`
	// Overlaps lists the stages that run at the same time as this one.
	Overlaps []Stage `json:"overlaps,omitempty"`
	// Spans is how many spans were merged into this row.
	Spans int `json:"spans"`
	// Attrs are the attributes of the longest span of this stage.
	Attrs Attrs `json:"attrs,omitempty"`
}

// Attribution decomposes a cold-start window into stages.
type Attribution struct {
	Window Interval      `json:"window"`
	Total  time.Duration `json:"total"`
	Stages []StageShare  `json:"stages"` // in start order
	// Attributed is the union of all stages inside the window.
	Attributed time.Duration `json:"attributed"`
	// Unattributed is Total − Attributed: wall time no stage covers.
	Unattributed time.Duration `json:"unattributed"`
	// Gaps are the unattributed intervals themselves.
	Gaps []Interval `json:"gaps,omitempty"`
	// CriticalPath is the chain of stages (and gaps) that ends the window.
	CriticalPath []PathStep `json:"critical_path,omitempty"`
	// Dominant is the stage with the longest exclusive time, or
	// StageUnattributed when the gaps are longer than any stage.
	Dominant Stage `json:"dominant,omitempty"`
}

// UnattributedShare is Unattributed ÷ Total.
func (a Attribution) UnattributedShare() float64 {
	if a.Total <= 0 {
		return 0
	}
	return float64(a.Unattributed) / float64(a.Total)
}

// Stage returns the share row of a stage, if present.
func (a Attribution) Stage(name Stage) (StageShare, bool) {
	for _, s := range a.Stages {
		if s.Name == name {
			return s, true
		}
	}
	return StageShare{}, false
}

// PathStep is one step of a critical path: a stage, or an unattributed gap
// (Name == StageUnattributed).
type PathStep struct {
	Name  Stage         `json:"name"`
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
}

// Attribute decomposes window into the given spans: per-stage duration,
// share and exclusive time, overlaps, unattributed gaps, the critical path
// and the dominant stage. Spans outside the window are clipped; spans with
// the same name are merged. Open spans count up to their current End.
func Attribute(spans []Span, window Interval) Attribution {
	a := Attribution{Window: window, Total: window.Duration()}
	byName := map[Stage][]Interval{}
	longest := map[Stage]Span{}
	var order []Stage
	var all []Interval
	for _, s := range spans {
		iv := s.Interval().Clip(window)
		if iv.Duration() == 0 && !(s.Duration() == 0 && s.Start >= window.Start && s.Start <= window.End) {
			continue
		}
		if _, seen := byName[s.Name]; !seen {
			order = append(order, s.Name)
		}
		byName[s.Name] = append(byName[s.Name], iv)
		if l, ok := longest[s.Name]; !ok || s.Duration() > l.Duration() {
			longest[s.Name] = s
		}
		all = append(all, iv)
	}
	merged := map[Stage][]Interval{}
	for _, name := range order {
		merged[name] = Union(byName[name])
	}
	for _, name := range order {
		ivs := byName[name]
		row := StageShare{Name: name, Spans: len(ivs), Attrs: longest[name].Attrs}
		row.Start, row.End = ivs[0].Start, ivs[0].End
		for _, iv := range ivs {
			if iv.Start < row.Start {
				row.Start = iv.Start
			}
			if iv.End > row.End {
				row.End = iv.End
			}
		}
		row.Duration = Covered(merged[name])
		if a.Total > 0 {
			row.Share = float64(row.Duration) / float64(a.Total)
		}
		var others []Interval
		for _, o := range order {
			if o == name {
				continue
			}
			if intersects(merged[name], merged[o]) {
				row.Overlaps = append(row.Overlaps, o)
			}
			others = append(others, merged[o]...)
		}
		row.Exclusive = row.Duration - intersection(merged[name], Union(others))
		a.Stages = append(a.Stages, row)
	}
	sort.SliceStable(a.Stages, func(i, j int) bool {
		if a.Stages[i].Start != a.Stages[j].Start {
			return a.Stages[i].Start < a.Stages[j].Start
		}
		return a.Stages[i].Name.Order() < a.Stages[j].Name.Order()
	})
	a.Attributed = Covered(all)
	a.Unattributed = a.Total - a.Attributed
	if a.Unattributed < 0 {
		a.Unattributed = 0
	}
	a.Gaps = Gaps(all, window)
	a.CriticalPath = CriticalPath(spans, window)
	var best time.Duration = -1
	for _, s := range a.Stages {
		if s.Exclusive > best {
			best, a.Dominant = s.Exclusive, s.Name
		}
	}
	var longestGap time.Duration
	for _, g := range a.Gaps {
		if g.Duration() > longestGap {
			longestGap = g.Duration()
		}
	}
	if longestGap > best && longestGap > 0 {
		a.Dominant = StageUnattributed
	}
	return a
}

// CriticalPath walks back from the end of window: at each point it takes the
// span that covers the point and started earliest (the one that kept the
// start from finishing sooner), jumps to its start, and repeats; time no span
// covers becomes an unattributed step. The result is in time order and its
// steps tile the window exactly.
func CriticalPath(spans []Span, window Interval) []PathStep {
	var ivs []Span
	for _, s := range spans {
		iv := s.Interval().Clip(window)
		if iv.Duration() > 0 {
			s.Start, s.End = iv.Start, iv.End
			ivs = append(ivs, s)
		}
	}
	var rev []PathStep
	cur := window.End
	for cur > window.Start {
		// Spans that cover the instant just before cur.
		var pick *Span
		for i := range ivs {
			s := &ivs[i]
			if s.Start < cur && s.End >= cur {
				if pick == nil || s.Start < pick.Start || (s.Start == pick.Start && s.Name.Order() < pick.Name.Order()) {
					pick = s
				}
			}
		}
		if pick != nil {
			rev = append(rev, PathStep{Name: pick.Name, Start: pick.Start, End: cur})
			cur = pick.Start
			continue
		}
		// A gap: back to the latest end of any span before cur.
		prev := window.Start
		for _, s := range ivs {
			if s.End < cur && s.End > prev {
				prev = s.End
			}
		}
		rev = append(rev, PathStep{Name: StageUnattributed, Start: prev, End: cur})
		cur = prev
	}
	out := make([]PathStep, len(rev))
	for i := range rev {
		out[i] = rev[len(rev)-1-i]
	}
	return out
}

// intersects reports whether two sorted disjoint interval lists share time.
func intersects(a, b []Interval) bool { return intersection(a, b) > 0 }

// intersection is the length of the overlap of two sorted disjoint lists.
func intersection(a, b []Interval) time.Duration {
	var d time.Duration
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo, hi := a[i].Start, a[i].End
		if b[j].Start > lo {
			lo = b[j].Start
		}
		if b[j].End < hi {
			hi = b[j].End
		}
		if hi > lo {
			d += hi - lo
		}
		if a[i].End < b[j].End {
			i++
		} else {
			j++
		}
	}
	return d
}
