package serverlog

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

func TestUnwrap(t *testing.T) {
	ref := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	vllm := "INFO 05-09 22:51:11 [__init__.py:239] Automatically detected platform cuda."
	cases := []struct {
		in, line, wrapper, host string
		at                      time.Time
	}{
		{vllm, vllm, "", "", time.Time{}},
		{"vllm-1  | " + vllm, vllm, WrapCompose, "", time.Time{}},
		{"vllm_server_1 | " + vllm, vllm, WrapCompose, "", time.Time{}},
		{"2025-05-09T20:51:11.123456789Z " + vllm, vllm, WrapDockerTime, "", time.Date(2025, 5, 9, 20, 51, 11, 123456789, time.UTC)},
		{"[pod/vllm-7d9f/vllm] " + vllm, vllm, WrapKubectl, "", time.Time{}},
		{"May  9 22:51:11 gpu-node-3 vllm[4242]: " + vllm, vllm, WrapSyslog, "gpu-node-3", time.Date(2025, 5, 9, 22, 51, 11, 0, time.UTC)},
		{"May 09 22:51:11.250000 gpu-node-3 python3[4242]: " + vllm, vllm, WrapSyslog, "gpu-node-3", time.Date(2025, 5, 9, 22, 51, 11, 250e6, time.UTC)},
		{"2025-05-09T22:51:11+0000 gpu-node-3 vllm[4242]: " + vllm, vllm, WrapJournalISO, "gpu-node-3", time.Date(2025, 5, 9, 22, 51, 11, 0, time.UTC)},
		// Nested: kubectl over docker logs -t over compose.
		{"[pod/a/b] 2025-05-09T20:51:11Z vllm-1  | " + vllm, vllm, WrapKubectl, "", time.Date(2025, 5, 9, 20, 51, 11, 0, time.UTC)},
		// A server's own lines that look like none of them stay whole.
		{"2025-07-04T12:35:58.150338Z  INFO text_generation_launcher: Shard ready in 48.277857716s rank=0", "", "", "", time.Time{}},
		{`[GIN] 2026/05/05 - 01:30:24 | 200 |  4.006473015s |       127.0.0.1 | POST     "/api/generate"`, "", "", "", time.Time{}},
		{"Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.01s/it]", "", "", "", time.Time{}},
		{"slot         init: id  0 | task -1 | new slot n_ctx_slot = 2048", "", "", "", time.Time{}},
		{"[2025-01-23 19:35:14 TP0] Init torch distributed begin.", "", "", "", time.Time{}},
		{"time=2024-11-08T01:05:27.403+05:30 level=DEBUG source=sched.go:224 msg=x", "", "", "", time.Time{}},
	}
	for _, c := range cases {
		u := Unwrap(c.in, ref)
		want := c.line
		if want == "" {
			want = c.in
		}
		if u.Line != want || u.Wrapper != c.wrapper || u.Host != c.host || u.HasAt != !c.at.IsZero() || (u.HasAt && !u.At.Equal(c.at)) {
			t.Errorf("Unwrap(%q) = %+v; want line %q wrapper %q host %q at %v", c.in, u, want, c.wrapper, c.host, c.at)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Unwrap(vllm, ref) }); n != 0 {
		t.Errorf("Unwrap allocates %v times for a plain line", n)
	}
}

// wrappers turn a line into what each collector makes of it, with the
// line's index as the collector's time.
var wrappers = map[string]func(i int, l string) string{
	"compose": func(i int, l string) string { return "server-1  | " + l },
	"docker-t": func(i int, l string) string {
		return time.Unix(1_770_000_000+int64(i), 0).UTC().Format(time.RFC3339Nano) + " " + l
	},
	"kubectl": func(i int, l string) string { return "[pod/srv-5b7c/srv] " + l },
	"journald": func(i int, l string) string {
		return time.Unix(1_770_000_000+int64(i), 0).UTC().Format(time.Stamp) + " gpu-node-3 server[4242]: " + l
	},
}

// TestWrappedFixtures: every fixture, wrapped by each collector, is
// detected as the same kind and gives the same stages and stage lines.
func TestWrappedFixtures(t *testing.T) {
	for _, rel := range fixtureLogs(t) {
		lines := readFixture(t, rel)
		kind := DetectKind(nil, lines)
		want := parseLines(kind, lines)
		for name, wrap := range wrappers {
			wrapped := make([]string, len(lines))
			for i, l := range lines {
				wrapped[i] = wrap(i, l)
			}
			if k := DetectKind(nil, wrapped); k != kind {
				t.Errorf("%s under %s: detected %s, want %s", rel, name, k, kind)
				continue
			}
			if got := parseLines(kind, wrapped); got != want {
				t.Errorf("%s under %s: parsed differently:\n got  %s\n want %s", rel, name, got, want)
			}
		}
	}
}

// parseLines feeds lines one second apart and renders what came out.
func parseLines(kind Kind, lines []string) string {
	p := NewParser(kind, trace.ClockAt(fixtureRef))
	p.SetDeferred(true)
	var b strings.Builder
	for i, l := range lines {
		sp, st := p.Feed(time.Duration(i)*time.Second, l)
		fmt.Fprintf(&b, "%s %v|", st, sp)
	}
	fmt.Fprintf(&b, "%v %+v", p.Flush(time.Duration(len(lines))*time.Second), p.Origin())
	return b.String()
}

// TestRefusedFigures: a figure that is not a finite number once read (a
// 305-digit KV buffer in MiB, 1e400 seconds) is refused where it is
// parsed: the line changes no span, and Rejected says why.
func TestRefusedFigures(t *testing.T) {
	huge := strings.Repeat("9", 305)
	cases := []struct {
		kind Kind
		line string
	}{
		{KindLlamaCpp, "llama_kv_cache:      CUDA0 KV buffer size = " + huge + ".00 MiB"},
		{KindVLLM, "INFO 05-09 22:55:45 [loader.py:458] Loading weights took " + huge + " seconds"},
		{KindVLLM, "INFO 05-09 22:55:45 [gpu_model_runner.py:1347] Model loading took " + huge + " GiB and 3.1 seconds"},
		{KindSGLang, "[2025-01-23 19:35:20 TP0] Load weight end. type=LlamaForCausalLM, avail mem=63.47 GB, mem usage=" + huge + " GB."},
		{KindOllama, `time=2025-08-24T08:26:00.310Z level=INFO source=backend.go:332 msg="compute graph" device=CUDA0 size="` + huge + ` GiB"`},
	}
	for _, c := range cases {
		p := NewParser(c.kind, trace.ClockAt(fixtureRef))
		p.SetDeferred(true)
		sp, _ := p.Feed(time.Second, c.line)
		why := p.Rejected()
		sp = append(sp, p.Flush(2*time.Second)...)
		for _, s := range sp {
			for k, v := range s.Attrs {
				if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
					t.Errorf("%s: span %s carries %s = %v", c.kind, s.Name, k, f)
				}
			}
		}
		if c.kind != KindOllama && why == "" {
			t.Errorf("%s: %q not refused", c.kind, c.line)
		}
		if c.kind != KindOllama && len(sp) != 0 {
			t.Errorf("%s: a refused line made spans %v", c.kind, sp)
		}
	}
}

// TestStageLineLimits: the built-in engine's stage lines with times near
// the int64 limits, or far from the line's own time, are refused.
func TestStageLineLimits(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	for _, l := range []string{
		fmt.Sprintf(`{"treni_stage":"v1","stage":"cuda_init","start_ns":%d,"end_ns":%d}`, math.MinInt64, t0.UnixNano()),
		fmt.Sprintf(`{"treni_stage":"v1","stage":"cuda_init","start_ns":%d,"end_ns":%d}`, t0.UnixNano(), int64(math.MaxInt64)),
		fmt.Sprintf(`{"treni_stage":"v1","stage":"cuda_init","start_ns":%d,"end_ns":%d}`, t0.Add(-time.Hour*24*365*50).UnixNano(), t0.UnixNano()),
	} {
		p := NewParser(KindTreni, trace.ClockAt(t0))
		sp, st := p.Feed(time.Second, l)
		if len(sp) != 0 || st != "" || p.Rejected() == "" {
			t.Errorf("%s: spans %v stage %q rejected %q", l, sp, st, p.Rejected())
		}
	}
	p := NewParser(KindTreni, trace.ClockAt(t0))
	if sp, _ := p.Feed(time.Second, fmt.Sprintf(`{"treni_stage":"v1","stage":"cuda_init","start_ns":%d,"end_ns":%d}`, t0.UnixNano(), t0.Add(time.Second).UnixNano())); len(sp) != 1 || p.Rejected() != "" {
		t.Errorf("a sound stage line: %v %q", sp, p.Rejected())
	}
}

// TestRestarts: a deferred parser splits a log in which the server starts
// again after it was ready; each start's spans come with its run.
func TestRestarts(t *testing.T) {
	for _, rel := range []string{"vllm/v0.8.5.post1-v1engine-qwen2.5-1.5b-serve.log", "sglang/v0.4.1-docs-send_request-llama3.1-8b-80gb.log",
		"tgi/v3.3.x-gemma3-27b-tp2-rtxa6000.log", "llamacpp/b6699-2025-10-cuda-rtx3070-gpt-oss-20b-cpu-moe.log"} {
		lines := readFixture(t, rel)
		kind := DetectKind(nil, lines)
		p := NewParser(kind, trace.ClockAt(fixtureRef))
		p.SetDeferred(true)
		perRun := map[int][]trace.Stage{}
		i := 0
		for pass := 0; pass < 3; pass++ {
			for _, l := range lines {
				sp, _ := p.Feed(time.Duration(i)*time.Second, l)
				for j, s := range sp {
					perRun[p.LastRuns()[j]] = append(perRun[p.LastRuns()[j]], s.Name)
				}
				i++
			}
		}
		sp := p.Flush(time.Duration(i) * time.Second)
		for j, s := range sp {
			perRun[p.LastRuns()[j]] = append(perRun[p.LastRuns()[j]], s.Name)
		}
		if p.Run() != 2 || len(perRun) != 3 {
			t.Errorf("%s: run %d, spans per run %v", rel, p.Run(), perRun)
			continue
		}
		if fmt.Sprint(sortedStages(perRun[1])) != fmt.Sprint(sortedStages(perRun[2])) {
			t.Errorf("%s: the second and third starts differ: %v / %v", rel, perRun[1], perRun[2])
		}
	}
}

func sortedStages(s []trace.Stage) []trace.Stage {
	out := append([]trace.Stage(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestOrigin: what each fixture states about where it ran.
func TestOrigin(t *testing.T) {
	cases := map[string]Origin{
		"vllm/v0.8.5.post1-v1engine-qwen2.5-1.5b-serve.log":                           {Device: "cuda", Version: "0.8.5.post1", Model: "Qwen/Qwen2.5-1.5B-Instruct"},
		"vllm/v0.10.x-v1engine-qwen3-235b-fp8-tp8-l40s-multiworker.log":               {TP: 8},
		"sglang/v0.4.1-docs-send_request-llama3.1-8b-80gb.log":                        {Device: "cuda", Model: "meta-llama/Meta-Llama-3.1-8B-Instruct"},
		"tgi/v3.3.x-gemma3-27b-tp2-rtxa6000.log":                                      {TP: 2, Model: "/models/gemma-3-27b-it"},
		"llamacpp/b6699-2025-10-cuda-rtx3070-gpt-oss-20b-cpu-moe.log":                 {Device: "cuda", GPUs: []string{"NVIDIA GeForce RTX 3070"}, Version: "b6699 (c08002a1)"},
		"llamacpp/b3892-2024-10-metal-m3max-starcoder15b-hf-download.log":             {Device: "metal", GPUs: []string{"Apple M3 Max"}, Version: "b3892 (96b69121)"},
		"ollama/v0.2x-2026-05-llamarunner-qwen2.5-coder-7b-rtx3060.log":               {Device: "cuda", GPUs: []string{"NVIDIA GeForce RTX 3060"}},
		"ollama/v0.3.x-2024-11-cpp-runner-granite-8b-m1pro-partial-offload-debug.log": {Device: "metal", GPUs: []string{"Apple M1 Pro"}},
	}
	for rel, want := range cases {
		lines := readFixture(t, rel)
		p := NewParser(DetectKind(nil, lines), trace.ClockAt(fixtureRef))
		for i, l := range lines {
			p.Feed(time.Duration(i)*time.Second, l)
		}
		got := p.Origin()
		if got.Device != want.Device || got.TP != want.TP || (want.Version != "" && got.Version != want.Version) ||
			(want.Model != "" && got.Model != want.Model) || fmt.Sprint(got.GPUs) != fmt.Sprint(want.GPUs) && want.GPUs != nil {
			t.Errorf("%s: origin %+v, want %+v", rel, got, want)
		}
	}
}

// TestParserMemoryBounded: a deferred parser holds only the spans still
// being built, however many starts and stages a log holds.
func TestParserMemoryBounded(t *testing.T) {
	lines := readFixture(t, "vllm/v0.8.5.post1-v1engine-qwen2.5-1.5b-serve.log")
	p := NewParser(KindVLLM, trace.ClockAt(fixtureRef))
	p.SetDeferred(true)
	i := 0
	maxHeld := 0
	for pass := 0; pass < 200; pass++ {
		for _, l := range lines {
			p.Feed(time.Duration(i)*time.Second, l)
			i++
			maxHeld = max(maxHeld, len(p.groups))
		}
	}
	if p.Run() != 199 || maxHeld > 20 {
		t.Errorf("after 200 starts: run %d, at most %d spans held", p.Run(), maxHeld)
	}
}
