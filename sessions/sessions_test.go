package sessions

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/treni-top/treni-top/trace"
)

var warm5 = []float64{50, 52, 51, 49, 50}

func TestRecordReadRoundTrip(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	for _, name := range []string{"s.jsonl", "s.jsonl.gz"} {
		path := writeSession(t, t.TempDir(), name, evs)
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if s.Truncated || len(s.Events) != len(evs) {
			t.Fatalf("%s: truncated=%v events=%d want %d", name, s.Truncated, len(s.Events), len(evs))
		}
		for i := range evs {
			if !reflect.DeepEqual(normalize(t, evs[i]), s.Events[i]) {
				t.Fatalf("%s: event %d differs:\n%+v\n%+v", name, i, evs[i], s.Events[i])
			}
		}
		if s.Header.Format != FormatName || s.Header.Target.Model != "demo-qwen3" || s.Header.ModelFiles[0].Bytes != 4e8 {
			t.Fatalf("header %+v", s.Header)
		}
	}
}

// normalize passes an event through JSON, as numbers in attrs come back as
// float64.
func normalize(t *testing.T, e trace.Event) trace.Event {
	b, _ := json.Marshal(e)
	var out trace.Event
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTruncatedAtEveryByteOfLastLine(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	path := writeSession(t, t.TempDir(), "s.jsonl", evs)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A recorder killed before it closed the file: no clean-end marker.
	body := bytes.TrimSuffix(full, []byte("\n"))
	data := full[:bytes.LastIndexByte(body, '\n')+1]
	body = bytes.TrimSuffix(data, []byte("\n"))
	lastStart := bytes.LastIndexByte(body, '\n') + 1
	for cut := lastStart; cut <= len(data); cut++ {
		s, err := Read(bytes.NewReader(data[:cut]))
		if err != nil {
			t.Fatalf("cut at %d of %d: %v", cut, len(data), err)
		}
		want := len(evs) - 1
		if cut == len(data)-1 {
			// Only the newline is missing: the last event is complete.
			want = len(evs)
		}
		if cut == len(data) {
			if s.Truncated || !s.Unfinished || len(s.Events) != len(evs) {
				t.Fatalf("file without its clean end: truncated=%v unfinished=%v n=%d", s.Truncated, s.Unfinished, len(s.Events))
			}
			continue
		}
		if len(s.Events) != want {
			t.Fatalf("cut at %d: %d events, want %d", cut, len(s.Events), want)
		}
		if cut > lastStart && cut < len(data)-1 && !s.Truncated {
			t.Fatalf("cut at %d: not marked truncated", cut)
		}
	}
}

// TestCleanEnd: a closed file ends with the clean-end marker, which the
// reader consumes; a file cut inside that marker is truncated with every
// event kept, and a file of format 1.0 (no marker) is not called
// unfinished.
func TestCleanEnd(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	path := writeSession(t, t.TempDir(), "s.jsonl", evs)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Read(bytes.NewReader(data))
	if err != nil || s.Truncated || s.Unfinished || len(s.Events) != len(evs) {
		t.Fatalf("closed file: %v truncated=%v unfinished=%v n=%d", err, s.Truncated, s.Unfinished, len(s.Events))
	}
	if !bytes.Contains(data, []byte(`"name":"`+trace.MarkerSessionEnd+`"`)) {
		t.Fatal("no clean-end marker written")
	}
	s, err = Read(bytes.NewReader(data[:len(data)-10]))
	if err != nil || !s.Truncated || len(s.Events) != len(evs) {
		t.Fatalf("cut inside the end marker: %v truncated=%v n=%d", err, s.Truncated, len(s.Events))
	}
	if md := BuildReport(s).Markdown(); !strings.Contains(md, "**truncated**") {
		t.Errorf("the report does not say the file is truncated:\n%s", md)
	}
	old := strings.Replace(headerLine(t), `"version":"`+FormatVersion+`"`, `"version":"1.0"`, 1)
	s, err = Read(strings.NewReader(old + "\n" + `{"t":2,"kind":"marker","marker":{"name":"x"}}` + "\n"))
	if err != nil || s.Unfinished || s.Truncated {
		t.Fatalf("format 1.0 without an end marker: %v unfinished=%v", err, s.Unfinished)
	}
}

func TestTruncatedGzip(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	h, _ := json.Marshal(NewHeader("t", time.Now(), Target{Kind: TargetBuiltin}))
	zw.Write(append(h, '\n'))
	for _, e := range evs {
		b, _ := json.Marshal(e)
		zw.Write(append(b, '\n'))
		zw.Flush()
	}
	// No Close: the gzip trailer is missing, as after a crash; cut a few
	// more bytes too.
	data := buf.Bytes()[:buf.Len()-7]
	s, err := Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Truncated || len(s.Events) < len(evs)-2 {
		t.Fatalf("truncated=%v events=%d of %d", s.Truncated, len(s.Events), len(evs))
	}
}

func TestReaderRefusals(t *testing.T) {
	newer := strings.Replace(headerLine(t), `"version":"`+FormatVersion+`"`, `"version":"2.3"`, 1)
	cases := map[string]string{
		"empty":       "",
		"not json":    "hello\n",
		"other json":  `{"format":"something-else","version":"1.0"}` + "\n",
		"newer major": newer + "\n",
		"bad event":   headerLine(t) + "\n" + `{"t":1,"kind":"stage"}` + "\n",
		"garbage":     headerLine(t) + "\n" + `{"t":1,"kind":` + "\n" + `{"t":2,"kind":"marker","marker":{"name":"x"}}` + "\n",
	}
	for name, in := range cases {
		_, err := Read(strings.NewReader(in))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if name == "newer major" && !strings.Contains(err.Error(), `"2.3"`) {
			t.Errorf("newer major: message %q does not name the version", err)
		}
		if (name == "empty" || name == "not json" || name == "other json") && !errors.Is(err, ErrNotSession) {
			t.Errorf("%s: %v is not ErrNotSession", name, err)
		}
	}
	// A newer minor version with an unknown event kind still reads.
	minor := strings.Replace(headerLine(t), `"version":"`+FormatVersion+`"`, `"version":"1.7"`, 1)
	s, err := Read(strings.NewReader(minor + "\n" + `{"t":1,"kind":"hologram","hologram":{}}` + "\n" + `{"t":2,"kind":"marker","marker":{"name":"x"}}` + "\n"))
	if err != nil || s.Skipped != 1 || len(s.Events) != 1 {
		t.Fatalf("newer minor: %v skipped=%v", err, s)
	}
}

func headerLine(t *testing.T) string {
	b, err := json.Marshal(NewHeader("t", time.Unix(0, 0), Target{Kind: TargetBuiltin}))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRecorderSurvivesSIGKILL re-executes the test binary as a recorder
// that writes events forever, kills it with SIGKILL, and reads the file.
func TestRecorderSurvivesSIGKILL(t *testing.T) {
	if path := os.Getenv("TRENI_TEST_RECORDER_PATH"); path != "" {
		r, err := Create(path, NewHeader("t", time.Now(), Target{Kind: TargetBuiltin}))
		if err != nil {
			os.Exit(3)
		}
		big := strings.Repeat("x", 3000) // long lines make a cut mid-line likely
		for i := 0; ; i++ {
			r.Emit(trace.Event{At: time.Duration(i), Kind: trace.KindLog, Log: &trace.Log{Stream: "stdout", Text: strconv.Itoa(i) + big}})
		}
	}
	path := filepath.Join(t.TempDir(), "killed.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestRecorderSurvivesSIGKILL$")
	cmd.Env = append(os.Environ(), "TRENI_TEST_RECORDER_PATH="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if st, err := os.Stat(path); err == nil && st.Size() > 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("recorder child wrote less than 1 MiB in 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("read after SIGKILL: %v", err)
	}
	if len(s.Events) < 100 {
		t.Fatalf("only %d events survived", len(s.Events))
	}
	for i, e := range s.Events {
		if e.At != time.Duration(i) || !strings.HasPrefix(e.Log.Text, strconv.Itoa(i)+"x") {
			t.Fatalf("event %d corrupt: %v %q", i, e.At, e.Log.Text[:10])
		}
	}
}

func TestAnalyzeRuns(t *testing.T) {
	evs := append(coldRun(0, 0, 1, warm5), coldRun(1, 3*time.Second, 1.1, warm5)...)
	runs := Analyze(evs)
	if len(runs) != 2 {
		t.Fatalf("%d runs", len(runs))
	}
	r := runs[0]
	if r.ColdEndKind != ColdEndFirstToken || r.ColdEnd != 450*ms || r.Start != 0 {
		t.Fatalf("cold window %v..%v (%s)", r.Start, r.ColdEnd, r.ColdEndKind)
	}
	for _, sp := range r.Spans {
		if sp.Open {
			t.Fatalf("open span %s survived its close", sp.Name)
		}
	}
	a := r.Attribution
	// Stages cover [0,292); the healthy→sent gap [292,300) is unattributed;
	// first_request [300,450) comes from the prober.
	if a.Unattributed != 8*ms {
		t.Fatalf("unattributed %v", a.Unattributed)
	}
	if fr, ok := a.Stage(trace.StageFirstRequest); !ok || fr.Duration != 150*ms {
		t.Fatalf("first_request %+v", fr)
	}
	if a.Dominant != trace.StagePageCache {
		t.Fatalf("dominant %s", a.Dominant)
	}
	rs := SummarizeRequests(r.Requests)
	if rs.Cold == nil || rs.Cold.TTFT != 150 || rs.WarmTTFT.N != 5 || rs.WarmTTFT.Median != 50 {
		t.Fatalf("requests %+v", rs)
	}
	if rs.ColdPenalty != 3 {
		t.Fatalf("cold penalty %v, want 3", rs.ColdPenalty)
	}
	if s := rs.WarmTTFT.Spread; s < 0.059 || s > 0.061 {
		t.Fatalf("spread %v, want (52-49)/50", s)
	}
	if runs[1].Start != 3*time.Second || runs[1].Index != 1 {
		t.Fatalf("run 1 starts %v", runs[1].Start)
	}
}

func TestReportFormats(t *testing.T) {
	path := writeSession(t, t.TempDir(), "s.jsonl", coldRun(0, 0, 1, warm5))
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	md := BuildReport(s).Markdown()
	for _, want := range []string{"page_cache", "**page_cache**", "unattributed", "cold_1", "warm_5", "Cold penalty factor", "3.0×", "Critical path", "insufficient evidence"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	js, err := BuildReport(s).JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || len(back.Runs) != 1 || back.Runs[0].ColdTotalMS != 450 {
		t.Fatalf("json report: %v %+v", err, back.Runs)
	}
}

func TestChromeExportHasPerfettoFields(t *testing.T) {
	s, err := Open(writeSession(t, t.TempDir(), "s.jsonl", coldRun(0, 0, 1, warm5)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ExportChrome(s)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	phases := map[string]int{}
	for _, e := range doc.TraceEvents {
		ph, _ := e["ph"].(string)
		phases[ph]++
		for _, k := range []string{"ph", "pid", "name"} {
			if _, ok := e[k]; !ok {
				t.Fatalf("event lacks %q: %v", k, e)
			}
		}
		if ph == "M" {
			continue
		}
		if _, ok := e["ts"]; !ok {
			t.Fatalf("event lacks ts: %v", e)
		}
		if _, ok := e["tid"]; !ok && ph != "C" {
			t.Fatalf("event lacks tid: %v", e)
		}
		if ph == "X" {
			if dur, ok := e["dur"].(float64); !ok || dur < 0 {
				t.Fatalf("slice lacks dur: %v", e)
			}
		}
	}
	// 8 stages + first_request + gaps as X; requests b/e; tokens n;
	// samples C.
	if phases["X"] < 9 || phases["b"] < 7 || phases["b"] != phases["e"] || phases["n"] != 7*4 || phases["C"] < 10 {
		t.Fatalf("phase counts %v", phases)
	}
}

func findRow(t *testing.T, res DiffResult, metric string) DiffRow {
	t.Helper()
	for _, r := range res.Rows {
		if r.Metric == metric {
			return r
		}
	}
	t.Fatalf("no row %s in\n%s", metric, res.Text())
	return DiffRow{}
}

// TestReplayTiming checks that events come out in order at their scaled
// offsets. It runs in a synctest bubble, whose clock advances only when
// every goroutine of the test is blocked: the replayer's timers then fire at
// exactly the instants it asked for, so the pacing is checked to the
// microsecond (float scaling rounds) whatever the host's load, instead of
// against a tolerance a loaded CI machine's wake-up delays can exceed.
func TestReplayTiming(t *testing.T) {
	var evs []trace.Event
	for i, off := range []int{0, 20, 40, 40, 60, 100, 150, 200} {
		evs = append(evs, trace.Event{At: time.Duration(off) * ms, Kind: trace.KindMarker, Marker: &trace.Marker{Name: strconv.Itoa(i)}})
	}
	const speed = 2.0
	synctest.Test(t, func(t *testing.T) {
		var got []time.Duration
		var names []string
		start := time.Now()
		rp := NewReplayer(evs, ReplayOptions{Speed: speed})
		err := rp.Run(context.Background(), trace.SinkFunc(func(e trace.Event) {
			got = append(got, time.Since(start))
			names = append(names, e.Marker.Name)
		}))
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != len(evs) {
			t.Fatalf("%d events replayed of %d", len(names), len(evs))
		}
		for i, e := range evs {
			if names[i] != e.Marker.Name {
				t.Fatalf("out of order: %v", names)
			}
			want := time.Duration(float64(e.At) / speed)
			if diff := got[i] - want; diff < -time.Microsecond || diff > time.Microsecond {
				t.Errorf("event %d at %s, want %s", i, got[i], want)
			}
		}
	})
}

func TestReplayFastPauseSeek(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	var n int
	if err := NewReplayer(evs, ReplayOptions{Fast: true}).Run(context.Background(), trace.SinkFunc(func(trace.Event) { n++ })); err != nil || n != len(evs) {
		t.Fatalf("fast: %v, %d of %d", err, n, len(evs))
	}
	// Paused at start, seek to the end: everything arrives at once, then
	// seeking back emits a reset marker and replays up to the target.
	rp := NewReplayer(evs, ReplayOptions{Speed: 1})
	rp.SetPaused(true)
	got := make(chan trace.Event, 4*len(evs))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rp.Run(ctx, trace.SinkFunc(func(e trace.Event) { got <- e })) }()
	rp.Seek(600 * ms)
	waitFor := func(pred func(trace.Event) bool) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case e := <-got:
				if pred(e) {
					return
				}
			case <-timeout:
				t.Fatal("timed out waiting for replay event")
			}
		}
	}
	waitFor(func(e trace.Event) bool { return e.Kind == trace.KindRequest && e.Request.Label == "cold_1" })
	rp.Seek(100 * ms)
	waitFor(func(e trace.Event) bool {
		return e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerReplayReset
	})
	if p := rp.Position(); p != 100*ms {
		t.Fatalf("position after seek %v", p)
	}
	rp.SetSpeed(1000)
	rp.SetPaused(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replay did not finish")
	}
}

// TestReplayWaitsAtEnd: with WaitAtEnd a finished replay keeps its
// position at the session's end (however long the wall clock runs on),
// reports Done, and a seek back replays from the start; Run returns only
// when ctx ends. In a synctest bubble, so "long after" costs no time.
func TestReplayWaitsAtEnd(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	synctest.Test(t, func(t *testing.T) {
		rp := NewReplayer(evs, ReplayOptions{Speed: 4, WaitAtEnd: true})
		var n, resets int
		sink := trace.SinkFunc(func(e trace.Event) {
			n++
			if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerReplayReset {
				resets++
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rp.Run(ctx, sink) }()
		time.Sleep(time.Hour) // the session is 2 s long: long over
		synctest.Wait()
		if !rp.Done() || n != len(evs) || rp.Position() != rp.Duration() {
			t.Fatalf("at the end: done %v, %d of %d events, position %v of %v", rp.Done(), n, len(evs), rp.Position(), rp.Duration())
		}
		rp.Seek(0)
		synctest.Wait()
		if resets != 1 || rp.Done() {
			t.Fatalf("seek back after the end: %d resets, done %v", resets, rp.Done())
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n != 2*len(evs)+1 || !rp.Done() {
			t.Fatalf("replayed again: %d events, want %d", n, 2*len(evs)+1)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want it to wait for ctx", err)
		}
	})
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(""))
	evs := coldRun(0, 0, 1, []float64{50})
	var buf bytes.Buffer
	h, _ := json.Marshal(NewHeader("t", time.Unix(0, 0), Target{Kind: TargetBuiltin}))
	buf.Write(append(h, '\n'))
	for _, e := range evs[:6] {
		b, _ := json.Marshal(e)
		buf.Write(append(b, '\n'))
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()-9])
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		// Whatever reads must analyze and report without panicking.
		_ = BuildReport(s).Markdown()
		if _, err := ExportChrome(s); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBenchSessionHasNoColdStart(t *testing.T) {
	var evs []trace.Event
	evs = append(evs, trace.Event{At: 10 * ms, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerBenchStart, Attrs: trace.Attrs{"workload": "baseline", "run": 1.0, "warmup": false}}})
	for i := 0; i < 4; i++ {
		sent := time.Duration(20+i*100) * ms
		evs = append(evs, trace.Event{At: sent + 90*ms, Kind: trace.KindRequest, Request: &trace.Request{ID: strconv.Itoa(i), Phase: trace.PhaseBench, Sent: sent,
			FirstToken: 30 * ms, Tokens: []time.Duration{30 * ms, 60 * ms, 90 * ms}, End: 90 * ms, CompletionTokens: 3, Done: true}})
	}
	evs = append(evs, trace.Event{At: 420 * ms, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerBenchEnd, Attrs: trace.Attrs{"workload": "baseline"}}})
	s, err := Open(writeSession(t, t.TempDir(), "bench.jsonl", evs))
	if err != nil {
		t.Fatal(err)
	}
	runs := s.Runs()
	if len(runs) != 1 || runs[0].ColdEndKind != ColdEndNone {
		t.Fatalf("runs %+v", runs)
	}
	br := BenchRuns(s.Events)
	if len(br) != 1 || br[0].Requests != 4 || br[0].TTFT.Median != 30 || br[0].ITL.Median != 30 {
		t.Fatalf("bench runs %+v", br)
	}
	// 12 tokens from 10 ms to the last end at 410 ms: 30 tok/s.
	if br[0].OutputTokPerS < 29.9 || br[0].OutputTokPerS > 30.1 {
		t.Fatalf("throughput %v", br[0].OutputTokPerS)
	}
	md := BuildReport(s).Markdown()
	if strings.Contains(md, "Cold start") || !strings.Contains(md, "Load runs") || !strings.Contains(md, "baseline #1") {
		t.Fatalf("bench report:\n%s", md)
	}
}

// TestRecordedBenchFlagsColdRequests: report on a recorded bench session
// applies the same cold-contamination rule as the live bench: the first two
// of eight requests at 2 s to first token against 100 ms for the rest are
// named, with the advice; the same run without them flags nothing.
func TestRecordedBenchFlagsColdRequests(t *testing.T) {
	bench := func(firstTTFT time.Duration) []trace.Event {
		evs := []trace.Event{{At: 10 * ms, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerBenchStart, Attrs: trace.Attrs{"workload": "baseline", "run": 1.0, "warmup": false}}}}
		for i := 0; i < 8; i++ {
			sent := time.Duration(20+i*3000) * ms
			ttft := 100 * ms
			if i < 2 {
				ttft = firstTTFT
			}
			evs = append(evs, trace.Event{At: sent + ttft + 10*ms, Kind: trace.KindRequest, Request: &trace.Request{ID: "r" + strconv.Itoa(i), Phase: trace.PhaseBench, Sent: sent,
				FirstToken: ttft, Tokens: []time.Duration{ttft, ttft + 10*ms}, End: ttft + 10*ms, CompletionTokens: 2, Done: true}})
		}
		return append(evs, trace.Event{At: 25 * time.Second, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerBenchEnd, Attrs: trace.Attrs{"workload": "baseline"}}})
	}
	br := BenchRuns(bench(2 * time.Second))
	if len(br) != 1 || !slices.Equal(br[0].ColdRequests, []string{"r0", "r1"}) || br[0].ColdThresholdMS != 400 {
		t.Fatalf("cold requests %v above %v ms, want r0, r1 above 400", br[0].ColdRequests, br[0].ColdThresholdMS)
	}
	var b strings.Builder
	writeBenchMarkdown(&b, br)
	if !strings.Contains(b.String(), "(r0, r1) took longer than 400 ms") || !strings.Contains(b.String(), "--warmup-runs 1") {
		t.Errorf("report:\n%s", b.String())
	}
	if br := BenchRuns(bench(100 * ms)); len(br[0].ColdRequests) != 0 {
		t.Errorf("a warm run flagged %v", br[0].ColdRequests)
	}
}

// TestReportMeasuredZeroITL: two tokens that arrived in one read have an
// inter-token gap of 0 ms; the warm summary prints that reading as 0, not
// as "—" (not observed) beside a median and a spread computed with it.
func TestReportMeasuredZeroITL(t *testing.T) {
	evs := coldRun(0, 0, 1, warm5)
	for _, e := range evs {
		if e.Kind == trace.KindRequest && e.Request.Label == "warm_2" {
			e.Request.Tokens[2] = e.Request.Tokens[1] // same read: ITL 0
		}
	}
	s, err := Open(writeSession(t, t.TempDir(), "s.jsonl", evs))
	if err != nil {
		t.Fatal(err)
	}
	md := BuildReport(s).Markdown()
	var row string
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| ITL ms |") {
			row = l
		}
	}
	if !strings.HasPrefix(row, "| ITL ms | 0 | ") {
		t.Errorf("warm ITL row %q, want a minimum of 0:\n%s", row, md)
	}
}
