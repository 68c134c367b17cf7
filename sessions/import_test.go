package sessions

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// importFixtureDir holds the shared server-log fixtures (../shared beside
// the clone). Tests fail, never skip, when it is missing.
const importFixtureDir = "../../shared/fixtures/serverlogs"

var importRef = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func importFixture(t *testing.T, rel string) *Session {
	t.Helper()
	f, err := os.Open(filepath.Join(importFixtureDir, rel))
	if err != nil {
		t.Fatalf("fixture: %v (the shared fixtures must sit at %s)", err, importFixtureDir)
	}
	defer f.Close()
	s, err := Import(f, ImportOptions{Source: rel, ToolVersion: "test", Ref: importRef})
	if err != nil {
		t.Fatalf("Import %s: %v", rel, err)
	}
	return s
}

// TestImportEveryFixture imports every shared server log and checks what
// report, diff and the TUI rely on.
func TestImportEveryFixture(t *testing.T) {
	var logs []string
	err := filepath.WalkDir(importFixtureDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".log") {
			rel, _ := filepath.Rel(importFixtureDir, p)
			logs = append(logs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil || len(logs) == 0 {
		t.Fatalf("walk %s: %v (%d logs); the shared fixtures are required", importFixtureDir, err, len(logs))
	}
	for _, rel := range logs {
		t.Run(rel, func(t *testing.T) {
			s := importFixture(t, rel)
			folder := strings.SplitN(rel, "/", 2)[0]
			wantKind := map[string]string{"vllm": "vllm", "sglang": "sglang", "tgi": "tgi", "llamacpp": "llama.cpp", "ollama": "ollama"}[folder]
			h := s.Header
			if h.Format != FormatName || h.Target.Kind != TargetImport || h.Target.ServerKind != wantKind || h.Notes["source"] != rel || h.Notes["timestamps"] == "" {
				t.Errorf("header %+v", h)
			}
			if len(s.Events) == 0 || s.Events[0].Kind != trace.KindProcess || s.Events[0].At != 0 || s.Events[0].Process.Action != trace.ProcessStart {
				t.Fatalf("first event %+v, want the process start at 0", s.Events[0])
			}
			var prev time.Duration
			logs, marked := 0, 0
			for i, e := range s.Events {
				if err := e.Validate(); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if e.At < prev {
					t.Fatalf("event %d at %v goes back from %v", i, e.At, prev)
				}
				prev = e.At
				if e.Kind == trace.KindLog {
					logs++
					if e.Log.Stage != "" {
						marked++
					}
				}
			}
			if logs < 5 || marked == 0 {
				t.Errorf("%d log events, %d marked with a stage", logs, marked)
			}
			runs := Analyze(s.Events)
			if len(runs) != 1 {
				t.Fatalf("%d runs", len(runs))
			}
			r := runs[0]
			if len(r.Spans) < 2 {
				t.Fatalf("only %d stages: %v", len(r.Spans), r.Spans)
			}
			for _, sp := range r.Spans {
				if !sp.Name.Valid() || sp.Start < 0 || sp.End < sp.Start || sp.End > prev || sp.Open {
					t.Errorf("span %s [%v, %v] open=%v outside [0, %v]", sp.Name, sp.Start, sp.End, sp.Open, prev)
				}
			}
			untimed := strings.Contains(h.Notes["timestamps"], "no line carries")
			if r.Start != 0 || (r.ColdTotal() <= 0) != untimed || r.Attribution.Total != r.ColdTotal() {
				t.Errorf("run start %v cold %v attribution %v (untimed %v)", r.Start, r.ColdTotal(), r.Attribution.Total, untimed)
			}
			if h.Host != (Host{}) || h.Origin == nil || h.Origin.Source != rel {
				t.Errorf("an import records the log's origin, never this machine: host %+v origin %+v", h.Host, h.Origin)
			}
			if sum := ImportSummary(s); !strings.HasPrefix(sum, wantKind+": ") || strings.Contains(sum, "no stage") {
				t.Errorf("summary %q", sum)
			}
		})
	}
}

func readFixtureBytes(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(importFixtureDir, rel))
	if err != nil {
		t.Fatalf("fixture: %v (the shared fixtures must sit at %s)", err, importFixtureDir)
	}
	return b
}

func importStageDur(t *testing.T, r Run, name trace.Stage) float64 {
	t.Helper()
	for _, sp := range r.Spans {
		if sp.Name == name {
			return sp.Duration().Seconds()
		}
	}
	t.Fatalf("no %s in %v", name, r.Spans)
	return 0
}

func TestImportVLLMServe(t *testing.T) {
	s := importFixture(t, "vllm/v0.8.5.post1-v1engine-qwen2.5-1.5b-serve.log")
	r := Analyze(s.Events)[0]
	for name, want := range map[trace.Stage]float64{
		trace.StageRuntimeInit: 45, trace.StageModelLoad: 226.292, trace.StageDecoderTensorUpload: 0.5,
		trace.StageCompile: 31.61, trace.StageKVAlloc: 10, trace.StageGraphCapture: 21,
	} {
		if got := importStageDur(t, r, name); math.Abs(got-want) > 0.002 {
			t.Errorf("%s: %.3fs, want %.3fs", name, got, want)
		}
	}
	if r.ColdEndKind != ColdEndHealthy || r.Healthy != 337*time.Second {
		t.Errorf("cold end %s healthy %v; want healthy at 5m37s (Application startup complete)", r.ColdEndKind, r.Healthy)
	}
	if want := time.Date(2026, 5, 9, 22, 51, 11, 0, time.UTC); !s.Header.Created.Equal(want) {
		t.Errorf("created %v, want %v (year from Ref)", s.Header.Created, want)
	}
	if r.Attribution.Dominant != trace.StageModelLoad {
		t.Errorf("dominant %s: the 225 s download inside model_load should dominate", r.Attribution.Dominant)
	}
}

// TestImportMidStartupLog: GLM's log starts while the weights stream; the
// server's own "Model loading took 33.64 s" moves offset zero back.
func TestImportMidStartupLog(t *testing.T) {
	s := importFixture(t, "vllm/v0.2x-dev-2026-05-v1engine-glm5.1-fp8-tp8-h200-runai-streamer-eager.log")
	if !strings.Contains(s.Header.Notes["start"], "model_load began") {
		t.Errorf("notes %v", s.Header.Notes)
	}
	r := Analyze(s.Events)[0]
	if r.Spans[0].Name != trace.StageModelLoad || r.Spans[0].Start != 0 {
		t.Errorf("first span %+v", r.Spans[0])
	}
	for _, e := range s.Events {
		if e.Kind == trace.KindLog {
			if e.At < 32*time.Second {
				t.Errorf("first line at %v, want ≈32.6 s after the shifted zero", e.At)
			}
			break
		}
	}
}

// TestImportUntimedLog: llama.cpp logs carry no timestamp at all. The
// stages keep the log's order and get no durations: none is made up from
// counting lines, and the report says the cold start is unknown.
func TestImportUntimedLog(t *testing.T) {
	s := importFixture(t, "llamacpp/b3892-2024-10-metal-m3max-starcoder15b-hf-download.log")
	if !strings.Contains(s.Header.Notes["timestamps"], "no line carries a timestamp") {
		t.Errorf("notes %v", s.Header.Notes)
	}
	for _, e := range s.Events {
		if e.At != 0 {
			t.Fatalf("%s event at %v: an untimed log has no offsets", e.Kind, e.At)
		}
	}
	r := Analyze(s.Events)[0]
	if r.Healthy != 0 || r.ColdTotal() != 0 {
		t.Errorf("healthy %v cold %v", r.Healthy, r.ColdTotal())
	}
	var order []trace.Stage
	for _, sp := range r.Spans {
		order = append(order, sp.Name)
		if sp.Duration() != 0 {
			t.Errorf("%s lasts %v in a log without timestamps", sp.Name, sp.Duration())
		}
	}
	want := []trace.Stage{trace.StageTensorIndexBuild, trace.StageDecoderTensorUpload, trace.StageKVAlloc, trace.StageCUDAInit, trace.StageWarmup, trace.StageHTTPReady}
	if !slices.Equal(order, want) {
		t.Errorf("order %v, want the log's %v", order, want)
	}
	rep := BuildReport(s)
	md := rep.Markdown()
	if !rep.Runs[0].Untimed || !strings.Contains(md, "Cold start: unknown (the log carries no timestamps)") || strings.Contains(md, "Critical path") {
		t.Errorf("report of an untimed log:\n%s", md)
	}
	sum := ImportSummary(s)
	if !strings.Contains(sum, "tensor_index_build (no duration)") || strings.Contains(sum, "ready at") {
		t.Errorf("summary %q", sum)
	}
	if d := Diagnose(s.Events); d.Dominant != "" || !d.Facts.UntimedLog {
		t.Errorf("diagnosis of an untimed log: %+v", d)
	}
}

func TestImportErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		opts ImportOptions
		want error
		text string
	}{
		{"empty", nil, ImportOptions{}, ErrNotLog, "empty"},
		{"blank lines", []byte("\n\n  \n"), ImportOptions{}, ErrNotLog, "empty"},
		{"binary", []byte("ELF\x00\x01\x02"), ImportOptions{}, ErrNotLog, "NUL"},
		{"unknown server", []byte("hello\nworld\n"), ImportOptions{}, ErrUnknownServer, "--kind"},
		{"bad kind", []byte("hello\n"), ImportOptions{Kind: "triton"}, nil, "unknown server kind"},
		// A kind whose lines the log does not have: an error naming what
		// auto-detection sees (issue 41: an Ollama log imported as vllm
		// said "Cold start: 8.00 s", counted from lines).
		{"wrong kind", readFixtureBytes(t, "ollama/v0.2x-2026-05-llamarunner-qwen2.5-coder-7b-rtx3060.log"), ImportOptions{Kind: "vllm"}, ErrWrongKind, "--kind ollama"},
		{"no kind matches", []byte("hello\nworld\n"), ImportOptions{Kind: "sglang"}, ErrWrongKind, "recognises no server"},
	}
	for _, c := range cases {
		_, err := Import(bytes.NewReader(c.in), c.opts)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: error %v, want %v mentioning %q", c.name, err, c.want, c.text)
		}
	}
	// A log of the kind given with no stage line still imports: plain log
	// lines.
	s, err := Import(strings.NewReader("INFO 05-09 22:51:11 [logger.py:39] Received request chatcmpl-1\n"), ImportOptions{Kind: "vllm"})
	if err != nil || !strings.Contains(ImportSummary(s), "no stage lines") {
		t.Fatalf("plain vllm log: %v", err)
	}
}

// TestImportFileRoundTrip writes gzip in, gzip out, and reads it back.
func TestImportFileRoundTrip(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(importFixtureDir, "sglang/v0.4.1-docs-send_request-llama3.1-8b-80gb.log"))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "server.log.gz")
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(bytes.ReplaceAll(src, []byte("\n"), []byte("\r\n"))) // CRLF too
	zw.Close()
	if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "s.jsonl.gz")
	s, err := ImportFile(in, out, ImportOptions{Kind: "sglang", ToolVersion: "test"})
	if err != nil {
		t.Fatalf("ImportFile: %v", err)
	}
	back, err := Open(out)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if s.Digest == nil || len(back.Events) <= len(s.Events) || back.Header.Notes["source"] != in || back.Header.Target.ServerKind != "sglang" || back.Truncated || back.Unfinished {
		t.Errorf("round trip: %d events, digest %d, notes %v", len(back.Events), len(s.Events), back.Header.Notes)
	}
	r := Analyze(back.Events)[0]
	// SGLang states "Time elapsed: 6.57 s"; the 1-s stamps say 7.
	if got := importStageDur(t, r, trace.StageGraphCapture); got != 6.57 {
		t.Errorf("graph capture %vs", got)
	}
	for _, e := range back.Events {
		if e.Kind == trace.KindLog && strings.ContainsAny(e.Log.Text, "\r") {
			t.Fatalf("carriage return kept in %q", e.Log.Text)
		}
	}
	if _, err := ImportFile(filepath.Join(dir, "missing.log"), out, ImportOptions{}); err == nil || !strings.Contains(err.Error(), "open server log") {
		t.Errorf("missing file: %v", err)
	}
}

// TestImportTreniLog imports the built-in engine's own stderr: JSON stage
// lines (wall-clock start and end) between plain log lines.
func TestImportTreniLog(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	line := func(st trace.Stage, a, b time.Duration) string {
		return string(trace.NewStageLine(st, t0.Add(a), t0.Add(b), trace.Attrs{"tensors": 3}).Marshal())
	}
	log := strings.Join([]string{
		t0.Format(time.RFC3339Nano) + " treni-top serve starting",
		line(trace.StageCUDAInit, 100*time.Millisecond, 400*time.Millisecond),
		line(trace.StageTensorIndexBuild, 200*time.Millisecond, 300*time.Millisecond),
		"plain line without a time",
		line(trace.StageHTTPReady, 900*time.Millisecond, time.Second),
	}, "\n")
	s, err := Import(strings.NewReader(log), ImportOptions{Ref: t0})
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if s.Header.Target.ServerKind != "treni" {
		t.Errorf("kind %q", s.Header.Target.ServerKind)
	}
	r := Analyze(s.Events)[0]
	if len(r.Spans) != 3 || r.Spans[0].Name != trace.StageCUDAInit || r.Spans[0].Start != 100*time.Millisecond || r.Spans[0].Source != "engine" {
		t.Errorf("spans %+v", r.Spans)
	}
	if r.Healthy != time.Second {
		t.Errorf("healthy %v, want the end of the engine's http_ready stage", r.Healthy)
	}
}

// TestImportDigestMatchesFile: the digest ImportFile builds as it writes is
// what OpenDigest reads back from the file (the summary and the report
// agree), for a log with one start and for one that restarts more often
// than a digest details.
func TestImportDigestMatchesFile(t *testing.T) {
	one := readFixtureBytes(t, "vllm/v0.10.x-v1engine-qwen3-235b-fp8-tp8-l40s-multiworker.log")
	var many bytes.Buffer
	for i := 0; i < maxDigestRuns+20; i++ {
		for _, l := range strings.Split(string(readFixtureBytes(t, "sglang/v0.4.1-docs-send_request-llama3.1-8b-80gb.log")), "\n") {
			// Each start an hour after the previous one.
			if strings.HasPrefix(l, "[2025-01-23 ") {
				l = fmt.Sprintf("[2025-%02d-%02d %02d%s", 1+i/500, 1+i/24%20, i%24, l[14:])
			}
			many.WriteString(l + "\n")
		}
	}
	wakes := []byte(strings.Join([]string{
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: tensor_parallel_size=1",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:05 [default_loader.py:1] Loading weights took 2.00 seconds",
		"(APIServer pid=2) INFO:     Application startup complete.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:01:00 [abstract.py:233] It took 0.500000 seconds to fall asleep.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:01:10 [abstract.py:251] It took 1.000000 seconds to wake up tags {'weights', 'kv_cache'}.",
	}, "\n"))
	for name, data := range map[string][]byte{"one start": one, "many starts": many.Bytes(), "sleep and wake": wakes} {
		dir := t.TempDir()
		in := filepath.Join(dir, "server.log")
		if err := os.WriteFile(in, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "s.jsonl")
		got, err := ImportFile(in, out, ImportOptions{ToolVersion: "test", Ref: importRef})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, err := OpenDigest(out)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a, _ := BuildReport(got).JSON()
		b, _ := BuildReport(back).JSON()
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the import's digest and the file's differ:\n%s\n%s", name, a, b)
		}
		if ImportSummary(got) != ImportSummary(back) {
			t.Errorf("%s: summaries differ", name)
		}
		if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: session file mode %v (%v)", name, st.Mode(), err)
		}
		if name == "many starts" && (back.Digest.Runs != maxDigestRuns+20 || back.Digest.Omitted != 20 || !strings.Contains(ImportSummary(got), fmt.Sprintf("%d starts", maxDigestRuns+20))) {
			t.Errorf("many starts: digest %d runs, %d omitted; summary %q", back.Digest.Runs, back.Digest.Omitted, ImportSummary(got))
		}
	}
}

// TestImportLateShift: a log that begins mid-startup says so only after
// more lines than the import holds back (the server's figure reaches
// before the first line): the events already written move too, in a
// plain session and in a compressed one.
func TestImportLateShift(t *testing.T) {
	var b strings.Builder
	t0 := time.Date(2026, 5, 9, 10, 0, 0, 0, time.UTC)
	n := maxReorder + 1000
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "INFO %s [x.py:1] chatter %d\n", t0.Add(time.Duration(i)*time.Millisecond).Format("01-02 15:04:05"), i)
	}
	// 100 s of loading, stated 70 s into the log: it began 30 s before
	// the first line.
	fmt.Fprintf(&b, "INFO %s [gpu_model_runner.py:1347] Model loading took 2.8 GiB and 100.00 seconds\n", t0.Add(70*time.Second).Format("01-02 15:04:05"))
	for _, name := range []string{"s.jsonl", "s.jsonl.gz"} {
		dir := t.TempDir()
		in := filepath.Join(dir, "late.log")
		if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, name)
		dg, err := ImportFile(in, out, ImportOptions{Kind: "vllm", Ref: importRef})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s, err := Open(out)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(s.Header.Notes["start"], "30s before the first line") || s.Truncated || s.Unfinished {
			t.Errorf("%s: notes %v truncated %v unfinished %v", name, s.Header.Notes, s.Truncated, s.Unfinished)
		}
		if e := s.Events[0]; e.Kind != trace.KindProcess || e.At != 0 {
			t.Errorf("%s: first event %+v", name, e)
		}
		var prev time.Duration
		for i, e := range s.Events {
			if e.At < prev {
				t.Fatalf("%s: event %d at %v before %v", name, i, e.At, prev)
			}
			prev = e.At
			if e.Kind == trace.KindLog {
				if e.At < 30*time.Second {
					t.Fatalf("%s: the first line at %v, want 30 s after the session's zero", name, e.At)
				}
				break
			}
		}
		r := Analyze(s.Events)[0]
		if r.Spans[0].Name != trace.StageModelLoad || r.Spans[0].Start != 0 || r.Spans[0].End != 100*time.Second {
			t.Errorf("%s: first span %+v", name, r.Spans[0])
		}
		a, _ := BuildReport(dg).JSON()
		back, _ := OpenDigest(out)
		c, _ := BuildReport(back).JSON()
		if !bytes.Equal(a, c) {
			t.Errorf("%s: digest and file disagree", name)
		}
	}
}

// TestLogReaderBlocks: reading a block of lines at a time hands out
// exactly the lines reading one at a time did (cleanLine of each), across
// block ends, with colour codes, invalid UTF-8 and carriage returns in
// some blocks only, a line longer than a block, one longer than
// maxImportLine (cut there), and a last line without a newline; a NUL in
// a later block is reported at its line.
func TestLogReaderBlocks(t *testing.T) {
	var lines []string
	for i := 0; len(strings.Join(lines, "\n")) < 5*logBlock; i++ {
		l := fmt.Sprintf("INFO 05-09 22:51:%02d [logger.py:39] line %d %s", i%60, i, strings.Repeat("x", i%300))
		switch i {
		case 700:
			l += "\x1b[32m green \x1b[0m"
		case 1400:
			l += " bad \xff\xfe utf8"
		case 1500:
			l += " #033[1m syslog's escape"
		case 2100:
			l = strings.Repeat("long ", 2*logBlock/5)
		case 2101:
			l = strings.Repeat("y", maxImportLine+10)
		}
		if i%7 == 0 {
			l += "\r"
		}
		lines = append(lines, l)
	}
	lines = append(lines, "last line, no newline")
	text := strings.Join(lines, "\n")
	lr, err := newLogReader(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range lines {
		if len(want) > maxImportLine {
			want = want[:maxImportLine]
		}
		want = cleanLine([]byte(want))
		got, ok := lr.next()
		if !ok || got != want {
			t.Fatalf("line %d: %v %.80q, want %.80q (err %v)", i+1, ok, got, want, lr.err)
		}
	}
	if l, ok := lr.next(); ok || lr.err != nil {
		t.Fatalf("after the last line: %q %v %v", l, ok, lr.err)
	}

	withNUL := strings.Join(lines[:2000], "\n") + "\nbinary \x00 here\n" + lines[5]
	lr, _ = newLogReader(strings.NewReader(withNUL))
	for _, ok := lr.next(); ok; _, ok = lr.next() {
	}
	if !errors.Is(lr.err, ErrNotLog) || !strings.Contains(lr.err.Error(), "line 2001 contains NUL") {
		t.Fatalf("NUL on line 2001: %v", lr.err)
	}
}

// TestImportPipelineMatchesSerial: the import's three goroutines (lines
// read and prepared ahead, parsed, written) write byte for byte the file
// one goroutine doing all three writes, for every shared fixture (each
// repeated past the lines auto-detection reads, and past several batches)
// and a synthetic log of every kind, plain and compressed.
func TestImportPipelineMatchesSerial(t *testing.T) {
	inputs := map[string][]byte{}
	err := filepath.WalkDir(importFixtureDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".log") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		for b.Len() == 0 || bytes.Count(b.Bytes(), []byte("\n")) < 3*detectLines {
			b.Write(data)
			b.WriteString("\n")
		}
		rel, _ := filepath.Rel(importFixtureDir, p)
		inputs[rel] = b.Bytes()
		return nil
	})
	if err != nil || len(inputs) == 0 {
		t.Fatalf("walk %s: %v; the shared fixtures are required", importFixtureDir, err)
	}
	for kind := range synthKinds {
		inputs["synthetic "+kind] = synthLog(kind, 600<<10)
	}
	dir := t.TempDir()
	for name, data := range inputs {
		in := filepath.Join(dir, "server.log")
		if err := os.WriteFile(in, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, ext := range []string{".jsonl", ".jsonl.gz"} {
			if ext == ".jsonl.gz" && !strings.HasPrefix(name, "synthetic") {
				continue
			}
			var files [2][]byte
			for i, serial := range []bool{true, false} {
				out := filepath.Join(dir, fmt.Sprintf("s%d%s", i, ext))
				if _, err := ImportFile(in, out, ImportOptions{Source: name, ToolVersion: "test", Ref: importRef, serial: serial}); err != nil {
					t.Fatalf("%s (serial %v): %v", name, serial, err)
				}
				if files[i], err = os.ReadFile(out); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(files[0], files[1]) {
				t.Errorf("%s%s: the pipelined import wrote %d bytes, the serial one %d, and they differ", name, ext, len(files[1]), len(files[0]))
			}
		}
	}
}
