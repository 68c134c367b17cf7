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

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// ImportOptions says how to read a server log.
type ImportOptions struct {
	// Kind is the server that wrote the log: auto (or ""), vllm, sglang,
	// tgi, llama.cpp, ollama or treni.
	Kind string
	// Source is where the log came from (its path), kept in
	// Header.Notes["source"].
	Source string
	// ToolVersion goes into the header.
	ToolVersion string
	// Ref completes timestamps that omit the year (vLLM) or the zone
	// (Ollama's gin lines): pass when the log was written. Zero means now;
	// ImportFile uses the file's modification time.
	Ref time.Time
}

// ErrUnknownServer is wrapped by Import when --kind auto cannot tell which
// server wrote the log.
var ErrUnknownServer = errors.New("cannot tell which server wrote the log")

// ErrNotLog is wrapped by Import for input that is not a text log (empty,
// binary).
var ErrNotLog = errors.New("not a text log")

// maxImportLine bounds one log line (a JSON config dump can be long).
const maxImportLine = 4 << 20

// Import turns a server log into a session: a process-start event at the
// first line, one log event per line (Log.Stage set on stage lines), the
// stage spans the log parser finds, and a healthy marker where the server
// says it is ready. Offsets come from the lines' own timestamps (offset
// zero is the first one); lines without a timestamp are placed evenly
// between their neighbours, and a log without any is spaced one second per
// line (Header.Notes says which). When the server's own figure shows a
// stage began before the first line (a log that starts mid-startup), every
// offset moves later so that the session starts there, and a note says so.
func Import(r io.Reader, opts ImportOptions) (*Session, error) {
	lines, err := readLogLines(r)
	if err != nil {
		return nil, err
	}
	kind, err := serverlog.ParseKind(opts.Kind)
	if err != nil {
		return nil, err
	}
	detected := false
	if kind == serverlog.KindAuto {
		head := lines
		if len(head) > 500 {
			head = head[:500]
		}
		kind = serverlog.DetectKind(nil, head)
		if kind == serverlog.KindUnknown {
			return nil, fmt.Errorf("%w: none of its first %d lines looks like vllm, sglang, tgi, llama.cpp, ollama or treni output; pass --kind", ErrUnknownServer, len(head))
		}
		detected = true
	}
	ref := opts.Ref
	if ref.IsZero() {
		ref = time.Now()
	}
	start, at, timed := serverlog.LineTimes(kind, lines, ref)
	p := serverlog.NewParser(kind, trace.ClockAt(start))
	p.SetDeferred(true)

	evs := make([]trace.Event, 0, len(lines)+32)
	for i, l := range lines {
		_, stage := p.Feed(at[i], l)
		if strings.TrimSpace(l) == "" {
			continue
		}
		evs = append(evs, trace.Event{At: at[i], Kind: trace.KindLog, Log: &trace.Log{Stream: "file", Text: l, Stage: stage}})
	}
	var last time.Duration
	if len(at) > 0 {
		last = at[len(at)-1]
	}
	spans := p.Flush(last)

	// A stage that began before the first line moves offset zero back.
	var shift time.Duration
	var early trace.Span
	for _, sp := range spans {
		if -sp.Start > shift {
			shift, early = -sp.Start, sp
		}
	}
	for i := range evs {
		evs[i].At += shift
	}
	for _, sp := range spans {
		sp := sp
		sp.Start += shift
		sp.End += shift
		evs = append(evs, trace.Event{At: sp.End, Kind: trace.KindStage, Stage: &sp})
	}
	if readyAt, ok := p.Ready(); ok {
		evs = append(evs, trace.Event{At: readyAt + shift, Kind: trace.KindMarker,
			Marker: &trace.Marker{Name: trace.MarkerHealthy, Attrs: trace.Attrs{"source": "log"}}})
	}
	trace.SortEvents(evs)
	evs = splitWakes(evs)
	// The log's clock quality travels with the events, so the diagnosis
	// can refuse to weigh durations that only count lines.
	evs = append([]trace.Event{
		{At: 0, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, ServerKind: string(kind)}},
		{At: 0, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerLogClock, Attrs: trace.Attrs{"timed_lines": float64(timed), "lines": float64(len(lines))}}},
	}, evs...)

	h := NewHeader(opts.ToolVersion, start.Add(-shift), Target{Kind: TargetImport, ServerKind: string(kind)})
	h.Notes = map[string]string{"source": opts.Source, "lines": fmt.Sprint(len(lines))}
	if detected {
		h.Notes["kind"] = "detected from the log (--kind auto)"
	}
	switch {
	case timed == 0:
		h.Notes["timestamps"] = fmt.Sprintf("no line carries a timestamp: lines are spaced %v apart, so durations count lines, not time", serverlog.UntimedSpacing)
	case timed < len(lines):
		h.Notes["timestamps"] = fmt.Sprintf("%d of %d lines carry a timestamp; the others are placed evenly between their neighbours", timed, len(lines))
	default:
		h.Notes["timestamps"] = "every line carries a timestamp"
	}
	if shift > 0 {
		h.Notes["start"] = fmt.Sprintf("the log begins mid-startup: by the server's own figure %s began %v before the first line; offsets start there", early.Name, shift.Round(time.Millisecond))
	}
	for i, e := range evs {
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("import built an invalid event %d (a bug in treni-top; please report it with the log): %w", i, err)
		}
	}
	return &Session{Path: "", Header: h, Events: evs}, nil
}

// readLogLines reads text lines (gzip detected from the content), strips
// terminal colour codes and carriage returns, and refuses binary input.
func readLogLines(r io.Reader) ([]string, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: bad gzip stream: %v", ErrNotLog, err)
		}
		defer gz.Close()
		br = bufio.NewReaderSize(gz, 64<<10)
	}
	var lines []string
	for {
		line, complete, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("read log line %d: %w", len(lines)+1, err)
			}
		}
		if len(line) > maxImportLine {
			line = line[:maxImportLine]
		}
		if bytes.IndexByte(line, 0) >= 0 {
			return nil, fmt.Errorf("%w: line %d contains NUL bytes (a binary file?); pass the server's text log", ErrNotLog, len(lines)+1)
		}
		if complete || len(line) > 0 {
			lines = append(lines, cleanLine(line))
		}
		if !complete {
			break
		}
	}
	nonEmpty := 0
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			nonEmpty++
		}
	}
	if nonEmpty == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrNotLog)
	}
	return lines, nil
}

// cleanLine drops "\r", ANSI escape sequences (coloured llama.cpp and
// uvicorn output) and invalid UTF-8.
func cleanLine(b []byte) string {
	b = bytes.TrimRight(b, "\r")
	if bytes.IndexByte(b, 0x1b) < 0 {
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

// ImportFile imports the log at path and writes the session to out (a .gz
// name is written compressed). Source defaults to path and Ref to the
// file's modification time.
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
	s, err := Import(f, opts)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	rec, err := Create(out, s.Header)
	if err != nil {
		return nil, err
	}
	for _, e := range s.Events {
		rec.Emit(e)
	}
	if err := rec.Close(); err != nil {
		return nil, err
	}
	s.Path = out
	return s, nil
}

// ImportSummary is a one-line account of an imported session's stages in
// the order they started, e.g. "vllm: runtime_init 45.0s · model_load
// 3m46.3s · … · ready at 5m37s".
func ImportSummary(s *Session) string {
	runs := Analyze(s.Events)
	kind := s.Header.Target.ServerKind
	if len(runs) == 0 || len(runs[0].Spans) == 0 {
		return kind + ": no stage lines recognised (the log is kept as plain lines)"
	}
	r := runs[0]
	spans := append([]trace.Span(nil), r.Spans...)
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].Start < spans[j].Start })
	parts := make([]string, 0, len(spans))
	for _, sp := range spans {
		p := fmt.Sprintf("%s %s", sp.Name, roundDur(sp.Duration()))
		if sp.Workers > 1 {
			p += fmt.Sprintf(" ×%d", sp.Workers)
		}
		parts = append(parts, p)
	}
	out := kind + ": " + strings.Join(parts, " · ")
	if r.Healthy > 0 {
		out += " · ready at " + roundDur(r.Healthy-r.Start)
	}
	return out
}

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
