package sessions

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// PrintProgress is the headless transcript of a session, the same for a
// live run (`run --headless`, `attach --headless`) and a replay (`replay
// --headless`): one plain line per fact — launches, each stage as it
// completes, healthy, each finished request with its TTFT/ITL/E2E, exits,
// crashes (with the log tail), page-cache residency and eviction, failed
// runs, refused actions, the GPU sampler's status, a server kind detected
// late and an attach. It returns when the subscription's channel closes
// (the bus closed) or ctx is done; the caller prints the final report. It
// writes no color and no cursor movement.
func PrintProgress(ctx context.Context, w io.Writer, sub *trace.Subscription) error {
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
	p := &progress{w: w}
	p.reset()
	return p
}

// reset forgets what was printed (a replay seeked backwards).
func (p *progress) reset() {
	p.spans, p.reqs, p.healthy, p.starts = map[string]bool{}, map[string]bool{}, map[int]bool{}, map[int]time.Duration{}
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
		p.process(e)
	case trace.KindStage:
		p.stage(e)
	case trace.KindMarker:
		p.marker(e)
	case trace.KindRequest:
		p.request(e)
	}
}

func (p *progress) process(e trace.Event) {
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
			p.printf(e.At, e.Run, "CRASHED pid %d (%s): the target exited on its own", pr.PID, how)
		}
	}
}

func (p *progress) stage(e trace.Event) {
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
		extra += " · " + stat.FormatBytes(b)
	}
	if sp.Source != "" {
		extra += " (" + sp.Source + ")"
	}
	p.printf(e.At, e.Run, "stage %-22s %9s%s", sp.Name, stat.FormatDuration(sp.Duration()), extra)
}

func (p *progress) request(e trace.Event) {
	q := e.Request
	if !q.Done || p.reqs[q.ID] {
		return
	}
	p.reqs[q.ID] = true
	r := Row(*q)
	if q.Error != "" {
		p.printf(e.At, e.Run, "request %-9s FAILED %s: %s", r.Label, q.ErrorKind, q.Error)
		return
	}
	p.printf(e.At, e.Run, "request %-9s TTFT %s ms · TTFB %s · ITL p50 %s p99 %s · TPOT %s · E2E %s ms · %d tokens",
		r.Label, stat.FormatMS(r.TTFT), stat.FormatMS(r.TTFB), stat.FormatMS(r.ITLP50), stat.FormatMS(r.ITLP99),
		stat.FormatMS(r.TPOT), stat.FormatMS(r.E2E), r.Tokens)
}

func (p *progress) marker(e trace.Event) {
	m := e.Marker
	switch m.Name {
	case trace.MarkerRunStart:
		if w := wakeOf(m.Attrs); w != nil {
			p.printf(e.At, e.Run, "run %d: %s: waking the target", e.Run, w)
			break
		}
		of := ""
		if n, ok := m.Attrs.Float("cold_runs"); ok && n > 1 {
			of = fmt.Sprintf(" (%d of %d)", e.Run+1, int(n))
		}
		p.printf(e.At, e.Run, "cold run %d: launching%s", e.Run, of)
	case trace.MarkerSleep:
		lvl, _ := m.Attrs.Float(trace.AttrSleepLevel)
		ms, _ := m.Attrs.Float("http_ms")
		if msg, ok := m.Attrs.String("error"); ok {
			p.printf(e.At, e.Run, "sleep (level %d) FAILED: %s", int(lvl), msg)
		} else {
			p.printf(e.At, e.Run, "target asleep (level %d) after %s", int(lvl), stat.FormatMS(ms))
		}
	case trace.MarkerAttached:
		// Said before the first poll: nothing is known yet of the server
		// but its URL (the healthy line or a wait line follows).
		p.printf(e.At, e.Run, "attaching: no cold start to trace (treni-top did not start this server)")
	case trace.MarkerHealthWait:
		p.printf(e.At, e.Run, "%s", HealthWaitText(m))
	case trace.MarkerHealthy:
		p.healthyLine(e)
	case trace.MarkerResidency:
		res, _ := m.Attrs.Float("resident_bytes")
		tot, _ := m.Attrs.Float("total_bytes")
		when, _ := m.Attrs.String("when")
		if msg, ok := m.Attrs.String("error"); ok {
			p.printf(e.At, e.Run, "weights residency (%s): %s", when, msg)
		} else if tot > 0 {
			p.printf(e.At, e.Run, "weights residency (%s): %.1f%% of %s in page cache", when, 100*res/tot, stat.FormatBytes(tot))
		}
	case trace.MarkerEvicted:
		if msg, ok := m.Attrs.String("error"); ok {
			p.printf(e.At, e.Run, "page-cache eviction FAILED: %s", msg)
		} else {
			p.printf(e.At, e.Run, "weights evicted from the page cache (verified: %v)", m.Attrs["ok"])
		}
	case trace.MarkerTargetCrashed:
		p.printf(e.At, e.Run, "target crashed; last lines of its output:")
		tail, _ := m.Attrs.String("log_tail")
		for _, l := range strings.Split(tail, "\n") {
			if p.err == nil && l != "" {
				_, p.err = fmt.Fprintf(p.w, "    | %s\n", l)
			}
		}
	case trace.MarkerRunFailed, trace.MarkerActionRefused:
		msg, _ := m.Attrs.String("error")
		if msg == "" {
			msg, _ = m.Attrs.String("reason")
		}
		p.printf(e.At, e.Run, "%s: %s", m.Name, msg)
	case trace.MarkerGPUStatus:
		st, _ := m.Attrs.String("status")
		p.printf(e.At, e.Run, "gpu: %s", st)
	case trace.MarkerKindDetected:
		k, _ := m.Attrs.String("server_kind")
		p.printf(e.At, e.Run, "server kind detected from its output: %s", k)
	case trace.MarkerInterrupted:
		cause, _ := m.Attrs.String("cause")
		p.printf(e.At, e.Run, "interrupted (%s): the target is stopped, the session file ends here", cause)
	case trace.MarkerReplayReset:
		p.printf(e.At, e.Run, "replay restarted from the beginning")
		p.reset()
	case trace.MarkerSessionTruncated:
		why, _ := m.Attrs.String("reason")
		p.printf(e.At, e.Run, "SESSION TRUNCATED: %s", why)
	case trace.MarkerValueRejected:
		why, _ := m.Attrs.String("reason")
		p.printf(e.At, e.Run, "log figure refused (%s); the line is kept as a plain line", why)
	case trace.MarkerEventDropped:
		kind, _ := m.Attrs.String("kind")
		why, _ := m.Attrs.String("error")
		p.printf(e.At, e.Run, "a %s event could not be recorded: %s", kind, why)
	}
}

// HealthWaitText is what a health_wait marker tells the user, in the
// headless transcript and the TUI's status line: why the target is not
// healthy yet and how long treni-top waits for it.
func HealthWaitText(m *trace.Marker) string {
	reason, _ := m.Attrs.String("reason")
	url, _ := m.Attrs.String("url")
	if url == "" {
		return "waiting: " + reason
	}
	until := "until --timeout"
	if s, ok := m.Attrs.Float("timeout_s"); ok && s > 0 {
		until += " " + time.Duration(s*float64(time.Second)).String()
	}
	wait := "waiting for it to become healthy"
	if reason == "connection refused" {
		wait = "waiting for a server to come up"
	}
	return fmt.Sprintf("no healthy answer at %s yet: %s; %s (%s)", url, reason, wait, until)
}

// healthyLine prints the first healthy marker of a run, with the time
// since its launch and the URL that answered.
func (p *progress) healthyLine(e trace.Event) {
	if p.healthy[e.Run] {
		return
	}
	p.healthy[e.Run] = true
	since := ""
	if s, ok := p.starts[e.Run]; ok {
		since = " (" + stat.FormatDuration(e.At-s) + " after launch)"
	}
	u, _ := e.Marker.Attrs.String("url")
	path, _ := e.Marker.Attrs.String("path")
	if u+path != "" {
		since += ": " + u + path
	}
	p.printf(e.At, e.Run, "healthy%s", since)
}
