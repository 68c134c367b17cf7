package sessions

import (
	"sort"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Cold-window end kinds: what closed the cold window of a run.
const (
	ColdEndFirstToken = "first_token" // the cold request's first token (the full cold start)
	ColdEndHealthy    = "healthy"     // no cold request yet: start → healthy
	ColdEndLastStage  = "last_stage"  // neither: start → end of the last stage
	ColdEndNone       = "none"        // nothing was launched (attach, bench): no cold window
)

// Run is one cold start of a target within a session and everything that
// belongs to it. Runs are computed from events alone, so the same code
// serves live sessions, replays and files.
type Run struct {
	Index int `json:"index"`
	// Start is the launch: the process start event, the run_start marker,
	// or the earliest stage, whichever is first.
	Start time.Duration `json:"start"`
	// Healthy is the first successful health poll (0 when not seen).
	Healthy time.Duration `json:"healthy,omitempty"`
	// ColdEnd closes the cold window; ColdEndKind says what it was.
	ColdEnd     time.Duration `json:"cold_end"`
	ColdEndKind string        `json:"cold_end_kind"`
	// Spans are the run's final stage spans (open ones replaced by their
	// closed versions), in start order.
	Spans []trace.Span `json:"spans"`
	// Attribution decomposes [Start, ColdEnd) into stages.
	Attribution trace.Attribution `json:"attribution"`
	// Requests are the finished requests, in send order.
	Requests []trace.Request `json:"requests"`
	// Exit is the target's exit, if it exited; Crashed when treni-top did
	// not ask for it.
	Exit    *trace.Process `json:"exit,omitempty"`
	Crashed bool           `json:"crashed,omitempty"`
	// Wake is set when the run is a wake of a sleeping target (its
	// run_start says so), not a fresh process.
	Wake *Wake `json:"wake,omitempty"`
	// Failed is the error of the run's run_failed marker: the run did not
	// complete its cold sequence (never healthy, a request failed, the
	// target exited), so its numbers are partial.
	Failed string `json:"failed,omitempty"`
	// DroppedSpans counts distinct spans beyond maxRunSpans that were not
	// kept.
	DroppedSpans int `json:"dropped_spans,omitempty"`
}

// NeverLaunched reports a run that failed before anything was started or
// measured: it has its failure and nothing else.
func (r Run) NeverLaunched() bool {
	return r.Failed != "" && r.ColdEndKind == ColdEndNone && len(r.Spans) == 0 && len(r.Requests) == 0
}

// ColdTotal is the length of the cold window.
func (r Run) ColdTotal() time.Duration { return r.ColdEnd - r.Start }

// ColdRequest is the run's cold request, if probed.
func (r Run) ColdRequest() (trace.Request, bool) {
	for _, q := range r.Requests {
		if q.Phase == trace.PhaseCold {
			return q, true
		}
	}
	return trace.Request{}, false
}

// Runs groups the session's events into runs.
func (s *Session) Runs() []Run { return Analyze(s.Events) }

// maxRunSpans bounds the distinct spans kept for one run: a cold start has
// a few dozen; a file with more (a log that repeats its stage lines
// without ever saying the server restarted) keeps its first ones and
// counts the rest in Run.DroppedSpans, so analysis holds bounded memory.
const maxRunSpans = 100_000

// Analyze groups events by run and computes each run's spans, cold window,
// attribution and requests.
func Analyze(events []trace.Event) []Run {
	a := newRunAnalyzer()
	for i := range events {
		a.add(&events[i])
	}
	return a.runs()
}

// runAnalyzer is Analyze one event at a time, for readers that stream a
// file. Events without their payload (a Stream's light events) only
// move the run's last offset.
type runAnalyzer struct {
	byRun map[int]*runAcc
}

type runAcc struct {
	run      Run
	hasStart bool
	spans    map[spanKey]int // index into order
	order    []trace.Span
	reqs     map[string]int // index into reqList
	reqList  []trace.Request
	lastAt   time.Duration
	spawned  bool // a process start was seen
}

func newRunAnalyzer() *runAnalyzer { return &runAnalyzer{byRun: map[int]*runAcc{}} }

func (a *runAnalyzer) get(i int) *runAcc {
	r, ok := a.byRun[i]
	if !ok {
		r = &runAcc{run: Run{Index: i}, spans: map[spanKey]int{}, reqs: map[string]int{}}
		a.byRun[i] = r
	}
	return r
}

func (r *runAcc) setStart(t time.Duration) {
	if !r.hasStart || t < r.run.Start {
		r.run.Start, r.hasStart = t, true
	}
}

// add takes one event.
func (a *runAnalyzer) add(e *trace.Event) {
	r := a.get(e.Run)
	if e.At > r.lastAt {
		r.lastAt = e.At
	}
	switch {
	case e.Kind == trace.KindStage && e.Stage != nil:
		sp := *e.Stage
		k := spanKey{sp.Name, sp.Start}
		if i, seen := r.spans[k]; seen {
			r.order[i] = sp
		} else if len(r.order) < maxRunSpans {
			r.spans[k] = len(r.order)
			r.order = append(r.order, sp)
		} else {
			r.run.DroppedSpans++
		}
	case e.Kind == trace.KindProcess && e.Process != nil:
		switch e.Process.Action {
		case trace.ProcessStart:
			r.setStart(e.At)
			r.spawned = true
		case trace.ProcessExit:
			p := *e.Process
			r.run.Exit = &p
			r.run.Crashed = !p.Expected
		}
	case e.Kind == trace.KindMarker && e.Marker != nil:
		switch e.Marker.Name {
		case trace.MarkerRunStart:
			r.setStart(e.At)
			r.run.Wake = wakeOf(e.Marker.Attrs)
		case trace.MarkerHealthy:
			if r.run.Healthy == 0 {
				r.run.Healthy = e.At
			}
		case trace.MarkerRunFailed:
			if r.run.Failed == "" {
				r.run.Failed, _ = e.Marker.Attrs.String("error")
			}
		}
	case e.Kind == trace.KindRequest && e.Request != nil:
		q := *e.Request
		if i, seen := r.reqs[q.ID]; seen {
			r.reqList[i] = q
		} else {
			r.reqs[q.ID] = len(r.reqList)
			r.reqList = append(r.reqList, q)
		}
	}
}

// runs computes each run from what add took.
func (a *runAnalyzer) runs() []Run {
	var idx []int
	for i := range a.byRun {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var runs []Run
	for _, i := range idx {
		acc := a.byRun[i]
		r := acc.run
		r.Spans = append([]trace.Span(nil), acc.order...)
		sort.SliceStable(r.Spans, func(i, j int) bool { return r.Spans[i].Start < r.Spans[j].Start })
		hasStart := acc.hasStart
		for _, sp := range r.Spans {
			if !hasStart || sp.Start < r.Start {
				r.Start, hasStart = sp.Start, true
			}
		}
		for _, q := range acc.reqList {
			if q.Done {
				r.Requests = append(r.Requests, q)
			}
		}
		sort.SliceStable(r.Requests, func(i, j int) bool { return r.Requests[i].Sent < r.Requests[j].Sent })
		if r.Failed != "" && !acc.spawned && len(r.Spans) == 0 && len(r.Requests) == 0 {
			// It failed before anything was measured (the port was
			// taken, the eviction could not be verified, an attached
			// server never answered): no cold window to time, only the
			// failure to report.
			r.ColdEndKind = ColdEndNone
			r.ColdEnd = r.Start
			runs = append(runs, r)
			continue
		}
		if len(r.Spans) == 0 && len(r.Requests) == 0 && !hasStart {
			continue
		}
		if !launched(r, hasStart) {
			// Requests against a server someone else started: there is
			// no cold start to decompose.
			r.ColdEndKind = ColdEndNone
			if len(r.Requests) > 0 {
				r.Start, r.ColdEnd = r.Requests[0].Sent, r.Requests[0].Sent
			}
			runs = append(runs, r)
			continue
		}
		r.ColdEnd, r.ColdEndKind = coldEnd(r, acc.lastAt)
		spans := r.Spans
		if q, ok := r.ColdRequest(); ok && q.FirstToken > 0 && !hasStage(spans, trace.StageFirstRequest) {
			// The prober measured the cold request; show it as the
			// first_request stage when no server log split it further.
			spans = append(spans, trace.Span{Name: trace.StageFirstRequest, Start: q.Sent, End: q.Sent + q.FirstToken, Source: "probe"})
			r.Spans = spans
		}
		r.Attribution = trace.Attribute(spans, trace.Interval{Start: r.Start, End: r.ColdEnd})
		runs = append(runs, r)
	}
	return runs
}

// launched reports whether the run saw a launch: stages, or a process
// start or run_start marker (hasStart), and not only requests.
func launched(r Run, hasStart bool) bool {
	if len(r.Spans) > 0 {
		return true
	}
	for _, q := range r.Requests {
		if q.Phase == trace.PhaseCold {
			return true
		}
	}
	return hasStart && len(r.Requests) == 0
}

type spanKey struct {
	name  trace.Stage
	start time.Duration
}

func hasStage(spans []trace.Span, name trace.Stage) bool {
	for _, s := range spans {
		if s.Name == name {
			return true
		}
	}
	return false
}

// coldEnd picks the end of the cold window: the cold request's first token,
// else healthy, else the last stage's end (else the last event seen).
func coldEnd(r Run, lastAt time.Duration) (time.Duration, string) {
	if q, ok := r.ColdRequest(); ok && q.FirstToken > 0 {
		return q.Sent + q.FirstToken, ColdEndFirstToken
	}
	if r.Healthy > 0 {
		return r.Healthy, ColdEndHealthy
	}
	end := r.Start
	for _, s := range r.Spans {
		if s.Name == trace.StageSleep {
			continue // a sleep ends the run; it is never part of a start
		}
		if s.End > end {
			end = s.End
		}
	}
	if end == r.Start {
		end = lastAt
	}
	return end, ColdEndLastStage
}
