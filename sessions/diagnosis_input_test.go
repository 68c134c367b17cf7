package sessions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// denseSession is a long live session as the samplers record it: a GPU and
// the process tree every 10 ms through a cold start of 30 s and a cold
// request that streams for 5 s, the page cache every 100 ms, the server's
// own metrics every second once healthy, log lines all along, warm
// requests, then a minute more of samples; then a run that fails before
// it is healthy with its last words in the log.
func denseSession() []trace.Event {
	var evs []trace.Event
	add := func(e trace.Event) { evs = append(evs, e) }
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	for run := 0; run < 2; run++ {
		base := ms(run * 200_000)
		failed := run == 1
		add(trace.Event{At: base, Run: run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart}})
		add(trace.Event{At: base, Run: run, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, PID: 10 + run, ServerKind: "vllm"}})
		end := 100_000
		if failed {
			end = 20_000
		}
		healthy, sent, ttft := 30_000, 30_100, 5_000
		for t := 0; t <= end; t += 10 {
			at := base + ms(t)
			cold := t < sent+ttft
			if cold || t%100 == 0 {
				// The GPU's memory rises, dips and rises again; PCIe
				// peaks once, mid-load.
				mem := 1e9 + float64(t%7000)*1e6
				rx := 1e9 + float64(t%1300)*1e5
				if t == 12_340 {
					rx = 9e10
				}
				add(trace.Event{At: at, Run: run, Kind: trace.KindSample, Sample: &trace.Sample{Source: "gpu0", Values: map[string]float64{
					trace.MetricGPUMemUsed: mem, trace.MetricPCIeRX: rx, trace.MetricGPUMemTotal: 8e10}}})
				add(trace.Event{At: at, Run: run, Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourceProcess, Values: map[string]float64{
					trace.MetricRSS: 5e8 + float64(t)*1e4, trace.MetricReadBytes: float64(min(t, healthy)) * 1e5}}})
			}
			if t%100 == 0 {
				weights := 4e9
				if t < 200 {
					weights = 0 // the files are not known yet
				}
				add(trace.Event{At: at, Run: run, Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourcePageCache, Values: map[string]float64{
					trace.MetricResidentBytes: float64(min(t, 25_000)) * 1.6e5, trace.MetricWeightBytes: weights, trace.MetricSysCachedBytes: 1e10 + float64(t)*1e5}}})
			}
			if t >= healthy && t%1000 == 0 && !failed {
				add(trace.Event{At: at, Run: run, Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourceServer, Values: map[string]float64{
					trace.MetricServerTTFTCount: float64(t % 3), trace.MetricServerTTFTMean: 0.05 + float64(t%5)/100, trace.MetricServerQueueMean: float64(t%4) / 1000}}})
			}
			if t%50 == 0 {
				text := fmt.Sprintf("INFO %d: loading step %d", t, t/50)
				if t%1000 == 0 {
					text = "   " // blank lines are never quoted
				}
				add(trace.Event{At: at, Run: run, Kind: trace.KindLog, Log: &trace.Log{Stream: "stderr", Text: text}})
			}
			switch {
			case t == 1_000:
				add(trace.Event{At: at, Run: run, Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StagePageCache, Start: base + ms(100), End: at, Source: "log"}})
			case t == 25_000:
				add(trace.Event{At: at, Run: run, Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageDecoderTensorUpload, Start: base + ms(1000), End: at, Source: "log"}})
			case t == healthy && !failed:
				add(trace.Event{At: at, Run: run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthy}})
			case t == sent+ttft+500 && !failed:
				add(trace.Event{At: at, Run: run, Kind: trace.KindRequest, Request: &trace.Request{ID: "cold", Label: "cold_1", Phase: trace.PhaseCold,
					Sent: base + ms(sent), FirstToken: ms(ttft), End: ms(ttft + 400), Tokens: []time.Duration{ms(ttft)}, CompletionTokens: 1, Done: true}})
			case t > sent+ttft+500 && t%5000 == 0 && !failed:
				add(trace.Event{At: at, Run: run, Kind: trace.KindRequest, Request: &trace.Request{ID: fmt.Sprint("warm", t), Label: "warm", Phase: trace.PhaseWarm,
					Sent: at - ms(300), FirstToken: ms(40 + t%30), End: ms(200), Tokens: []time.Duration{ms(40 + t%30)}, CompletionTokens: 1, Done: true}})
			}
		}
		if failed {
			add(trace.Event{At: base + ms(end), Run: run, Kind: trace.KindLog, Log: &trace.Log{Stream: "stderr", Text: "RuntimeError: CUDA out of memory"}})
			add(trace.Event{At: base + ms(end+1), Run: run, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessExit, PID: 10 + run, ExitCode: 1}})
			add(trace.Event{At: base + ms(end+2), Run: run, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunFailed, Attrs: trace.Attrs{"error": "target exited"}}})
		}
	}
	return evs
}

// diagnoses is every run's diagnosis and the latest run's, as JSON.
func diagnoses(t *testing.T, evs []trace.Event) string {
	t.Helper()
	var all []Diagnosis
	for _, r := range Analyze(evs) {
		all = append(all, DiagnoseRun(evs, r))
	}
	b, err := json.Marshal(struct {
		Runs   []Diagnosis
		Latest Diagnosis
	}{all, Diagnose(evs)})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDiagnosisInputMatchesEvents: the diagnosis of what DiagnosisInput
// keeps equals the diagnosis of every event, for recorded sessions and a
// long dense one, at the end and at points along the stream (the TUI
// diagnoses a live session as it grows), while it keeps a fraction of the
// samples and log lines.
func TestDiagnosisInputMatchesEvents(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.jsonl.gz")
	if len(paths) == 0 {
		t.Fatal("no recorded sessions in testdata")
	}
	streams := map[string][]trace.Event{
		"dense":       denseSession(),
		"cold series": coldRunSeries(),
		"two runs":    append(coldRun(0, 0, 1, warm5), coldRun(1, 30*time.Second, 1, warm5)...),
	}
	for _, p := range paths {
		s, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		streams[filepath.Base(p)] = s.Events
	}
	for name, evs := range streams {
		for _, thin := range []int{inputThinEvery, 500} {
			in := NewDiagnosisInput()
			in.thinEvery = thin
			for i, e := range evs {
				in.Add(e)
				if i%(len(evs)/25+1) != 0 && i != len(evs)-1 {
					continue
				}
				if want, got := diagnoses(t, evs[:i+1]), diagnoses(t, in.Events()); want != got {
					t.Fatalf("%s (thinned every %d): after %d of %d events the diagnosis differs:\nall:  %s\nkept: %s", name, thin, i+1, len(evs), want, got)
				}
			}
			if in.Dropped() != 0 {
				t.Errorf("%s: %d samples dropped", name, in.Dropped())
			}
			// The dense session's runs keep a fraction of its events: the
			// failed run, whose window never settles, all of its samples
			// until it is thinned.
			if kept := len(in.Events()); name == "dense" && (thin == 500 && kept > len(evs)/20 || kept > len(evs)/3) {
				t.Errorf("dense (thinned every %d): %d of %d events kept", thin, kept, len(evs))
			}
		}
	}
}

// TestDiagnosisInputBounded: a run whose cold window never closes (its
// target never answers) keeps at most maxSamples samples and counts the
// rest, with the first of each source kept.
func TestDiagnosisInputBounded(t *testing.T) {
	in := NewDiagnosisInput()
	in.thinEvery, in.maxSamples = 1_000_000, 1000
	in.Add(trace.Event{Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, PID: 1}})
	const n = 100_000
	for i := 0; i < n; i++ {
		in.Add(trace.Event{At: time.Duration(i) * time.Millisecond, Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourceProcess, Values: map[string]float64{trace.MetricRSS: float64(i)}}})
	}
	in.Add(trace.Event{At: n * time.Millisecond, Kind: trace.KindSample, Sample: &trace.Sample{Source: "gpu0", Values: map[string]float64{trace.MetricGPUMemUsed: 1}}})
	samples := 0
	gpu := false
	for _, e := range in.Events() {
		if e.Kind == trace.KindSample {
			samples++
			gpu = gpu || e.Sample.Source == "gpu0"
		}
	}
	if samples != 1001 || in.Dropped() != n-1000 || !gpu {
		t.Errorf("kept %d samples (GPU's first: %v), dropped %d", samples, gpu, in.Dropped())
	}
	if !Diagnose(in.Events()).Facts.HaveGPU {
		t.Error("the diagnosis lost the GPU")
	}
}

// TestOpenForDiagnosis: a file read by OpenForDiagnosis has the runs and
// diagnoses of the whole file, the header and the file's state, and keeps
// a fraction of a dense session's events.
func TestOpenForDiagnosis(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.jsonl.gz")
	dense := writeSession(t, t.TempDir(), "dense.jsonl", denseSession())
	for _, p := range append(paths, dense) {
		all, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		got, dropped, err := OpenForDiagnosis(p)
		if err != nil {
			t.Fatal(err)
		}
		if want, have := diagnoses(t, all.Events), diagnoses(t, got.Events); want != have {
			t.Errorf("%s: the diagnosis differs:\nall:  %s\nkept: %s", p, want, have)
		}
		wr, _ := json.Marshal(all.Runs())
		gr, _ := json.Marshal(got.Runs())
		if string(wr) != string(gr) {
			t.Errorf("%s: the runs differ:\nall:  %s\nkept: %s", p, wr, gr)
		}
		if dropped != 0 || got.Header.Created != all.Header.Created || got.Truncated != all.Truncated || got.Unfinished != all.Unfinished || got.Path != p {
			t.Errorf("%s: dropped %d, header %v, truncated %v, unfinished %v, path %q", p, dropped, got.Header.Created, got.Truncated, got.Unfinished, got.Path)
		}
		if p == dense && len(got.Events) > len(all.Events)/3 {
			t.Errorf("dense: kept %d of %d events", len(got.Events), len(all.Events))
		}
	}
	if _, _, err := OpenForDiagnosis(filepath.Join(t.TempDir(), "missing.jsonl")); err == nil {
		t.Error("a missing file read")
	}
	b, err := os.ReadFile(dense)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, append(b[:bytes.IndexByte(b, '\n')+1], "{\"t\":1,\"kind\":\"stage\",\"stage\":3}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenForDiagnosis(bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a malformed line: %v", err)
	}
}
