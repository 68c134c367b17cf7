package prober

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxLine bounds one line of a stream, so a server that never sends a
// newline cannot make the prober buffer without limit.
const maxLine = 8 << 20

// errLineTooLong is returned for a line over maxLine.
var errLineTooLong = errors.New("stream line longer than 8 MiB")

// lineReader reads lines ending in \n or \r\n from a stream.
type lineReader struct {
	br  *bufio.Reader
	buf []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next line without its terminator. The slice is valid
// until the next call. At the end of the stream a last unterminated line is
// returned first, then io.EOF.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.br.ReadSlice('\n')
		l.buf = append(l.buf, frag...)
		if len(l.buf) > maxLine {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			line := l.buf[:len(l.buf)-1]
			return bytes.TrimSuffix(line, []byte{'\r'}), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(l.buf) > 0:
			return bytes.TrimSuffix(l.buf, []byte{'\r'}), nil
		default:
			return nil, err
		}
	}
}

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	Type string // the "event:" field; empty means "message"
	Data []byte // the "data:" lines joined by \n
}

// sseReader parses server-sent events (the WHATWG EventSource format that
// OpenAI-compatible servers stream): "data:" lines, with several lines of
// one event joined by \n; "event:" setting the type; lines starting with
// ':' are comments (keep-alives); a blank line dispatches the event. "id:"
// and "retry:" are accepted and ignored. A lone \r as line terminator is not
// supported (no LLM server sends one).
type sseReader struct {
	lines *lineReader
	data  []byte
	typ   string
	has   bool
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{lines: newLineReader(r)} }

// next returns the next event. At the end of the stream an event whose
// blank line never came is still returned (some servers omit the last blank
// line), then io.EOF.
func (s *sseReader) next() (sseEvent, error) {
	for {
		line, err := s.lines.next()
		if err != nil {
			if errors.Is(err, io.EOF) && s.has {
				return s.dispatch(), nil
			}
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if s.has {
				return s.dispatch(), nil
			}
			s.typ = ""
			continue
		}
		if line[0] == ':' {
			continue // comment
		}
		field, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(field) {
		case "data":
			if s.has {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			s.has = true
		case "event":
			s.typ = string(value)
		}
	}
}

func (s *sseReader) dispatch() sseEvent {
	ev := sseEvent{Type: s.typ, Data: bytes.Clone(s.data)}
	s.data, s.typ, s.has = s.data[:0], "", false
	return ev
}
