package sessions

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
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
type Recorder struct {
	mu   sync.Mutex
	path string
	f    *os.File
	gz   *gzip.Writer // non-nil for .gz paths
	w    *bufio.Writer
	enc  *json.Encoder
	err  error
	n    int
}

// Create opens path (creating its directory) and writes the header line.
// A path ending in .gz is written gzip-compressed, flushed per line.
func Create(path string, h Header) (*Recorder, error) {
	if h.Format == "" {
		h.Format = FormatName
	}
	if h.Version == "" {
		h.Version = FormatVersion
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create session directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create session file: %w", err)
	}
	r := &Recorder{path: path, f: f}
	var out io.Writer = f
	if strings.HasSuffix(path, ".gz") {
		r.gz = gzip.NewWriter(f)
		out = r.gz
	}
	r.w = bufio.NewWriterSize(out, 64<<10)
	r.enc = json.NewEncoder(r.w)
	r.enc.SetEscapeHTML(false)
	if err := r.writeLine(h); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// Path is the file being written.
func (r *Recorder) Path() string { return r.path }

// Emit appends one event. Write errors are kept and returned by Err and
// Close; later events are dropped only after a write has failed.
func (r *Recorder) Emit(e trace.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || r.f == nil {
		return
	}
	if err := r.writeLine(e); err != nil {
		r.err = err
		return
	}
	r.n++
}

// writeLine encodes v as one line and pushes it to the kernel.
func (r *Recorder) writeLine(v any) error {
	if err := r.enc.Encode(v); err != nil {
		return fmt.Errorf("write session %s: %w", r.path, err)
	}
	return r.flush()
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
		return r.err
	}
	if err := r.f.Sync(); err != nil {
		return fmt.Errorf("sync session %s: %w", r.path, err)
	}
	return r.err
}

// Close finishes the file. It is idempotent.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return r.err
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
	return r.err
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
		// An event that failed to encode wrote nothing: the lines before
		// it still go out.
		if r.f != nil {
			if err := r.flush(); err != nil && r.err == nil {
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
	if err := r.enc.Encode(e); err != nil {
		r.err = fmt.Errorf("write session %s: %w", r.path, err)
		return
	}
	r.n++
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
