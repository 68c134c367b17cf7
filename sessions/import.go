package sessions

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// ImportOptions says how to read a server log.
type ImportOptions struct {
	// Kind is the server that wrote the log: auto (or ""), vllm, sglang,
	// tgi, llama.cpp, ollama or treni.
	Kind string
	// Source is where the log came from (its path), kept in the header's
	// origin.
	Source string
	// ToolVersion goes into the header.
	ToolVersion string
	// Ref completes timestamps that omit the year (vLLM) or the zone
	// (Ollama's gin lines), and bounds plausible ones: pass when the log
	// was written. Zero means now; ImportFile uses the file's
	// modification time.
	Ref time.Time

	// serial reads, parses and writes on the calling goroutine (tests
	// hold the pipeline to it).
	serial bool
}

// ErrUnknownServer is wrapped by Import when --kind auto cannot tell which
// server wrote the log.
var ErrUnknownServer = errors.New("cannot tell which server wrote the log")

// ErrWrongKind is wrapped by Import when the --kind given recognises no
// line of the log.
var ErrWrongKind = errors.New("the log is not of the kind given")

// ErrNotLog is wrapped by Import for input that is not a text log (empty,
// binary).
var ErrNotLog = errors.New("not a text log")

// maxImportLine bounds one log line (a JSON config dump can be long).
const maxImportLine = 4 << 20

// maxRejectMarkers bounds the value_rejected markers of one import: a log
// of a million bad lines gets a count, not a million markers.
const maxRejectMarkers = 1000

// detectLines is how many lines --kind auto reads before it decides.
const detectLines = 500

// Import turns a server log into a session held in memory (ImportFile
// writes it to a file as it reads, for logs of any size): a process-start
// event at the first line of each start of the server, one log event per
// line (Log.Stage set on stage lines), the stage spans the log parser
// finds, a healthy marker where the server says it is ready, and markers
// for the log's clock, its origin and any figure refused.
//
// Offsets come from the lines' own timestamps, else from a log
// collector's (docker logs -t, journald); a line without either keeps the
// previous timed line's offset, so a log without any timestamp gives the
// stages' order and no durations (none is made up from counting lines).
// Offset zero is the first timed line; when the server's own figure shows
// a stage began before it (a log that starts mid-startup), every offset
// moves later so that the session starts there, and a note says so. A log
// in which the server starts again after it was ready gives one run per
// start.
func Import(r io.Reader, opts ImportOptions) (*Session, error) {
	var evs []trace.Event
	im, err := runImport(r, opts, func(e *trace.Event) error {
		evs = append(evs, *e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The first event is the first start, at the session's zero: the
	// earliest stage's start once shifted.
	for i := 1; i < im.shiftedOut; i++ {
		shiftEvent(&evs[i], im.late)
	}
	return &Session{Header: im.header(), Events: evs}, nil
}

// ImportFile imports the log at path into the session file out (a .gz
// name is written compressed) and returns the session's digest
// (OpenDigest), from which ImportSummary and the report are computed. It
// writes as it reads: memory does not grow with the log. Nothing is left
// at out unless the import succeeds: the session is written to a
// temporary file in out's directory and renamed. Source defaults to path
// and Ref to the file's modification time.
func ImportFile(path, out string, opts ImportOptions) (*Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open server log: %w", err)
	}
	defer f.Close()
	if opts.Source == "" {
		opts.Source = path
	}
	if opts.Ref.IsZero() {
		if st, err := f.Stat(); err == nil {
			opts.Ref = st.ModTime()
		}
	}
	s, err := importToFile(f, out, opts)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	s.Path = out
	return s, nil
}

// shiftEvent moves an event (and the span it carries) later by d.
func shiftEvent(e *trace.Event, d time.Duration) {
	e.At += d
	if e.Stage != nil {
		sp := *e.Stage
		sp.Start += d
		sp.End += d
		e.Stage = &sp
	}
}

// importer is one import's state: the lines' clock, the parser, the
// events not yet handed on (kept in order), and what the header says.
type importer struct {
	opts     ImportOptions
	kind     serverlog.Kind
	detected bool
	headKind serverlog.Kind // what the first lines look like
	ref      time.Time
	clock    *serverlog.LineClock
	p        *serverlog.Parser
	q        reorder
	emit     func(*trace.Event) error
	logs     []trace.Log  // the slab newLog hands out
	spanSlab []trace.Span // the slab newSpan hands out

	lines, rejected int
	run             int
	readyRun        int // the last server start (parser run) whose healthy marker went out
	runLast         time.Duration
	wrapper, host   string
	minStart        time.Duration // the earliest span start (negative: before the first line)
	early           trace.Stage
	stageLines      int
	spans           int
	start           time.Time
	hasStart        bool
	// shift moves every event later so that a stage the server says began
	// before the first line starts at zero. It is applied as events are
	// queued; once events were handed on, a further move is late: it is
	// applied to the queue at the end, and shiftedOut says how many events
	// were handed on before it (the caller moves them, but the first, the
	// first start at the session's zero).
	shift, late time.Duration
	shiftedOut  int

	// Sleep and wake (vLLM's sleep mode): a weights_restore or kv_alloc
	// span after a sleep span begins a run of its own at its start
	// (docs/ARCHITECTURE.md, "Sleep and wake"). wakes counts them over the
	// log; wakeStarts are this start's, wakeBase the wakes before it.
	asleep     bool
	wakes      int
	wakeBase   int
	wakeStarts []time.Duration
	parserRun  int
}

// runImport reads the log and hands every event to emit in offset order,
// unshifted; the caller moves them by im.shift.
func runImport(r io.Reader, opts ImportOptions, emit func(*trace.Event) error) (*importer, error) {
	kind, err := serverlog.ParseKind(opts.Kind)
	if err != nil {
		return nil, err
	}
	lr, err := newLogReader(r)
	if err != nil {
		return nil, err
	}
	defer lr.close()
	ref := opts.Ref
	if ref.IsZero() {
		ref = time.Now()
	}
	im := &importer{opts: opts, kind: kind, ref: ref, emit: emit, readyRun: -1}
	// The first lines decide the kind (--kind auto) and the time of
	// offset zero, which the built-in engine's stage lines are read
	// against.
	var head []string
	for len(head) < detectLines {
		l, ok := lr.next()
		if !ok {
			break
		}
		head = append(head, l)
	}
	if err := lr.err; err != nil {
		return nil, err
	}
	if lr.nonEmpty == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrNotLog)
	}
	im.headKind = serverlog.DetectKind(nil, head)
	if im.kind == serverlog.KindAuto {
		im.kind = im.headKind
		if im.kind == serverlog.KindUnknown {
			return nil, fmt.Errorf("%w: none of its first %d lines looks like vllm, sglang, tgi, llama.cpp, ollama or treni output; pass --kind", ErrUnknownServer, len(head))
		}
		im.detected = true
	}
	im.clock = serverlog.NewLineClock(im.kind, ref)
	for _, l := range head {
		im.clock.Place(serverlog.Unwrap(l, ref))
	}
	zero, ok := im.clock.Start()
	if !ok {
		zero = ref
	}
	// The head was placed once to find offset zero; place it again on a
	// fresh clock with the lines.
	im.clock = serverlog.NewLineClock(im.kind, ref)
	im.p = serverlog.NewParser(im.kind, trace.ClockAt(zero))
	im.p.SetDeferred(true)
	if err := im.emitEvent(trace.Event{At: 0, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, ServerKind: string(im.kind)}}); err != nil {
		return nil, err
	}
	for _, l := range head {
		if err := im.line(l, serverlog.Unwrap(l, ref), serverlog.Prepared{}); err != nil {
			return nil, err
		}
	}
	head = nil
	if opts.serial {
		for {
			l, ok := lr.next()
			if !ok {
				break
			}
			if err := im.line(l, serverlog.Unwrap(l, ref), serverlog.Prepared{}); err != nil {
				return nil, err
			}
		}
		if lr.err != nil {
			return nil, lr.err
		}
	} else if err := im.readAhead(lr); err != nil {
		return nil, err
	}
	if err := im.finish(); err != nil {
		return nil, err
	}
	im.start, im.hasStart = im.clock.Start()
	if !im.hasStart {
		im.start = ref
	}
	return im, nil
}

// readAhead imports the rest of the log's lines as a goroutine of their
// own reads and prepares them (startReadAhead).
func (im *importer) readAhead(lr *logReader) error {
	ra := startReadAhead(lr, im.ref, im.kind)
	defer ra.stop()
	for {
		b, ok := ra.next()
		if !ok {
			return ra.err
		}
		for i := range b {
			if err := im.line(b[i].text, b[i].u, b[i].pre); err != nil {
				return err
			}
		}
		ra.recycle(b)
	}
}

// line imports one line (u: unwrapped; pre: read ahead, or the zero
// Prepared).
func (im *importer) line(l string, u serverlog.Unwrapped, pre serverlog.Prepared) error {
	im.lines++
	// What is kept of a line is copied: a line is a piece of a block of
	// the log (logReader), which it would keep alive.
	if u.Wrapper != "" && im.wrapper == "" {
		im.wrapper = strings.Clone(u.Wrapper)
	}
	if u.Host != "" && im.host == "" {
		im.host = strings.Clone(u.Host)
	}
	at, _ := im.clock.PlacePrepared(u, pre)
	spans, stage := im.p.FeedPrepared(at, u.Line, pre)
	if err := im.spansOut(spans, im.p.LastRuns()); err != nil {
		return err
	}
	if pr := im.p.Run(); pr != im.parserRun {
		// The server started again: the previous start's clock and
		// origin markers, then a new run.
		if err := im.runEnd(); err != nil {
			return err
		}
		im.parserRun, im.wakeBase, im.wakeStarts, im.asleep = pr, im.wakes, im.wakeStarts[:0], false
		im.run = pr + im.wakes
		if err := im.emitEvent(trace.Event{At: at, Run: im.run, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, ServerKind: string(im.kind)}}); err != nil {
			return err
		}
	}
	im.runLast = at
	if why := im.p.Rejected(); why != "" {
		im.rejected++
		if im.rejected > maxRejectMarkers {
			goto marked // counted in the header's note, not marked again
		}
		text := strings.Clone(l)
		if len(text) > 300 {
			text = text[:300] + "…"
		}
		if err := im.emitEvent(trace.Event{At: at, Run: im.run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerValueRejected,
			Attrs: trace.Attrs{"reason": why, "line": text}}}); err != nil {
			return err
		}
	}
marked:
	if stage != "" {
		im.stageLines++
	}
	if readyAt, ok := im.p.Ready(); ok && im.readyRun != im.parserRun {
		im.readyRun = im.parserRun
		if err := im.emitEvent(trace.Event{At: readyAt, Run: im.run, Kind: trace.KindMarker,
			Marker: &trace.Marker{Name: trace.MarkerHealthy, Attrs: trace.Attrs{"source": "log"}}}); err != nil {
			return err
		}
	}
	if strings.TrimSpace(l) == "" {
		return nil
	}
	return im.emitEvent(trace.Event{At: at, Run: im.run, Kind: trace.KindLog, Log: im.newLog(trace.Log{Stream: "file", Text: l, Stage: stage})})
}

// logSlab is how many log payloads (or spans) are allocated at once.
const logSlab = 256

// newSpan is a stage event's span, from a slab as newLog's: a log of the
// engine's stage lines has a span for every line.
func (im *importer) newSpan(sp trace.Span) *trace.Span {
	if len(im.spanSlab) == cap(im.spanSlab) {
		im.spanSlab = make([]trace.Span, 0, logSlab)
	}
	im.spanSlab = append(im.spanSlab, sp)
	return &im.spanSlab[len(im.spanSlab)-1]
}

// newLog is a log event's payload, from a slab shared by the next few:
// one allocation per line was a large part of the garbage an import made.
func (im *importer) newLog(l trace.Log) *trace.Log {
	if len(im.logs) == cap(im.logs) {
		im.logs = make([]trace.Log, 0, logSlab)
	}
	im.logs = append(im.logs, l)
	return &im.logs[len(im.logs)-1]
}

// spansOut queues the spans the parser finished, each in its run.
func (im *importer) spansOut(spans []trace.Span, runs []int) error {
	for i := range spans {
		sp := spans[i]
		pr := im.parserRun
		if i < len(runs) {
			pr = runs[i]
		}
		if pr == im.parserRun {
			if err := im.sleepWake(sp); err != nil {
				return err
			}
		}
		run := im.runOf(pr, sp.Start)
		if im.spans == 0 || sp.Start < im.minStart {
			im.minStart, im.early = sp.Start, sp.Name
		}
		if need := -sp.Start - im.shift - im.late; need > 0 {
			if im.q.count == 0 && im.late == 0 {
				im.q.shift(need) // nothing went out yet: move the queue
				im.shift += need
			} else {
				im.late += need
			}
		}
		im.spans++
		if err := im.emitEvent(trace.Event{At: max(sp.End, 0), Run: run, Kind: trace.KindStage, Stage: im.newSpan(sp)}); err != nil {
			return err
		}
	}
	return nil
}

// runOf is the run of a span of the server's start pr that began at t
// (the parser's offset): the start's own run, moved on by the wakes that
// began before t.
func (im *importer) runOf(pr int, t time.Duration) int {
	if pr != im.parserRun {
		return pr + im.wakeBase // the previous start's: no wake after it
	}
	n := 0
	for _, w := range im.wakeStarts {
		if w <= t {
			n++
		}
	}
	return pr + im.wakeBase + n
}

// sleepWake follows vLLM's sleep mode: a sleep span, then a wake's span
// (weights_restore, or kv_alloc for the KV cache alone), begins a run at
// the wake's start. The events already queued from that start on move to
// it, and a run_start marker names the wake.
func (im *importer) sleepWake(sp trace.Span) error {
	switch sp.Name {
	case trace.StageSleep:
		im.asleep = true
		return nil
	case trace.StageWeightsRestore, trace.StageKVAlloc:
		if !im.asleep {
			return nil
		}
	default:
		return nil
	}
	im.asleep = false
	old := im.parserRun + im.wakes
	im.wakes++
	im.wakeStarts = append(im.wakeStarts, sp.Start)
	run := im.parserRun + im.wakes
	im.q.retag(old, run, sp.Start+im.shift)
	// The run the wake ends keeps its clock and origin markers, at the
	// wake's start.
	if err := im.runEndAt(old, max(sp.Start, 0)); err != nil {
		return err
	}
	if im.run == old {
		im.run = run
	}
	return im.emitEvent(trace.Event{At: max(sp.Start, 0), Run: run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart,
		Attrs: trace.Attrs{"run": float64(run), trace.AttrWake: float64(im.wakes - im.wakeBase), "source": "log"}}})
}

// runEnd emits the clock and origin markers of the run that ends, at its
// last line: the diagnosis reads them per run.
func (im *importer) runEnd() error { return im.runEndAt(im.run, im.runLast) }

// runEndAt emits run's clock and origin markers at at.
func (im *importer) runEndAt(run int, at time.Duration) error {
	c := im.clock
	attrs := trace.Attrs{"timed_lines": float64(c.Timed()), "lines": float64(im.lines), "wrapper_lines": float64(c.Wrapped),
		"untimed_lines": float64(c.Untimed), "rejected_lines": float64(c.Rejected)}
	if c.FirstRejected != "" {
		attrs["first_rejected"] = c.FirstRejected
	}
	if err := im.emitEvent(trace.Event{At: at, Run: run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerLogClock, Attrs: attrs}}); err != nil {
		return err
	}
	o := im.p.Origin()
	oa := trace.Attrs{}
	for k, v := range map[string]string{"device": o.Device, "gpus": strings.Join(o.GPUs, ", "), "version": o.Version, "model": o.Model} {
		if v != "" {
			oa[k] = v
		}
	}
	if o.TP > 0 {
		oa["tp"] = float64(o.TP)
	}
	return im.emitEvent(trace.Event{At: at, Run: run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerLogOrigin, Attrs: oa}})
}

// finish flushes the parser and the queue and checks that the kind fit.
func (im *importer) finish() error {
	spans := im.p.Flush(im.runLast)
	if err := im.spansOut(spans, im.p.LastRuns()); err != nil {
		return err
	}
	if err := im.runEnd(); err != nil {
		return err
	}
	if !im.detected && im.spans == 0 && im.stageLines == 0 && im.readyRun < 0 && im.headKind != im.kind {
		return im.wrongKind()
	}
	if im.late > 0 {
		// What is still queued moves now; what already went out is moved
		// by the caller (im.q.count says how much).
		im.shiftedOut = im.q.count
		im.q.shift(im.late)
	}
	return im.q.drain(im.emit)
}

// wrongKind explains a --kind that matched nothing, naming the kind the
// lines look like.
func (im *importer) wrongKind() error {
	if k := im.headKind; k != serverlog.KindUnknown {
		return fmt.Errorf("%w: no line of it is one %s writes, and its lines look like %s output; pass --kind %s (or --kind auto)", ErrWrongKind, im.kind, k, k)
	}
	return fmt.Errorf("%w: no line of it is one %s writes, and auto-detection recognises no server either; check the file, or pass the right --kind", ErrWrongKind, im.kind)
}

// emitEvent queues one event; the queue hands events on in offset order.
// A stage event's span is its own (newSpan): it is moved in place.
func (im *importer) emitEvent(e trace.Event) error {
	if d := im.shift; d > 0 {
		e.At += d
		if e.Stage != nil {
			e.Stage.Start += d
			e.Stage.End += d
		}
	}
	return im.q.push(e, im.emit)
}

// header is the session header of the import.
func (im *importer) header() Header {
	c := im.clock
	o := im.p.Origin()
	origin := Origin{Source: im.opts.Source, Server: string(im.kind), Version: o.Version, Device: o.Device, GPUs: o.GPUs, TP: o.TP, Model: o.Model,
		Host: im.host, Wrapper: im.wrapper}
	switch {
	case c.Timed() == 0:
		origin.Clock = "none: no line carries a timestamp, so the stages keep the log's order and have no durations"
	case c.Wrapped == 0:
		origin.Clock = "the server's own timestamps"
	case c.Own == 0:
		origin.Clock = "the collector's timestamps (" + im.wrapper + ")"
	default:
		origin.Clock = fmt.Sprintf("the server's own timestamps, and the collector's (%s) on %d lines that carry none", im.wrapper, c.Wrapped)
	}
	shift := im.shift + im.late
	h := NewImportHeader(im.opts.ToolVersion, im.start.Add(-shift), Target{Kind: TargetImport, ServerKind: string(im.kind), Model: o.Model, Device: o.Device}, origin)
	if len(o.GPUs) > 0 {
		h.Target.Device = o.GPUs[0]
	}
	h.Notes = map[string]string{"source": im.opts.Source, "lines": fmt.Sprint(im.lines)}
	if im.detected {
		h.Notes["kind"] = "detected from the log (--kind auto)"
	}
	switch {
	case c.Timed() == 0:
		h.Notes["timestamps"] = "no line carries a timestamp: the stages keep the log's order, and their durations are unknown"
	case c.Timed() < im.lines:
		h.Notes["timestamps"] = fmt.Sprintf("%d of %d lines carry a timestamp; each of the others takes the time of the last timed line before it, so a stage built only from such lines has no duration", c.Timed(), im.lines)
	default:
		h.Notes["timestamps"] = "every line carries a timestamp"
	}
	if c.Rejected > 0 {
		h.Notes["rejected_timestamps"] = fmt.Sprintf("%d lines carry an impossible timestamp (before 2000, or after the log was written), first: %q; they are placed as if they had none", c.Rejected, trimForNote(c.FirstRejected))
	}
	if im.rejected > 0 {
		h.Notes["rejected_values"] = fmt.Sprintf("%d lines carry a figure that is not a finite number (or a stage line times far from its own); each stays a plain line, the first %d with a %s marker", im.rejected, min(im.rejected, maxRejectMarkers), trace.MarkerValueRejected)
	}
	if shift > 0 {
		h.Notes["start"] = fmt.Sprintf("the log begins mid-startup: by the server's own figure %s began %v before the first line; offsets start there", im.early, shift.Round(time.Millisecond))
	}
	if im.run > 0 {
		h.Notes["runs"] = fmt.Sprintf("the server starts %d times in this log: one run per start", im.run+1)
	}
	return h
}

func trimForNote(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// reorder hands events on in offset order. Lines come in order; a stage
// span is final only lines after it ended, so its event (at its end) may
// be due before events already queued. The queue keeps the latest
// maxReorder events; a span older than all of them goes out at the oldest
// offset still queued rather than out of order.
type reorder struct {
	ring  []trace.Event // in order (lines, markers): n of them from head, wrapping
	head  int
	n     int
	late  lateHeap // out of order (spans)
	seq   uint64
	last  time.Duration // the latest offset handed on
	count int           // events handed on
	out   trace.Event   // the event being handed on (emit copies it)
}

// maxReorder bounds the events the import holds back.
const maxReorder = 1 << 16

func (q *reorder) push(e trace.Event, emit func(*trace.Event) error) error {
	if e.At < q.last {
		e.At = q.last
	}
	if q.n == 0 || e.At >= q.fifoAt(q.n-1).At {
		q.fifoPush(e)
	} else {
		q.seq++
		q.late.push(lateEvent{e, q.seq})
	}
	for q.n+q.late.len() > maxReorder {
		if err := q.pop(emit); err != nil {
			return err
		}
	}
	return nil
}

// fifoAt is the i-th in-order event queued.
func (q *reorder) fifoAt(i int) *trace.Event {
	i += q.head
	if i >= len(q.ring) {
		i -= len(q.ring)
	}
	return &q.ring[i]
}

// fifoPush queues an in-order event last, growing the ring when full.
func (q *reorder) fifoPush(e trace.Event) {
	if q.n == len(q.ring) {
		grown := make([]trace.Event, max(1024, 2*len(q.ring)))
		for i := 0; i < q.n; i++ {
			grown[i] = *q.fifoAt(i)
		}
		q.ring, q.head = grown, 0
	}
	*q.fifoAt(q.n) = e
	q.n++
}

// pop hands on the earliest queued event (the in-order one on a tie: it
// was queued first).
func (q *reorder) pop(emit func(*trace.Event) error) error {
	e := &q.out
	if q.late.len() > 0 && (q.n == 0 || q.late.min().e.At < q.fifoAt(0).At) {
		*e = q.late.pop().e
	} else {
		f := q.fifoAt(0)
		*e, *f = *f, trace.Event{}
		q.head, q.n = q.head+1, q.n-1
		if q.head == len(q.ring) {
			q.head = 0
		}
	}
	q.last = e.At
	q.count++
	return emit(e)
}

// retag moves the queued events of run from at on (a stage span by its
// start) to run to.
func (q *reorder) retag(from, to int, at time.Duration) {
	move := func(e *trace.Event) {
		t := e.At
		if e.Kind == trace.KindStage && e.Stage != nil {
			t = e.Stage.Start
		}
		if e.Run == from && t >= at {
			e.Run = to
		}
	}
	for i := 0; i < q.n; i++ {
		move(q.fifoAt(i))
	}
	for i := range q.late {
		move(&q.late[i].e)
	}
}

// shift moves every queued event later by d, except the first start of
// the session (run 0's process start at zero).
func (q *reorder) shift(d time.Duration) {
	for i := 0; i < q.n; i++ {
		if e := q.fifoAt(i); !(e.Kind == trace.KindProcess && e.Run == 0 && e.At == 0) {
			shiftEvent(e, d)
		}
	}
	for i := range q.late {
		shiftEvent(&q.late[i].e, d)
	}
}

func (q *reorder) drain(emit func(*trace.Event) error) error {
	for q.n+q.late.len() > 0 {
		if err := q.pop(emit); err != nil {
			return err
		}
	}
	return nil
}

// lateEvent orders out-of-order events by offset, then by arrival.
type lateEvent struct {
	e   trace.Event
	seq uint64
}

// lateHeap is a min-heap of lateEvent.
type lateHeap []lateEvent

func (h lateHeap) len() int       { return len(h) }
func (h lateHeap) min() lateEvent { return h[0] }
func (h lateHeap) less(i, j int) bool {
	return h[i].e.At < h[j].e.At || h[i].e.At == h[j].e.At && h[i].seq < h[j].seq
}

func (h *lateHeap) push(x lateEvent) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *lateHeap) pop() lateEvent {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// logReader reads text lines (gzip detected from the content), strips
// terminal colour codes and carriage returns, and refuses binary input.
//
// It reads a block of lines at a time and makes one string of the block,
// of which each line is a substring: a string per line was most of an
// import's allocations (and of its garbage collection). A line keeps its
// block alive while something holds it, so nothing that outlives the
// writing of its line holds one: the import holds lines only while they
// wait to be written, and copies what it keeps (the parser's spans and
// origin share no memory with the lines; a refused line's marker, the
// collector's name); what stays alive is bounded, not growing with the
// log.
type logReader struct {
	br       *bufio.Reader
	gz       *gzip.Reader
	n        int // lines handed out
	nonEmpty int // lines handed out that are not blank (counted until the first)
	err      error
	eof      bool // the input is read to its end (or failed)

	raw   []byte   // the block being read, each line followed by "\n"
	ends  []int    // where each line of raw ends (before its "\n")
	lines []string // the current block's cleaned lines
	pos   int      // the next of lines to hand out
}

// logBlock is about how many bytes of log one block holds: large enough
// that its string's allocation costs nothing per line, small enough that a
// line kept alive keeps little else with it.
const logBlock = 64 << 10

func newLogReader(r io.Reader) (*logReader, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	lr := &logReader{br: br}
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: bad gzip stream: %v", ErrNotLog, err)
		}
		lr.gz = gz
		lr.br = bufio.NewReaderSize(gz, 256<<10)
	}
	return lr, nil
}

func (lr *logReader) close() {
	if lr.gz != nil {
		lr.gz.Close()
	}
}

// next returns the next line; false at the end or on an error (err).
func (lr *logReader) next() (string, bool) {
	if lr.pos == len(lr.lines) && !lr.fill() {
		return "", false
	}
	l := lr.lines[lr.pos]
	lr.pos++
	lr.n++
	if lr.nonEmpty == 0 && strings.TrimSpace(l) != "" {
		lr.nonEmpty++
	}
	return l, true
}

// fill reads the next block of lines; false at the end or on an error.
func (lr *logReader) fill() bool {
	lr.raw, lr.ends, lr.lines, lr.pos = lr.raw[:0], lr.ends[:0], lr.lines[:0], 0
	for len(lr.raw) < logBlock && !lr.eof {
		line, complete, err := readLogLine(lr.br)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			lr.err, lr.eof = fmt.Errorf("read log line %d: %w", lr.n+len(lr.ends)+1, err), true
			return false
		}
		if !complete {
			lr.eof = true
			if len(line) == 0 {
				break
			}
		}
		lr.raw = append(append(lr.raw, line...), '\n')
		lr.ends = append(lr.ends, len(lr.raw)-1)
	}
	if len(lr.ends) == 0 {
		return false
	}
	if i := bytes.IndexByte(lr.raw, 0); i >= 0 {
		nth := sort.SearchInts(lr.ends, i) // the line that holds it
		lr.err, lr.eof = fmt.Errorf("%w: line %d contains NUL bytes (a binary file?); pass the server's text log", ErrNotLog, lr.n+nth+1), true
		return false
	}
	block := string(lr.raw)
	// Lines are cut at "\n", which no UTF-8 sequence contains: when the
	// block is valid, so is every line. Colour codes and invalid bytes
	// are rare; only a block that has any cleans line by line.
	plain := utf8.ValidString(block) && strings.IndexByte(block, 0x1b) < 0 && !strings.Contains(block, string(syslogESC))
	start := 0
	for _, end := range lr.ends {
		if plain {
			lr.lines = append(lr.lines, strings.TrimRight(block[start:end], "\r"))
		} else {
			lr.lines = append(lr.lines, cleanLine(lr.raw[start:end]))
		}
		start = end + 1
	}
	return true
}

// readLogLine reads one line, keeping at most maxImportLine bytes of it.
func readLogLine(br *bufio.Reader) ([]byte, bool, error) {
	chunk, err := br.ReadSlice('\n')
	if err == nil {
		return chunk[:len(chunk)-1], true, nil
	}
	buf := append([]byte(nil), chunk...)
	for errors.Is(err, bufio.ErrBufferFull) {
		chunk, err = br.ReadSlice('\n')
		if len(buf) < maxImportLine {
			buf = append(buf, chunk...)
		}
		if err == nil {
			buf = bytes.TrimSuffix(buf, []byte("\n"))
			if len(buf) > maxImportLine {
				buf = buf[:maxImportLine]
			}
			return buf, true, nil
		}
	}
	if len(buf) > maxImportLine {
		buf = buf[:maxImportLine]
	}
	return buf, false, err
}

var syslogESC = []byte("#033[")

// cleanLine drops "\r", ANSI escape sequences (coloured llama.cpp and
// uvicorn output) and invalid UTF-8.
func cleanLine(b []byte) string {
	b = bytes.TrimRight(b, "\r")
	if bytes.Contains(b, syslogESC) {
		// syslog and CloudWatch write the escape byte as "#033".
		b = bytes.ReplaceAll(b, syslogESC, []byte("\x1b["))
	}
	if bytes.IndexByte(b, 0x1b) < 0 {
		if utf8.Valid(b) {
			return string(b) // the usual case: one copy
		}
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '[' {
			j := i + 2
			for j < len(b) && !(b[j] >= 0x40 && b[j] <= 0x7e) {
				j++
			}
			i = j
			continue
		}
		out = append(out, b[i])
	}
	return strings.ToValidUTF8(string(out), "\uFFFD")
}

// ImportSummary is a one-line account of an imported session: for its
// first run, the stages in the order they started, as the report's stage
// table lists them (e.g. "vllm: runtime_init 45.0s · model_load 3m46.3s ·
// … · ready at 5m37s"), and for a log in which the server started several
// times, how many starts and their cold windows.
func ImportSummary(s *Session) string {
	rep := BuildReport(s)
	kind := s.Header.Target.ServerKind
	if len(rep.Runs) == 0 || len(rep.Runs[0].Stages) == 0 {
		return kind + ": no stage lines recognised (the log is kept as plain lines)"
	}
	r := rep.Runs[0]
	parts := make([]string, 0, len(r.Stages))
	for _, st := range r.Stages {
		p := string(st.Name) + " " + summaryDuration(st.DurationMS, r.Untimed)
		if st.Workers > 1 {
			p += fmt.Sprintf(" ×%d", st.Workers)
		}
		parts = append(parts, p)
	}
	out := kind + ": " + strings.Join(parts, " · ")
	if r.HealthyMS > 0 && !r.Untimed {
		out += " · ready at " + roundDur(time.Duration(r.HealthyMS*float64(time.Millisecond)))
	}
	if n := rep.RunsTotal; n > 1 {
		out += fmt.Sprintf(" · %d starts in the log", n)
		if rep.ColdTotals.N > 1 {
			out += fmt.Sprintf(" (cold start min %s, median %s, max %s)", roundMS(rep.ColdTotals.Min), roundMS(rep.ColdTotals.Median), roundMS(rep.ColdTotals.Max))
		}
	}
	return out
}

// summaryDuration is a stage's length for the summary line: unknown for
// an untimed log, or for a stage its timestamps give no length.
func summaryDuration(ms float64, untimed bool) string {
	if untimed && ms == 0 {
		return "(no duration)"
	}
	return roundMS(ms)
}

func roundMS(ms float64) string { return roundDur(time.Duration(ms * float64(time.Millisecond))) }

func roundDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
