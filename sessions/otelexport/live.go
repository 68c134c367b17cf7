package otelexport

import (
	"context"
	"fmt"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// Live exports a session as it is recorded: each stage span when it
// closes, each probe request when it finishes, and a run's root span (with
// the diagnosis) when the next run begins or the session ends. It reads the
// bus through its own subscription, whose queue is unbounded, so it never
// slows a producer; the exporter behind it drops rather than blocks.
type Live struct {
	x      *exporter
	sub    *trace.Subscription
	loop   chan struct{} // closed when the consumer goroutine has exited
	events []trace.Event // owned by the consumer goroutine until loop closes
	// rooted holds runs whose root span has gone; later events of such a
	// run (rare: a late request) still export their own spans.
	rooted map[int]bool
	cur    int
	// past holds runs whose cold window can no longer grow, so that their
	// later samples (a fleet agent samples for days) are not kept: the
	// diagnosis reads samples only inside the cold window.
	past map[int]bool
	// launch holds runs that showed a launch (a stage, a process start or
	// a run_start marker), as sessions.Analyze decides.
	launch map[int]bool
}

// NewLive starts exporting the events emitted on bus from now on; header
// is the session's (its start time is the time origin, its host and start
// seed the trace IDs, see IDs). The goroutine it starts ends when the bus
// closes or ctx is done; call Close after closing the bus.
func NewLive(ctx context.Context, cfg Config, header sessions.Header, bus *trace.Bus) (*Live, error) {
	x, err := newExporter(ctx, cfg, header)
	if err != nil {
		return nil, err
	}
	l := &Live{x: x, sub: bus.Subscribe(), loop: make(chan struct{}), rooted: map[int]bool{}, past: map[int]bool{}, launch: map[int]bool{}}
	go l.run(ctx)
	return l, nil
}

func (l *Live) run(ctx context.Context) {
	defer close(l.loop)
	for {
		select {
		case <-ctx.Done():
			l.sub.Cancel()
			return
		case e, ok := <-l.sub.Events():
			if !ok {
				return
			}
			l.handle(e)
		}
	}
}

// handle exports what an event completes and keeps what the root span
// will need: logs are dropped (no span carries them), and so are samples
// after a run's cold window has closed (its cold request finished, or a
// request finished with no launch before it: an attached server).
func (l *Live) handle(e trace.Event) {
	switch e.Kind {
	case trace.KindLog:
		return
	case trace.KindSample:
		if l.past[e.Run] {
			return
		}
	case trace.KindMarker:
		switch e.Marker.Name {
		case trace.MarkerReplayReset:
			l.events, l.cur, l.past, l.launch = nil, 0, map[int]bool{}, map[int]bool{}
			return
		case trace.MarkerRunStart:
			l.launch[e.Run] = true
		}
	case trace.KindProcess:
		if e.Process.Action == trace.ProcessStart {
			l.launch[e.Run] = true
		}
	case trace.KindStage:
		l.launch[e.Run] = true
		if !e.Stage.Open {
			l.x.stage(e.Run, *e.Stage)
		}
	case trace.KindRequest:
		if e.Request.Done {
			l.x.request(e.Run, *e.Request)
			if e.Request.Phase == trace.PhaseCold || !l.launch[e.Run] {
				l.past[e.Run] = true
			}
		}
	}
	if e.Run > l.cur {
		// A new cold run starts: the previous ones are over.
		l.finish(func(run int) bool { return run < e.Run })
		l.cur = e.Run
	}
	l.events = append(l.events, e)
}

// finish exports the roots (and any spans not yet sent) of the runs that
// pick selects and have not been rooted.
func (l *Live) finish(pick func(int) bool) {
	for _, run := range sessions.Analyze(l.events) {
		if pick(run.Index) && !l.rooted[run.Index] {
			l.rooted[run.Index] = true
			l.x.exportRun(l.events, run)
		}
	}
}

// Close waits for the events already queued on the bus to be handled, sends
// every run's root span, flushes and shuts the exporter down. All of it
// takes at most twice Config.FlushTimeout, whatever the collector does
// (once for the queue, once for the flush); ctx may shorten it. Close the
// bus first, or Close stops reading at the deadline.
func (l *Live) Close(ctx context.Context) Stats {
	wait := time.NewTimer(l.x.cfg.flushTimeout())
	defer wait.Stop()
	select {
	case <-l.loop:
	case <-wait.C:
		l.sub.Cancel()
		<-l.loop
	case <-ctx.Done():
		l.sub.Cancel()
		<-l.loop
	}
	l.finish(func(int) bool { return true })
	st := l.x.close(context.WithoutCancel(ctx))
	if ctx.Err() != nil && st.Err == nil && st.Exported < st.Spans {
		st.Err = fmt.Errorf("export cut short: %w", ctx.Err())
	}
	return st
}
