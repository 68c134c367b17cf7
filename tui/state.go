package tui

import (
	"math"
	"sort"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// Bounds on what the UI keeps in memory. The session file keeps everything;
// the screen only ever shows the recent past.
const (
	maxSeriesPoints = 2048
	maxLogLines     = 20000
)

// series is one chart's history: values at session offsets, oldest first.
type series struct {
	t []time.Duration
	v []float64
}

func (s *series) add(at time.Duration, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return // a broken reading must not reach the plotter
	}
	s.t = append(s.t, at)
	s.v = append(s.v, v)
	if len(s.v) > maxSeriesPoints {
		// Drop the oldest half in one copy rather than one point per add.
		n := len(s.v) / 2
		s.t = append(s.t[:0], s.t[n:]...)
		s.v = append(s.v[:0], s.v[n:]...)
	}
}

func (s *series) last() (float64, bool) {
	if len(s.v) == 0 {
		return 0, false
	}
	return s.v[len(s.v)-1], true
}

// logLine is one line of the target's output as the log pane shows it.
type logLine struct {
	at     time.Duration
	run    int
	stream string
	text   string
	stage  trace.Stage
}

// state is the session as the UI knows it: every event applied so far and
// what is derived from them. Derivations that scan all events (runs,
// diagnosis) are recomputed by analyze, which the model throttles.
type state struct {
	// input is what the diagnosis reads of the events (not the samples
	// and log lines it never reads); core are those Analyze reads (stages,
	// requests, processes, markers). Neither grows with the samples and
	// log lines a long session is made of.
	input *sessions.DiagnosisInput
	core  []trace.Event
	last  time.Duration // the latest event offset

	// samples is every sampled metric's history, for the Charts pane.
	samples sampleStore

	logs []logLine
	// logVersion counts appended log lines, so the log pane rebuilds its
	// content only when it changed.
	logVersion int
	// logDropped counts lines dropped from the front, so the log pane knows
	// its formatted copy is stale.
	logDropped int
	// inflight are requests seen but not done (latest update), for the
	// probing state and the requests pane's streaming rows.
	inflight map[string]inflightReq

	runs []sessions.Run
	// diag is the latest run's diagnosis; selDiag an earlier run's, when
	// one is selected ([), recomputed when diag is (see diagnosis).
	diag    sessions.Diagnosis
	diagAt  time.Time
	hasDiag bool
	selDiag struct {
		run int
		at  time.Time
		d   sessions.Diagnosis
	}
	dirty bool // non-sample events applied since the last analyze
	// samplesDirty: samples applied since the last diagnosis.
	samplesDirty bool
	// diagStale: non-sample events applied since the last diagnosis. It
	// outlives dirty (cleared by every analyze), so that an event that
	// came within a second of the last diagnosis still gets diagnosed on
	// a later pass.
	diagStale bool
	version   int // bumped by analyze; panes cache on it
	processes int // process start events seen
	resets    int // replay resets seen (for tests and the status line)
	// bench follows bench runs; nil until a bench_start marker arrives.
	bench *benchTrack
}

func newState() *state {
	return &state{inflight: map[string]inflightReq{}, input: sessions.NewDiagnosisInput()}
}

// apply appends events. It returns true when a replay reset asked to forget
// everything; the caller then starts from a fresh state with the events
// that follow the reset.
func (s *state) apply(evs []trace.Event) (reset bool, rest []trace.Event) {
	for i, e := range evs {
		if e.Kind == trace.KindMarker && e.Marker != nil && e.Marker.Name == trace.MarkerReplayReset {
			return true, evs[i+1:]
		}
		s.applyOne(e)
	}
	return false, nil
}

func (s *state) applyOne(e trace.Event) {
	if e.Validate() != nil {
		return // a malformed event must not crash the UI
	}
	if e.At > s.last {
		s.last = e.At
	}
	s.input.Add(e)
	if e.Kind == trace.KindSample {
		// Runs do not depend on samples; only the diagnosis reads them,
		// and it is refreshed at a slower pace for samples alone.
		s.samplesDirty = true
		s.applySample(e.At, e.Sample)
		return
	}
	s.dirty, s.diagStale = true, true
	switch e.Kind {
	case trace.KindLog:
		s.logs = append(s.logs, logLine{at: e.At, run: e.Run, stream: e.Log.Stream, text: e.Log.Text, stage: e.Log.Stage})
		if len(s.logs) > maxLogLines {
			n := len(s.logs) / 4
			s.logs = append(s.logs[:0], s.logs[n:]...)
			s.logDropped += n
		}
		s.logVersion++
		return
	case trace.KindMarker:
		if n := e.Marker.Name; n == trace.MarkerBenchStart || n == trace.MarkerBenchEnd {
			if s.bench == nil {
				s.bench = &benchTrack{}
			}
			s.bench.marker(e)
		}
	case trace.KindRequest:
		if s.bench != nil {
			s.bench.request(e.At, e.Request)
		}
		if e.Request.Done {
			delete(s.inflight, e.Request.ID)
		} else {
			s.inflight[e.Request.ID] = inflightReq{run: e.Run, q: *e.Request}
		}
	case trace.KindProcess:
		if e.Process.Action == trace.ProcessStart {
			s.processes++
		}
	}
	s.core = append(s.core, e)
}

func (s *state) applySample(at time.Duration, sm *trace.Sample) {
	s.samples.add(at, sm)
}

// analyze recomputes runs (and, at most once a second unless final, the
// diagnosis).
//
// nowOff is the live session offset (negative when there is no live
// clock): stages still open are drawn up to it, so bars grow between the
// producer's updates.
func (s *state) analyze(now time.Time, final bool, nowOff time.Duration) {
	diagDue := final || !s.hasDiag ||
		s.diagStale && now.Sub(s.diagAt) >= time.Second ||
		s.samplesDirty && s.coldWindowOpen() && now.Sub(s.diagAt) >= diagSamplesEvery
	if !s.dirty && !diagDue {
		return
	}
	if s.dirty || final {
		s.runs = sessions.Analyze(s.core)
		s.growOpen(nowOff)
	}
	if diagDue {
		s.diag = sessions.Diagnose(s.input.Events())
		s.diagAt, s.hasDiag = now, true
		s.samplesDirty, s.diagStale = false, false
	}
	s.dirty = false
	s.version++
}

// coldWindowOpen reports whether the latest run's cold window is still
// open (no first token yet): only then can new samples change the
// diagnosis, whose evidence is read inside that window.
func (s *state) coldWindowOpen() bool {
	if len(s.runs) == 0 {
		return true
	}
	return s.runs[len(s.runs)-1].ColdEndKind != sessions.ColdEndFirstToken
}

// provisional reports whether r's diagnosis can still change because its
// cold window is open: r is the latest run, its window has begun but not
// reached its first token, it has neither an exit nor a failure, and more
// events can come (ended is unset). Its shares are then of the window so
// far, and the pane and header say so rather than call a cause dominant.
func (s *state) provisional(r sessions.Run, ended bool) bool {
	if ended || len(s.runs) == 0 || r.Index != s.runs[len(s.runs)-1].Index {
		return false
	}
	switch r.ColdEndKind {
	case sessions.ColdEndFirstToken, sessions.ColdEndNone, "":
		return false // a full window, or none to rank
	}
	return r.Exit == nil && r.Failed == ""
}

// run returns the selected run: sel < 0 or past the end means the latest.
func (s *state) run(sel int) (sessions.Run, bool) {
	if len(s.runs) == 0 {
		return sessions.Run{}, false
	}
	if sel < 0 || sel >= len(s.runs) {
		return s.runs[len(s.runs)-1], true
	}
	return s.runs[sel], true
}

// diagnosis is the selected run's diagnosis (sel as in run): the latest
// run's is kept up to date by analyze; an earlier run's is computed when
// first asked for and again only after analyze diagnosed anew.
func (s *state) diagnosis(sel int) sessions.Diagnosis {
	r, ok := s.run(sel)
	if !ok || r.Index == s.runs[len(s.runs)-1].Index {
		return s.diag
	}
	if c := &s.selDiag; c.run != r.Index || !c.at.Equal(s.diagAt) || c.d.Hypotheses == nil {
		c.run, c.at, c.d = r.Index, s.diagAt, sessions.DiagnoseRun(s.input.Events(), r)
	}
	return s.selDiag.d
}

// allRequests are the finished requests of every run, in send order, for
// the per-request charts.
func (s *state) allRequests() []trace.Request {
	var out []trace.Request
	for _, r := range s.runs {
		out = append(out, r.Requests...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Sent < out[j].Sent })
	return out
}

// probing reports whether a request of run is in flight.
func (s *state) probing(run int) bool {
	for _, r := range s.inflight {
		if r.run == run {
			return true
		}
	}
	return false
}

// targetState is the header's state word for a run, derived from events
// only: launching → loading → healthy ↔ probing → stopped | crashed.
func targetState(r sessions.Run, ok bool, probing bool) string {
	switch {
	case !ok:
		return "waiting"
	case r.Exit != nil && r.Crashed:
		if r.Exit.Signal != "" {
			return "crashed (" + r.Exit.Signal + ")"
		}
		return "crashed (exit " + itoa(r.Exit.ExitCode) + ")"
	case r.Exit != nil:
		return "stopped"
	case probing:
		return "probing"
	case r.Healthy > 0:
		return "healthy"
	case len(r.Spans) > 0:
		return "loading"
	}
	return "launching"
}

// growOpen extends the latest run's open stages to nowOff and, while the
// cold window is still open-ended, the window too.
func (s *state) growOpen(nowOff time.Duration) {
	if nowOff <= 0 || len(s.runs) == 0 {
		return
	}
	r := &s.runs[len(s.runs)-1]
	if r.Exit != nil {
		return
	}
	changed := false
	for i := range r.Spans {
		if sp := &r.Spans[i]; sp.Open && sp.End < nowOff {
			sp.End, changed = nowOff, true
		}
	}
	if !changed {
		return
	}
	if r.ColdEndKind == sessions.ColdEndLastStage && nowOff > r.ColdEnd {
		r.ColdEnd = nowOff
	}
	r.Attribution = trace.Attribute(r.Spans, trace.Interval{Start: r.Start, End: r.ColdEnd})
}

// hasOpen reports whether the latest run has a stage still running.
func (s *state) hasOpen() bool {
	if len(s.runs) == 0 {
		return false
	}
	for _, sp := range s.runs[len(s.runs)-1].Spans {
		if sp.Open {
			return true
		}
	}
	return false
}

// inflightReq is a request still streaming.
type inflightReq struct {
	run int
	q   trace.Request
}

// streaming returns run's in-flight requests in send order.
func (s *state) streaming(run int) []trace.Request {
	var out []trace.Request
	for _, r := range s.inflight {
		if r.run == run {
			out = append(out, r.q)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Sent != out[j].Sent {
			return out[i].Sent < out[j].Sent
		}
		return out[i].ID < out[j].ID
	})
	return out
}
