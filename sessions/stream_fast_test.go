package sessions

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/treni-top/treni-top/trace"
)

// FuzzDecodeFast: a sample or log line the hand-written decoder accepts
// is one encoding/json accepts, decoded to the same event.
func FuzzDecodeFast(f *testing.F) {
	for _, l := range []string{
		`{"t":1200000000,"kind":"sample","run":2,"sample":{"source":"gpu0","values":{"gpu_mem_used_bytes":60000000001,"gpu_util_pct":97,"pcie_rx_bytes_per_s":1.2e9,"x":-0.5e-7}}}`,
		`{"t":0,"kind":"sample","sample":{"source":"process","values":{}}}`,
		`{"t":5,"kind":"log","run":1,"log":{"stream":"stderr","pid":1004,"text":"2026/11/22 serve: request 3 done: 200 tokens in 812 ms","stage":"warmup"}}`,
		`{"t":5,"kind":"log","log":{"stream":"stdout","text":"é 漢字 \u2028 ok"}}`,
		`{"t":5,"kind":"log","log":{"stream":"stdout","text":"quote \" inside"}}`,
		`{"t":05,"kind":"log","log":{"stream":"stdout","text":"x"}}`,
		`{"t":5,"kind":"sample","sample":{"source":"a","values":{"k":1e400}}}`,
		`{"t":5,"kind":"sample","sample":{"source":"a","values":{"k":01}}}`,
		`{"t":5,"kind":"sample","run":0,"sample":{"source":"a","values":{"k":1,"k":2}}}  `,
		`{"t":5,"kind":"log","log":{"stream":"stdout","pid":-3,"text":""}}`,
	} {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		at, kind, run, ok := lineHead(line)
		if !ok {
			return
		}
		var s Stream
		got, fast := s.decodeFast(line, at, kind, run)
		if !fast {
			return
		}
		var want trace.Event
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", line, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nfast %+v %+v %+v\njson %+v %+v %+v", line, got, got.Sample, got.Log, want, want.Sample, want.Log)
		}
	})
}

// TestDecodeFastTakesRecordedLines: every sample and log line the
// recorder writes of a plain session takes the hand-written path.
func TestDecodeFastTakesRecordedLines(t *testing.T) {
	p := writeSession(t, t.TempDir(), "dense.jsonl", denseSession())
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var s Stream
	n := 0
	for _, line := range bytes.Split(b, []byte("\n"))[1:] {
		at, kind, run, ok := lineHead(line)
		if !ok || kind != trace.KindSample && kind != trace.KindLog {
			continue
		}
		n++
		if _, fast := s.decodeFast(line, at, kind, run); !fast {
			t.Fatalf("declined %s", line)
		}
	}
	if n < 10000 {
		t.Fatalf("%d sample and log lines", n)
	}
}
