package sessions

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// FuzzLogEventEncoding: the hand-written encoding of a log event is
// encoding/json's, byte for byte, for any text (control bytes, invalid
// UTF-8, U+2028), and it reads back as the same event.
func FuzzLogEventEncoding(f *testing.F) {
	for _, s := range []string{"", "plain", "quote \" back \\ slash", "ctl \x00\x01\b\f\n\r\t\x1f", "bad \xff\xfe utf8", "sep \u2028\u2029", "<html>&amp;", "ünïcödé ✓"} {
		f.Add(s, int64(12345), 0, 0, "kv_alloc")
	}
	f.Fuzz(func(t *testing.T, text string, at int64, run, pid int, stage string) {
		e := trace.Event{At: time.Duration(at), Run: run, Kind: trace.KindLog, Log: &trace.Log{Stream: "file", PID: pid, Text: text, Stage: trace.Stage(stage)}}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
		got := appendLogEvent(nil, &e)
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("encoding differs:\n got  %s\n want %s", got, want.Bytes())
		}
	})
}

// FuzzEventEncoding: the hand-written encoding of stage, marker and
// process events (appendEvent) is encoding/json's, byte for byte, for any
// names, texts, attribute keys and values (floats of every size, strings
// with control bytes and invalid UTF-8); a value encoding/json refuses (a
// float that is not finite) is left to encoding/json.
func FuzzEventEncoding(f *testing.F) {
	f.Add(int64(12345), 0, uint8(0), "kv_alloc", "log:vllm", "bytes", 1.5e9, "line", "Loading weights took 2.85 seconds", true, 2)
	f.Add(int64(-1), 3, uint8(1), "healthy", "", "source", 0.0, "", "", false, 0)
	f.Add(int64(7), 1, uint8(2), "start", "vllm", "x", math.Inf(1), "ctl \x00\x1f\u2028", "bad \xff utf8", true, -4)
	f.Add(int64(0), 0, uint8(0), "\"quoted\"", "<a&b>", "", 1e-7, "b", "ünï", false, 1)
	f.Add(int64(0), 0, uint8(1), "m", "", "a", 1e21, "a", "dup", true, 0)
	f.Add(int64(0), 0, uint8(1), "m", "", "big", 123456789012345678901234.0, "small", "x", false, 0)
	f.Add(int64(0), 0, uint8(0), "s", "", "nan", math.NaN(), "k", "v", false, 0)
	// Whole numbers, written as integers below 1e15 (-0 keeps its sign).
	f.Add(int64(0), 0, uint8(0), "s", "", "negzero", math.Copysign(0, -1), "k", "v", false, 1)
	f.Add(int64(0), 0, uint8(0), "s", "", "edge", 999999999999999.0, "k", "v", false, 1)
	f.Add(int64(0), 0, uint8(1), "m", "", "edge", 1e15, "k", "v", false, 1)
	f.Add(int64(0), 0, uint8(1), "m", "", "neg", -1503238144.0, "k", "v", false, 1)
	f.Fuzz(func(t *testing.T, at int64, run int, kind uint8, name, text, k1 string, v1 float64, k2, v2 string, flag bool, n int) {
		attrs := trace.Attrs{k1: v1, k2: v2, "flag": flag, "n": n}
		var e trace.Event
		switch kind % 3 {
		case 0:
			e = trace.Event{At: time.Duration(at), Run: run, Kind: trace.KindStage, Stage: &trace.Span{Name: trace.Stage(name), Start: time.Duration(at) - 5,
				End: time.Duration(at), Open: flag, Source: text, Workers: n, Attrs: attrs}}
			if n%2 == 0 {
				e.Stage.Attrs = nil
			}
		case 1:
			e = trace.Event{At: time.Duration(at), Run: run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: name, Attrs: attrs}}
			if n%3 == 0 {
				e.Marker.Attrs = trace.Attrs{}
			}
		case 2:
			e = trace.Event{At: time.Duration(at), Run: run, Kind: trace.KindProcess, Process: &trace.Process{Action: name, PID: n, ServerKind: text,
				Command: []string{k1, k2, v2}[:n&3%4], ExitCode: n / 2, Signal: v2, Expected: flag, Builtin: !flag}}
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		werr := enc.Encode(e)
		// Without the keys' order kept, with the order of other keys as
		// many (a key of them missing), then with this event's own.
		order := &attrOrder{keys: []string{"flag", "n", "zz", k1}}
		for i, o := range []*attrOrder{nil, order, order} {
			got, ok := appendEvent(nil, &e, o)
			if werr != nil {
				if ok {
					t.Fatalf("encoding/json refuses the event (%v), appendEvent (%d) wrote %s", werr, i, got)
				}
				return
			}
			if !ok {
				t.Fatalf("appendEvent (%d) refused an event encoding/json writes: %s", i, want.Bytes())
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("encoding (%d) differs:\n got  %s\n want %s", i, got, want.Bytes())
			}
		}
	})
}
