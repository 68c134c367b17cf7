package serverlog

import (
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

	groups []*group
	active map[trace.Stage]*group

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
	p := &Parser{kind: kind, clock: clock, active: map[trace.Stage]*group{}}
	if kind == KindAuto || kind == "" {
		p.kind, p.auto = KindAuto, true
	}
	return p
}

// SetDeferred makes Feed return no spans and Flush return all of them with
// exact starts (the earliest worker's), for import. Call it before the
// first Feed.
func (p *Parser) SetDeferred(on bool) { p.deferred = on }

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
// or updated, and the stage the line belongs to when it is a stage line
// (for trace.Log.Stage). Unknown lines return nothing. Feed never panics
// on any input and allocates only for stage lines.
func (p *Parser) Feed(at time.Duration, line string) ([]trace.Span, trace.Stage) {
	line = strings.TrimRight(line, "\r\n")
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
		return out, p.lastStage
	}
	return p.feed(at, line)
}

// Tick releases stages whose workers have gone quiet for the settle window
// without a new line arriving; a live launcher may call it on a timer.
func (p *Parser) Tick(at time.Duration) []trace.Span {
	p.changed = p.changed[:0]
	p.settle(at)
	return p.emit()
}

func (p *Parser) feed(at time.Duration, line string) ([]trace.Span, trace.Stage) {
	p.changed = p.changed[:0]
	p.settle(at)
	p.hits = p.hits[:0]
	worker := ""
	if sl, err := trace.ParseStageLine(line); err == nil {
		p.lastAt = at
		settled := p.emit()
		return append(settled, p.stageLine(sl)...), sl.Stage
	} else if err != trace.ErrNotStageLine {
		p.lastAt = at
		return p.emit(), "" // a malformed stage line stays a plain line
	}
	switch p.kind {
	case KindVLLM:
		worker = p.vllm(at, line)
	case KindSGLang:
		worker = p.sglang(at, line)
	case KindTGI:
		worker = p.tgi(at, line)
	case KindLlamaCpp:
		p.llamacpp(at, line, false)
	case KindOllama:
		p.ollama(at, line)
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

// Flush closes whatever is still open at the end of the log (at is the
// time of the last line) and returns the spans it changed; a deferred
// parser returns every span instead. A stage that never saw its end line
// is closed at at with attrs["unfinished"] = true.
func (p *Parser) Flush(at time.Duration) []trace.Span {
	var out []trace.Span
	if p.auto && p.kind == KindAuto {
		out = p.detect(KindUnknown)
	}
	p.changed = p.changed[:0]
	if at < p.lastAt {
		at = p.lastAt
	}
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
	if p.deferred {
		return p.Spans()
	}
	return append(out, p.emit()...)
}

// Spans returns every span the parser has built so far, in start order,
// with the latest state of each.
func (p *Parser) Spans() []trace.Span {
	out := make([]trace.Span, 0, len(p.groups))
	for _, g := range p.groups {
		if len(g.members) == 0 {
			continue
		}
		out = append(out, g.span())
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
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
		sp, st := p.feed(pl.at, pl.line)
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

// stageLine handles the built-in engine's own JSON stage lines: complete
// spans with wall-clock start and end.
func (p *Parser) stageLine(sl trace.StageLine) []trace.Span {
	sp := sl.Span(p.clock)
	g := &group{stage: sl.Stage, source: sp.Source, members: map[string]*member{"": {start: sp.Start, end: sp.End, endSet: true}},
		order: []string{""}, attrs: trace.Attrs{}, closedAny: true, lastActivity: sp.End, line: ""}
	for k, v := range sl.Attrs {
		g.attrs[k] = v
	}
	p.groups = append(p.groups, g)
	if sl.Stage == trace.StageHTTPReady && !p.ready {
		p.ready, p.readyAt = true, sp.End
	}
	if sl.Stage != trace.StageRuntimeInit && sl.Stage != trace.StageProcessStart {
		p.runtimeDone = true
	}
	if p.deferred {
		return nil
	}
	g.emitted, g.frozen, g.frozenStart = true, true, sp.Start
	return []trace.Span{g.span()}
}
