package sessions

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Stream reads a session file one event at a time, so that what is
// computed from a file of any size (a report, a replay, a diff) holds only
// what it keeps, never the whole file.
//
// Events of the kinds a Stream was not asked to decode come back light:
// their offset, kind and run are read from the start of the line (the
// recorder always writes them first) and their payload is left nil, which
// skips the JSON decoding that dominates reading a file of log lines and
// samples. The clean-end marker the recorder writes on Close
// (trace.MarkerSessionEnd) is consumed, not returned: Ended says whether
// it was there.
type Stream struct {
	// Header is the file's first line.
	Header Header

	closers []io.Closer
	br      *bufio.Reader
	decode  map[trace.Kind]bool // nil: every kind
	// filter, when set, decides per line which events to decode (after
	// the kind filter): it sees the head and the raw line.
	filter func(at time.Duration, kind trace.Kind, run int, line []byte) bool
	lineNo int
	err    error
	done   bool

	truncated bool
	ended     bool
	skipped   int
	maxAt     time.Duration
	// interned are the names decodeFast read (sources, metrics, streams).
	interned map[string]string
}

// OpenStream opens a .jsonl or .jsonl.gz session file and reads its
// header. With kinds given, only events of those kinds are decoded (the
// others come back light); markers are always decoded.
func OpenStream(path string, kinds ...trace.Kind) (*Stream, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	s, err := NewStream(f, kinds...)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read session %s: %w", path, err)
	}
	s.closers = append(s.closers, f)
	return s, nil
}

// NewStream reads a session from r (gzip detected from the content) up to
// and including its header line.
func NewStream(r io.Reader, kinds ...trace.Kind) (*Stream, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	s := &Stream{br: br}
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: bad gzip stream: %v", ErrNotSession, err)
		}
		s.closers = append(s.closers, gz)
		s.br = bufio.NewReaderSize(gz, 256<<10)
	}
	if len(kinds) > 0 {
		s.decode = map[trace.Kind]bool{trace.KindMarker: true}
		for _, k := range kinds {
			s.decode[k] = true
		}
	}
	line, complete, err := readLine(s.br)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("line 1: %w", err)
	}
	if len(bytes.TrimSpace(line)) == 0 && !complete {
		return nil, fmt.Errorf("%w: the file is empty", ErrNotSession)
	}
	if !complete {
		return nil, fmt.Errorf("%w: the header line is incomplete", ErrNotSession)
	}
	s.lineNo = 1
	if err := parseHeader(line, &s.Header); err != nil {
		return nil, err
	}
	return s, nil
}

// Next reads the next event into e. It returns false at the end of the
// file or on an error (Err says which). A last line cut short (a recorder
// that was killed) ends the stream and sets Truncated; a malformed
// complete line is an error naming its line number; events of kinds this
// build does not know are skipped and counted.
func (s *Stream) Next(e *trace.Event) bool {
	for !s.done {
		line, complete, err := readLine(s.br)
		if len(line) > 0 || complete {
			s.lineNo++
		}
		if err != nil && !errors.Is(err, io.EOF) {
			if errors.Is(err, io.ErrUnexpectedEOF) || isGzipTruncation(err) {
				// A gzip stream cut by a crash: keep what was complete.
				s.truncated, s.done = true, true
				return false
			}
			s.err, s.done = fmt.Errorf("line %d: %w", s.lineNo+1, err), true
			return false
		}
		if !complete {
			s.done = true
			if len(bytes.TrimSpace(line)) == 0 {
				return false
			}
			// A last line that lacks only its newline is kept; one cut
			// inside the JSON (a killed recorder) is dropped.
			if s.parse(line, e) == nil && !s.endMarker(e) {
				return true
			}
			if !s.ended {
				s.truncated = true
			}
			return false
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := s.parse(line, e); err != nil {
			if errors.Is(err, errUnknownKind) {
				s.skipped++
				continue
			}
			s.err, s.done = fmt.Errorf("line %d: %w", s.lineNo, err), true
			return false
		}
		if s.endMarker(e) {
			continue
		}
		return true
	}
	return false
}

// endMarker consumes the recorder's clean-end marker.
func (s *Stream) endMarker(e *trace.Event) bool {
	if e.Kind == trace.KindMarker && e.Marker != nil && e.Marker.Name == trace.MarkerSessionEnd {
		s.ended = true
		return true
	}
	return false
}

var errUnknownKind = errors.New("unknown event kind")

// parse decodes one line. A light event (its kind not decoded) is read
// from the line's head only.
func (s *Stream) parse(line []byte, e *trace.Event) error {
	at, kind, run, ok := lineHead(line)
	if ok && kind != trace.KindMarker && (s.decode != nil && !s.decode[kind] || s.filter != nil && !s.filter(at, kind, run, line)) {
		if !knownKind(kind) {
			return errUnknownKind
		}
		if b := bytes.TrimRight(line, " \t\r"); len(b) == 0 || b[len(b)-1] != '}' {
			return errors.New("not a valid event: the line does not end its JSON object")
		}
		*e = trace.Event{At: at, Kind: kind, Run: run}
		s.note(at)
		return nil
	}
	if ok && (kind == trace.KindSample || kind == trace.KindLog) {
		if ev, fast := s.decodeFast(line, at, kind, run); fast {
			*e = ev
			s.note(at)
			return nil
		}
	}
	*e = trace.Event{}
	if err := json.Unmarshal(line, e); err != nil {
		return fmt.Errorf("not a valid event: %w", err)
	}
	if err := e.Validate(); err != nil {
		if !knownKind(e.Kind) {
			return errUnknownKind
		}
		return err
	}
	s.note(e.At)
	return nil
}

func (s *Stream) note(at time.Duration) {
	if at > s.maxAt {
		s.maxAt = at
	}
}

// lineHead reads `{"t":N,"kind":"K"` and an optional `,"run":R` from the
// start of an event line, as the recorder writes them.
func lineHead(b []byte) (at time.Duration, kind trace.Kind, run int, ok bool) {
	const tPrefix, kPrefix, rPrefix = `{"t":`, `,"kind":"`, `,"run":`
	if !bytes.HasPrefix(b, []byte(tPrefix)) {
		return 0, "", 0, false
	}
	b = b[len(tPrefix):]
	n, rest, ok := leadingInt(b)
	if !ok || n < 0 {
		return 0, "", 0, false
	}
	if !bytes.HasPrefix(rest, []byte(kPrefix)) {
		return 0, "", 0, false
	}
	rest = rest[len(kPrefix):]
	q := bytes.IndexByte(rest, '"')
	if q <= 0 || q > 16 {
		return 0, "", 0, false
	}
	kind = trace.Kind(rest[:q])
	rest = rest[q+1:]
	if bytes.HasPrefix(rest, []byte(rPrefix)) {
		r, _, ok := leadingInt(rest[len(rPrefix):])
		if !ok || r < 0 || r > 1<<30 {
			return 0, "", 0, false
		}
		run = int(r)
	}
	return time.Duration(n), kind, run, true
}

// leadingInt parses the decimal integer (at most 18 digits) at the start
// of b.
func leadingInt(b []byte) (int64, []byte, bool) {
	neg := len(b) > 0 && b[0] == '-'
	i := 0
	if neg {
		i++
	}
	var n int64
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		if j-i >= 18 {
			return 0, b, false
		}
		n = n*10 + int64(b[j]-'0')
		j++
	}
	if j == i {
		return 0, b, false
	}
	if neg {
		n = -n
	}
	return n, b[j:], true
}

// ReadHeader reads only the header of the session file at path.
func ReadHeader(path string) (Header, error) {
	st, err := OpenStream(path)
	if err != nil {
		return Header{}, err
	}
	defer st.Close()
	return st.Header, nil
}

// Err is the error that ended the stream, if any.
func (s *Stream) Err() error { return s.err }

// Truncated reports that the file ended inside a line (a recorder that
// was killed); everything before that line was read.
func (s *Stream) Truncated() bool { return s.truncated }

// Ended reports that the recorder's clean-end marker was read.
func (s *Stream) Ended() bool { return s.ended }

// Skipped counts events of kinds this build does not know.
func (s *Stream) Skipped() int { return s.skipped }

// LastAt is the latest offset read so far.
func (s *Stream) LastAt() time.Duration { return s.maxAt }

// Close releases the file.
func (s *Stream) Close() error {
	var first error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i].Close(); err != nil && first == nil {
			first = err
		}
	}
	s.closers = nil
	return first
}

// Unfinished reports whether the file lacks its clean end although the
// recorder that wrote it writes one (format 1.1 and later): the recorder
// did not close it (killed, out of disk, a crash). Files of format 1.0
// never carry the marker and are not called unfinished.
func (s *Stream) Unfinished() bool {
	return !s.ended && writesEndMarker(s.Header.Version)
}

func knownKind(k trace.Kind) bool {
	switch k {
	case trace.KindStage, trace.KindSample, trace.KindRequest, trace.KindLog, trace.KindProcess, trace.KindMarker:
		return true
	}
	return false
}
