package serverlog

import (
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

func TestDetectKindFromCommand(t *testing.T) {
	cases := []struct {
		cmd  []string
		want Kind
	}{
		{[]string{"vllm", "serve", "Qwen/Qwen3-4B"}, KindVLLM},
		{[]string{"/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "x"}, KindVLLM},
		{[]string{"docker", "run", "--gpus", "all", "vllm/vllm-openai:latest", "--model", "x"}, KindVLLM},
		{[]string{"python", "-m", "sglang.launch_server", "--model-path", "x"}, KindSGLang},
		{[]string{"text-generation-launcher", "--model-id", "gpt2"}, KindTGI},
		{[]string{"docker", "run", "ghcr.io/huggingface/text-generation-inference:3.3", "--model-id", "x"}, KindTGI},
		{[]string{"./build/bin/llama-server", "-m", "x.gguf"}, KindLlamaCpp},
		{[]string{"ollama", "serve"}, KindOllama},
		{[]string{"/opt/treni-top", "serve", "--model", "d"}, KindTreni},
		{[]string{"python", "app.py"}, KindUnknown},
		{nil, KindUnknown},
	}
	for _, c := range cases {
		if got := DetectKind(c.cmd, nil); got != c.want {
			t.Errorf("DetectKind(%q) = %s, want %s", c.cmd, got, c.want)
		}
	}
	// The command wins over the lines.
	if got := DetectKind([]string{"ollama", "serve"}, []string{"llama_model_loader: loaded meta data with 1 key-value pairs and 2 tensors"}); got != KindOllama {
		t.Errorf("command should win, got %s", got)
	}
	if got := DetectKind(nil, []string{`{"treni_stage":"v1","stage":"cuda_init","start_ns":1,"end_ns":2}`}); got != KindTreni {
		t.Errorf("treni stage line detected as %s", got)
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{"": KindAuto, "auto": KindAuto, "VLLM": KindVLLM, "llama.cpp": KindLlamaCpp, "llamacpp": KindLlamaCpp, "treni": KindTreni} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := ParseKind("triton"); err == nil || !strings.Contains(err.Error(), "use auto") {
		t.Errorf("ParseKind(triton) error %v should list the kinds", err)
	}
}

func TestParseTimestamp(t *testing.T) {
	utc := time.UTC
	ref := time.Date(2026, 5, 10, 0, 0, 0, 0, utc)
	ist := time.FixedZone("", 5*3600+1800)
	cases := []struct {
		kind Kind
		line string
		ref  time.Time
		want time.Time
		ok   bool
	}{
		{KindVLLM, "INFO 05-09 22:51:11 [__init__.py:239] Automatically detected platform cuda.", ref, time.Date(2026, 5, 9, 22, 51, 11, 0, utc), true},
		{KindVLLM, "DEBUG 02-16 16:40:17.843 [__init__.py:28] No plugins", ref, time.Date(2026, 2, 16, 16, 40, 17, 843e6, utc), true},
		{KindVLLM, "INFO 02-16 16:29:15 llm_engine.py:79] Initializing an LLM engine", ref, time.Date(2026, 2, 16, 16, 29, 15, 0, utc), true},
		{KindVLLM, "(Worker_TP7_EP7 pid=2085) INFO 09-24 20:46:11 [gpu_model_runner.py:2338] Starting", time.Date(2026, 9, 1, 0, 0, 0, 0, utc), time.Date(2026, 9, 24, 20, 46, 11, 0, utc), true},
		// New Year: the previous line was on Dec 31.
		{KindVLLM, "INFO 01-01 00:00:01 [x.py:1] y", time.Date(2025, 12, 31, 23, 59, 59, 0, utc), time.Date(2026, 1, 1, 0, 0, 1, 0, utc), true},
		// A May log read in November stays in that year.
		{KindVLLM, "INFO 05-09 22:51:11 [x.py:1] y", time.Date(2026, 11, 22, 0, 0, 0, 0, utc), time.Date(2026, 5, 9, 22, 51, 11, 0, utc), true},
		{KindVLLM, "(Worker_TP0 pid=3667549) 2026-05-19 02:11:47,969 - INFO - autotuner.py:446 - flashinfer.jit", ref, time.Date(2026, 5, 19, 2, 11, 47, 969e6, utc), true},
		{KindVLLM, "INFO:     Application startup complete.", ref, time.Time{}, false},
		{KindSGLang, "[2025-01-23 19:35:14 TP0] Init torch distributed begin.", ref, time.Date(2025, 1, 23, 19, 35, 14, 0, utc), true},
		{KindSGLang, "Loading safetensors checkpoint shards:   0% Completed", ref, time.Time{}, false},
		{KindTGI, "2025-07-04T12:35:58.150338Z  INFO shard-manager: text_generation_launcher: Shard ready in 48.277857716s rank=0", ref, time.Date(2025, 7, 4, 12, 35, 58, 150338000, utc), true},
		{KindTGI, "INFO:tgi-server:         2024-01-15T08:47:15.883089Z  INFO download: text_generation_launcher: Starting download process.", ref, time.Date(2024, 1, 15, 8, 47, 15, 883089000, utc), true},
		{KindTGI, `{"timestamp":"2024-05-01T10:00:00.5Z","level":"INFO","fields":{"message":"Connected"}}`, ref, time.Date(2024, 5, 1, 10, 0, 0, 5e8, utc), true},
		{KindOllama, `time=2024-11-08T01:05:27.403+05:30 level=DEBUG source=sched.go:224 msg="loading first model"`, ref, time.Date(2024, 11, 8, 1, 5, 27, 403e6, ist), true},
		{KindOllama, `[GIN] 2026/05/05 - 01:30:24 | 200 |  4.006473015s |       127.0.0.1 | POST     "/api/generate"`, ref, time.Date(2026, 5, 5, 1, 30, 24, 0, utc), true},
		{KindOllama, `INFO [main] model loaded | tid="0x1f9bab240" timestamp=1731008147`, ref, time.Unix(1731008147, 0), true},
		{KindOllama, "llama_model_loader: loaded meta data with 34 key-value pairs", ref, time.Time{}, false},
		{KindLlamaCpp, "0.07.611.221 I srv  llama_server: model loaded", ref, ref.Add(7611221 * time.Microsecond), true},
		{KindLlamaCpp, "1.02.000.500 I main: server is listening", ref, ref.Add(62*time.Second + 500*time.Microsecond), true},
		{KindLlamaCpp, "main: model loaded", ref, time.Time{}, false},
		{KindTreni, `{"treni_stage":"v1","stage":"cuda_init","start_ns":1000,"end_ns":2000000000}`, ref, time.Unix(2, 0), true},
		{KindTreni, "2026/11/22 03:00:01.5 listening on :8080", ref, time.Date(2026, 11, 22, 3, 0, 1, 5e8, utc), true},
		{KindAuto, "[2025-01-23 19:35:14] x", ref, time.Date(2025, 1, 23, 19, 35, 14, 0, utc), true},
		{KindAuto, "no time here", ref, time.Time{}, false},
	}
	for _, c := range cases {
		got, ok := ParseTimestamp(c.kind, c.line, c.ref)
		if ok != c.ok || (ok && !got.Equal(c.want)) {
			t.Errorf("ParseTimestamp(%s, %q) = %v, %v; want %v, %v", c.kind, c.line, got, ok, c.want, c.ok)
		}
	}
}

func TestLineClock(t *testing.T) {
	ref := time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)
	lines := []string{
		"untimed before",
		"[2025-01-23 10:00:00] a",
		"untimed 1",
		"untimed 2",
		"[2025-01-23 10:00:04] b",
		"[2025-01-23 09:59:00] a stamp that goes back in time",
		"[9999-01-23 10:00:09] a stamp from the future",
		"[1970-01-01 00:00:01] a clock never set",
		"untimed after",
		"[2025-01-23 10:00:06] c",
	}
	c := NewLineClock(KindSGLang, ref)
	var at []time.Duration
	var how []LineTime
	for _, l := range lines {
		a, h := c.Place(Unwrap(l, ref))
		at, how = append(at, a), append(how, h)
	}
	start, ok := c.Start()
	if !ok || !start.Equal(time.Date(2025, 1, 23, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("start %v %v", start, ok)
	}
	// Untimed lines keep the previous timed line's offset: order, not
	// time (no line counting), and impossible stamps are ignored.
	want := []time.Duration{0, 0, 0, 0, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 6 * time.Second}
	wantHow := []LineTime{TimeNone, TimeOwn, TimeNone, TimeNone, TimeOwn, TimeOwn, TimeRejected, TimeRejected, TimeNone, TimeOwn}
	for i := range want {
		if at[i] != want[i] || how[i] != wantHow[i] {
			t.Errorf("line %d at %v (%d), want %v (%d)", i, at[i], how[i], want[i], wantHow[i])
		}
	}
	if c.Own != 4 || c.Untimed != 4 || c.Rejected != 2 || c.Timed() != 4 || !strings.Contains(c.FirstRejected, "9999") {
		t.Errorf("counts own %d untimed %d rejected %d first %q", c.Own, c.Untimed, c.Rejected, c.FirstRejected)
	}
	u := NewLineClock(KindLlamaCpp, ref)
	for _, l := range []string{"a", "b", "c"} {
		if a, h := u.Place(Unwrap(l, ref)); a != 0 || h != TimeNone {
			t.Errorf("untimed log: %v %d", a, h)
		}
	}
	if _, ok := u.Start(); ok || u.Timed() != 0 {
		t.Errorf("an untimed log has no start")
	}
}

// TestLineClockWrapperZone: a vLLM log under docker logs -t carries the
// server's zone-less local stamps and the collector's UTC ones; lines with
// only the collector's (tqdm bars) stay on the same axis.
func TestLineClockWrapperZone(t *testing.T) {
	ref := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	// The server's clock is UTC+2 (read in ref's zone, UTC), the
	// collector's UTC.
	lines := []string{
		"2025-05-09T20:51:11.100000000Z INFO 05-09 22:51:11 [x.py:1] first",
		"2025-05-09T20:51:12.500000000Z Loading safetensors checkpoint shards:  50% Completed | 1/2",
		"2025-05-09T20:51:13.900000000Z INFO 05-09 22:51:13 [x.py:1] third",
	}
	c := NewLineClock(KindVLLM, ref)
	var at []time.Duration
	for _, l := range lines {
		a, _ := c.Place(Unwrap(l, ref))
		at = append(at, a)
	}
	want := []time.Duration{0, 1500 * time.Millisecond, 2 * time.Second}
	for i := range want {
		if at[i] != want[i] {
			t.Errorf("line %d at %v, want %v", i, at[i], want[i])
		}
	}
	if c.Own != 2 || c.Wrapped != 1 {
		t.Errorf("own %d wrapped %d", c.Own, c.Wrapped)
	}
}

// feedAll feeds lines one second apart to a deferred parser.
func feedAll(kind Kind, lines ...string) (*Parser, []trace.Span) {
	p := NewParser(kind, trace.ClockAt(time.Unix(0, 0)))
	p.SetDeferred(true)
	var got []trace.Span
	for i, l := range lines {
		sp, _ := p.Feed(time.Duration(i)*time.Second, l)
		got = append(got, sp...)
	}
	return p, finalSpans(append(got, p.Flush(time.Duration(len(lines))*time.Second)...))
}

// finalSpans keeps the last version of each span a parser returned (by
// Name and Start, as consumers replace them), in start order.
func finalSpans(spans []trace.Span) []trace.Span {
	type key struct {
		name  trace.Stage
		start time.Duration
	}
	idx := map[key]int{}
	var out []trace.Span
	for _, s := range spans {
		k := key{s.Name, s.Start}
		if i, ok := idx[k]; ok {
			out[i] = s
			continue
		}
		idx[k] = len(out)
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

func spanOf(t *testing.T, spans []trace.Span, name trace.Stage) trace.Span {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no %s span in %v", name, spans)
	return trace.Span{}
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// Lines of formats the fixtures do not show (PATTERNS.md), one second apart.
func TestFormatsBeyondFixtures(t *testing.T) {
	t.Run("vllm 2026 wording", func(t *testing.T) {
		_, spans := feedAll(KindVLLM,
			"(APIServer pid=2) INFO 05-19 02:09:59 [api_server.py:1] vLLM API server version 0.20.1",
			"(EngineCore pid=1) INFO 05-19 02:10:00 [core.py:1] Initializing a V1 LLM engine (v0.20.1) with config: tensor_parallel_size=1",
			"(EngineCore pid=1) INFO 05-19 02:10:01 [default_loader.py:1] [RunAI Streamer] Overall time to stream 15.0 GiB of all files: 0.50s, 30 GiB/s",
			"(EngineCore pid=1) INFO 05-19 02:10:02 [gpu_model_runner.py:1] Model loading took 15.0 GiB memory and 1.000000 seconds",
			"(EngineCore pid=1) INFO 05-19 02:10:03 [monitor.py:1] torch.compile took 0.50 s in total",
			"(EngineCore pid=1) INFO 05-19 02:10:04 [monitor.py:1] Initial profiling/warmup run took 0.25 s",
			"(APIServer pid=2) INFO 05-19 02:10:05 [api_server.py:1] Starting vLLM server on http://0.0.0.0:8000",
			"(APIServer pid=2) INFO:     Application startup complete.",
		)
		if s := spanOf(t, spans, trace.StageDecoderTensorUpload); s.Duration() != 500*time.Millisecond || s.Attrs["loader"] != "runai_streamer" {
			t.Errorf("runai upload %v", s.Duration())
		} else if b, _ := s.Attrs.Float(trace.AttrBytes); !approx(b, 15*giB) {
			t.Errorf("runai bytes %v", b)
		}
		if s := spanOf(t, spans, trace.StageCompile); s.Duration() != 500*time.Millisecond {
			t.Errorf("compile %v", s.Duration())
		}
		if s := spanOf(t, spans, trace.StageWarmup); s.Duration() != 250*time.Millisecond {
			t.Errorf("warmup %v", s.Duration())
		}
		if s := spanOf(t, spans, trace.StageRuntimeInit); s.Attrs["version"] != "0.20.1" {
			t.Errorf("version %v", s.Attrs)
		}
		spanOf(t, spans, trace.StageHTTPReady)
	})
	t.Run("vllm V0 tensor parallel workers without a tag on the driver", func(t *testing.T) {
		_, spans := feedAll(KindVLLM,
			"INFO 10-11 09:03:09 llm_engine.py:226] Initializing an LLM engine (v0.7.3) with config: tensor_parallel_size=2, pipeline_parallel_size=1",
			"(VllmWorkerProcess pid=11) INFO 10-11 09:03:10 model_runner.py:1] Starting to load model m...",
			"INFO 10-11 09:03:10 model_runner.py:1] Starting to load model m...",
			"(VllmWorkerProcess pid=11) INFO 10-11 09:03:20 model_runner.py:1] Loading model weights took 7.0 GB",
			"INFO 10-11 09:03:21 model_runner.py:1] Loading model weights took 7.0 GB",
			"INFO 10-11 09:03:22 executor_base.py:1] # cuda blocks: 100, # CPU blocks: 10",
		)
		s := spanOf(t, spans, trace.StageModelLoad)
		if s.Workers != 2 {
			// One tagged worker plus the untagged driver.
			t.Errorf("workers %d, want 2", s.Workers)
		}
		if s.Start != time.Second || s.End != 4*time.Second {
			t.Errorf("V0 load [%v, %v], want from the first 'Starting to load' to the last weights line", s.Start, s.End)
		}
		if b, _ := spanOf(t, spans, trace.StageKVAlloc).Attrs.Float(trace.AttrBlocks); b != 100 {
			t.Errorf("cuda blocks %v", b)
		}
	})
	t.Run("tgi ≤0.8 and sub-second shard", func(t *testing.T) {
		_, spans := feedAll(KindTGI,
			"2023-05-01T10:00:00.000000Z  INFO text_generation_launcher: Starting shard 0",
			"2023-05-01T10:00:01.000000Z  INFO text_generation_launcher: Shard 0 ready in 850.2ms",
		)
		s := spanOf(t, spans, trace.StageModelLoad)
		if rep, _ := s.Attrs.Float(trace.AttrReported); !approx(rep, 0.8502) {
			t.Errorf("reported %v", rep)
		}
	})
	t.Run("tgi --json-output", func(t *testing.T) {
		p, spans := feedAll(KindTGI,
			`{"timestamp":"2024-05-01T10:00:00.000000Z","level":"INFO","fields":{"message":"Starting shard"},"target":"text_generation_launcher","span":{"rank":0,"name":"shard-manager"}}`,
			`{"timestamp":"2024-05-01T10:00:09.000000Z","level":"INFO","fields":{"message":"Shard ready in 9.1s"},"target":"text_generation_launcher","span":{"rank":0,"name":"shard-manager"}}`,
			`{"timestamp":"2024-05-01T10:00:10.000000Z","level":"INFO","fields":{"message":"Connected"},"target":"text_generation_router"}`,
		)
		s := spanOf(t, spans, trace.StageModelLoad)
		if rep, _ := s.Attrs.Float(trace.AttrReported); !approx(rep, 9.1) || s.End != time.Second {
			t.Errorf("json shard %+v", s)
		}
		if _, ok := p.Ready(); !ok {
			t.Error("json Connected not ready")
		}
	})
	t.Run("llama.cpp 2026 prefix", func(t *testing.T) {
		p, spans := feedAll(KindLlamaCpp,
			"0.00.010.000 I load_backend: loaded CUDA backend from /usr/lib/libggml-cuda.so",
			"0.00.020.000 I main: loading model",
			"0.00.030.000 I llama_model_loader: loaded meta data with 3 key-value pairs and 7 tensors from m.gguf (version GGUF V3 (latest))",
			"0.00.040.000 I load_tensors: offloaded 3/3 layers to GPU",
			"0.00.050.000 I llama_kv_cache: size =   64.00 MiB (  1024 cells,   2 layers,  1/1 seqs)",
			"0.00.060.000 I llama_context: graph splits = 1",
			"0.07.611.221 I srv  llama_server: model loaded",
			"0.07.700.000 I main: server is listening on http://127.0.0.1:8080 - starting the main loop",
		)
		spanOf(t, spans, trace.StageCUDAInit)
		spanOf(t, spans, trace.StageTensorIndexBuild)
		spanOf(t, spans, trace.StageKVAlloc)
		if _, ok := p.Ready(); !ok {
			t.Error("not ready after model loaded")
		}
	})
	t.Run("llama.cpp old listening line is not readiness", func(t *testing.T) {
		p, _ := feedAll(KindLlamaCpp, "main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 15", "main: loading model")
		if _, ok := p.Ready(); ok {
			t.Error("the pre-load listening line must not count as ready")
		}
	})
	t.Run("ollama 0.30 llama-server and Listening", func(t *testing.T) {
		p, spans := feedAll(KindOllama,
			`time=2026-08-21T10:00:00.000Z level=INFO source=routes.go:1 msg="Listening on 127.0.0.1:11434 (version 0.30.0)"`,
			`time=2026-08-21T10:00:05.000Z level=INFO source=llama_server.go:433 msg="starting llama-server" cmd="llama-server --model x"`,
			`time=2026-08-21T10:00:06.000Z level=INFO source=llama_server.go:1362 msg="llama-server started in 1.50 seconds"`,
			`[GIN] 2026/08/21 - 10:00:07 | 200 |  2.5s |  127.0.0.1 | POST     "/api/chat"`,
			`[GIN] 2026/08/21 - 10:00:08 | 200 |  0.1s |  127.0.0.1 | POST     "/api/chat"`,
		)
		if s := spanOf(t, spans, trace.StageModelLoad); s.Duration() != 1500*time.Millisecond {
			t.Errorf("model_load %v", s.Duration())
		}
		n := 0
		for _, s := range spans {
			if s.Name == trace.StageFirstRequest {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d first_request spans, want only the first call", n)
		}
		if at, ok := p.Ready(); !ok || at != 0 {
			t.Errorf("ready %v %v", at, ok)
		}
	})
}

func TestTreniStageLines(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	clock := trace.ClockAt(base)
	line := string(trace.NewStageLine(trace.StageCUDAInit, base.Add(time.Second), base.Add(3*time.Second), trace.Attrs{"device": "H200"}).Marshal())
	p := NewParser(KindTreni, clock)
	spans, stage := p.Feed(4*time.Second, line)
	if stage != trace.StageCUDAInit || len(spans) != 1 {
		t.Fatalf("stage %q spans %v", stage, spans)
	}
	if s := spans[0]; s.Start != time.Second || s.End != 3*time.Second || s.Source != "engine" || s.Attrs["device"] != "H200" {
		t.Errorf("span %+v", s)
	}
	// Any parser accepts the engine's lines (a wrapper script around it).
	p = NewParser(KindVLLM, clock)
	if spans, _ := p.Feed(0, line); len(spans) != 1 {
		t.Errorf("vllm parser ignored a treni stage line")
	}
	// A malformed stage line is a plain line.
	if spans, st := p.Feed(0, `{"treni_stage":"v9","stage":"x"}`); len(spans) != 0 || st != "" {
		t.Errorf("malformed stage line gave %v %q", spans, st)
	}
}

func TestAutoParser(t *testing.T) {
	p := NewParser(KindAuto, trace.Clock{})
	p.Feed(0, "some wrapper chatter")
	sp, _ := p.Feed(time.Second, "[2025-01-23 19:35:15 TP0] Load weight begin. avail mem=78.81 GB")
	if p.Kind() != KindSGLang {
		t.Fatalf("auto kind %s", p.Kind())
	}
	if len(sp) != 1 || sp[0].Name != trace.StageRuntimeInit {
		// The wrapper line started the log: runtime_init, then the open
		// upload is held back (a tagged rank, worker count unknown).
		t.Errorf("spans %v", sp)
	}
	sp, st := p.Feed(2*time.Second, "[2025-01-23 19:35:20 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.72 GB")
	if st != trace.StageDecoderTensorUpload || len(sp) != 1 || sp[0].Open {
		t.Errorf("end line: %q %v", st, sp)
	}
	// Never detected: flushes as unknown, no spans, no panic.
	q := NewParser(KindAuto, trace.Clock{})
	for i := 0; i < 3; i++ {
		q.Feed(time.Duration(i), "nothing to see")
	}
	if sp := q.Flush(time.Second); len(sp) != 0 || q.Kind() != KindUnknown {
		t.Errorf("undetected: %v %s", sp, q.Kind())
	}
}

func TestUnknownLinesReturnNothing(t *testing.T) {
	for _, k := range Kinds() {
		p := NewParser(k, trace.Clock{})
		for i, l := range []string{"", "hello", "INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK", "Loading weights took many seconds", "took 3 s"} {
			if sp, st := p.Feed(time.Duration(i)*time.Second, l); len(sp) != 0 || st != "" {
				t.Errorf("%s: %q gave %v %q", k, l, sp, st)
			}
		}
	}
}

// TestLiveStartIsFrozen: once published, a span keeps its Start even when a
// later worker reports an earlier one (consumers key spans by Name, Start).
func TestLiveStartIsFrozen(t *testing.T) {
	p := NewParser(KindVLLM, trace.Clock{})
	var got []trace.Span
	feed := func(at time.Duration, l string) {
		sp, _ := p.Feed(at, l)
		got = append(got, sp...)
	}
	feed(0, "(Worker_TP0 pid=1) INFO 09-24 20:50:00 [default_loader.py:1] Loading weights took 10.00 seconds")
	feed(time.Second, "(Worker_TP1 pid=2) INFO 09-24 20:50:01 [default_loader.py:1] Loading weights took 20.00 seconds")
	got = append(got, p.Flush(2*time.Second)...)
	if len(got) < 2 {
		t.Fatalf("spans %v", got)
	}
	for _, s := range got {
		if s.Start != -10*time.Second {
			t.Errorf("start moved to %v", s.Start)
		}
	}
	last := got[len(got)-1]
	if last.Workers != 2 || last.End != time.Second {
		t.Errorf("collapsed span %+v", last)
	}
	// Deferred: the earliest worker's start.
	_, spans := feedAll(KindVLLM,
		"(Worker_TP0 pid=1) INFO 09-24 20:50:00 [default_loader.py:1] Loading weights took 10.00 seconds",
		"(Worker_TP1 pid=2) INFO 09-24 20:50:01 [default_loader.py:1] Loading weights took 20.00 seconds")
	if s := spanOf(t, spans, trace.StageDecoderTensorUpload); s.Start != -19*time.Second || s.Workers != 2 {
		t.Errorf("deferred %+v", s)
	}
}

// TestFeedPlainLinesDoNotAllocate: the launcher feeds every line of a
// chatty server; lines that are not stage lines must cost no garbage.
func TestFeedPlainLinesDoNotAllocate(t *testing.T) {
	plain := map[Kind]string{
		KindVLLM:     "INFO 05-09 22:56:48 [launcher.py:36] Route: /v1/chat/completions, Methods: POST",
		KindSGLang:   "[2025-01-23 19:35:28 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0",
		KindTGI:      "2025-07-04T12:36:00.922473Z  INFO text_generation_launcher: image_id 0 start_idx 0 end_idx 258, length 258",
		KindLlamaCpp: "slot         init: id  0 | task -1 | new slot n_ctx_slot = 2048",
		KindOllama:   `time=2024-11-08T01:05:27.667+05:30 level=DEBUG source=server.go:632 msg="model load progress 0.19"`,
	}
	for k, l := range plain {
		p := NewParser(k, trace.Clock{})
		p.Feed(0, l)
		n := testing.AllocsPerRun(100, func() { p.Feed(time.Second, l) })
		if n != 0 {
			t.Errorf("%s: %v allocations per plain line", k, n)
		}
	}
}

// TestLineClockYearLessCollector: journald's stamps have no year; a
// server's own dated stamps keep theirs, and the collector's lines follow
// them (an Ollama log of 2024 read in 2026 stays in 2024).
func TestLineClockYearLessCollector(t *testing.T) {
	ref := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	lines := []string{
		"May 27 12:32:31 h ollama[1]: time=2024-05-27T12:32:31.486Z level=INFO source=images.go:729 msg=x",
		"May 27 12:32:33 h ollama[1]: a line without its own stamp",
	}
	c := NewLineClock(KindOllama, ref)
	var at []time.Duration
	for _, l := range lines {
		a, _ := c.Place(Unwrap(l, ref))
		at = append(at, a)
	}
	start, _ := c.Start()
	if start.Year() != 2024 || at[1] < 1500*time.Millisecond || at[1] > 1600*time.Millisecond {
		t.Errorf("start %v, second line at %v", start, at[1])
	}
}
