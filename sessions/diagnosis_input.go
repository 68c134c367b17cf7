package sessions

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Bounds on what DiagnosisInput keeps of a run whose cold window is still open.
const (
	// inputThinEvery is how many samples an open run gathers before
	// they are thinned to those its facts can still read.
	inputThinEvery = 20_000
	// maxInputSamples bounds the samples kept of one run: a cold
	// request that streams for an hour at the cold sampling rate would
	// otherwise keep every sample of it.
	maxInputSamples = 200_000
)

// DiagnosisInput keeps, one event at a time, what the diagnosis reads of a
// stream of events (a live session, a replay), in memory that grows with
// the runs, stages, requests and markers but not with the samples and log
// lines most of a long session is made of. Diagnose(ev.Events()) and
// DiagnoseRun(ev.Events(), run) give what they give on every event added
// (TestDiagnosisInputMatchesEvents), for events in the order a session records
// them.
//
// Of each run it keeps:
//   - every event but samples and log lines (what Analyze reads);
//   - its samples while its cold window may still grow; once the window
//     is settled (the cold request finished after the target was healthy
//     or gave its first token, or requests finished against a server the
//     run did not launch), only the samples the diagnosis reads
//     (usedSamples), and of later samples those it may read: inside the
//     window, the server's own metrics, a source's first;
//   - its last non-blank log lines, which the diagnosis of a failed run
//     quotes;
//   - the offset of its last event, where Analyze ends a run that has
//     neither stages nor health.
//
// A run whose window stays open has its samples thinned every
// inputThinEvery samples to those the window's facts can still read
// (those before the run's start and from its health on, where a cold
// request may be in flight, are kept whole), and keeps at most
// maxInputSamples: beyond that samples are dropped and counted
// (Dropped).
type DiagnosisInput struct {
	core    []trace.Event // every event but samples and log lines, in order
	runs    map[int]*inputRun
	dropped int
	// thinEvery and maxSamples are inputThinEvery and maxInputSamples
	// (tests lower them).
	thinEvery, maxSamples int
	// events is what Events returned last; nil once an event changed it.
	events []trace.Event
}

// inputRun is what DiagnosisInput keeps of one run.
type inputRun struct {
	meta    runMeta // the run's cold window as Analyze computes it
	settled bool
	samples []trace.Event
	// sources are the sample sources of which a sample is kept; weights:
	// a page-cache sample that states the weights' size is kept.
	sources map[string]bool
	weights bool
	tail    []trace.Event // the last non-blank log lines, oldest first
	thinAt  int           // thin the samples when there are this many
}

// NewDiagnosisInput returns an empty DiagnosisInput.
func NewDiagnosisInput() *DiagnosisInput {
	return &DiagnosisInput{runs: map[int]*inputRun{}, thinEvery: inputThinEvery, maxSamples: maxInputSamples}
}

// Dropped counts the samples not kept because a run's cold window stayed
// open for more than maxInputSamples of them: the diagnosis of that run
// did not read them.
func (v *DiagnosisInput) Dropped() int { return v.dropped }

// Add takes the next event. Events without their payload (a Stream's light
// events) only move their run's last offset.
func (v *DiagnosisInput) Add(e trace.Event) {
	v.events = nil
	r := v.runs[e.Run]
	if r == nil {
		r = &inputRun{sources: map[string]bool{}, thinAt: v.thinEvery}
		v.runs[e.Run] = r
	}
	// The run's last offset counts every event, as Analyze's does.
	r.meta.lastAt = max(r.meta.lastAt, e.At)
	if e.Validate() != nil {
		return
	}
	switch e.Kind {
	case trace.KindSample:
		v.addSample(r, e)
		return
	case trace.KindLog:
		if strings.TrimSpace(e.Log.Text) != "" {
			r.tail = append(r.tail, e)
			if len(r.tail) > failureTailLines {
				r.tail = r.tail[len(r.tail)-failureTailLines:]
			}
		}
		return
	}
	v.core = append(v.core, e)
	r.meta.add(&e)
	if !r.settled && r.meta.settled() {
		r.settled = true
		v.keepUsed(e.Run, r, v.run(e.Run, r))
	}
}

// DropRunsBefore forgets every run numbered below run, so that a
// long-lived reader that shows only the newest runs (fleetmetrics, an
// agent's /metrics) holds them and not the session's whole history.
func (v *DiagnosisInput) DropRunsBefore(run int) {
	v.events = nil
	keep := v.core[:0]
	for _, e := range v.core {
		if e.Run >= run {
			keep = append(keep, e)
		}
	}
	clear(v.core[len(keep):])
	v.core = keep
	for i := range v.runs {
		if i < run {
			delete(v.runs, i)
		}
	}
}

// addSample keeps a sample the diagnosis may read.
func (v *DiagnosisInput) addSample(r *inputRun, e trace.Event) {
	s := e.Sample
	first := !r.sources[s.Source]
	weights := !r.weights && s.Source == trace.SourcePageCache && s.Values[trace.MetricWeightBytes] > 0
	if r.settled && !first && !weights && s.Source != trace.SourceServer && e.At > r.meta.windowEnd() {
		return // after the settled window: the facts never read it
	}
	if len(r.samples) >= v.maxSamples && !first && !weights {
		v.dropped++
		return
	}
	r.sources[s.Source] = true
	r.weights = r.weights || weights
	r.samples = append(r.samples, e)
	if !r.settled && len(r.samples) >= r.thinAt {
		v.thin(e.Run, r)
	}
}

// run is run i as Analyze computes it from every event added.
func (v *DiagnosisInput) run(i int, r *inputRun) Run {
	a := newRunAnalyzer()
	for k := range v.core {
		if v.core[k].Run == i {
			a.add(&v.core[k])
		}
	}
	last := trace.Event{At: r.meta.lastAt, Run: i, Kind: trace.KindMarker, Marker: &trace.Marker{Name: lastEventMarker}}
	a.add(&last)
	for _, run := range a.runs() {
		if run.Index == i {
			return run
		}
	}
	return Run{Index: i, Start: r.meta.lastAt, ColdEnd: r.meta.lastAt, ColdEndKind: ColdEndNone}
}

// keepUsed keeps of a settled run's samples those its facts read.
func (v *DiagnosisInput) keepUsed(i int, r *inputRun, run Run) {
	used := usedSamples(r.samples, run)
	r.samples = keepMarked(r.samples, func(k int) bool { return used[k] })
}

// thin keeps of an open run's samples those its facts can still read: all
// before its start (a stage may yet begin earlier) and from its health on
// (a cold request may be in flight), and in between those read with the
// window ending where it ends now or later.
func (v *DiagnosisInput) thin(i int, r *inputRun) {
	run := v.run(i, r)
	now := usedSamples(r.samples, run)
	run.ColdEnd = math.MaxInt64
	later := usedSamples(r.samples, run)
	from := time.Duration(math.MaxInt64)
	if r.meta.healthy > 0 {
		from = r.meta.healthy
	}
	r.samples = keepMarked(r.samples, func(k int) bool {
		at := r.samples[k].At
		return at < run.Start || at >= from || now[k] || later[k]
	})
	r.thinAt = max(2*len(r.samples), v.thinEvery)
}

// keepMarked keeps the events whose index keep reports, in place.
func keepMarked(evs []trace.Event, keep func(int) bool) []trace.Event {
	out := evs[:0]
	for k := range evs {
		if keep(k) {
			out = append(out, evs[k])
		}
	}
	clear(evs[len(out):]) // let the dropped payloads go
	if len(out) < cap(out)/4 {
		return append([]trace.Event(nil), out...) // and the room they took
	}
	return out
}

// settled reports that the run's cold window can no longer move: its
// cold request finished once the target was healthy or with a first
// token, or requests finished against a server it did not launch (no
// window).
func (m *runMeta) settled() bool {
	if !m.launched() {
		return m.hasReqs
	}
	q, ok := m.coldRequest()
	return ok && (q.FirstToken > 0 || m.healthy > 0)
}

// windowEnd is where the facts stop reading samples of a settled run: the
// end of window, or for a run that launched nothing the send of its first
// request (Analyze's degenerate window).
func (m *runMeta) windowEnd() time.Duration {
	if !m.launched() {
		return m.firstSent
	}
	return m.window().End
}

// Events is what the diagnosis reads: the events kept, each run's after
// the events of every kind but samples and log lines. The slice is shared
// until the next Add: do not modify it.
func (v *DiagnosisInput) Events() []trace.Event {
	if v.events != nil {
		return v.events
	}
	n := len(v.core)
	idx := make([]int, 0, len(v.runs))
	for i, r := range v.runs {
		idx = append(idx, i)
		n += len(r.samples) + len(r.tail) + 1
	}
	sort.Ints(idx)
	out := make([]trace.Event, 0, n)
	out = append(out, v.core...)
	for _, i := range idx {
		r := v.runs[i]
		out = append(out, r.samples...)
		out = append(out, r.tail...)
		out = append(out, trace.Event{At: r.meta.lastAt, Run: i, Kind: trace.KindMarker, Marker: &trace.Marker{Name: lastEventMarker}})
	}
	v.events = out
	return out
}

// OpenForDiagnosis reads the session file at path in one pass and keeps
// what a DiagnosisInput keeps of it: every event but samples and log
// lines, and of those what the diagnosis reads. Its Runs, Diagnose and
// DiagnoseRun are those of the whole file (TestOpenForDiagnosis), in
// memory that does not grow with the samples and log lines; its Events
// are not every event of the file (Dropped says how many samples a run
// that never settled lost), so list events from a Stream instead.
func OpenForDiagnosis(path string) (*Session, int, error) {
	st, err := OpenStream(path)
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	in := NewDiagnosisInput()
	var e trace.Event
	for st.Next(&e) {
		in.Add(e)
	}
	if err := st.Err(); err != nil {
		return nil, 0, fmt.Errorf("read session %s: %w", path, err)
	}
	s := &Session{Path: path, Header: st.Header, Events: in.Events(), Skipped: st.Skipped(),
		Truncated: st.Truncated(), Unfinished: st.Unfinished() && !st.Truncated()}
	return s, in.Dropped(), nil
}
