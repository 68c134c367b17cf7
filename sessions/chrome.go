package sessions

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// ChromeEvent is one entry of a Chrome trace's traceEvents array, the JSON
// format Perfetto and chrome://tracing open. Times are microseconds.
type ChromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	ID   string         `json:"id,omitempty"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// Thread ids inside each run's process: one track per stage (so that
// overlapping stages never have to nest), then fixed tracks.
const (
	tidMarkers  = 1000
	tidLog      = 1001
	tidRequests = 1002
)

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ExportChrome converts a session held in memory to a Chrome trace (see
// WriteChrome).
func ExportChrome(s *Session) ([]byte, error) {
	var b bytes.Buffer
	cw := newChromeWriter(&b)
	cw.runs(s.Header, s.Runs())
	for i := range s.Events {
		cw.event(&s.Events[i])
	}
	if err := cw.close(s.Header); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteChrome writes the session file at path to w as a Chrome trace:
// each run is a process, stages are complete slices ("X") on one thread
// per stage, samples are counters ("C"), requests are async slices
// ("b"/"e") with an async instant ("n") per token and a nested "ttft"
// slice, logs and markers are instants.
//
// It holds the runs (their stages and requests) and never the file: a
// first pass reads the runs, decoding no sample or log line; a second
// writes the samples, markers, processes and log lines as it reads them.
// The output is byte for byte what encoding the whole trace at once gave
// (TestChromeMatchesWholeFile).
func WriteChrome(w io.Writer, path string) error {
	st, err := OpenStream(path, trace.KindStage, trace.KindProcess, trace.KindRequest)
	if err != nil {
		return err
	}
	a := newRunAnalyzer()
	var e trace.Event
	for st.Next(&e) {
		a.add(&e)
	}
	st.Close()
	if err := st.Err(); err != nil {
		return fmt.Errorf("read session %s: %w", path, err)
	}
	if st, err = OpenStream(path, trace.KindSample, trace.KindProcess, trace.KindLog); err != nil {
		return err
	}
	defer st.Close()
	cw := newChromeWriter(w)
	cw.runs(st.Header, a.runs())
	// One goroutine reads and decodes, this one encodes and writes: the
	// two halves of the work take about as long, and a second core
	// halves the time.
	full, free, stop := make(chan []trace.Event, 4), make(chan []trace.Event, 4), make(chan struct{})
	go readBatches(st, full, free, stop)
	for b := range full {
		for i := range b {
			cw.event(&b[i])
		}
		if cw.err != nil {
			close(stop)
			for range full { // wait for the reader to stop
			}
			return cw.err
		}
		clear(b) // the writer is done with the payloads
		// Never wait here: a reader that has finished takes no batch
		// back, and one that is not waiting for a batch needs none.
		select {
		case free <- b[:0]:
		default:
		}
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("read session %s: %w", path, err)
	}
	return cw.close(st.Header)
}

// chromeBatch is how many events the reading goroutine hands over at once.
const chromeBatch = 1024

// readBatches reads st's events in batches onto full, taking empty batches
// back from free, until the file ends or stop closes; it closes full when
// it returns.
func readBatches(st *Stream, full chan<- []trace.Event, free <-chan []trace.Event, stop <-chan struct{}) {
	defer close(full)
	send := func(b []trace.Event) bool {
		select {
		case full <- b:
			return true
		case <-stop:
			return false
		}
	}
	b := make([]trace.Event, 0, chromeBatch)
	var e trace.Event
	for st.Next(&e) {
		if e.Validate() != nil {
			continue // a stage or request: the runs had it
		}
		if b = append(b, e); len(b) < chromeBatch {
			continue
		}
		if !send(b) {
			return
		}
		select {
		case b = <-free:
		default:
			b = make([]trace.Event, 0, chromeBatch)
		}
	}
	if len(b) > 0 {
		send(b)
	}
}

// chromeWriter writes a trace's events as they come: the array's opening,
// each event (the frequent ones, samples and log lines, encoded by hand
// as encoding/json encodes them), and the closing with the metadata.
type chromeWriter struct {
	w     *bufio.Writer
	buf   []byte
	n     int // events written
	named map[[2]int]bool
	keys  []string
	err   error
}

func newChromeWriter(w io.Writer) *chromeWriter {
	cw := &chromeWriter{w: bufio.NewWriterSize(w, 256<<10), named: map[[2]int]bool{}}
	cw.w.WriteString(`{"traceEvents":[`)
	return cw
}

// add writes one event encoded by encoding/json.
func (cw *chromeWriter) add(e ChromeEvent) {
	b, err := json.Marshal(e)
	if err != nil {
		cw.fail(fmt.Errorf("encode chrome trace: %w", err))
		return
	}
	cw.write(b)
}

// write writes one encoded event after a comma when it is not the first.
func (cw *chromeWriter) write(b []byte) {
	if cw.n > 0 {
		cw.w.WriteByte(',')
	}
	cw.n++
	cw.w.Write(b)
}

func (cw *chromeWriter) fail(err error) {
	if cw.err == nil {
		cw.err = err
	}
}

// thread names a thread the first time it is used.
func (cw *chromeWriter) thread(pid, tid int, name string) {
	if cw.named[[2]int{pid, tid}] {
		return
	}
	cw.named[[2]int{pid, tid}] = true
	cw.add(ChromeEvent{Name: "thread_name", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"name": name}})
	cw.add(ChromeEvent{Name: "thread_sort_index", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"sort_index": tid}})
}

// runs writes every run's process, stages, unattributed gaps and requests.
func (cw *chromeWriter) runs(h Header, runs []Run) {
	for _, run := range runs {
		pid := run.Index + 1
		cw.add(ChromeEvent{Name: "process_name", Ph: "M", PID: pid, Args: map[string]any{"name": fmt.Sprintf("run %d: %s", run.Index, h.Target.Describe())}})
		for _, sp := range run.Spans {
			tid := sp.Name.Order() + 1
			cw.thread(pid, tid, string(sp.Name))
			dur := us(sp.Duration())
			args := map[string]any{"source": sp.Source}
			for k, v := range sp.Attrs {
				args[k] = v
			}
			if sp.Workers > 1 {
				args["workers"] = sp.Workers
			}
			if sp.Open {
				args["open"] = true
			}
			cw.add(ChromeEvent{Name: string(sp.Name), Cat: "stage", Ph: "X", TS: us(sp.Start), Dur: &dur, PID: pid, TID: tid, Args: args})
		}
		for _, g := range run.Attribution.Gaps {
			tid := len(trace.Stages()) + 1
			cw.thread(pid, tid, string(trace.StageUnattributed))
			dur := us(g.Duration())
			cw.add(ChromeEvent{Name: string(trace.StageUnattributed), Cat: "stage", Ph: "X", TS: us(g.Start), Dur: &dur, PID: pid, TID: tid})
		}
		for _, q := range run.Requests {
			cw.request(pid, run.Index, q)
		}
	}
}

// request writes a request's async slice, its ttft slice and its tokens.
func (cw *chromeWriter) request(pid, run int, q trace.Request) {
	cw.thread(pid, tidRequests, "requests")
	id := fmt.Sprintf("r%d-%s", run, q.ID)
	name := q.Label
	if name == "" {
		name = q.ID
	}
	args := map[string]any{"phase": string(q.Phase), "ttft_ms": stat.MS(q.TTFT()), "e2e_ms": stat.MS(q.E2E()), "tokens": q.OutputTokens()}
	if q.Error != "" {
		args["error"] = q.Error
	}
	cw.add(ChromeEvent{Name: name, Cat: "request", Ph: "b", TS: us(q.Sent), PID: pid, TID: tidRequests, ID: id, Args: args})
	if q.FirstToken > 0 {
		cw.add(ChromeEvent{Name: "ttft", Cat: "request", Ph: "b", TS: us(q.Sent), PID: pid, TID: tidRequests, ID: id})
		cw.add(ChromeEvent{Name: "ttft", Cat: "request", Ph: "e", TS: us(q.Sent + q.FirstToken), PID: pid, TID: tidRequests, ID: id})
	}
	for i, t := range q.Tokens {
		cw.add(ChromeEvent{Name: "token", Cat: "request", Ph: "n", TS: us(q.Sent + t), PID: pid, TID: tidRequests, ID: id, Args: map[string]any{"i": i}})
	}
	end := q.End
	if end < q.FirstToken {
		end = q.FirstToken
	}
	cw.add(ChromeEvent{Name: name, Cat: "request", Ph: "e", TS: us(q.Sent + end), PID: pid, TID: tidRequests, ID: id})
}

// event writes what one session event is in the trace: a counter per
// metric of a sample, an instant for a marker, a process start or exit
// and a log line (stages and requests come from the runs).
func (cw *chromeWriter) event(e *trace.Event) {
	pid := e.Run + 1
	switch e.Kind {
	case trace.KindSample:
		cw.keys = cw.keys[:0]
		for k := range e.Sample.Values {
			cw.keys = append(cw.keys, k)
		}
		sort.Strings(cw.keys)
		// One counter track per metric, named source.metric, so that
		// units never share an axis.
		for _, k := range cw.keys {
			b := append(cw.buf[:0], `{"name":`...)
			b = cw.appendName(b, e.Sample.Source, k)
			b = append(b, `,"cat":"sample","ph":"C","ts":`...)
			b = cw.appendTS(b, e.At)
			b = append(b, `,"pid":`...)
			b = strconv.AppendInt(b, int64(pid), 10)
			b = append(b, `,"tid":0,"args":{"value":`...)
			b = cw.appendFloat(b, e.Sample.Values[k])
			cw.buf = append(b, "}}"...)
			cw.write(cw.buf)
		}
	case trace.KindMarker:
		cw.thread(pid, tidMarkers, "markers")
		args := map[string]any{}
		for k, v := range e.Marker.Attrs {
			args[k] = v
		}
		cw.add(ChromeEvent{Name: e.Marker.Name, Cat: "marker", Ph: "i", S: "p", TS: us(e.At), PID: pid, TID: tidMarkers, Args: args})
	case trace.KindProcess:
		cw.thread(pid, tidMarkers, "markers")
		args := map[string]any{"pid": e.Process.PID}
		if e.Process.Action == trace.ProcessExit {
			args["exit_code"] = e.Process.ExitCode
			args["expected"] = e.Process.Expected
		}
		cw.add(ChromeEvent{Name: "process " + e.Process.Action, Cat: "process", Ph: "i", S: "p", TS: us(e.At), PID: pid, TID: tidMarkers, Args: args})
	case trace.KindLog:
		cw.thread(pid, tidLog, "log")
		b := append(cw.buf[:0], `{"name":"log","cat":"log","ph":"i","ts":`...)
		b = cw.appendTS(b, e.At)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(pid), 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, tidLog, 10)
		b = append(b, `,"s":"t","args":{`...)
		// The keys in encoding/json's order for a map: sorted.
		if e.Log.Stage != "" {
			b = append(b, `"stage":`...)
			b = cw.appendString(b, string(e.Log.Stage))
			b = append(b, ',')
		}
		b = append(b, `"stream":`...)
		b = cw.appendString(b, e.Log.Stream)
		b = append(b, `,"text":`...)
		b = cw.appendString(b, e.Log.Text)
		cw.buf = append(b, "}}"...)
		cw.write(cw.buf)
	}
}

// appendName appends the counter name source.metric as appendString
// does, without building it when both parts are plain.
func (cw *chromeWriter) appendName(b []byte, source, metric string) []byte {
	if !plainJSON(source) || !plainJSON(metric) {
		return cw.appendString(b, source+"."+metric)
	}
	b = append(b, '"')
	b = append(b, source...)
	b = append(b, '.')
	b = append(b, metric...)
	return append(b, '"')
}

// plainJSON: every byte of s is printable ASCII that encoding/json writes
// as it is.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendString appends s as encoding/json encodes a string (HTML
// characters escaped): as it is when every byte is printable ASCII that
// needs no escape, else through encoding/json.
func (cw *chromeWriter) appendString(b []byte, s string) []byte {
	if !plainJSON(s) {
		q, err := json.Marshal(s)
		if err != nil {
			cw.fail(fmt.Errorf("encode chrome trace: %w", err))
		}
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendFloat appends f as encoding/json encodes a float64: the shortest
// decimal, in exponent form below 1e-6 and from 1e21 on, with a
// one-digit negative exponent not padded ("1e-7").
func (cw *chromeWriter) appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		cw.fail(fmt.Errorf("encode chrome trace: unsupported value %v", f))
		return append(b, '0')
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 && (f != 0 || !math.Signbit(f)) {
		return strconv.AppendInt(b, int64(f), 10) // an integer: its digits
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b
}

// appendTS appends the trace time of offset d (us(d)) as appendFloat
// does, without its general algorithm for the offsets a session holds
// (below 10^15 ns, 11 days): us(d) is then the nearest float64 to d/1000,
// and d/1000 written out (at most 15 significant digits, so no shorter
// decimal is as near) is the shortest decimal that reads back as it.
func (cw *chromeWriter) appendTS(b []byte, d time.Duration) []byte {
	if d <= 0 || d >= 1e15 {
		return cw.appendFloat(b, us(d))
	}
	b = strconv.AppendInt(b, int64(d/1000), 10)
	if frac := int64(d % 1000); frac != 0 {
		b = append(b, '.', byte('0'+frac/100))
		if frac%100 != 0 {
			b = append(b, byte('0'+frac/10%10))
			if frac%10 != 0 {
				b = append(b, byte('0'+frac%10))
			}
		}
	}
	return b
}

// close ends the array, writes the metadata and flushes.
func (cw *chromeWriter) close(h Header) error {
	meta, err := json.Marshal(map[string]string{"tool": "treni-top " + h.ToolVersion, "target": h.Target.Describe()})
	if err != nil {
		cw.fail(fmt.Errorf("encode chrome trace: %w", err))
	}
	cw.w.WriteString(`],"displayTimeUnit":"ms","metadata":`)
	cw.w.Write(meta)
	cw.w.WriteByte('}')
	if err := cw.w.Flush(); err != nil {
		cw.fail(fmt.Errorf("write chrome trace: %w", err))
	}
	return cw.err
}
