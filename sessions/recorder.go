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
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Recorder writes a session file as events happen. Every event is written
// and flushed to the operating system as one complete line before Emit
// returns, so a recorder killed with SIGKILL leaves a file that reads up to
// its last complete line. It is safe for concurrent use and implements
// trace.Sink.
//
// An event that cannot be encoded (a value JSON cannot hold, such as +Inf)
// is replaced by a trace.MarkerEventDropped marker that says why, and every
// later event is still written; Sync and Close report the dropped events.
// A write that fails (a full disk) stops the recorder, and Sync and Close
// return that error. Close writes the clean-end marker
// (trace.MarkerSessionEnd) that tells readers the file is complete.
type Recorder struct {
	mu   sync.Mutex
	path string
	f    *os.File
	gz   *gzip.Writer // non-nil for .gz paths
	w    *bufio.Writer
	le   lineEncoder
	err  error
}

// Create opens path (creating its directory) and writes the header line.
// A path ending in .gz is written gzip-compressed, flushed per line.
func Create(path string, h Header) (*Recorder, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create session directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create session file: %w", err)
	}
	r, err := newRecorder(path, f, strings.HasSuffix(path, ".gz"), h, 64<<10)
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// newRecorder writes the header of a session to f.
func newRecorder(path string, f *os.File, gz bool, h Header, buf int) (*Recorder, error) {
	if h.Format == "" {
		h.Format = FormatName
	}
	if h.Version == "" {
		h.Version = FormatVersion
	}
	r := &Recorder{path: path, f: f}
	var out io.Writer = f
	if gz {
		r.gz = gzip.NewWriter(f)
		out = r.gz
	}
	r.w = bufio.NewWriterSize(out, buf)
	line, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("write session %s: encode the header: %w", path, err)
	}
	if _, err := r.w.Write(append(line, '\n')); err != nil {
		return nil, fmt.Errorf("write session %s: %w", path, err)
	}
	if err := r.flush(); err != nil {
		return nil, err
	}
	return r, nil
}

// Path is the file being written.
func (r *Recorder) Path() string { return r.path }

// Emit appends one event and pushes it to the kernel.
func (r *Recorder) Emit(e trace.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || r.f == nil {
		return
	}
	r.encode(e)
	if r.err == nil {
		if err := r.flush(); err != nil {
			r.err = err
		}
	}
}

// flush pushes the buffered lines to the kernel.
func (r *Recorder) flush() error {
	if err := r.w.Flush(); err != nil {
		return fmt.Errorf("write session %s: %w", r.path, err)
	}
	if r.gz != nil {
		if err := r.gz.Flush(); err != nil {
			return fmt.Errorf("write session %s: %w", r.path, err)
		}
	}
	return nil
}

// Sync asks the OS to put the file on stable storage (the `s` key).
func (r *Recorder) Sync() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return r.errLocked()
	}
	if err := r.f.Sync(); err != nil {
		return fmt.Errorf("sync session %s: %w", r.path, err)
	}
	return r.errLocked()
}

// errLocked is the write error, else the dropped events; r.mu is held.
func (r *Recorder) errLocked() error {
	if r.err != nil {
		return r.err
	}
	return r.le.droppedErr(r.path)
}

// Close writes the clean-end marker and finishes the file. It is
// idempotent.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return r.errLocked()
	}
	if r.err == nil {
		r.le.end(r.w)
		if r.le.writeErr != nil {
			r.err = fmt.Errorf("write session %s: %w", r.path, r.le.writeErr)
		}
		if err := r.flush(); err != nil && r.err == nil {
			r.err = err
		}
	}
	if r.gz != nil {
		if err := r.gz.Close(); err != nil && r.err == nil {
			r.err = fmt.Errorf("close session %s: %w", r.path, err)
		}
	}
	if err := r.f.Close(); err != nil && r.err == nil {
		r.err = fmt.Errorf("close session %s: %w", r.path, err)
	}
	r.f = nil
	return r.errLocked()
}

// Record copies a subscription into the recorder until the subscription's
// channel closes (the bus closed) or done is closed. It is the body of the
// goroutine that owns a live recording.
//
// Events already queued behind the one received are encoded with it and
// pushed to the kernel in one write: a burst (a sampler tick's samples, a
// flood of tokens) costs one system call, and nothing is held back while
// Record waits, so the SIGKILL guarantee of Emit is unchanged.
func (r *Recorder) Record(sub *trace.Subscription) {
	ch := sub.Events()
	for e := range ch {
		r.mu.Lock()
		r.encode(e)
	drain:
		for n := 1; n < recordBatch; n++ {
			select {
			case e2, ok := <-ch:
				if !ok {
					break drain // the range sees the close next
				}
				r.encode(e2)
			default:
				break drain
			}
		}
		if r.f != nil && r.err == nil {
			if err := r.flush(); err != nil {
				r.err = err
			}
		}
		r.mu.Unlock()
	}
}

// recordBatch bounds the events Record encodes before a write.
const recordBatch = 256

// encode appends one event to the buffer without flushing; r.mu is held.
func (r *Recorder) encode(e trace.Event) {
	if r.err != nil || r.f == nil {
		return
	}
	r.le.write(r.w, &e)
	if r.le.writeErr != nil {
		r.err = fmt.Errorf("write session %s: %w", r.path, r.le.writeErr)
	}
}

// lineEncoder turns events into session lines, one at a time: an event
// that does not encode is replaced by a marker saying so, so that one bad
// value never costs the events after it.
type lineEncoder struct {
	buf      bytes.Buffer
	enc      *json.Encoder
	n        int           // events written
	dropped  int           // events replaced by MarkerEventDropped
	firstErr error         // the first encoding error
	lastAt   time.Duration // the latest offset written
	writeErr error         // the writer failed: nothing more is written
	attrs    attrOrder     // the last attributes' keys (appendEvent)
}

// write encodes e and writes its line to w.
func (le *lineEncoder) write(w io.Writer, e *trace.Event) {
	if le.writeErr != nil {
		return
	}
	if le.enc == nil {
		le.enc = json.NewEncoder(&le.buf)
		le.enc.SetEscapeHTML(false)
	}
	le.buf.Reset()
	if line, ok := appendEvent(le.buf.AvailableBuffer(), e, &le.attrs); ok {
		le.buf.Write(line)
	} else if err := le.enc.Encode(e); err != nil {
		le.dropped++
		if le.firstErr == nil {
			le.firstErr = fmt.Errorf("%s event at %v: %w", e.Kind, e.At, err)
		}
		le.buf.Reset()
		m := trace.Event{At: max(e.At, 0), Run: e.Run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerEventDropped,
			Attrs: trace.Attrs{"kind": string(e.Kind), "error": err.Error()}}}
		if err := le.enc.Encode(m); err != nil {
			return // a marker of strings always encodes
		}
	}
	if _, err := w.Write(le.buf.Bytes()); err != nil {
		le.writeErr = err
		return
	}
	le.n++
	if e.At > le.lastAt {
		le.lastAt = e.At
	}
}

// end writes the clean-end marker.
func (le *lineEncoder) end(w io.Writer) {
	le.write(w, &trace.Event{At: le.lastAt, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerSessionEnd,
		Attrs: trace.Attrs{"events": float64(le.n), "dropped": float64(le.dropped)}}})
}

// ErrEventsDropped is wrapped when events could not be written.
var ErrEventsDropped = errors.New("events could not be written")

func (le *lineEncoder) droppedErr(path string) error {
	if le.dropped == 0 {
		return nil
	}
	return fmt.Errorf("session %s: %d %w (first: %v); each is replaced by an %s marker and the events after it are kept",
		path, le.dropped, ErrEventsDropped, le.firstErr, trace.MarkerEventDropped)
}

// DefaultDir is where sessions are recorded when no --record is given:
// $XDG_DATA_HOME/treni-top/sessions, or ~/.local/share/treni-top/sessions.
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "treni-top", "sessions"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the user's data directory (set XDG_DATA_HOME or pass --record FILE): %w", err)
	}
	return filepath.Join(home, ".local", "share", "treni-top", "sessions"), nil
}

// DefaultPath is a new, unique session path under DefaultDir, named after
// the time and a short label for the target.
func DefaultPath(now time.Time, label string) (string, error) {
	dir, err := DefaultDir()
	if err != nil {
		return "", err
	}
	label = sanitize(label)
	if label == "" {
		label = "session"
	}
	base := now.Format("20060102-150405") + "-" + label
	p := filepath.Join(dir, base+".jsonl")
	for i := 2; ; i++ {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			return p, nil
		}
		p = filepath.Join(dir, fmt.Sprintf("%s-%d.jsonl", base, i))
	}
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.Trim(b.String(), "-.")
}
