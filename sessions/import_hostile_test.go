package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// TestImportWrappedLog: the same log under docker compose with docker logs
// -t stamps, and under journald: detected, parsed as the bare log, the
// collector named, journald's host kept as the log's host.
func TestImportWrappedLog(t *testing.T) {
	bare := string(readFixtureBytes(t, "sglang/v0.4.1-docs-send_request-llama3.1-8b-80gb.log"))
	want := Analyze(mustImport(t, bare, ImportOptions{Ref: importRef}).Events)[0]
	lines := strings.Split(strings.TrimRight(bare, "\n"), "\n")
	wrap := func(f func(i int, l string) string) string {
		var b strings.Builder
		for i, l := range lines {
			b.WriteString(f(i, l) + "\n")
		}
		return b.String()
	}
	// The collector's clock is the server's (UTC), one second a line.
	compose := wrap(func(i int, l string) string {
		return time.Date(2025, 1, 23, 19, 34, 55+i, 0, time.UTC).Format(time.RFC3339Nano) + " sglang-1  | " + l
	})
	journald := wrap(func(i int, l string) string {
		return time.Date(2025, 1, 23, 19, 34, 55+i, 0, time.UTC).Format(time.Stamp) + " gpu-node-7 python3[812]: " + l
	})
	for name, c := range map[string]struct {
		log, wrapper, host string
	}{"compose -t": {compose, "docker logs -t", ""}, "journald": {journald, "journald/syslog", "gpu-node-7"}} {
		s := mustImport(t, c.log, ImportOptions{Ref: importRef})
		if s.Header.Target.ServerKind != "sglang" || s.Header.Origin.Wrapper != c.wrapper || s.Header.Origin.Host != c.host {
			t.Errorf("%s: kind %s origin %+v", name, s.Header.Target.ServerKind, s.Header.Origin)
		}
		got := Analyze(s.Events)[0]
		if fmt.Sprint(names(got.Spans)) != fmt.Sprint(names(want.Spans)) {
			t.Errorf("%s: stages %v, want %v", name, names(got.Spans), names(want.Spans))
		}
		// Lines without SGLang's own stamp (tqdm bars, uvicorn) take the
		// collector's: the clock says both.
		if !strings.Contains(s.Header.Origin.Clock, "the collector's") {
			t.Errorf("%s: clock %q", name, s.Header.Origin.Clock)
		}
	}
}

func names(spans []trace.Span) []trace.Stage {
	var out []trace.Stage
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func mustImport(t *testing.T, log string, opts ImportOptions) *Session {
	t.Helper()
	s, err := Import(strings.NewReader(log), opts)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	return s
}

// TestImportHostileValues (issue 42 item 2): a 305-digit KV buffer size, a
// line stamped in year 9999 and stage lines at the int64 limits neither
// fail the import nor reach the file: each such line stays a plain line
// with a marker, the cold start is not negative, and every event encodes.
func TestImportHostileValues(t *testing.T) {
	huge := strings.Repeat("9", 305)
	llama := strings.Join([]string{
		"0.00.010.000 I build: 6699 (c08002a1) with cc (GCC) 14.3.1 for x86_64-redhat-linux",
		"0.00.020.000 I main: loading model",
		"0.01.000.000 I llama_context: constructing llama_context",
		"0.01.100.000 I llama_kv_cache:      CUDA0 KV buffer size = " + huge + ".00 MiB",
		"0.01.200.000 I llama_context: graph splits = 2",
		"0.02.000.000 I main: model loaded",
	}, "\n")
	t0 := time.Date(2026, 5, 9, 10, 0, 0, 0, time.UTC)
	tgi := strings.Join([]string{
		t0.Format(time.RFC3339Nano) + "  INFO text_generation_launcher: Starting download process.",
		"9999-01-01T00:00:00.000000Z  INFO text_generation_launcher: a clock that jumped",
		t0.Add(3*time.Second).Format(time.RFC3339Nano) + "  INFO shard-manager: text_generation_launcher: Starting shard rank=0",
		t0.Add(9*time.Second).Format(time.RFC3339Nano) + "  INFO shard-manager: text_generation_launcher: Shard ready in 6.0s rank=0",
	}, "\n")
	treni := strings.Join([]string{
		fmt.Sprintf(`{"treni_stage":"v1","stage":"runtime_init","start_ns":%d,"end_ns":%d}`, t0.UnixNano(), t0.Add(time.Second).UnixNano()),
		fmt.Sprintf(`{"treni_stage":"v1","stage":"cuda_init","start_ns":%d,"end_ns":%d}`, int64(math.MinInt64), t0.Add(2*time.Second).UnixNano()),
		fmt.Sprintf(`{"treni_stage":"v1","stage":"kv_alloc","start_ns":%d,"end_ns":%d}`, t0.Add(2*time.Second).UnixNano(), int64(math.MaxInt64)),
		fmt.Sprintf(`{"treni_stage":"v1","stage":"http_ready","start_ns":%d,"end_ns":%d}`, t0.Add(3*time.Second).UnixNano(), t0.Add(4*time.Second).UnixNano()),
	}, "\n")
	for name, c := range map[string]struct {
		log       string
		rejected  int // value_rejected markers
		badClocks int // lines whose stamp was ignored
	}{"llama.cpp KV buffer": {llama, 1, 0}, "tgi year 9999": {tgi, 0, 1}, "treni int64 limits": {treni, 2, 1}} {
		dir := t.TempDir()
		in := filepath.Join(dir, "hostile.log")
		if err := os.WriteFile(in, []byte(c.log), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "s.jsonl")
		if _, err := ImportFile(in, out, ImportOptions{Ref: t0.Add(time.Hour)}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s, err := Open(out)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rejected := 0
		for _, e := range s.Events {
			if _, err := json.Marshal(e); err != nil {
				t.Errorf("%s: %s event does not encode: %v", name, e.Kind, err)
			}
			if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerValueRejected {
				rejected++
			}
			if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerEventDropped {
				t.Errorf("%s: an event was dropped by the writer", name)
			}
		}
		if rejected != c.rejected {
			t.Errorf("%s: %d value_rejected markers, want %d", name, rejected, c.rejected)
		}
		if (c.badClocks > 0) != strings.Contains(s.Header.Notes["rejected_timestamps"], fmt.Sprintf("%d lines", c.badClocks)) {
			t.Errorf("%s: notes %v", name, s.Header.Notes)
		}
		for _, r := range Analyze(s.Events) {
			if r.ColdTotal() < 0 || r.ColdTotal() > 24*time.Hour {
				t.Errorf("%s: cold start %v", name, r.ColdTotal())
			}
		}
		md := BuildReport(s).Markdown()
		if strings.Contains(md, "Inf") || strings.Contains(md, "-9223") || strings.Contains(md, "a bug in treni-top") {
			t.Errorf("%s: report:\n%s", name, md)
		}
	}
}

// TestImportLeavesNothingOnFailure: a failed import leaves no session and
// no temporary file behind.
func TestImportLeavesNothingOnFailure(t *testing.T) {
	for name, c := range map[string]struct {
		data []byte
		opts ImportOptions
	}{
		"wrong kind":     {readFixtureBytes(t, "ollama/v0.2x-2026-05-llamarunner-qwen2.5-coder-7b-rtx3060.log"), ImportOptions{Kind: "vllm"}},
		"unknown server": {[]byte("hello\nworld\n"), ImportOptions{}},
		"binary":         {append([]byte("INFO 05-09 22:51:11 [x.py:1] vLLM\n"), 0, 1, 2, '\n'), ImportOptions{}},
	} {
		dir := t.TempDir()
		in := filepath.Join(t.TempDir(), "in.log")
		if err := os.WriteFile(in, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ImportFile(in, filepath.Join(dir, "s.jsonl"), c.opts); err == nil {
			t.Errorf("%s: imported", name)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%s: left %v behind", name, left)
		}
	}
}

// TestRecorderKeepsWriting (issue 42 item 2): an event JSON cannot hold is
// replaced by a marker, every later event is written, and Close says so.
func TestRecorderKeepsWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	r, err := Create(path, NewHeader("test", time.Unix(0, 0), Target{Kind: TargetBuiltin}))
	if err != nil {
		t.Fatal(err)
	}
	r.Emit(trace.Event{At: time.Second, Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageKVAlloc, End: time.Second, Attrs: trace.Attrs{trace.AttrBytes: math.Inf(1)}}})
	sub := trace.NewBus()
	s := sub.Subscribe()
	done := make(chan struct{})
	go func() { r.Record(s); close(done) }()
	sub.Emit(trace.Event{At: 2 * time.Second, Kind: trace.KindSample, Sample: &trace.Sample{Source: "gpu0", Values: map[string]float64{"x": math.NaN()}}})
	sub.Emit(trace.Event{At: 3 * time.Second, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthy}})
	sub.Close()
	<-done
	err = r.Close()
	if !errors.Is(err, ErrEventsDropped) || !strings.Contains(err.Error(), "2 events") {
		t.Fatalf("Close: %v", err)
	}
	back, err := Open(path)
	if err != nil || back.Truncated || back.Unfinished || len(back.Events) != 3 {
		t.Fatalf("read back: %v, %+v", err, back)
	}
	if back.Events[0].Marker == nil || back.Events[0].Marker.Name != trace.MarkerEventDropped || back.Events[2].Marker.Name != trace.MarkerHealthy {
		t.Errorf("events %+v", back.Events)
	}
}

// TestReplayTruncated: replaying a file its recorder never closed ends
// with a session_truncated marker, which the headless transcript prints,
// and the report says it.
func TestReplayTruncated(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	path := writeSession(t, t.TempDir(), "s.jsonl", evs)
	data, _ := os.ReadFile(path)
	body := bytes.TrimSuffix(data, []byte("\n"))
	cut := data[:bytes.LastIndexByte(body, '\n')+1] // no clean end
	if err := os.WriteFile(path, cut, 0o644); err != nil {
		t.Fatal(err)
	}
	rp, err := OpenReplayer(path, ReplayOptions{Fast: true, Kinds: []trace.Kind{trace.KindProcess, trace.KindStage, trace.KindRequest}})
	if err != nil {
		t.Fatal(err)
	}
	sub, stop := rp.Play(context.Background())
	var out strings.Builder
	if err := PrintProgress(context.Background(), &out, sub); err != nil {
		t.Fatal(err)
	}
	stop()
	if !rp.Truncated() || !strings.Contains(out.String(), "SESSION TRUNCATED") {
		t.Errorf("truncated %v, transcript:\n%s", rp.Truncated(), out.String())
	}
	s, err := OpenDigest(path)
	if err != nil || !s.Unfinished || !strings.Contains(BuildReport(s).Markdown(), "**truncated**") {
		t.Errorf("digest %v unfinished %v", err, s != nil && s.Unfinished)
	}
}

// TestDigestMatchesFile: every figure of a report computed from the digest
// equals the one computed from the whole file, on recorded sessions.
func TestDigestMatchesFile(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.jsonl.gz")
	gen := writeSession(t, t.TempDir(), "gen.jsonl", append(coldRun(0, 0, 1, warm5), coldRun(1, 30*time.Second, 1, warm5)...))
	for _, p := range append(paths, gen) {
		full, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		dg, err := OpenDigest(p)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := BuildReport(full).JSON()
		b, _ := BuildReport(dg).JSON()
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the digest's report differs from the file's", p)
		}
		if len(dg.Events) >= len(full.Events) && strings.Contains(p, "testdata") {
			t.Errorf("%s: the digest keeps %d of %d events", p, len(dg.Events), len(full.Events))
		}
	}
	if len(paths) == 0 {
		t.Fatal("no recorded sessions in testdata")
	}
}

// TestReportStagesAfterWindow: a stage the log names after the server
// said it was ready (llama-server's listening line after "model loaded")
// is in the report's table, the JSON and the import summary alike.
func TestReportStagesAfterWindow(t *testing.T) {
	log := strings.Join([]string{
		"0.00.010.000 I build: 6699 (c08002a1) with cc (GCC) 14.3.1 for x86_64-redhat-linux",
		"0.00.020.000 I main: loading model",
		"0.00.100.000 I llama_model_loader: loaded meta data with 35 key-value pairs and 459 tensors from /m.gguf (version GGUF V3 (latest))",
		"0.02.000.000 I load_tensors: offloaded 25/25 layers to GPU",
		"0.03.000.000 I llama_context: constructing llama_context",
		"0.03.500.000 I llama_context: graph splits = 2",
		"0.04.000.000 I main: model loaded",
		"0.05.000.000 I main: server is listening on http://127.0.0.1:8080 - starting the main loop",
	}, "\n")
	s := mustImport(t, log, ImportOptions{Ref: importRef})
	rep := BuildReport(s)
	sum := ImportSummary(s)
	js, _ := rep.JSON()
	md := rep.Markdown()
	for _, sp := range Analyze(s.Events)[0].Spans {
		n := string(sp.Name)
		inTable := strings.Contains(md, "| "+n) || strings.Contains(md, "| **"+n+"**")
		if !strings.Contains(sum, n) || !inTable || !bytes.Contains(js, []byte(`"name": "`+n+`"`)) {
			t.Errorf("stage %s: summary %q, in the table %v, in the JSON %v", n, sum, inTable, bytes.Contains(js, []byte(n)))
		}
	}
	if !strings.Contains(md, "http_ready (after the cold window)") {
		t.Errorf("report:\n%s", md)
	}
}

// TestImportRejectedLinesBounded: a log with more refused lines than the
// import marks gets maxRejectMarkers markers and a note counting them all.
func TestImportRejectedLinesBounded(t *testing.T) {
	t0 := time.Date(2026, 5, 9, 10, 0, 0, 0, time.UTC)
	var b strings.Builder
	n := maxRejectMarkers + 500
	for i := 0; i < n; i++ {
		// Stage lines that end days after the log was written.
		fmt.Fprintf(&b, "%s treni-top serve: ok\n", t0.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano))
		fmt.Fprintf(&b, `{"treni_stage":"v1","stage":"warmup","start_ns":%d,"end_ns":%d}`+"\n", t0.UnixNano(), t0.Add(100*time.Hour).UnixNano())
	}
	s := mustImport(t, b.String(), ImportOptions{Kind: "treni", Ref: t0.Add(time.Hour)})
	markers := 0
	for _, e := range s.Events {
		if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerValueRejected {
			markers++
		}
	}
	if markers != maxRejectMarkers || !strings.Contains(s.Header.Notes["rejected_values"], fmt.Sprintf("%d lines", n)) {
		t.Errorf("%d markers, note %q", markers, s.Header.Notes["rejected_values"])
	}
}
