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

// op is what a recognised line does to its stage.
type op uint8

const (
	opMark        op = iota // the line belongs to the stage but changes no timing
	opOpen                  // the stage begins at this line (or at hit.start)
	opExtend                // the stage is still running at this line
	opClose                 // the stage ends at this line
	opAnnotate              // attributes for the latest span of the stage
	opEngineStart           // the first engine line: runtime_init ends here
	opReady                 // the server says it can serve
)

// hit is one effect of a line on one stage.
type hit struct {
	stage       trace.Stage
	op          op
	start       time.Duration // for a new member: where it began
	hasStart    bool
	reported    float64 // the server's own figure, seconds
	hasReported bool
	sumReported bool          // add to the member's figure (sub-steps of one stage)
	keepEnd     bool          // close: keep an end set by a terminal extension
	end         time.Duration // close: the stage ended here, not at the line
	hasEnd      bool
	terminal    bool // extend: the stage's work is known to have reached here
	main        bool // belongs to the main process even on a tagged line
	set         trace.Attrs
	add         trace.Attrs
	max         trace.Attrs
}

// member is one worker's part of a stage.
type member struct {
	start, end  time.Duration
	open        bool
	endSet      bool
	closedOnce  bool // this worker's own end line was seen
	main        bool // created by a line of the main process, not a worker
	reported    float64
	hasReported bool
}

// group is one stage span being built from one or more workers' lines.
type group struct {
	stage        trace.Stage
	source       string
	members      map[string]*member
	order        []string
	attrs        trace.Attrs
	line         string
	lastActivity time.Duration
	closedAny    bool
	unfinished   bool
	emitted      bool
	frozen       bool
	frozenStart  time.Duration
	dirty        bool
}

func (g *group) hasOpen() bool {
	for _, m := range g.members {
		if m.open {
			return true
		}
	}
	return false
}

func (g *group) bounds() (start, end time.Duration) {
	first := true
	for _, w := range g.order {
		m := g.members[w]
		if first || m.start < start {
			start = m.start
		}
		if first || m.end > end {
			end = m.end
		}
		first = false
	}
	if g.frozen {
		start = g.frozenStart
	}
	if end < start {
		end = start
	}
	return start, end
}

func (g *group) span() trace.Span {
	start, end := g.bounds()
	sp := trace.Span{Name: g.stage, Start: start, End: end, Open: !g.closedAny, Source: g.source}
	tagged := 0
	var repMax, repMin float64
	nrep := 0
	untagged := false
	for _, w := range g.order {
		if w != "" {
			tagged++
		} else if !g.members[w].main {
			untagged = true
		}
		if m := g.members[w]; m.hasReported {
			if nrep == 0 || m.reported > repMax {
				repMax = m.reported
			}
			if nrep == 0 || m.reported < repMin {
				repMin = m.reported
			}
			nrep++
		}
	}
	// An untagged member next to tagged ones is a worker too: vLLM V0's
	// driver worker prints without a tag, and garbled lines lose theirs.
	// Lines of the engine core or API server (main) are not workers.
	if untagged && tagged > 0 {
		tagged++
	}
	if tagged > 1 {
		sp.Workers = tagged
	}
	attrs := make(trace.Attrs, len(g.attrs)+4)
	for k, v := range g.attrs {
		attrs[k] = v
	}
	if nrep > 0 {
		attrs[trace.AttrReported] = repMax
		if nrep > 1 && repMin != repMax {
			attrs["reported_min_s"] = repMin
		}
	}
	if g.line != "" {
		attrs[trace.AttrLine] = g.line
	}
	if g.unfinished {
		attrs["unfinished"] = true
	}
	if len(attrs) > 0 {
		sp.Attrs = attrs
	}
	return sp
}

func (p *Parser) workerMode() bool {
	return p.workersKnown > 1 || (p.workersKnown == 0 && p.sawWorkers)
}

// group returns the span being built for stage, or a new one when the last
// one has ended and gone quiet for the settle window.
func (p *Parser) group(stage trace.Stage, at time.Duration) *group {
	if g := p.active[stage]; g != nil && (g.hasOpen() || at-g.lastActivity <= settleWindow) {
		return g
	}
	g := &group{stage: stage, source: "log:" + string(p.kind), members: map[string]*member{}, attrs: trace.Attrs{}, lastActivity: at}
	p.groups = append(p.groups, g)
	p.active[stage] = g
	return g
}

// latest returns the most recent span of stage, if any.
func (p *Parser) latest(stage trace.Stage) *group {
	return p.active[stage]
}

// lastEnd is the latest end, no later than at, of the spans of the given
// stages: where a stage whose start the server does not log begins.
func (p *Parser) lastEnd(at time.Duration, stages ...trace.Stage) (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, g := range p.groups {
		if len(g.members) == 0 {
			continue
		}
		for _, s := range stages {
			if g.stage == s {
				_, e := g.bounds()
				if e <= at && (!found || e > best) {
					best, found = e, true
				}
			}
		}
	}
	return best, found
}

func (p *Parser) touch(g *group) {
	if !g.dirty {
		g.dirty = true
		p.changed = append(p.changed, g)
	}
}

// apply performs one hit and returns the stage the line belongs to.
func (p *Parser) apply(at time.Duration, worker string, h hit, line string) trace.Stage {
	if h.main {
		worker = ""
	}
	switch h.op {
	case opMark:
		return h.stage
	case opReady:
		if !p.ready {
			p.ready, p.readyAt = true, at
		}
		return ""
	case opEngineStart:
		if !p.engineSeen {
			p.engineSeen, p.engineAt = true, at
		}
		if p.runtimeDone {
			return ""
		}
		p.runtimeDone = true
		if at <= p.firstAt {
			return ""
		}
		g := &group{stage: trace.StageRuntimeInit, source: "log:" + string(p.kind), members: map[string]*member{"": {start: p.firstAt, end: at, endSet: true}},
			order: []string{""}, attrs: trace.Attrs{}, closedAny: true, lastActivity: at, line: line}
		mergeAttrs(g.attrs, h.set, h.add)
		p.groups = append(p.groups, g)
		p.touch(g)
		return trace.StageRuntimeInit
	case opAnnotate:
		g := p.latest(h.stage)
		if g == nil {
			return ""
		}
		mergeAttrs(g.attrs, h.set, h.add)
		maxAttrs(g.attrs, h.max)
		if h.hasReported {
			for _, w := range g.order {
				if m := g.members[w]; !m.hasReported {
					m.reported, m.hasReported = h.reported, true
				}
			}
		}
		p.touch(g)
		return h.stage
	}
	switch h.stage {
	case trace.StageCUDAInit, trace.StageTokenizerLoad, trace.StageRuntimeInit, trace.StageProcessStart:
	default:
		p.runtimeDone = true
	}
	g := p.group(h.stage, at)
	m := g.members[worker]
	if m == nil {
		start := at
		if h.hasStart {
			start = h.start
		}
		m = &member{start: start, end: at, main: h.main}
		if h.hasEnd {
			m.end = max(h.end, start)
		}
		g.members[worker] = m
		g.order = append(g.order, worker)
		if h.op != opClose {
			m.open = true
		}
	} else if h.hasStart && h.start < m.start {
		// A later line's figure shows the stage began before the line
		// that first named it (vLLM logs "Using cache directory" after
		// Dynamo has run for seconds).
		m.start = h.start
	}
	switch h.op {
	case opOpen:
		m.open = true
		if at > m.end {
			m.end = at
		}
	case opExtend:
		if at > m.end {
			m.end = at
		}
		if h.terminal {
			m.endSet = true
		}
	case opClose:
		switch {
		case h.hasEnd:
			if h.end > m.end {
				m.end = h.end
			}
		case !(h.keepEnd && m.endSet):
			if at > m.end {
				m.end = at
			}
		}
		m.open, m.endSet, m.closedOnce = false, true, true
		if g.line == "" {
			g.line = line
		}
		g.closedAny = true
	}
	if h.hasReported {
		if h.sumReported {
			m.reported += h.reported
		} else if !m.hasReported || h.reported > m.reported {
			m.reported = h.reported
		}
		m.hasReported = true
	}
	mergeAttrs(g.attrs, h.set, h.add)
	maxAttrs(g.attrs, h.max)
	g.lastActivity = at
	p.touch(g)
	return h.stage
}

// mergeAttrs sets absent keys from set and sums the numbers of add.
func mergeAttrs(dst, set, add trace.Attrs) {
	for k, v := range set {
		if _, ok := dst[k]; !ok {
			dst[k] = v
		}
	}
	for k, v := range add {
		f, _ := add.Float(k)
		old, _ := dst.Float(k)
		if _, ok := v.(float64); ok {
			dst[k] = old + f
		}
	}
}

// maxAttrs keeps the largest of each number.
func maxAttrs(dst, src trace.Attrs) {
	for k := range src {
		f, _ := src.Float(k)
		if old, ok := dst.Float(k); !ok || f > old {
			dst[k] = f
		}
	}
}

// settle closes the remaining workers of stages that already ended for one
// worker and have been quiet for the settle window.
func (p *Parser) settle(at time.Duration) {
	if !p.workerMode() {
		return
	}
	for _, g := range p.active {
		if !g.closedAny || at-g.lastActivity <= settleWindow || !g.hasOpen() {
			continue
		}
		changed := false
		for _, m := range g.members {
			if m.open && !m.closedOnce {
				m.open, changed = false, true
			}
		}
		if changed {
			p.touch(g)
		}
	}
}

// emit returns the spans of the groups this line changed, for live
// consumers. Open spans of tensor-parallel stages are held back until one
// worker finishes, so that their Start (fixed once published) is already
// the earliest worker's.
func (p *Parser) emit() []trace.Span {
	var out []trace.Span
	for _, g := range p.changed {
		g.dirty = false
		if p.deferred || len(g.members) == 0 {
			continue
		}
		if !g.closedAny && p.workerMode() {
			continue
		}
		if !g.emitted {
			g.emitted = true
			g.frozenStart, _ = g.bounds()
			g.frozen = true
		}
		out = append(out, g.span())
	}
	p.changed = p.changed[:0]
	return out
}
