package sessions

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// oddSession is a cold run with what the Chrome encoding must escape or
// format as encoding/json does: HTML and control characters, invalid
// UTF-8 and line separators in log lines and names, tiny and huge and
// negative values, a second run, a marker with attributes.
func oddSession() []trace.Event {
	evs := coldRun(0, 0, 1, warm5)
	texts := []string{"<script>alert(\"x\") & 'y'</script>", "tab\there\nnewline \\ back", "é ü 漢字 \u2028 \u2029 \x01 \x7f", "bad \xff\xfe utf8", ""}
	for i, tx := range texts {
		evs = append(evs, trace.Event{At: time.Duration(2100+i) * time.Millisecond, Kind: trace.KindLog, Log: &trace.Log{Stream: "stdout", Text: tx, Stage: trace.StageWarmup}})
	}
	vals := []float64{1e-7, 1e21, -3.25, 1.5e15, 0, 123456789.123, math.SmallestNonzeroFloat64, math.MaxFloat64, 1e-6, 999999999999999999999}
	for i, v := range vals {
		evs = append(evs, trace.Event{At: time.Duration(2200+i) * time.Millisecond, Kind: trace.KindSample, Sample: &trace.Sample{Source: "gpu<0>&", Values: map[string]float64{
			fmt.Sprintf("m%d", i): v, "z\"q": float64(i), "a/b": v / 3}}})
	}
	evs = append(evs, trace.Event{At: 2300 * time.Millisecond, Kind: trace.KindMarker, Marker: &trace.Marker{Name: "note <&>", Attrs: trace.Attrs{"why": "a & b", "n": 3.0}}})
	evs = append(evs, coldRun(1, 3*time.Second, 1.1, []float64{40, 41})...)
	evs = append(evs, trace.Event{At: 6 * time.Second, Run: 1, Kind: trace.KindLog, Log: &trace.Log{Stream: "stderr", Text: "µs ≥ 10 </log>"}})
	return evs
}

// TestChromeMatchesWholeFile: the streamed trace is byte for byte what
// the exporter that encoded the whole trace at once wrote (the goldens in
// testdata/chrome were written by it, before the trace was streamed), for
// recorded sessions and one with everything the encoding must escape.
func TestChromeMatchesWholeFile(t *testing.T) {
	odd := writeSession(t, t.TempDir(), "odd.jsonl", oddSession())
	for _, p := range []string{"testdata/builtin-cpu-live.jsonl.gz", "testdata/ollama-gpu-1.7b-evicted.jsonl.gz", odd} {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(p), ".gz"), ".jsonl")
		f, err := os.Open(filepath.Join("testdata", "chrome", name+".json.gz"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := io.ReadAll(zr)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := WriteChrome(&got, p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			i := 0
			for i < min(got.Len(), len(want)) && got.Bytes()[i] == want[i] {
				i++
			}
			t.Errorf("%s: the trace differs from byte %d:\ngot  …%s…\nwant …%s…", name, i, got.Bytes()[max(i-80, 0):min(i+80, got.Len())], want[max(i-80, 0):min(i+80, len(want))])
		}
		s, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if mem, err := ExportChrome(s); err != nil || !bytes.Equal(mem, want) {
			t.Errorf("%s: ExportChrome of the session in memory differs (%v)", name, err)
		}
	}
}

// TestChromeFloatEncoding: the hand-written float encoding is encoding/json's.
func TestChromeFloatEncoding(t *testing.T) {
	cw := newChromeWriter(io.Discard)
	for _, d := range []time.Duration{1, 999, 1000, 1001, 1010, 1100, 123456789, 1e15 - 1, 1e15, 64e12 + 7} {
		if want, _ := json.Marshal(us(d)); !bytes.Equal(cw.appendTS(nil, d), want) {
			t.Errorf("offset %d: %s, encoding/json %s", d, cw.appendTS(nil, d), want)
		}
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 97, 60000000001, 1 << 53, 1<<53 + 2, -4503599627370497, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 1.5e300, -2.5e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, 123.456, 1e-9, 3e-10} {
		want, _ := json.Marshal(f)
		if got := cw.appendFloat(nil, f); !bytes.Equal(got, want) {
			t.Errorf("%v: %s, encoding/json %s", f, got, want)
		}
	}
}

// FuzzChromeEncoding: the hand-written string and float encodings of the
// Chrome trace are encoding/json's for any input.
func FuzzChromeEncoding(f *testing.F) {
	f.Add("gpu0.gpu_mem_used_bytes", 6e10)
	f.Add("<script>&\"\\\n\u2028é\xff", 1e-7)
	f.Add("", 1e21)
	f.Fuzz(func(t *testing.T, s string, v float64) {
		cw := newChromeWriter(io.Discard)
		d := time.Duration(math.Float64bits(v) >> 14) // offsets up to 13 days
		if want, _ := json.Marshal(us(d)); !bytes.Equal(cw.appendTS(nil, d), want) {
			t.Errorf("offset %d: %s, encoding/json %s", d, cw.appendTS(nil, d), want)
		}
		want, _ := json.Marshal(s)
		if got := cw.appendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%q: %s, encoding/json %s", s, got, want)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		want, _ = json.Marshal(v)
		if got := cw.appendFloat(nil, v); !bytes.Equal(got, want) {
			t.Errorf("%v: %s, encoding/json %s", v, got, want)
		}
	})
}

// slowWriter is a destination slower than the reading goroutine: each
// write first yields to the other goroutines once per 64 bytes.
type slowWriter struct{ n int }

func (w *slowWriter) Write(p []byte) (int, error) {
	for range len(p) / 64 {
		runtime.Gosched()
	}
	w.n += len(p)
	return len(p), nil
}

// TestChromeLongSessionSlowWriter: a session of many batches written to a
// destination slower than the file is read ends with the whole trace (the
// reading goroutine finishing first once held the writer forever, handing
// back more batches than could be taken back).
func TestChromeLongSessionSlowWriter(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	for i := range 40 * chromeBatch {
		evs = append(evs, trace.Event{At: 3*time.Second + time.Duration(i)*time.Millisecond, Kind: trace.KindSample,
			Sample: &trace.Sample{Source: "gpu0", Values: map[string]float64{trace.MetricGPUMemUsed: float64(i)}}})
	}
	p := writeSession(t, t.TempDir(), "long.jsonl", evs)
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ExportChrome(s)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		var w slowWriter
		if err := WriteChrome(&w, p); err != nil || w.n != len(want) {
			t.Fatalf("wrote %d bytes of %d (%v)", w.n, len(want), err)
		}
	}
}
