package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

var fuzzImportKinds = []string{"auto", "vllm", "sglang", "tgi", "llama.cpp", "ollama", "treni"}

// FuzzImport feeds arbitrary bytes to the streaming import with each
// kind's parser: it never panics, and whatever it imports is a session
// every reader takes: events that validate and encode (nothing a writer
// would refuse), offsets that never go back, spans that end after they
// start, cold windows that are not negative, and a report.
func FuzzImport(f *testing.F) {
	for _, rel := range []string{"vllm/v0.8.5.post1-v1engine-qwen2.5-1.5b-serve.log", "sglang/v0.4.1-docs-send_request-llama3.1-8b-80gb.log",
		"tgi/v3.3.x-gemma3-27b-tp2-rtxa6000.log", "llamacpp/b6699-2025-10-cuda-rtx3070-gpt-oss-20b-cpu-moe.log",
		"ollama/v0.2x-2026-05-llamarunner-qwen2.5-coder-7b-rtx3060.log"} {
		b, err := readFixtureFile(rel)
		if err != nil {
			f.Fatalf("fixture %s: %v", rel, err)
		}
		if len(b) > 3000 {
			b = b[:3000]
		}
		f.Add(uint8(0), b)
	}
	huge := strings.Repeat("9", 305)
	for i, s := range []string{
		"0.01.100.000 I llama_kv_cache:      CUDA0 KV buffer size = " + huge + ".00 MiB\n0.02.000.000 I main: model loaded\n",
		"9999-01-01T00:00:00.000000Z  INFO text_generation_launcher: Starting download process.\n2024-01-01T00:00:00Z  INFO x: Connected\n",
		`{"treni_stage":"v1","stage":"cuda_init","start_ns":-9223372036854775808,"end_ns":9223372036854775807}` + "\n",
		"vllm-1  | INFO 05-09 22:55:45 [gpu_model_runner.py:1347] Model loading took 2.8 GiB and 1e300 seconds\n",
		"May  9 22:51:11 h vllm[1]: INFO 05-09 22:51:11 [x.py:1] Initializing a V1 LLM engine (v0.8.5)\nMay  9 22:51:12 h vllm[1]: INFO:     Application startup complete.\n",
	} {
		f.Add(uint8(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, k uint8, data []byte) {
		kind := fuzzImportKinds[int(k)%len(fuzzImportKinds)]
		s, err := Import(bytes.NewReader(data), ImportOptions{Kind: kind, Ref: importRef})
		if err != nil {
			if !errors.Is(err, ErrNotLog) && !errors.Is(err, ErrUnknownServer) && !errors.Is(err, ErrWrongKind) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		var prev time.Duration
		for i, e := range s.Events {
			if err := e.Validate(); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			if e.At < prev {
				t.Fatalf("event %d at %v goes back from %v", i, e.At, prev)
			}
			prev = e.At
			if _, err := json.Marshal(e); err != nil {
				t.Fatalf("event %d does not encode: %v", i, err)
			}
			if e.Kind == trace.KindStage && (e.Stage.End < e.Stage.Start || e.Stage.Start < 0) {
				t.Fatalf("span %+v", e.Stage)
			}
		}
		if _, err := json.Marshal(s.Header); err != nil {
			t.Fatalf("header does not encode: %v", err)
		}
		for _, r := range Analyze(s.Events) {
			if r.ColdTotal() < 0 {
				t.Fatalf("negative cold start %v", r.ColdTotal())
			}
		}
		_ = ImportSummary(s)
	})
}

// FuzzRecorderValues feeds the session writer events carrying arbitrary
// numbers (NaN, ±Inf, huge, negative offsets): every event becomes one
// line (itself or the marker that says why it could not be written), the
// file reads back whole and closed, and the events after a bad one are
// there.
func FuzzRecorderValues(f *testing.F) {
	f.Add(math.Float64bits(math.Inf(1)), math.Float64bits(12.5), int64(5), int64(math.MaxInt64))
	f.Add(math.Float64bits(math.NaN()), math.Float64bits(math.Inf(-1)), int64(-1), int64(math.MinInt64))
	f.Add(math.Float64bits(1e308), math.Float64bits(math.Copysign(0, -1)), int64(0), int64(1))
	f.Fuzz(func(t *testing.T, a, b uint64, at, d int64) {
		x, y := math.Float64frombits(a), math.Float64frombits(b)
		path := filepath.Join(t.TempDir(), "s.jsonl")
		r, err := Create(path, NewHeader("fuzz", time.Unix(0, 0), Target{Kind: TargetBuiltin}))
		if err != nil {
			t.Fatal(err)
		}
		evs := []trace.Event{
			{At: time.Duration(at), Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageKVAlloc, Start: time.Duration(d), End: time.Duration(at), Attrs: trace.Attrs{trace.AttrBytes: x}}},
			{At: time.Duration(at), Kind: trace.KindSample, Sample: &trace.Sample{Source: "gpu0", Values: map[string]float64{"a": x, "b": y}}},
			{At: time.Duration(d), Kind: trace.KindMarker, Marker: &trace.Marker{Name: "m", Attrs: trace.Attrs{"v": y}}},
			{At: time.Second, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthy}},
		}
		for _, e := range evs {
			r.Emit(e)
		}
		closeErr := r.Close()
		bad := 0
		for _, v := range []float64{x, y} {
			if math.IsInf(v, 0) || math.IsNaN(v) {
				bad++
			}
		}
		if bad == 0 && closeErr != nil {
			t.Fatalf("finite values: Close %v", closeErr)
		}
		if bad > 0 && !errors.Is(closeErr, ErrEventsDropped) {
			t.Fatalf("non-finite values: Close %v", closeErr)
		}
		st, err := OpenStream(path)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		n := 0
		var e trace.Event
		for st.Next(&e) {
			n++
		}
		// Events with negative offsets fail validation on reading: that
		// is the reader refusing them loudly, not the writer losing them.
		if err := st.Err(); err != nil {
			if at >= 0 && d >= 0 && d <= at {
				t.Fatalf("read back: %v", err)
			}
			return
		}
		if n != len(evs) || !st.Ended() {
			t.Fatalf("read back %d of %d events, ended %v", n, len(evs), st.Ended())
		}
	})
}

// readFixtureFile reads a shared server-log fixture.
func readFixtureFile(rel string) ([]byte, error) {
	return os.ReadFile(filepath.Join(importFixtureDir, rel))
}
