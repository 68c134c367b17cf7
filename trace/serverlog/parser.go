package serverlog

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// settleWindow is how long, in log time, a stage keeps accepting the same
// stage line from other workers (tensor parallel) or a repeat of it, before
// a new line of that stage counts as a new span. Workers of one engine
// finish a step within about 2 s of each other in the fixtures (vLLM TP8
// on L40S: "Loading weights took" from 20:50:57 to 20:50:59, graph capture
// 20:54:35–36, with timestamps rounded to the second), so 5 s leaves room.
const settleWindow = 5 * time.Second

// maxAutoBuffer bounds the lines an auto-detecting parser holds back while
// it has not yet seen a line that names the server.
const maxAutoBuffer = 200

// Parser turns one server's log lines into stage spans. It is a small state
// machine per kind: begin/end pairs, lines that only report a duration
// ("took 4.38 seconds": the span ends at the line and starts that much
// earlier), per-worker duplicates collapsed into one span with Workers = N,
// and attributes (bytes, tokens, blocks, the server's own figure in
// trace.AttrReported and the line in trace.AttrLine).
//
// runtime_init runs from the first line fed to the server's first engine
// line (vLLM "Initializing … LLM engine", SGLang "Init torch distributed
// begin", TGI "Starting download process", llama.cpp "main: loading
// model"): the launcher's process_start covers spawn → first line, so the
// two meet. A log that starts mid-startup gets no runtime_init.
//
// The spans and the origin a parser returns share no memory with the
// lines it was fed (their texts are copied): a caller may cut lines out of
// a large buffer (import reads a block of lines at once) without a span
// it keeps keeping the buffer alive.
//
// A Parser is not safe for concurrent use: give each target's output one
// parser and feed it from one goroutine (the launcher merges stdout and
// stderr into one ordered stream per target before feeding).
//
// Live parsers (the default) return spans as soon as a stage starts or
// ends. Once a span has been returned its Start never changes, so consumers
// that replace spans by (Name, Start) stay correct when a late worker's line
// updates End or Workers. A deferred parser (SetDeferred) returns nothing
// from Feed and every span, with exact earliest starts, from Flush: that is
// what import wants.
type Parser struct {
	kind     Kind
	clock    trace.Clock
	deferred bool

	started bool
	firstAt time.Duration
	lastAt  time.Duration

	// groups are the spans still being built: the latest of each stage
	// (active) and any not yet handed out. A span that can no longer
	// change leaves the list (retire), so a parser's memory does not grow
	// with the log; ended keeps what lastEnd needs of the spans that left.
	groups []*group
	active map[trace.Stage]*group
	ended  map[trace.Stage]*endTracker
	// out holds a deferred parser's spans that became final during the
	// current line, outRun the start each belongs to; lastRuns is outRun
	// of the batch last returned.
	out      []trace.Span
	spare    []trace.Span // the batch returned last (takeOut)
	outRun   []int
	lastRuns []int
	run      int

	workersKnown int  // from "world size N", tp_size=N, "Sharding model on N processes"
	sawWorkers   bool // a worker-tagged line was seen

	runtimeDone bool
	engineSeen  bool          // an engine-start line was seen
	engineAt    time.Duration // when
	readyAt     time.Duration
	ready       bool
	firstReq    bool

	auto      bool
	pending   []pendingLine
	lastStage trace.Stage

	hits    []hit
	changed []*group

	// rejected says why the last line's figures were refused.
	rejected string
	// names are the attribute names and values of stage lines, copied
	// once (see interner).
	names interner
	// noPrefilter runs every line through the rules (tests compare).
	noPrefilter bool
	origin      Origin

	v vllmState
	l llamaState
	o ollamaState
}

type pendingLine struct {
	at   time.Duration
	line string
}

// NewParser makes a parser for kind. KindAuto detects the kind from the
// lines themselves (holding back up to 200 lines until one names the
// server). clock converts the wall-clock times of the built-in engine's
// stage lines into session offsets; it is unused for other kinds.
func NewParser(kind Kind, clock trace.Clock) *Parser {
	p := &Parser{kind: kind, clock: clock, active: map[trace.Stage]*group{}, ended: map[trace.Stage]*endTracker{}}
	if kind == KindAuto || kind == "" {
		p.kind, p.auto = KindAuto, true
	}
	return p
}

// SetDeferred makes the parser return each span only once its start is
// final (the earliest worker's, for import): when its stage has ended and
// gone quiet for the settle window, when a new span of the stage begins, or
// at Flush. A span that a later line annotates (a total printed after
// the fact) is returned again with the same Name and Start, so consumers
// replace spans by (Name, Start) as they do for live ones. The slice a
// deferred parser returns is valid until its next Feed, Tick or Flush:
// copy the spans to keep them. Call it before the first Feed.
func (p *Parser) SetDeferred(on bool) { p.deferred = on }

// Rejected says why the figures of the last line fed were refused (a
// number that is not finite, or overflows once converted to bytes or
// seconds; a stage line whose times lie far from the line's own), or ""
// when they were not. A refused line stays a plain log line: it changes
// no span.
func (p *Parser) Rejected() string { return p.rejected }

// Kind is the parser's kind; for an auto parser, the detected kind once a
// line named the server (KindAuto before, KindUnknown if none did within
// the first 200 lines).
func (p *Parser) Kind() Kind { return p.kind }

// Ready reports when the server said it can serve requests ("Application
// startup complete", "The server is fired up and ready to roll!",
// "Connected", "main: model loaded", Ollama's "Listening on").
func (p *Parser) Ready() (time.Duration, bool) { return p.readyAt, p.ready }

// Feed parses one line seen at offset at (live: arrival time; import: the
// line's own timestamp). It returns the spans this line started, completed
// or updated (a deferred parser: the spans that became final), and the
// stage the line belongs to when it is a stage line (for trace.Log.Stage).
// Unknown lines return nothing. Collectors' prefixes (docker compose,
// kubectl, journald; see Unwrap) are stripped first. Feed never panics on
// any input and allocates only for stage lines.
func (p *Parser) Feed(at time.Duration, line string) ([]trace.Span, trace.Stage) {
	return p.FeedUnwrapped(at, Unwrap(line, time.Time{}).Line)
}

// FeedUnwrapped is Feed for a line whose collectors' prefixes the caller
// already stripped with Unwrap.
func (p *Parser) FeedUnwrapped(at time.Duration, line string) ([]trace.Span, trace.Stage) {
	return p.FeedPrepared(at, line, Prepared{})
}

// Prepared is what a Preparer read of a line ahead of the parser.
type Prepared struct {
	ok    bool // prepared (the zero Prepared is not)
	stage trace.StageLine
	err   error // from reading it as a stage line
	// fast: the stage line is of the engine's own shape (fastStageLine),
	// whose end_ns is what treniTime reads as the line's stamp.
	fast bool
	// kind is the kind whose rule texts were looked for (none: not looked
	// for), texts whether the line contains one (the prefilter's answer).
	kind  Kind
	texts bool
}

// A Preparer reads lines ahead of a parser, on a goroutine of the
// caller's, doing the part of parsing that needs nothing from the lines
// before (reading the built-in engine's stage lines, most of the work on
// a log of them, and looking for the rules' texts, most of it on other
// logs), so that two cores share an import's parsing. Its results are
// fed, in the lines' order, to FeedPrepared (and LineClock.PlacePrepared).
// A Preparer is not safe for concurrent use; what it returns may go to
// another goroutine.
type Preparer struct {
	names interner
	kind  Kind
	texts *prefilter // kind's, nil for none
}

// NewPreparer makes a Preparer for a parser of kind (a concrete kind; for
// KindAuto it reads stage lines only).
func NewPreparer(kind Kind) *Preparer {
	return &Preparer{kind: kind, texts: prefilters[kind]}
}

// Prepare reads line (unwrapped) for FeedPrepared.
func (pr *Preparer) Prepare(line string) Prepared {
	line = strings.TrimRight(line, "\r\n")
	pre := Prepared{ok: true}
	if sl, ok := fastStageLine(line, &pr.names); ok {
		pre.stage, pre.fast = sl, true
		return pre
	}
	if pre.stage, pre.err = trace.ParseStageLine(line); pre.err != nil && pr.texts != nil {
		// Not a stage line: the parser's rules read it, if the prefilter
		// lets them.
		pre.kind, pre.texts = pr.kind, pr.texts.mayMatch(line)
	}
	return pre
}

// FeedPrepared is FeedUnwrapped for a line a Preparer read (pre; the zero
// Prepared for a line that was not).
func (p *Parser) FeedPrepared(at time.Duration, line string, pre Prepared) ([]trace.Span, trace.Stage) {
	line = strings.TrimRight(line, "\r\n")
	p.rejected = ""
	if !p.started {
		p.started, p.firstAt = true, at
	}
	if at < p.lastAt {
		at = p.lastAt // a line never goes back in time
	}
	if p.auto && p.kind == KindAuto {
		if n := len(p.pending); n > 0 && at < p.pending[n-1].at {
			at = p.pending[n-1].at
		}
		p.pending = append(p.pending, pendingLine{at, line})
		k := lineKind(line)
		if k == KindUnknown && len(p.pending) < maxAutoBuffer {
			return nil, ""
		}
		out := p.detect(k)
		// This line was the last one detect fed.
		return p.takeOut(out), p.lastStage
	}
	sp, st := p.feed(at, line, pre)
	return p.takeOut(sp), st
}

// takeOut returns a deferred parser's final spans (live: sp).
func (p *Parser) takeOut(sp []trace.Span) []trace.Span {
	if !p.deferred {
		return sp
	}
	out := p.out
	p.lastRuns = append(p.lastRuns[:0], p.outRun...)
	// The slice handed out is used again two batches later: a slice per
	// line was most of what a log of stage lines allocated.
	clear(p.spare)
	p.out, p.spare, p.outRun = p.spare[:0], out, p.outRun[:0]
	return out
}

// byStart sorts spans by start, keeping their runs beside them.
type byStart struct {
	s   []trace.Span
	run []int
}

func (b byStart) Len() int           { return len(b.s) }
func (b byStart) Less(i, j int) bool { return b.s[i].Start < b.s[j].Start }
func (b byStart) Swap(i, j int) {
	b.s[i], b.s[j] = b.s[j], b.s[i]
	b.run[i], b.run[j] = b.run[j], b.run[i]
}

// Tick releases stages whose workers have gone quiet for the settle window
// without a new line arriving; a live launcher may call it on a timer.
func (p *Parser) Tick(at time.Duration) []trace.Span {
	p.changed = p.changed[:0]
	p.settle(at)
	return p.takeOut(p.emit())
}

func (p *Parser) feed(at time.Duration, line string, pre Prepared) ([]trace.Span, trace.Stage) {
	p.changed = p.changed[:0]
	p.settle(at)
	p.hits = p.hits[:0]
	worker := ""
	if !pre.ok {
		pre.stage, pre.err = parseStageLine(line, &p.names)
	}
	if sl, err := pre.stage, pre.err; err == nil {
		p.lastAt = at
		settled := p.emit()
		sp, ok := p.stageLine(at, sl)
		if !ok {
			return settled, ""
		}
		return append(settled, sp...), sl.Stage
	} else if err != trace.ErrNotStageLine {
		p.lastAt = at
		return p.emit(), "" // a malformed stage line stays a plain line
	}
	if p.skipRules(line, pre) {
		p.lastAt = at
		return p.emit(), ""
	}
	worker = p.rules(at, line)
	if p.deferred && p.ready && p.hasEngineStart() {
		// The server starts again in the same log: every span of the
		// previous start is final, and this line begins the next one.
		p.restart(at)
		p.hits = p.hits[:0]
		worker = p.rules(at, line)
	}
	p.noteOrigin(line)
	if why := p.refuse(at); why != "" {
		p.rejected = why
		p.hits = p.hits[:0]
	}
	var stage trace.Stage
	for _, h := range p.hits {
		if st := p.apply(at, worker, h, line); stage == "" {
			stage = st
		}
	}
	p.lastAt = at
	return p.emit(), stage
}

// skipRules: the prefilter says no rule (nor noteOrigin) can fire on the
// line. llama.cpp's device block is read line by line (its first
// non-device line ends cuda_init), so while it runs every line goes
// through the rules.
func (p *Parser) skipRules(line string, pre Prepared) bool {
	f := prefilters[p.kind]
	if f == nil || p.noPrefilter {
		return false
	}
	if pre.ok && pre.kind == p.kind {
		if pre.texts { // a Preparer looked
			return false
		}
	} else if f.mayMatch(line) {
		return false
	}
	switch p.kind {
	case KindLlamaCpp, KindOllama:
		if g := p.latest(trace.StageCUDAInit); p.l.backend != "" || g != nil && g.hasOpen() {
			return false
		}
		// Ollama's rules read a slog line's msg unescaped: `msg="kv\ cache"`
		// is "kv cache", which the line's text does not contain.
		if p.kind == KindOllama && strings.IndexByte(line, '\\') >= 0 {
			return false
		}
	case KindVLLM, KindSGLang, KindTGI:
		// A worker's tag on any line puts the parser in worker mode
		// (open spans wait for a worker to finish): until one was seen,
		// lines that may carry one go through the rules.
		if !p.sawWorkers && mayCarryWorker(p.kind, line) {
			return false
		}
	}
	return true
}

// mayCarryWorker: the line may carry a worker's tag for the kind's rules.
func mayCarryWorker(k Kind, line string) bool {
	switch k {
	case KindVLLM:
		return strings.HasPrefix(line, "(")
	case KindSGLang:
		return sglangPrefix(line)
	}
	return strings.Contains(line, "rank")
}

// rules turns the line into hits by the kind's rules and returns the
// worker it came from.
func (p *Parser) rules(at time.Duration, line string) string {
	switch p.kind {
	case KindVLLM:
		return p.vllm(at, line)
	case KindSGLang:
		return p.sglang(at, line)
	case KindTGI:
		return p.tgi(at, line)
	case KindLlamaCpp:
		p.llamacpp(at, line, false)
	case KindOllama:
		p.ollama(at, line)
	}
	return ""
}

// hasEngineStart: the line begins a start of the server (llama-server
// prints its backends' device block first, before it loads).
func (p *Parser) hasEngineStart() bool {
	for _, h := range p.hits {
		if h.op == opEngineStart || p.kind == KindLlamaCpp && h.stage == trace.StageCUDAInit && h.op == opOpen {
			return true
		}
	}
	return false
}

// Run is the server start the last line belongs to: 0 for the first; a
// deferred parser counts one more each time the server starts again after
// it was ready (an engine's first line, the built-in engine's runtime_init,
// after the ready line).
func (p *Parser) Run() int { return p.run }

// LastRuns gives, for each span of the last batch a deferred parser
// returned (Feed, Tick or Flush), the start (Run) it belongs to: a restart
// line returns the previous start's last spans.
func (p *Parser) LastRuns() []int { return p.lastRuns }

// restart ends the current start of the server: every span still being
// built is closed (a stage that never ended is marked unfinished) and
// handed out, and what the rules remember starts afresh.
func (p *Parser) restart(at time.Duration) {
	p.closeAll(p.lastAt)
	for _, g := range p.groups {
		p.hand(g)
	}
	p.groups = p.groups[:0]
	clear(p.active)
	for _, t := range p.ended {
		// Emptied, not dropped: a log that starts again every few
		// lines (the engine's stage lines) would allocate them anew.
		*t = endTracker{later: t.later[:0]}
	}
	p.run++
	p.firstAt = at
	p.ready, p.readyAt = false, 0
	p.runtimeDone, p.engineSeen, p.engineAt, p.firstReq = false, false, 0, false
	p.v, p.l, p.o = vllmState{}, llamaState{}, ollamaState{}
}

// closeAll closes every stage still running at the end of a start (at, the
// last line's time); a stage that never saw its end is unfinished.
func (p *Parser) closeAll(at time.Duration) {
	for _, g := range p.groups {
		if !g.hasOpen() {
			continue
		}
		for _, m := range g.members {
			if !m.open {
				continue
			}
			m.open = false
			if !g.closedAny {
				m.end = max(m.end, at)
			}
		}
		if !g.closedAny {
			g.unfinished = true
		}
		g.closedAny = true
		p.touch(g)
	}
}

// Flush closes whatever is still open at the end of the log (at is the
// time of the last line) and returns the spans it changed; a deferred
// parser returns every span it has not returned yet, in start order. A
// stage that never saw its end line is closed at at with
// attrs["unfinished"] = true.
func (p *Parser) Flush(at time.Duration) []trace.Span {
	var out []trace.Span
	if p.auto && p.kind == KindAuto {
		out = p.detect(KindUnknown)
	}
	p.changed = p.changed[:0]
	if at < p.lastAt {
		at = p.lastAt
	}
	p.closeAll(at)
	if p.deferred {
		n := len(p.out)
		for _, g := range p.groups {
			p.hand(g)
		}
		// What this start still held, in start order after what earlier
		// lines handed out.
		tail, tailRuns := p.out[n:], p.outRun[n:]
		sort.Sort(byStart{tail, tailRuns})
		return p.takeOut(nil)
	}
	return append(out, p.emit()...)
}

// detect settles an auto parser's kind (from the held-back lines when k is
// unknown) and feeds it the held-back lines.
func (p *Parser) detect(k Kind) []trace.Span {
	if k == KindUnknown {
		k = kindFromLines(linesOf(p.pending))
	}
	p.kind = k
	buf := p.pending
	p.pending = nil
	var out []trace.Span
	for _, pl := range buf {
		sp, st := p.feed(pl.at, pl.line, Prepared{})
		out = append(out, sp...)
		p.lastStage = st
	}
	return out
}

func linesOf(pl []pendingLine) []string {
	out := make([]string, len(pl))
	for i, l := range pl {
		out[i] = l.line
	}
	return out
}

// maxStageLineSkew is how far a stage line's end may lie after the time
// the line was seen: the engine writes it when the stage ends.
const maxStageLineSkew = time.Minute

// stageLine handles the built-in engine's own JSON stage lines: complete
// spans with wall-clock start and end. A line whose end lies after the
// line was seen, or whose start lies further before it than any stage
// lasts (start_ns near the int64 limits, a clock that jumped), is refused.
func (p *Parser) stageLine(at time.Duration, sl trace.StageLine) ([]trace.Span, bool) {
	sp := sl.Span(p.clock)
	if p.deferred && p.ready && (sl.Stage == trace.StageRuntimeInit || sl.Stage == trace.StageProcessStart) {
		p.restart(at)
	}
	if sp.End > at+maxStageLineSkew || sp.Start < at-maxStated || sp.End < at-maxStated {
		p.rejected = fmt.Sprintf("treni stage line %s: its times (start_ns %d, end_ns %d) lie far from the line's own time", sl.Stage, sl.StartNS, sl.EndNS)
		return nil, false
	}
	for k, v := range sl.Attrs {
		if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
			p.rejected = fmt.Sprintf("treni stage line %s: attribute %s is not a finite number", sl.Stage, k)
			return nil, false
		}
	}
	if sl.Stage == trace.StageHTTPReady && !p.ready {
		p.ready, p.readyAt = true, sp.End
	}
	if sl.Stage != trace.StageRuntimeInit && sl.Stage != trace.StageProcessStart {
		p.runtimeDone = true
	}
	p.ended[sl.Stage] = p.ended[sl.Stage].add(sp.End, at)
	if p.deferred {
		// Final as it is read: handed out at once, never kept.
		p.out, p.outRun = append(p.out, sp), append(p.outRun, p.run)
		return nil, true
	}
	m := &member{start: sp.Start, end: sp.End, endSet: true}
	g := &group{stage: sl.Stage, source: sp.Source, members: map[string]*member{"": m},
		order: []string{""}, list: []*member{m}, attrs: trace.Attrs{}, closedAny: true, lastActivity: sp.End, line: ""}
	for k, v := range sl.Attrs {
		g.attrs[k] = v
	}
	g.emitted, g.frozen, g.frozenStart = true, true, sp.Start
	return []trace.Span{g.span()}, true
}
