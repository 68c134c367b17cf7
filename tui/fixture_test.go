package tui

import (
	"flag"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// updating reports whether -update was given: go test ./tui -update
// regenerates the recorded session fixture and the golden frames. The flag
// itself is defined by teatest's golden package, which this test binary
// links; defining it here too would panic.
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

const fixturePath = "testdata/session.jsonl"

const gib = 1 << 30

// fixtureCreated is offset zero of the fixture, fixed so the file is
// byte-stable across regenerations.
var fixtureCreated = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

var (
	fixtureOnce sync.Once
	fixtureSess *sessions.Session
	fixtureErr  error
)

// loadFixture returns the recorded session, writing it first under -update.
func loadFixture(t testing.TB) *sessions.Session {
	t.Helper()
	fixtureOnce.Do(func() {
		if updating() {
			if fixtureErr = writeFixture(fixturePath); fixtureErr != nil {
				return
			}
		}
		fixtureSess, fixtureErr = sessions.Open(fixturePath)
	})
	if fixtureErr != nil {
		t.Fatalf("fixture: %v", fixtureErr)
	}
	return fixtureSess
}

func fixtureHeader() sessions.Header {
	h := sessions.Header{
		Format: sessions.FormatName, Version: sessions.FormatVersion, ToolVersion: "0.1.0-dev",
		Created: fixtureCreated,
		Host:    sessions.Host{Hostname: "h200-lab-3", OS: "linux", Arch: "amd64", Kernel: "6.8.0-49-generic", CPUs: 16, MemBytes: 128 << 30},
		GPUs:    []sessions.GPU{{Index: 0, Name: "NVIDIA H200", MemBytes: 150_150_000_000, Driver: "580.95.05"}},
		Target: sessions.Target{
			Kind: sessions.TargetBuiltin, ServerKind: "treni",
			Command: []string{"treni-top", "serve", "--model", "demo/qwen3-0.6b", "--device", "cuda:0", "--port", "8123"},
			URL:     "http://127.0.0.1:8123", Model: "demo/qwen3-0.6b", Device: "NVIDIA H200",
		},
		ModelFiles: []sessions.ModelFile{{Path: "/home/dev/.cache/treni-top/demo/qwen3-0.6b/model.safetensors", Bytes: 1_503_238_553}},
	}
	return h
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// fixtureSpans is a built-in engine cold start on an H200 with the weights
// evicted: CUDA init runs beside the page-cache fill, the upload overlaps the
// tail of the fill, and two small gaps no stage covers.
func fixtureSpans() []trace.Span {
	const w = 1_503_238_553
	sp := func(n trace.Stage, a, b float64, attrs trace.Attrs) trace.Span {
		return trace.Span{Name: n, Start: ms(a), End: ms(b), Source: "engine", Attrs: attrs}
	}
	return []trace.Span{
		sp(trace.StageProcessStart, 8, 41, nil),
		sp(trace.StageRuntimeInit, 41, 63, nil),
		sp(trace.StageCUDAInit, 63, 398, nil),
		sp(trace.StagePageCache, 66, 735, trace.Attrs{trace.AttrBytes: float64(w), trace.AttrGBps: 2.25, trace.AttrFiles: 1.0}),
		sp(trace.StageTensorIndexBuild, 70, 92, trace.Attrs{trace.AttrTensors: 311.0}),
		sp(trace.StageTokenizerLoad, 93, 171, nil),
		sp(trace.StageDecoderTensorUpload, 402, 1045, trace.Attrs{trace.AttrBytes: float64(w), trace.AttrGBps: 2.34}),
		sp(trace.StageKernelLoad, 1046, 1268, nil),
		sp(trace.StageKVAlloc, 1270, 1322, trace.Attrs{trace.AttrBlocks: 4096.0, trace.AttrTokens: 65536.0, trace.AttrBytes: 7.5e9}),
		sp(trace.StageGraphCapture, 1323, 1790, trace.Attrs{trace.AttrBuckets: 8.0}),
		sp(trace.StageHTTPReady, 1818, 1831, nil),
	}
}

// fixtureRequest builds a streamed request with jittered inter-token gaps.
func fixtureRequest(id, label string, phase trace.Phase, sent, ttft, itl float64, n int, seed int) trace.Request {
	q := trace.Request{ID: id, Label: label, Phase: phase, Endpoint: "chat", Sent: ms(sent),
		FirstByte: ms(ttft * 0.74), FirstEvent: ms(ttft * 0.76), FirstToken: ms(ttft),
		PromptTokens: 24, CompletionTokens: n, Status: 200, Done: true}
	at := ttft
	for i := 0; i < n; i++ {
		if i > 0 {
			// Deterministic jitter: a slow token every 16th, small wobble otherwise.
			j := 0.08 * math.Sin(float64(i*7+seed))
			if i%16 == 0 {
				j += 0.45
			}
			at += itl * (1 + j)
		}
		q.Tokens = append(q.Tokens, ms(at))
	}
	q.End = ms(at + 0.4)
	return q
}

func fixtureEvents() []trace.Event {
	var evs []trace.Event
	add := func(at float64, e trace.Event) {
		e.At = ms(at)
		evs = append(evs, e)
	}
	const total = 1_503_238_553.0
	add(0, trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerEvicted, Attrs: trace.Attrs{"files": 1.0}}})
	add(1, trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerResidency,
		Attrs: trace.Attrs{"resident_bytes": 0.0, "total_bytes": total, "when": "before_launch"}}})
	add(5, trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerRunStart}})
	add(8, trace.Event{Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, PID: 4242,
		Command: fixtureHeader().Target.Command, ServerKind: "treni"}})
	logf := func(at float64, stream, text string, st trace.Stage) {
		add(at, trace.Event{Kind: trace.KindLog, Log: &trace.Log{Stream: stream, PID: 4242, Text: text, Stage: st}})
	}
	for _, s := range fixtureSpans() {
		open := s
		open.Open, open.End = true, s.Start
		add(float64(s.Start)/1e6, trace.Event{Kind: trace.KindStage, Stage: &open})
		closed := s
		add(float64(s.End)/1e6, trace.Event{Kind: trace.KindStage, Stage: &closed})
		line := trace.NewStageLine(s.Name, fixtureCreated.Add(s.Start), fixtureCreated.Add(s.End), s.Attrs)
		line.PID = 4242
		logf(float64(s.End)/1e6+0.2, "stderr", string(line.Marshal()), s.Name)
	}
	logf(12, "stdout", "treni-top serve 0.1.0-dev: model demo/qwen3-0.6b (qwen3, 28 layers, 596M params, bf16)", "")
	logf(399, "stdout", "cuda: NVIDIA H200 (sm_90, 140 GiB), driver 580.95.05, context ready", "")
	logf(1046, "stdout", "weights: 311 tensors, 1.40 GiB uploaded at 2.34 GB/s (pageable; page cache was cold)", "")
	logf(1323, "stdout", "kv cache: 4096 blocks × 16 tokens = 65536 tokens, 6.98 GiB", "")
	logf(1791, "stdout", "cuda graphs: 8 decode buckets captured (1, 2, 4, 8, 16, 32, 64, 128)", "")
	logf(1819, "stdout", "listening on 127.0.0.1:8123", "")
	add(1833, trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthy}})

	reqs := []trace.Request{
		fixtureRequest("r1", "cold_1", trace.PhaseCold, 1860, 96.4, 6.4, 64, 1),
		fixtureRequest("r2", "warmup_1", trace.PhaseWarmup, 2500, 14.1, 5.9, 64, 2),
	}
	for i, ttft := range []float64{11.8, 12.3, 11.5, 12.9, 12.1} {
		reqs = append(reqs, fixtureRequest("r"+itoa(3+i), "warm_"+itoa(1+i), trace.PhaseWarm, 3000+500*float64(i), ttft, 5.9+0.05*float64(i), 64, 3+i))
	}
	for _, q := range reqs {
		live := q
		live.Done, live.Tokens, live.FirstToken, live.End = false, nil, 0, 0
		add(float64(q.Sent)/1e6, trace.Event{Kind: trace.KindRequest, Request: &live})
		done := q
		add(float64(q.Sent+q.End)/1e6, trace.Event{Kind: trace.KindRequest, Request: &done})
		logf(float64(q.Sent+q.End)/1e6+0.1, "stdout", "POST /v1/chat/completions 200 "+q.Label+" prompt=24 completion=64", "")
	}

	// Samplers at 10 Hz.
	lin := func(t, a, b float64) float64 { return math.Max(0, math.Min(1, (t-a)/(b-a))) }
	for t := 0.0; t <= 5600; t += 100 {
		gpu := 0.56 * gib
		if t >= 398 {
			gpu += 0.5 * gib
		}
		gpu += 1.40 * gib * lin(t, 402, 1045)
		if t >= 1322 {
			gpu += 6.98 * gib
		}
		gpu += 0.31 * gib * lin(t, 1323, 1790)
		rx := 0.02e9
		if t >= 402 && t < 1045 {
			rx = 2.34e9 + 0.05e9*math.Sin(t/37)
		}
		util := 0.0
		if t >= 1046 && t < 1790 {
			util = 38
		}
		add(t, trace.Event{Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.GPUSource(0), Values: map[string]float64{
			trace.MetricGPUMemUsed: gpu, trace.MetricGPUMemTotal: 150_150_000_000, trace.MetricPCIeRX: rx, trace.MetricGPUUtil: util}}})
		rss := 0.0
		if t >= 8 {
			rss = 22e6 + 0.18*gib*lin(t, 41, 400) + 1.40*gib*lin(t, 66, 1045)
		}
		add(t+1, trace.Event{Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourceProcess, Values: map[string]float64{
			trace.MetricRSS: rss, trace.MetricProcs: 1}}})
		add(t+2, trace.Event{Kind: trace.KindSample, Sample: &trace.Sample{Source: trace.SourcePageCache, Values: map[string]float64{
			trace.MetricResidentBytes: total * lin(t, 66, 735), trace.MetricWeightBytes: total}}})
	}
	trace.SortEvents(evs)
	return evs
}

// writeFixture records the fixture with the real recorder, so it is a
// session file like any other.
func writeFixture(path string) error {
	rec, err := sessions.Create(filepath.Clean(path), fixtureHeader())
	if err != nil {
		return err
	}
	for _, e := range fixtureEvents() {
		rec.Emit(e)
	}
	return rec.Close()
}
