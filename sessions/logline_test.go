package sessions

import (
	"bytes"
	"encoding/json"
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
