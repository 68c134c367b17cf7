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

	"github.com/treni-top/treni-top/trace"
)

// Session is a session file read into memory.
type Session struct {
	// Path is where it was read from ("" for streams).
	Path   string
	Header Header
	// Events in file order (offsets are monotonic as recorded).
	Events []trace.Event
	// Truncated is true when the file ended inside a line (a recorder that
	// was killed); everything before that line was read.
	Truncated bool
	// Skipped counts events of kinds this build does not know (a newer
	// minor version); they are left out, not fatal.
	Skipped int
}

// ErrNotSession is wrapped by errors for input that is not a session file.
var ErrNotSession = errors.New("not a treni-top session file")

// Open reads a .jsonl or .jsonl.gz session file (gzip is detected from the
// content, not the name).
func Open(path string) (*Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	defer f.Close()
	s, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("read session %s: %w", path, err)
	}
	s.Path = path
	return s, nil
}

// maxLine bounds one line so that garbage input cannot exhaust memory.
const maxLine = 64 << 20

// Read parses a session from r. A last line cut short is tolerated (the
// session is marked Truncated); a malformed complete line is an error that
// names its line number.
func Read(r io.Reader) (*Session, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: bad gzip stream: %v", ErrNotSession, err)
		}
		defer gz.Close()
		br = bufio.NewReaderSize(gz, 64<<10)
	}
	s := &Session{}
	lineNo := 0
	for {
		line, complete, err := readLine(br)
		if len(line) > 0 || complete {
			lineNo++
		}
		if err != nil && !errors.Is(err, io.EOF) {
			if errors.Is(err, io.ErrUnexpectedEOF) || isGzipTruncation(err) {
				// A gzip stream cut by a crash: keep what was complete.
				s.Truncated = true
				break
			}
			return nil, fmt.Errorf("line %d: %w", lineNo+1, err)
		}
		if !complete {
			if len(bytes.TrimSpace(line)) > 0 {
				if lineNo == 1 {
					return nil, fmt.Errorf("%w: the header line is incomplete", ErrNotSession)
				}
				// A last line that lacks only its newline is kept; one cut
				// inside the JSON (a killed recorder) is dropped.
				var e trace.Event
				if json.Unmarshal(line, &e) == nil && e.Validate() == nil {
					s.Events = append(s.Events, e)
				} else {
					s.Truncated = true
				}
			}
			break
		}
		if lineNo == 1 {
			if err := parseHeader(line, &s.Header); err != nil {
				return nil, err
			}
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e trace.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("line %d is not a valid event: %w", lineNo, err)
		}
		if err := e.Validate(); err != nil {
			if isUnknownKind(e) {
				s.Skipped++
				continue
			}
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		s.Events = append(s.Events, e)
	}
	if lineNo == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrNotSession)
	}
	return s, nil
}

// readLine returns one line without its newline and whether the newline was
// there.
func readLine(br *bufio.Reader) ([]byte, bool, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxLine {
			return nil, false, fmt.Errorf("a line is longer than %d MiB; the file is corrupt", maxLine>>20)
		}
		if err == nil {
			return buf[:len(buf)-1], true, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, false, err
	}
}

func isGzipTruncation(err error) bool {
	return errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader)
}

func isUnknownKind(e trace.Event) bool {
	switch e.Kind {
	case trace.KindStage, trace.KindSample, trace.KindRequest, trace.KindLog, trace.KindProcess, trace.KindMarker:
		return false
	}
	return true
}

func parseHeader(line []byte, h *Header) error {
	if err := json.Unmarshal(line, h); err != nil {
		return fmt.Errorf("%w: the first line is not a JSON header (%v)", ErrNotSession, err)
	}
	if h.Format != FormatName {
		return fmt.Errorf("%w: the header's format is %q, want %q", ErrNotSession, h.Format, FormatName)
	}
	return checkVersion(h.Version)
}
