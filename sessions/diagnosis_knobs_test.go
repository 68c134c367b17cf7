package sessions

import (
	"strings"
	"testing"

	"github.com/treni-top/treni-top/trace"
)

// TestNextKnobTable pins the next knob of every (hypothesis × target
// kind): each cell names a knob that target has (want) and none that it
// lacks (never). Adding hypothesis G is one row per target here.
func TestNextKnobTable(t *testing.T) {
	cpuMmap := target{Engine: EngineBuiltinCPU, Load: loadMmap}
	cpuCopy := target{Engine: EngineBuiltinCPU, Load: loadCopy}
	cuda := target{Engine: EngineBuiltinCUDA, Load: loadCopy, GPU: true}
	cudaMmap := target{Engine: EngineBuiltinCUDA, Load: loadMmap, GPU: true}
	vllm := target{Engine: EngineVLLM, GPU: true}
	sglang := target{Engine: EngineSGLang, GPU: true}
	tgi := target{Engine: EngineTGI, GPU: true}
	llamaGPU := target{Engine: EngineLlamaCpp, GPU: true}
	llamaCPU := target{Engine: EngineLlamaCpp}
	ollama := target{Engine: EngineOllama, GPU: true}
	otherGPU := target{Engine: EngineOther, GPU: true}
	otherCPU := target{Engine: EngineOther}

	// Knobs that exist only for some targets.
	pythonServer := []string{"interpreter", "imports"}
	vllmFlags := []string{"--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization", "--enforce-eager"}
	gpuOnly := []string{"graph bucket", "capture", "cuMemHostRegister", "PCIe", "upload from pinned"}
	builtinNever := append(append(append([]string{}, pythonServer...), vllmFlags...), "OLLAMA_", "-ngl")

	cases := []struct {
		name  string
		t     target
		code  string
		want  string
		never []string
	}{
		{"builtin-cpu A", cpuMmap, "A", "pre-warm the page cache", builtinNever},
		{"builtin-cpu B mmap", cpuMmap, "B", "--load copy", append(builtinNever, gpuOnly...)},
		{"builtin-cpu B copy", cpuCopy, "B", "host copy (--load copy)", append(builtinNever, append(gpuOnly, "upload")...)},
		{"builtin-cpu C", cpuMmap, "C", "--warmup-passes", append(builtinNever, gpuOnly...)},
		{"builtin-cpu D", cpuMmap, "D", "--kv-blocks", append(builtinNever, gpuOnly...)},
		{"builtin-cpu E", cpuMmap, "E", "compiled binary", builtinNever},
		{"builtin-cpu F", cpuMmap, "F", "--max-batch", builtinNever},
		{"builtin-cuda A", cuda, "A", "pre-warm the page cache", builtinNever},
		{"builtin-cuda B copy", cuda, "B", "staged upload (--load copy)", builtinNever},
		{"builtin-cuda B mmap", cudaMmap, "B", "mapped upload (--load mmap)", builtinNever},
		{"builtin-cuda C", cuda, "C", "decode graphs", builtinNever},
		{"builtin-cuda D", cuda, "D", "--kv-gib", builtinNever},
		{"builtin-cuda E", cuda, "E", "compiled binary", builtinNever},
		{"builtin-cuda F", cuda, "F", "--max-batched-tokens", builtinNever},
		{"vllm A", vllm, "A", "--load-format runai_streamer", nil},
		{"vllm B", vllm, "B", "pinned", nil},
		{"vllm C", vllm, "C", "--enforce-eager", nil},
		{"vllm D", vllm, "D", "--gpu-memory-utilization", nil},
		{"vllm E", vllm, "E", "lazy imports", nil},
		{"vllm F", vllm, "F", "--max-num-seqs", nil},
		{"sglang A", sglang, "A", "pre-warm", []string{"runai"}},
		{"sglang B", sglang, "B", "pinned", nil},
		{"sglang C", sglang, "C", "--cuda-graph-max-bs", vllmFlags},
		{"sglang D", sglang, "D", "--mem-fraction-static", vllmFlags},
		{"sglang E", sglang, "E", "lazy imports", nil},
		{"sglang F", sglang, "F", "--max-running-requests", vllmFlags},
		{"tgi A", tgi, "A", "pre-warm", []string{"runai"}},
		{"tgi B", tgi, "B", "pinned", nil},
		{"tgi C", tgi, "C", "--cuda-graphs", vllmFlags},
		{"tgi D", tgi, "D", "--max-batch-total-tokens", vllmFlags},
		{"tgi E", tgi, "E", "lazy imports", nil},
		{"tgi F", tgi, "F", "--max-concurrent-requests", vllmFlags},
		{"llama.cpp A", llamaGPU, "A", "--no-mmap", append(vllmFlags, pythonServer...)},
		{"llama.cpp B gpu", llamaGPU, "B", "-ngl", append(vllmFlags, "cuMemHostRegister")},
		{"llama.cpp B cpu", llamaCPU, "B", "--mlock", append(vllmFlags, gpuOnly...)},
		{"llama.cpp C", llamaGPU, "C", "--no-warmup", append(vllmFlags, "graph bucket")},
		{"llama.cpp D", llamaGPU, "D", "--cache-type-k", vllmFlags},
		{"llama.cpp E", llamaGPU, "E", "compiled", pythonServer},
		{"llama.cpp F", llamaGPU, "F", "--parallel", vllmFlags},
		{"ollama A", ollama, "A", "OLLAMA_KEEP_ALIVE", []string{"--"}},
		{"ollama B", ollama, "B", "num_gpu", []string{"--", "cuMemHostRegister"}},
		{"ollama C", ollama, "C", "OLLAMA_KEEP_ALIVE", []string{"--", "graph bucket"}},
		{"ollama D", ollama, "D", "OLLAMA_KV_CACHE_TYPE", []string{"--"}},
		{"ollama E", ollama, "E", "runner process", append([]string{"--"}, pythonServer...)},
		{"ollama F", ollama, "F", "OLLAMA_NUM_PARALLEL", []string{"--"}},
		{"other gpu A", otherGPU, "A", "stream weights while loading", nil},
		{"other gpu B", otherGPU, "B", "cuMemHostRegister", nil},
		{"other gpu C", otherGPU, "C", "graph buckets", nil},
		{"other gpu D", otherGPU, "D", "KV pool", nil},
		{"other gpu E", otherGPU, "E", "interpreter", nil},
		{"other gpu F", otherGPU, "F", "--max-num-seqs", nil},
		{"other cpu B", otherCPU, "B", "pre-fault the mapping", gpuOnly},
	}
	for _, c := range cases {
		got := nextKnob(c.code, c.t)
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: %q lacks %q", c.name, got, c.want)
		}
		for _, n := range c.never {
			if strings.Contains(got, n) {
				t.Errorf("%s: %q advises %q, which this target does not have", c.name, got, n)
			}
		}
	}
	// Every target has a knob for every hypothesis.
	for _, tg := range []target{cpuMmap, cpuCopy, cuda, cudaMmap, vllm, sglang, tgi, llamaGPU, llamaCPU, ollama, otherGPU, otherCPU} {
		for _, r := range rules() {
			if nextKnob(r.code, tg) == "" {
				t.Errorf("%s/%s: no knob for %s", tg.Engine, tg.Load, r.code)
			}
		}
	}
}

// TestDiagnoseChoosesKnobForTarget: the target is read from the session
// (the process start's server kind, the built-in engine's stages), so a
// CPU run with --load copy gets the host-copy knob and a CUDA run the
// upload knob.
func TestDiagnoseChoosesKnobForTarget(t *testing.T) {
	run := func(kind string, spans ...trace.Span) []trace.Event {
		ev := []trace.Event{
			{At: 0, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerResidency, Attrs: trace.Attrs{"resident_bytes": 4e8, "total_bytes": 4e8}}},
			{At: 0, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, PID: 1, ServerKind: kind}},
		}
		for _, sp := range spans {
			sp := sp
			ev = append(ev, trace.Event{At: sp.End, Kind: trace.KindStage, Stage: &sp})
		}
		ev = append(ev, trace.Event{At: d(1000), Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthy}})
		return ev
	}
	span := func(name trace.Stage, a, b float64, attrs trace.Attrs) trace.Span {
		return trace.Span{Name: name, Start: d(a), End: d(b), Attrs: attrs}
	}
	cpuCopy := run("treni",
		span(trace.StageRuntimeInit, 0, 10, trace.Attrs{"device": "cpu"}),
		span(trace.StagePageCache, 10, 100, nil),
		span(trace.StageDecoderTensorUpload, 100, 990, trace.Attrs{"mode": "copy", "device": "host"}))
	cudaRun := run("treni",
		span(trace.StageRuntimeInit, 0, 10, trace.Attrs{"device": "cuda"}),
		span(trace.StageCUDAInit, 10, 50, nil),
		span(trace.StageDecoderTensorUpload, 100, 990, trace.Attrs{"mode": "staged"}))
	cudaMapped := run("treni",
		span(trace.StageCUDAInit, 10, 50, nil),
		span(trace.StageDecoderTensorUpload, 100, 990, trace.Attrs{"mode": "mapped"}))
	ollama := run("ollama", span(trace.StageModelLoad, 0, 990, nil))
	for _, c := range []struct {
		name   string
		ev     []trace.Event
		engine Engine
		want   string
	}{
		{"cpu copy", cpuCopy, EngineBuiltinCPU, "host copy (--load copy)"},
		{"cuda", cudaRun, EngineBuiltinCUDA, "staged upload (--load copy)"},
		{"cuda mapped", cudaMapped, EngineBuiltinCUDA, "mapped upload (--load mmap)"},
		{"ollama", ollama, EngineOllama, "OLLAMA_KEEP_ALIVE"},
	} {
		dg := Diagnose(c.ev)
		b, _ := dg.Hypothesis("B")
		if dg.Engine != c.engine || dg.Dominant != "B" || !strings.Contains(b.NextKnob, c.want) || !strings.Contains(dg.Summary, c.want) {
			t.Errorf("%s: engine %q dominant %q knob %q summary %q", c.name, dg.Engine, dg.Dominant, b.NextKnob, dg.Summary)
		}
		if c.engine == EngineBuiltinCPU {
			if cc, _ := dg.Hypothesis("C"); strings.Contains(cc.NextKnob, "capture") {
				t.Errorf("%s: C advises graph capture on the CPU engine: %q", c.name, cc.NextKnob)
			}
		}
	}
}
