package serverlog

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// This file holds the span builder every server's rules feed: a rule turns
// a line into hits (op + figures + attributes), apply performs them on
// groups (one per stage span, with one member per worker), and emit hands
// the changed spans to live consumers. The per-server rules are in
// vllm.go, sglang.go, tgi.go, llamacpp.go and ollama.go.

// AttrStated marks a span whose reported_s is its own duration as the
// server measured it: the span is that long (per worker), placed by the
// line timestamps.
const AttrStated = "stated"

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
	// stated: reported is the stage's own duration as the server measured
	// it (not a total that covers other stages), so it wins over the
	// line timestamps, which often have one-second resolution.
	stated      bool
	sumReported bool          // add to the member's figure (sub-steps of one stage)
	keepEnd     bool          // close: keep an end set by a terminal extension
	end         time.Duration // close: the stage ended here, not at the line
	hasEnd      bool
	terminal    bool // extend: the stage's work is known to have reached here
	main        bool // belongs to the main process even on a tagged line
	// fresh: the line is a span of its own, never a worker's part of the
	// last one (a sleep or a wake, which repeat within the settle window).
	fresh bool
	set   trace.Attrs
	add   trace.Attrs
	max   trace.Attrs
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
	stated      bool // reported is this worker's own duration of the stage
}

// stop is where the member's part of the stage ends: start + the stated
// duration once it has ended with one, else its last line. Timestamps only
// place a stated span (at its first line, or at its end line minus the
// figure when the figure's line is its first); its length is the server's.
func (m *member) stop() time.Duration {
	if m.stated && m.hasReported && !m.open {
		if d := seconds(m.reported); d > 0 {
			return m.start + d
		}
	}
	return m.end
}

// group is one stage span being built from one or more workers' lines.
type group struct {
	stage        trace.Stage
	source       string
	members      map[string]*member
	order        []string
	list         []*member // the members in order: hasOpen runs for every line
	attrs        trace.Attrs
	line         string
	lastActivity time.Duration
	closedAny    bool
	unfinished   bool
	emitted      bool
	frozen       bool
	frozenStart  time.Duration
	dirty        bool
	// stale: changed since a deferred parser last handed it out.
	stale bool
}

func (g *group) hasOpen() bool {
	for _, m := range g.list {
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
		if e := m.stop(); first || e > end {
			end = e
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

// earliest is the earliest member start, whatever a live consumer was
// already given: rules that compare against it then read the same in live
// and deferred parsing.
func (g *group) earliest() (time.Duration, bool) {
	var s time.Duration
	found := false
	for _, m := range g.members {
		if !found || m.start < s {
			s, found = m.start, true
		}
	}
	return s, found
}

func (g *group) span() trace.Span {
	start, end := g.bounds()
	sp := trace.Span{Name: g.stage, Start: start, End: end, Open: !g.closedAny, Source: g.source}
	tagged := 0
	var repMax, repMin float64
	nrep := 0
	untagged := false
	stated := false
	for _, w := range g.order {
		stated = stated || g.members[w].stated
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
		if s, ok := v.(string); ok {
			v = strings.Clone(s) // a piece of a line: the span keeps no line's memory
		}
		attrs[k] = v
	}
	if nrep > 0 {
		attrs[trace.AttrReported] = repMax
		if nrep > 1 && repMin != repMax {
			attrs["reported_min_s"] = repMin
		}
	}
	if g.line != "" {
		attrs[trace.AttrLine] = strings.Clone(g.line)
	}
	if g.unfinished {
		attrs["unfinished"] = true
	}
	if stated {
		// reported_s is the stage's own length (per worker), which the
		// span's length follows, not a total covering other stages.
		attrs[AttrStated] = true
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
// one has ended and gone quiet for the settle window, or fresh asks for one.
func (p *Parser) group(stage trace.Stage, at time.Duration, fresh bool) *group {
	old := p.active[stage]
	if old != nil && !fresh && (old.hasOpen() || at-old.lastActivity <= settleWindow) {
		return old
	}
	if old != nil {
		p.retire(old, at)
	}
	g := &group{stage: stage, source: "log:" + string(p.kind), members: map[string]*member{}, attrs: trace.Attrs{}, lastActivity: at}
	p.groups = append(p.groups, g)
	p.active[stage] = g
	return g
}

// retire drops a span that no line can change any more (a new span of its
// stage began): a deferred parser hands it out, and lastEnd keeps its end.
func (p *Parser) retire(g *group, at time.Duration) {
	p.hand(g)
	for i, h := range p.groups {
		if h == g {
			p.groups = append(p.groups[:i], p.groups[i+1:]...)
			break
		}
	}
	if len(g.members) > 0 {
		_, e := g.bounds()
		p.ended[g.stage] = p.ended[g.stage].add(e, at)
	}
}

// hand gives a deferred parser's consumer the span's current state if it
// changed since it was last handed out.
func (p *Parser) hand(g *group) {
	if !p.deferred || !g.stale || len(g.members) == 0 {
		return
	}
	g.stale = false
	p.out, p.outRun = append(p.out, g.span()), append(p.outRun, p.run)
}

// endTracker remembers, for one stage, the latest end of the spans that
// left the parser, as lastEnd asks for it: the latest end no later than
// the line being read. Lines only go forward, so an end that was already
// no later than one line stays so; the few that lie ahead wait in later.
type endTracker struct {
	best  time.Duration
	has   bool
	later []time.Duration
}

// maxLaterEnds bounds the ends kept ahead of the line being read.
const maxLaterEnds = 16

// add records an end seen while reading the line at at.
func (t *endTracker) add(e, at time.Duration) *endTracker {
	if t == nil {
		t = &endTracker{}
	}
	if e <= at {
		if !t.has || e > t.best {
			t.best, t.has = e, true
		}
	} else if len(t.later) < maxLaterEnds {
		t.later = append(t.later, e)
	}
	return t
}

// latest is the latest end no later than at.
func (t *endTracker) latest(at time.Duration) (time.Duration, bool) {
	if t == nil {
		return 0, false
	}
	keep := t.later[:0]
	for _, e := range t.later {
		if e <= at {
			if !t.has || e > t.best {
				t.best, t.has = e, true
			}
		} else {
			keep = append(keep, e)
		}
	}
	t.later = keep
	return t.best, t.has
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
	for _, s := range stages {
		if e, ok := p.ended[s].latest(at); ok && (!found || e > best) {
			best, found = e, true
		}
	}
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
	g.stale = true
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
		// Final as it is made: no rule reaches runtime_init again, so it
		// is not kept among the spans being built.
		m := &member{start: p.firstAt, end: at, endSet: true}
		g := &group{stage: trace.StageRuntimeInit, source: "log:" + string(p.kind), members: map[string]*member{"": m},
			order: []string{""}, list: []*member{m}, attrs: trace.Attrs{}, closedAny: true, lastActivity: at, line: line}
		mergeAttrs(g.attrs, h.set, h.add)
		p.touch(g)
		p.hand(g)
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
					m.reported, m.hasReported, m.stated = h.reported, true, h.stated
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
	g := p.group(h.stage, at, h.fresh)
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
		g.order, g.list = append(g.order, worker), append(g.list, m)
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
			if finite(m.reported + h.reported) {
				m.reported += h.reported
			}
		} else if !m.hasReported || h.reported > m.reported {
			m.reported = h.reported
		}
		m.hasReported = true
		m.stated = m.stated || h.stated
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
		if _, ok := v.(float64); ok && finite(old+f) {
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
// worker and have been quiet for the settle window. A deferred parser then
// hands out every span that has ended and gone quiet: no later line can
// move its start (a new line of its stage begins a new span).
func (p *Parser) settle(at time.Duration) {
	if p.workerMode() {
		// The latest span of each stage, in the order they began (not the
		// map's, which differs from one run to the next): a live parser
		// returns the spans a line settles in the same order every time.
		for _, g := range p.groups {
			if p.active[g.stage] != g || !g.closedAny || at-g.lastActivity <= settleWindow || !g.hasOpen() {
				continue
			}
			changed := false
			for _, m := range g.list {
				if m.open && !m.closedOnce {
					m.open, changed = false, true
				}
			}
			if changed {
				p.touch(g)
			}
		}
	}
	if !p.deferred {
		return
	}
	for _, g := range p.groups {
		if g.stale && g.closedAny && at-g.lastActivity > settleWindow && !g.hasOpen() {
			p.hand(g)
		}
	}
}

// refuse checks the figures of this line's hits before they reach a span:
// a number that is not finite (a 305-digit "KV buffer size" in MiB is
// +Inf once in bytes), or a duration longer than maxStated, is refused
// with the reason, and the line changes nothing.
func (p *Parser) refuse(at time.Duration) string {
	for _, h := range p.hits {
		if h.hasReported && !finite(h.reported) {
			return fmt.Sprintf("%s: the stated duration is not a finite number", h.stage)
		}
		if h.hasReported && h.reported >= maxStated.Seconds() || h.hasStart && at-h.start >= maxStated {
			return fmt.Sprintf("%s: a stated duration of %v or more, longer than any start", h.stage, maxStated)
		}
		for _, a := range []trace.Attrs{h.set, h.add, h.max} {
			for k, v := range a {
				if f, ok := v.(float64); ok && !finite(f) {
					return fmt.Sprintf("%s: %s is not a finite number", h.stage, k)
				}
			}
		}
	}
	return ""
}

// finite reports whether f is a number JSON can hold.
func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }

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
