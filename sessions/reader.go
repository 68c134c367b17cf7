package sessions

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

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
	// Unfinished is true when the file lacks the clean end its recorder
	// writes on close (format 1.1 and later): the recorder was killed or
	// failed before it closed the file.
	Unfinished bool
	// Skipped counts events of kinds this build does not know (a newer
	// minor version); they are left out, not fatal.
	Skipped int
	// Digest is set when the session was read by OpenDigest: what was
	// left out.
	Digest *Digest
}

// ErrNotSession is wrapped by errors for input that is not a session file.
var ErrNotSession = errors.New("not a treni-top session file")

// Open reads a .jsonl or .jsonl.gz session file (gzip is detected from the
// content, not the name).
func Open(path string) (*Session, error) {
	st, err := OpenStream(path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	s, err := readAll(st)
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
	st, err := NewStream(r)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return readAll(st)
}

func readAll(st *Stream) (*Session, error) {
	s := &Session{Header: st.Header}
	var e trace.Event
	for st.Next(&e) {
		s.Events = append(s.Events, e)
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	s.Truncated, s.Unfinished, s.Skipped = st.Truncated(), st.Unfinished() && !st.Truncated(), st.Skipped()
	return s, nil
}

// readLine returns one line without its newline and whether the newline was
// there.
func readLine(br *bufio.Reader) ([]byte, bool, error) {
	chunk, err := br.ReadSlice('\n')
	if err == nil {
		return chunk[:len(chunk)-1], true, nil // the common case: no copy
	}
	buf := append([]byte(nil), chunk...)
	for errors.Is(err, bufio.ErrBufferFull) {
		if len(buf) > maxLine {
			return nil, false, fmt.Errorf("a line is longer than %d MiB; the file is corrupt", maxLine>>20)
		}
		chunk, err = br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if err == nil {
			return buf[:len(buf)-1], true, nil
		}
	}
	return buf, false, err
}

func isGzipTruncation(err error) bool {
	return errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader)
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

// lastEventMarker is the marker a digest puts at the offset of a run's
// last event when that event itself (a log line, a sample) was left out,
// so that the run's cold window falls back to the same end.
const lastEventMarker = "digest_last_event"

// maxDigestRuns bounds the runs a digest keeps in detail: a log that
// restarted its server thousands of times is summarised by the first
// ones and the last, with every run's cold total kept.
const maxDigestRuns = 100

// Digest says what OpenDigest left out of a session.
type Digest struct {
	// Runs is how many runs the file holds; Omitted counts the ones whose
	// events were left out (beyond maxDigestRuns: all but the first ones
	// and the last), and ColdTotals is every run's cold window, in run
	// order, so that the omitted ones still count.
	Runs       int             `json:"runs"`
	Omitted    int             `json:"omitted,omitempty"`
	ColdTotals []time.Duration `json:"-"`
	// LogLines and Samples count the events left out; Dropped the events
	// beyond maxDigestRunEvents in one run.
	LogLines int `json:"log_lines"`
	Samples  int `json:"samples"`
	Dropped  int `json:"dropped,omitempty"`
}

// maxDigestRunEvents bounds the events a digest keeps of one run (a
// session of a few runs has thousands; a log whose every line made a
// marker or a span without the server ever restarting has millions).
const maxDigestRunEvents = 200_000
