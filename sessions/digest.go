package sessions

import (
	"bytes"
	"fmt"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// OpenDigest reads what reports, diffs and the diagnosis need of a session
// file, in two passes that each hold bounded memory whatever the file's
// size: the stages, processes, markers and requests, the samples inside
// each run's cold window (and the server's own /metrics samples), but no
// log lines and no samples outside the windows. The first pass finds each
// run's cold window; the second keeps the events. A file with more than
// maxDigestRuns runs keeps the first ones and the last in detail; Digest
// lists the others, with every run's cold total.
//
// Every figure computed from the digest (Runs, Diagnose, BuildReport,
// Diff) equals the one computed from the whole file.
func OpenDigest(path string) (*Session, error) {
	metas, err := scanRunMetas(path)
	if err != nil {
		return nil, err
	}
	d := &Digest{Runs: metas.count, ColdTotals: metas.finish()}
	detail := map[int]bool{}
	for r := range metas.byRun {
		if metas.detailed(r) {
			detail[r] = true
		}
	}
	d.Omitted = d.Runs - len(detail)
	windows := map[int]trace.Interval{}
	for r := range detail {
		windows[r] = metas.byRun[r].window()
	}
	serverSample := []byte(`"sample":{"source":"` + trace.SourceServer + `"`)
	// The first sample of each source in a run is kept wherever it lies:
	// the diagnosis reads from it that a GPU was sampled and the weights'
	// size.
	type runSource struct {
		run    int
		source string
	}
	firstOf := map[runSource]bool{}
	st, err := OpenStream(path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	st.filter = func(at time.Duration, kind trace.Kind, run int, line []byte) bool {
		if !detail[run] {
			return false
		}
		switch kind {
		case trace.KindLog:
			return false
		case trace.KindSample:
			w := windows[run]
			head := line
			if len(head) > 160 {
				head = head[:160]
			}
			if at >= w.Start && at <= w.End || bytes.Contains(head, serverSample) {
				return true
			}
			if src, ok := sampleSource(head); ok && !firstOf[runSource{run, src}] {
				firstOf[runSource{run, src}] = true
				return true
			}
			return false
		}
		return true
	}
	s := &Session{Path: path, Header: st.Header, Digest: d}
	kept := map[int]bool{} // runs whose last event was kept
	perRun := map[int]int{}
	var e trace.Event
	for st.Next(&e) {
		m := metas.byRun[e.Run]
		if !detail[e.Run] {
			continue
		}
		light := e.Validate() != nil
		if light {
			switch e.Kind {
			case trace.KindLog:
				d.LogLines++
			case trace.KindSample:
				d.Samples++
			}
		}
		if m != nil && e.At == m.lastAt && !kept[e.Run] {
			kept[e.Run] = true
			if light {
				s.Events = append(s.Events, trace.Event{At: e.At, Run: e.Run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: lastEventMarker}})
			}
		}
		if !light {
			if perRun[e.Run] >= maxDigestRunEvents {
				d.Dropped++
				continue
			}
			perRun[e.Run]++
			s.Events = append(s.Events, e)
		}
	}
	if err := st.Err(); err != nil {
		return nil, fmt.Errorf("read session %s: %w", path, err)
	}
	s.Truncated, s.Unfinished, s.Skipped = st.Truncated(), st.Unfinished() && !st.Truncated(), st.Skipped()
	return s, nil
}

// digestBuilder builds, in one pass over events as they are written, the
// digest OpenDigest would read back from a session without samples (an
// import's): every event but log lines for the first runs and the last,
// every run's cold window.
type digestBuilder struct {
	metas   *runMetas
	kept    []seqEvent // runs below maxDigestRuns-1
	tail    []seqEvent // the latest run above them
	tailRun int
	logs    int
	n       int         // events added
	perRun  map[int]int // events kept per run
	dropped int         // events beyond maxDigestRunEvents
}

// seqEvent is an event with its place in the stream.
type seqEvent struct {
	e   trace.Event
	seq int
}

func newDigestBuilder() *digestBuilder {
	return &digestBuilder{metas: newRunMetas(), tailRun: -1, perRun: map[int]int{}}
}

func (d *digestBuilder) add(e *trace.Event) {
	seq := d.n
	d.n++
	if m := d.metas.add(e); m != nil && e.At >= m.lastAt {
		m.lastKind = e.Kind // leaves with the meta when the run is summarised
	}
	if e.Kind == trace.KindLog {
		d.logs++
		return
	}
	if d.perRun[e.Run] >= maxDigestRunEvents {
		d.dropped++
		return
	}
	d.perRun[e.Run]++
	if e.Run < maxDigestRuns-1 {
		d.kept = append(d.kept, seqEvent{*e, seq})
		return
	}
	if e.Run != d.tailRun {
		delete(d.perRun, d.tailRun)
		d.tail, d.tailRun = d.tail[:0], e.Run
	}
	d.tail = append(d.tail, seqEvent{*e, seq})
}

// session is the digest of the session whose header is h. The events
// added before the shift of a log that begins mid-startup was known (the
// first shifted of them) move later by shift, as the file's do.
func (d *digestBuilder) session(h Header, shift time.Duration, shifted int) *Session {
	dg := &Digest{Runs: d.metas.count, LogLines: d.logs, ColdTotals: d.metas.finish(), Dropped: d.dropped}
	last := d.metas.maxRun
	var evs []trace.Event
	kept := d.kept
	if last >= maxDigestRuns-1 {
		kept = append(kept, d.tail...)
	}
	for _, se := range kept {
		if se.seq > 0 && se.seq < shifted {
			shiftEvent(&se.e, shift)
		}
		evs = append(evs, se.e)
	}
	detailed := 0
	for r, m := range d.metas.byRun {
		if !d.metas.detailed(r) {
			continue
		}
		detailed++
		if m.lastKind == trace.KindLog {
			at := m.lastAt
			if shifted > 0 && at < shift {
				at += shift // a run that ended before the shift was known
			}
			evs = append(evs, trace.Event{At: at, Run: r, Kind: trace.KindMarker, Marker: &trace.Marker{Name: lastEventMarker}})
		}
	}
	dg.Omitted = dg.Runs - detailed
	trace.SortEvents(evs)
	return &Session{Header: h, Events: evs, Digest: dg}
}

// sampleSource reads the source of a sample line from its head.
func sampleSource(head []byte) (string, bool) {
	const key = `"sample":{"source":"`
	i := bytes.Index(head, []byte(key))
	if i < 0 {
		return "", false
	}
	rest := head[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	return string(rest[:j]), true
}

// runMeta is what the first pass of a digest keeps of one run: enough to
// compute its cold window exactly as Analyze does (launched, Start,
// ColdEnd), and no more.
type runMeta struct {
	keep                            bool // one of the first runs: detailed
	failed, spawned                 bool // a run_failed marker, a process start
	hasEnd                          bool // spanEnd was set (a span other than a sleep)
	start, healthy, spanEnd, lastAt time.Duration
	firstSent                       time.Duration // the earliest send of a finished request
	hasStart, hasSpans, hasReqs     bool
	spanStart                       time.Duration
	// The cold request: every version of the cold-phase requests by id,
	// the earliest done one wins (as Run.ColdRequest).
	cold map[string]trace.Request
	// lastKind is the kind of the run's latest event so far (an import's
	// digest marks a run that ends on a log line).
	lastKind trace.Kind
}

// Its memory does not grow with the number of runs: a run's meta is kept
// while the run may still take events (until a run two after it appears)
// and for the first maxDigestRuns-1 runs, which a digest details; the
// others leave their cold total behind.
type runMetas struct {
	byRun  map[int]*runMeta
	count  int // runs seen
	first  int // how many runs are kept in detail
	maxRun int
	open   []int           // runs not kept in detail whose meta is still held
	cold   []time.Duration // the cold totals of the runs that left
	// The meta of the last event's run: runs come in long stretches,
	// and add runs for every event of an import.
	lastRun int
	last    *runMeta
}

func newRunMetas() *runMetas {
	return &runMetas{byRun: map[int]*runMeta{}, maxRun: -1}
}

// scanRunMetas is the digest's first pass.
func scanRunMetas(path string) (*runMetas, error) {
	st, err := OpenStream(path, trace.KindStage, trace.KindProcess, trace.KindRequest)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ms := newRunMetas()
	var e trace.Event
	for st.Next(&e) {
		ms.add(&e)
	}
	if err := st.Err(); err != nil {
		return nil, fmt.Errorf("read session %s: %w", path, err)
	}
	return ms, nil
}

// add takes one event of the first pass and returns its run's meta (nil
// for a late event of a run already summarised).
func (ms *runMetas) add(e *trace.Event) *runMeta {
	m := ms.last
	if m == nil || ms.lastRun != e.Run {
		m = ms.byRun[e.Run]
	}
	if m == nil {
		if ms.first >= maxDigestRuns-1 && e.Run < ms.maxRun-1 {
			return nil // a late event of a run already summarised
		}
		m = &runMeta{keep: ms.first < maxDigestRuns-1}
		if m.keep {
			ms.first++
		}
		ms.byRun[e.Run] = m
		ms.count++
		if !m.keep {
			ms.open = append(ms.open, e.Run)
		}
		if e.Run > ms.maxRun {
			ms.maxRun = e.Run
			keep := ms.open[:0]
			for _, r := range ms.open {
				if r < ms.maxRun-1 {
					ms.leave(r, ms.byRun[r])
				} else {
					keep = append(keep, r)
				}
			}
			ms.open = keep
		}
	}
	m.add(e)
	ms.lastRun, ms.last = e.Run, m
	return m
}

// add takes one event of the run.
func (m *runMeta) add(e *trace.Event) {
	if e.At > m.lastAt {
		m.lastAt = e.At
	}
	switch {
	case e.Kind == trace.KindStage && e.Stage != nil:
		if !m.hasSpans || e.Stage.Start < m.spanStart {
			m.spanStart = e.Stage.Start
		}
		// A sleep ends a run; it never extends its cold window (coldEnd).
		if e.Stage.Name != trace.StageSleep && (!m.hasEnd || e.Stage.End > m.spanEnd) {
			m.spanEnd, m.hasEnd = e.Stage.End, true
		}
		m.hasSpans = true
	case e.Kind == trace.KindProcess && e.Process != nil && e.Process.Action == trace.ProcessStart,
		e.Kind == trace.KindMarker && e.Marker != nil && e.Marker.Name == trace.MarkerRunStart:
		if !m.hasStart || e.At < m.start {
			m.start, m.hasStart = e.At, true
		}
		m.spawned = m.spawned || e.Kind == trace.KindProcess
	case e.Kind == trace.KindMarker && e.Marker != nil && e.Marker.Name == trace.MarkerRunFailed:
		m.failed = true
	case e.Kind == trace.KindMarker && e.Marker != nil && e.Marker.Name == trace.MarkerHealthy:
		if m.healthy == 0 {
			m.healthy = e.At
		}
	case e.Kind == trace.KindRequest && e.Request != nil:
		if e.Request.Done {
			if !m.hasReqs || e.Request.Sent < m.firstSent {
				m.firstSent = e.Request.Sent
			}
			m.hasReqs = true
		}
		if e.Request.Phase == trace.PhaseCold {
			if m.cold == nil {
				m.cold = map[string]trace.Request{}
			}
			q := *e.Request
			q.Tokens = nil // the window needs the times, not the tokens
			m.cold[q.ID] = q
		}
	}
}

// detailed: run r is one of the first runs, or the last (call after
// finish).
func (ms *runMetas) detailed(r int) bool {
	m := ms.byRun[r]
	return m != nil && (m.keep || r == ms.maxRun)
}

// leave summarises run r: its cold total stays, its meta goes.
func (ms *runMetas) leave(r int, m *runMeta) {
	if m.launched() {
		ms.cold = append(ms.cold, m.coldEnd()-m.startAt())
	}
	delete(ms.byRun, r)
	if ms.last == m {
		ms.last = nil
	}
}

// finish is every run's cold total (the runs still kept included).
func (ms *runMetas) finish() []time.Duration {
	out := append([]time.Duration(nil), ms.cold...)
	for _, m := range ms.byRun {
		if m.launched() {
			out = append(out, m.coldEnd()-m.startAt())
		}
	}
	return out
}

// startAt is Run.Start: the launch, or the earliest span.
func (m *runMeta) startAt() time.Duration {
	s := m.start
	if m.hasSpans && (!m.hasStart || m.spanStart < s) {
		s = m.spanStart
	}
	return s
}

// coldRequest is Run.ColdRequest.
func (m *runMeta) coldRequest() (trace.Request, bool) {
	var best trace.Request
	found := false
	for _, q := range m.cold {
		if q.Done && (!found || q.Sent < best.Sent) {
			best, found = q, true
		}
	}
	return best, found
}

// launched is Analyze's launched (and its run that failed before
// anything was measured).
func (m *runMeta) launched() bool {
	if m.failed && !m.spawned && !m.hasSpans && !m.hasReqs {
		return false
	}
	if m.hasSpans {
		return true
	}
	if _, ok := m.coldRequest(); ok {
		return true
	}
	return m.hasStart && !m.hasReqs
}

// coldEnd is Analyze's coldEnd.
func (m *runMeta) coldEnd() time.Duration {
	if q, ok := m.coldRequest(); ok && q.FirstToken > 0 {
		return q.Sent + q.FirstToken
	}
	if m.healthy > 0 {
		return m.healthy
	}
	start := m.startAt()
	end := start
	if m.hasEnd && m.spanEnd > end {
		end = m.spanEnd
	}
	if end == start {
		end = m.lastAt
	}
	return end
}

// window is where the diagnosis reads samples: the cold window and the
// cold request (whose memory jump it weighs), or the whole run when it was
// not launched (the facts then come from the server's samples and the
// requests).
func (m *runMeta) window() trace.Interval {
	if !m.launched() {
		return trace.Interval{Start: 0, End: -1}
	}
	w := trace.Interval{Start: m.startAt(), End: m.coldEnd()}
	if q, ok := m.coldRequest(); ok && q.Sent+q.End > w.End {
		w.End = q.Sent + q.End
	}
	return w
}
