package sessions

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// headerRoom is the room an import keeps for its header at the start of a
// plain (.jsonl) session: the header is known only once the whole log was
// read (its clock, its origin, the shift of a log that begins
// mid-startup), and writing it into that room, padded with spaces, spares
// copying the events after it. JSON allows the spaces; the header is a
// few kilobytes at most (the notes are bounded, the source path is a
// path).
const headerRoom = 32 << 10

// importToFile streams the import into a temporary file beside out
// (writing on a goroutine of its own while the log is parsed), then
// writes the header and renames the file to out: nothing is left at out
// unless the import succeeds. It returns the session's digest, built as
// the events go by: what OpenDigest reads back from the file.
func importToFile(r io.Reader, out string, opts ImportOptions) (_ *Session, err error) {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, fmt.Errorf("create session directory for %s: %w", out, err)
	}
	target, direct, err := OutputTarget(out)
	if err != nil {
		return nil, err
	}
	dir := TempDirFor(target, direct)
	tmp, err := os.CreateTemp(dir, ".treni-import-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create a temporary file beside %s: %w", out, err)
	}
	defer func() {
		tmp.Close()
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	gz := strings.HasSuffix(out, ".gz")
	// A compressed session cannot be written into: its events go to a
	// plain body first, compressed after the header at the end.
	body := tmp
	if gz {
		if body, err = os.CreateTemp(dir, ".treni-import-body-*.tmp"); err != nil {
			return nil, fmt.Errorf("create a temporary file beside %s: %w", out, err)
		}
		defer func() {
			body.Close()
			os.Remove(body.Name())
		}()
	} else if _, err := body.Write(headerPlaceholder()); err != nil {
		return nil, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	// The digest is built on the writer's goroutine, from the events as
	// they are written: the parsing goroutine has the most to do.
	dg := newDigestBuilder()
	w := startEventWriter(body, dg.add, opts.serial)
	im, err := runImport(r, opts, w.write)
	if werr := w.close(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, err
	}
	h := im.header()
	switch {
	case gz || im.shiftedOut > 0:
		// Copy (compressing, or moving the offsets written before the
		// shift was known) into a second file after the header.
		final, err := os.CreateTemp(dir, ".treni-import-*.tmp")
		if err != nil {
			return nil, fmt.Errorf("create a temporary file beside %s: %w", out, err)
		}
		defer func() {
			final.Close()
			if err != nil {
				os.Remove(final.Name())
			}
		}()
		from := int64(0)
		if !gz {
			from = headerRoom
		}
		if _, err := body.Seek(from, io.SeekStart); err != nil {
			return nil, fmt.Errorf("read back %s: %w", body.Name(), err)
		}
		rec, err := newRecorder(out, final, gz, h, 1<<20)
		if err != nil {
			return nil, err
		}
		if err := copyBody(rec, body, im.late, im.shiftedOut); err != nil {
			return nil, err
		}
		if im.shiftedOut == 0 {
			rec.le.n, rec.le.lastAt = im.q.count, im.q.last // copied, not encoded
		}
		if err := rec.Close(); err != nil {
			return nil, err
		}
		os.Remove(tmp.Name())
		tmp = final
	default:
		if err := writeHeaderInRoom(tmp, h); err != nil {
			return nil, fmt.Errorf("write session %s: %w", out, err)
		}
		if _, err := tmp.Seek(0, io.SeekEnd); err != nil {
			return nil, fmt.Errorf("write session %s: %w", out, err)
		}
		le := lineEncoder{n: im.q.count, lastAt: im.q.last}
		le.end(tmp)
		if le.writeErr != nil {
			return nil, fmt.Errorf("write session %s: %w", out, le.writeErr)
		}
		if err := tmp.Close(); err != nil {
			return nil, fmt.Errorf("write session %s: %w", out, err)
		}
	}
	if err := PlaceOutput(tmp.Name(), target, direct); err != nil {
		return nil, fmt.Errorf("import into %s: %w", out, err)
	}
	return dg.session(h, im.late, im.shiftedOut), nil
}

// headerPlaceholder is the room kept for the header: spaces and a newline.
func headerPlaceholder() []byte {
	b := make([]byte, headerRoom)
	for i := range b {
		b[i] = ' '
	}
	b[len(b)-1] = '\n'
	return b
}

// writeHeaderInRoom writes h at the start of f, padded with spaces to
// headerRoom.
func writeHeaderInRoom(f *os.File, h Header) error {
	line, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode the header: %w", err)
	}
	if len(line) >= headerRoom {
		return fmt.Errorf("the header (%d bytes) does not fit the %d bytes kept for it", len(line), headerRoom)
	}
	_, err = f.WriteAt(line, 0)
	return err
}

// copyBody copies the body's lines into the session after its header,
// moving the offsets of the first n events later by shift (they were
// written before a stage that began before the first line was found),
// except the first (the first start, at the session's zero). The offsets
// are rewritten in the line's text; a line of another shape is decoded
// and encoded again.
func copyBody(rec *Recorder, body io.Reader, shift time.Duration, n int) error {
	if n == 0 {
		if _, err := io.Copy(rec.w, body); err != nil {
			return fmt.Errorf("write session %s: %w", rec.path, err)
		}
		return nil
	}
	br := bufio.NewReaderSize(body, 1<<20)
	var buf []byte
	for i := 0; ; i++ {
		line, complete, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read back the events: %w", err)
		}
		if len(line) == 0 && !complete {
			return nil
		}
		if i == 0 || i >= n {
			buf = append(append(buf[:0], line...), '\n')
		} else if buf = shiftLine(buf[:0], line, shift); buf == nil {
			var e trace.Event
			if err := json.Unmarshal(line, &e); err != nil {
				return fmt.Errorf("read back event %d: %w", i, err)
			}
			shiftEvent(&e, shift)
			rec.le.write(rec.w, &e)
			if rec.le.writeErr != nil {
				return fmt.Errorf("write session %s: %w", rec.path, rec.le.writeErr)
			}
			continue
		}
		if _, err := rec.w.Write(buf); err != nil {
			return fmt.Errorf("write session %s: %w", rec.path, err)
		}
		if !complete {
			return nil
		}
	}
}

// shiftLine appends line with its offset (and a stage's start and end)
// moved by d, rewriting the numbers where the encoder put them; nil when
// the line is not of that shape.
func shiftLine(dst, line []byte, d time.Duration) []byte {
	const tKey = `{"t":`
	if !bytes.HasPrefix(line, []byte(tKey)) {
		return nil
	}
	t, rest, ok := leadingInt(line[len(tKey):])
	if !ok {
		return nil
	}
	dst = append(dst, tKey...)
	dst = strconv.AppendInt(dst, t+int64(d), 10)
	if _, kind, _, ok := lineHead(line); ok && kind == trace.KindStage {
		// ,"stage":{"name":"…","start":N,"end":N
		i := bytes.Index(rest, []byte(`,"start":`))
		if i < 0 {
			return nil
		}
		dst = append(dst, rest[:i+len(`,"start":`)]...)
		start, after, ok := leadingInt(rest[i+len(`,"start":`):])
		if !ok || !bytes.HasPrefix(after, []byte(`,"end":`)) {
			return nil
		}
		end, tail, ok := leadingInt(after[len(`,"end":`):])
		if !ok {
			return nil
		}
		dst = strconv.AppendInt(dst, start+int64(d), 10)
		dst = append(dst, `,"end":`...)
		dst = strconv.AppendInt(dst, end+int64(d), 10)
		rest = tail
	}
	dst = append(dst, rest...)
	return append(dst, '\n')
}

// eventWriter encodes and writes events on a goroutine of its own, in
// batches, so that the import's parsing and its writing use two cores
// (inline: on the caller's, for the tests that compare). Its owner
// (importToFile) stops it with close, which waits for it.
type eventWriter struct {
	batch []trace.Event
	work  chan []trace.Event
	free  chan []trace.Event
	done  chan error
	out   *eventSink     // inline: written here as they come
	one   [1]trace.Event // inline: the event being written
}

// eventSink encodes events into a session file's body.
type eventSink struct {
	f    *os.File
	bw   *bufio.Writer
	le   lineEncoder
	also func(*trace.Event)
	err  error
}

// put writes a batch of events (nothing after an error).
func (s *eventSink) put(b []trace.Event) {
	if s.err != nil {
		return
	}
	for i := range b {
		s.le.write(s.bw, &b[i])
		s.also(&b[i])
	}
	if s.le.writeErr != nil {
		s.err = fmt.Errorf("write %s: %w", s.f.Name(), s.le.writeErr)
	} else if s.le.dropped > 0 {
		// The parsers refuse values JSON cannot hold; an event that
		// still fails to encode is a bug, and no session is left.
		s.err = fmt.Errorf("%w (a bug in treni-top; please report it with the log)", s.le.droppedErr(s.f.Name()))
	}
}

// finish flushes what is buffered and returns the first error.
func (s *eventSink) finish() error {
	if s.err == nil {
		if err := s.bw.Flush(); err != nil {
			s.err = fmt.Errorf("write %s: %w", s.f.Name(), err)
		}
	}
	return s.err
}

// writerBatch is how many events go to the writer at once.
const writerBatch = 512

// startEventWriter starts the writer of events to f; each is also handed
// to also, on the writer's goroutine, once written. inline writes on the
// caller's goroutine instead.
func startEventWriter(f *os.File, also func(*trace.Event), inline bool) *eventWriter {
	sink := &eventSink{f: f, bw: bufio.NewWriterSize(f, 1<<20), also: also}
	if inline {
		return &eventWriter{out: sink}
	}
	w := &eventWriter{work: make(chan []trace.Event, 4), free: make(chan []trace.Event, 5), done: make(chan error, 1)}
	for i := 0; i < 5; i++ {
		w.free <- make([]trace.Event, 0, writerBatch)
	}
	w.batch = <-w.free
	go func() {
		for b := range w.work {
			sink.put(b)
			clear(b)
			w.free <- b[:0]
		}
		w.done <- sink.finish()
	}()
	return w
}

// write queues one event; a failed write is reported by close.
func (w *eventWriter) write(e *trace.Event) error {
	if w.out != nil {
		w.one[0] = *e
		w.out.put(w.one[:])
		return nil
	}
	w.batch = append(w.batch, *e)
	if len(w.batch) == writerBatch {
		w.work <- w.batch
		w.batch = <-w.free
	}
	return nil
}

// close writes what is queued, stops the writer and returns its error.
func (w *eventWriter) close() error {
	if w.out != nil {
		return w.out.finish()
	}
	if len(w.batch) > 0 {
		w.work <- w.batch
	}
	close(w.work)
	return <-w.done
}
