package tui

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// Headless prints the session's progress as plain lines (for CI and ssh):
// launches, each stage as it completes, healthy, each finished request with
// its TTFT/ITL/E2E, exits and crashes. It returns when the subscription's
// channel closes (the bus closed) or ctx is done; the caller prints the
// final report. It writes no color and no cursor movement.
func Headless(ctx context.Context, w io.Writer, sub *trace.Subscription) error {
	p := newProgress(w)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-sub.Events():
			if !ok {
				return p.err
			}
			p.event(e)
			if p.err != nil {
				return p.err
			}
		}
	}
}

// progress turns events into lines, once per fact: a span is printed when
// its closed version arrives, a request when it is done.
type progress struct {
	w       io.Writer
	err     error
	spans   map[string]bool
	reqs    map[string]bool
	healthy map[int]bool
	starts  map[int]time.Duration
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, spans: map[string]bool{}, reqs: map[string]bool{}, healthy: map[int]bool{}, starts: map[int]time.Duration{}}
}

func (p *progress) printf(at time.Duration, run int, format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, "%9.3fs run %d  %s\n", at.Seconds(), run, fmt.Sprintf(format, args...))
}

func (p *progress) event(e trace.Event) {
	if e.Validate() != nil {
		return
	}
	switch e.Kind {
	case trace.KindProcess:
		pr := e.Process
		switch pr.Action {
		case trace.ProcessStart:
			if _, ok := p.starts[e.Run]; !ok {
				p.starts[e.Run] = e.At
			}
			kind := pr.ServerKind
			if kind == "" {
				kind = "unknown"
			}
			p.printf(e.At, e.Run, "launched pid %d (%s): %s", pr.PID, kind, strings.Join(pr.Command, " "))
		case trace.ProcessExit:
			how := fmt.Sprintf("exit code %d", pr.ExitCode)
			if pr.Signal != "" {
				how = "signal " + pr.Signal
			}
			if pr.Expected {
				p.printf(e.At, e.Run, "stopped pid %d (%s)", pr.PID, how)
			} else {
				p.printf(e.At, e.Run, "CRASHED pid %d (%s)", pr.PID, how)
			}
		}
	case trace.KindStage:
		sp := e.Stage
		key := fmt.Sprintf("%d/%s/%d", e.Run, sp.Name, sp.Start)
		if sp.Open || p.spans[key] {
			return
		}
		p.spans[key] = true
		extra := ""
		if gb, ok := sp.Attrs.Float(trace.AttrGBps); ok {
			extra = fmt.Sprintf(" · %.2f GB/s", gb)
		}
		if b, ok := sp.Attrs.Float(trace.AttrBytes); ok {
			extra += " · " + fmtBytes(b)
		}
		p.printf(e.At, e.Run, "stage %-22s %9s%s", sp.Name, fmtDur(sp.Duration()), extra)
	case trace.KindMarker:
		switch e.Marker.Name {
		case trace.MarkerHealthy:
			if p.healthy[e.Run] {
				return
			}
			p.healthy[e.Run] = true
			since := ""
			if s, ok := p.starts[e.Run]; ok {
				since = " (" + fmtDur(e.At-s) + " after launch)"
			}
			p.printf(e.At, e.Run, "healthy%s", since)
		case trace.MarkerRunStart:
			p.printf(e.At, e.Run, "cold run starts")
		case trace.MarkerEvicted:
			p.printf(e.At, e.Run, "weights evicted from the page cache")
		case trace.MarkerTargetCrashed:
			p.printf(e.At, e.Run, "target crashed")
		case trace.MarkerReplayReset:
			p.printf(e.At, e.Run, "replay restarted from the beginning")
			p.spans, p.reqs, p.healthy = map[string]bool{}, map[string]bool{}, map[int]bool{}
		}
	case trace.KindRequest:
		q := e.Request
		if !q.Done || p.reqs[q.ID] {
			return
		}
		p.reqs[q.ID] = true
		r := sessions.Row(*q)
		if q.Error != "" {
			p.printf(e.At, e.Run, "request %-9s FAILED %s: %s", r.Label, q.ErrorKind, q.Error)
			return
		}
		p.printf(e.At, e.Run, "request %-9s TTFT %s ms · TTFB %s · ITL p50 %s p99 %s · TPOT %s · E2E %s ms · %d tokens",
			r.Label, fmtMS(r.TTFT), fmtMS(r.TTFB), fmtMS(r.ITLP50), fmtMS(r.ITLP99), fmtMS(r.TPOT), fmtMS(r.E2E), r.Tokens)
	}
}
