package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// read is one output stream's goroutine: every line becomes a log event and
// goes through the parser.
func (p *Process) read(f *os.File, stream string) {
	defer p.readers.Done()
	br := bufio.NewReaderSize(f, 64<<10)
	var buf []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if len(chunk) > 0 && len(buf) < maxLineBytes {
			n := min(len(chunk), maxLineBytes-len(buf))
			buf = append(buf, chunk[:n]...)
		}
		if err != nil {
			if len(buf) > 0 {
				p.line(stream, string(buf))
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				p.line(stream, fmt.Sprintf("[treni-top: reading the target's %s failed: %v]", stream, err))
			}
			return
		}
		if isPrefix {
			continue
		}
		p.line(stream, string(buf))
		buf = buf[:0]
	}
}

// line handles one output line: kind detection (detectKind), the parser,
// the listener-up line, the log event and the spans.
func (p *Process) line(stream, text string) {
	// Progress bars redraw with \r; keep what a terminal would show.
	if i := strings.LastIndexByte(strings.TrimRight(text, "\r"), '\r'); i >= 0 {
		text = text[i+1:]
	}
	text = strings.TrimRight(text, "\r")
	at := p.clock.Now()

	p.mu.Lock()
	// The kind first: the first line may already be the built-in engine's
	// stage line, and the engine reports its own process_start.
	pre, spans := p.detectKind(at, text) // events to emit before this line's
	if !p.sawLine {
		p.sawLine = true
		if p.kind != serverlog.KindTreni && !p.attached {
			// process_start for an external server: spawn → first output
			// (the built-in engine reports its own, from /proc starttime).
			pre = append(pre, trace.Event{At: at, Kind: trace.KindStage, Stage: &trace.Span{
				Name: trace.StageProcessStart, Start: p.spawnAt, End: at, Source: "launcher",
			}})
		}
	}
	s, stage := p.parser.Feed(at, text)
	spans = append(spans, s...)
	for _, sp := range spans {
		if sp.Name == trace.StageHTTPReady {
			p.logHTTPReady = true
		}
	}
	if p.listenAt == 0 {
		if u, ok := listenURL(text); ok {
			p.listenAt = at
			if !p.urlFixed && (p.url == "" || p.kind == serverlog.KindUnknown || p.kind == serverlog.KindTreni) {
				p.url = u
			}
		}
	}
	p.tail = append(p.tail, text)
	if len(p.tail) > TailLines {
		p.tail = p.tail[len(p.tail)-TailLines:]
	}
	pid := p.pid
	p.mu.Unlock()

	for _, e := range pre {
		p.emit(e)
	}
	p.emit(trace.Event{At: at, Kind: trace.KindLog, Log: &trace.Log{Stream: stream, PID: pid, Text: text, Stage: stage}})
	for i := range spans {
		sp := spans[i]
		p.emit(trace.Event{At: at, Kind: trace.KindStage, Stage: &sp})
	}
}

// detectKind settles the server kind from an output line, with p.mu held.
// While the kind is unknown the first lines vote (serverlog.DetectKind);
// once known, the built-in engine's structured stage line still wins over
// a kind guessed from the command (a treni-top binary under another name,
// a model path that mentions another server), unless the caller forced
// the kind. On a change it switches the parser, re-infers the URL and
// returns the server_kind_detected marker and the spans of the lines seen
// so far, re-read with the right parser.
func (p *Process) detectKind(at time.Duration, text string) (pre []trace.Event, spans []trace.Span) {
	if p.spec.Kind != "" || p.kind == serverlog.KindTreni {
		return nil, nil
	}
	var k serverlog.Kind
	var reread []string
	var rereadAts []time.Duration
	switch {
	case p.kind == serverlog.KindUnknown && len(p.firstLines) < detectLines:
		p.firstLines = append(p.firstLines, text)
		p.firstAts = append(p.firstAts, at)
		k = serverlog.DetectKind(p.spec.Command, p.firstLines)
		reread, rereadAts = p.firstLines[:len(p.firstLines)-1], p.firstAts
	case p.kind != serverlog.KindUnknown:
		if _, err := trace.ParseStageLine(text); err == nil {
			k = serverlog.KindTreni
		}
	}
	if k == "" || k == serverlog.KindUnknown {
		return nil, nil
	}
	p.kind = k
	p.parser = serverlog.NewParser(k, p.clock)
	pre = append(pre, trace.Event{At: at, Kind: trace.KindMarker, Marker: &trace.Marker{
		Name: trace.MarkerKindDetected, Attrs: trace.Attrs{"server_kind": string(k)},
	}})
	// Re-read the lines seen so far with the right parser; their log
	// events already went out unmarked.
	for i, l := range reread {
		s, _ := p.parser.Feed(rereadAts[i], l)
		spans = append(spans, s...)
	}
	if !p.urlFixed {
		if u, _ := InferURL(p.spec.Command, p.spec.Env, k); u != "" {
			p.url = u
		}
	}
	return pre, spans
}
