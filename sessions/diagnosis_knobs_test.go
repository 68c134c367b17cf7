package sessions

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/trace"
)

// gpuOnly are words of advice that only a GPU target can follow (or that
// claim a GPU): a CPU run, or one whose device is not known yet, never
// gets them.
var gpuOnly = []string{"graph bucket", "capture", "cuMemHostRegister", "PCIe", "pinned", "HBM", "CUDA", "upload", "-ngl", "num_gpu", "VRAM"}

// TestNextKnobTable pins the next knob of every (hypothesis × target
// kind): each cell names a knob that target has (want) and none that it
// lacks (never). Adding hypothesis G is one row per target here.
func TestNextKnobTable(t *testing.T) {
	cpuMmap := target{Engine: EngineBuiltinCPU, Device: DeviceCPU, Load: loadMmap}
	cpuMmapRun := target{Engine: EngineBuiltinCPU, Device: DeviceCPU, Load: loadMmap, PlainRun: true}
	cpuCopy := target{Engine: EngineBuiltinCPU, Device: DeviceCPU, Load: loadCopy}
	cpuWarmup := target{Engine: EngineBuiltinCPU, Device: DeviceCPU, Load: loadMmap, PlainRun: true, WarmupPasses: 3}
	builtinUnknown := target{Engine: EngineBuiltin, PlainRun: true}
	cuda := target{Engine: EngineBuiltinCUDA, Device: DeviceGPU, Load: loadCopy}
	cudaMmap := target{Engine: EngineBuiltinCUDA, Device: DeviceGPU, Load: loadMmap}
	vllm := target{Engine: EngineVLLM, Device: DeviceGPU}
	sglang := target{Engine: EngineSGLang, Device: DeviceGPU}
	tgi := target{Engine: EngineTGI, Device: DeviceGPU}
	llamaGPU := target{Engine: EngineLlamaCpp, Device: DeviceGPU}
	llamaCPU := target{Engine: EngineLlamaCpp, Device: DeviceCPU}
	llamaUnknown := target{Engine: EngineLlamaCpp}
	ollama := target{Engine: EngineOllama, Device: DeviceGPU}
	ollamaCPU := target{Engine: EngineOllama, Device: DeviceCPU}
	otherGPU := target{Engine: EngineOther, Device: DeviceGPU}
	otherCPU := target{Engine: EngineOther, Device: DeviceCPU}
	otherUnknown := target{Engine: EngineOther}

	// Knobs that exist only for some targets.
	pythonServer := []string{"interpreter", "imports"}
	vllmFlags := []string{"--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization", "--enforce-eager"}
	builtinNever := append(append(append([]string{}, pythonServer...), vllmFlags...), "OLLAMA_", "-ngl", "--no-mmap")
	// A plain run passes engine flags through --serve-arg, never as serve's.
	plainNever := append(append([]string{}, builtinNever...), "treni-top serve")

	cases := []struct {
		name  string
		t     target
		code  string
		want  string
		never []string
	}{
		{"builtin-cpu A", cpuMmap, "A", "pre-warm the page cache", builtinNever},
		{"builtin-cpu B mmap", cpuMmap, "B", "`treni-top serve … --load=copy`", append(builtinNever, gpuOnly...)},
		{"builtin-cpu B mmap, plain run", cpuMmapRun, "B", "`treni-top run … --load=copy`", append(plainNever, gpuOnly...)},
		{"builtin-cpu B copy", cpuCopy, "B", "host copy (load mode copy)", append(builtinNever, gpuOnly...)},
		{"builtin-cpu C", cpuMmap, "C", "`treni-top serve … --warmup-passes=1`", append(builtinNever, gpuOnly...)},
		{"builtin-cpu C, plain run", cpuMmapRun, "C", "`treni-top run … --serve-arg=--warmup-passes=1`", append(plainNever, gpuOnly...)},
		{"builtin-cpu C after warm-up passes", cpuWarmup, "C", "3 warm-up passes before healthy", append(plainNever, gpuOnly...)},
		{"builtin-cpu D", cpuMmap, "D", "`treni-top serve … --kv-gib=G`, or `--kv-blocks=N`", append(builtinNever, gpuOnly...)},
		{"builtin-cpu D, plain run", cpuMmapRun, "D", "`treni-top run … --serve-arg=--kv-gib=G`, or `--serve-arg=--kv-blocks=N`", append(plainNever, gpuOnly...)},
		{"builtin-cpu E", cpuMmap, "E", "compiled binary", builtinNever},
		{"builtin-cpu F", cpuMmapRun, "F", "`--serve-arg=--threads=N`", plainNever},
		{"builtin, device unknown B", builtinUnknown, "B", "not said its device yet", append(plainNever, gpuOnly...)},
		{"builtin, device unknown C", builtinUnknown, "C", "--warmup-passes=1", append(plainNever, gpuOnly...)},
		{"builtin-cuda A", cuda, "A", "pre-warm the page cache", builtinNever},
		{"builtin-cuda B copy", cuda, "B", "staged upload (load mode copy)", builtinNever},
		{"builtin-cuda B mmap", cudaMmap, "B", "mapped upload (load mode mmap)", builtinNever},
		{"builtin-cuda C", cuda, "C", "decode graphs", builtinNever},
		{"builtin-cuda D", cuda, "D", "--kv-gib", builtinNever},
		{"builtin-cuda E", cuda, "E", "compiled binary", builtinNever},
		{"builtin-cuda F", cuda, "F", "--max-batched-tokens", append(builtinNever, "--threads")},
		{"vllm A", vllm, "A", "`--load-format runai_streamer`", nil},
		{"vllm B", vllm, "B", "pinned", nil},
		{"vllm C", vllm, "C", "`--enforce-eager`", nil},
		{"vllm D", vllm, "D", "`--gpu-memory-utilization`", nil},
		{"vllm E", vllm, "E", "lazy imports", nil},
		{"vllm F", vllm, "F", "`--max-num-seqs`", nil},
		{"sglang A", sglang, "A", "pre-warm", []string{"runai"}},
		{"sglang B", sglang, "B", "pinned", nil},
		{"sglang C", sglang, "C", "`--cuda-graph-max-bs`", vllmFlags},
		{"sglang D", sglang, "D", "`--mem-fraction-static`", vllmFlags},
		{"sglang E", sglang, "E", "lazy imports", nil},
		{"sglang F", sglang, "F", "`--max-running-requests`", vllmFlags},
		{"tgi A", tgi, "A", "pre-warm", []string{"runai"}},
		{"tgi B", tgi, "B", "pinned", nil},
		{"tgi C", tgi, "C", "`--cuda-graphs 1,2,4`", vllmFlags},
		{"tgi D", tgi, "D", "`--max-batch-total-tokens`", vllmFlags},
		{"tgi E", tgi, "E", "lazy imports", nil},
		{"tgi F", tgi, "F", "`--max-concurrent-requests`", vllmFlags},
		{"llama.cpp A", llamaGPU, "A", "`--no-mmap`", append(vllmFlags, pythonServer...)},
		{"llama.cpp B gpu", llamaGPU, "B", "`-ngl N`", append(vllmFlags, "cuMemHostRegister")},
		{"llama.cpp B cpu", llamaCPU, "B", "`--mlock`", append(vllmFlags, gpuOnly...)},
		{"llama.cpp B unknown", llamaUnknown, "B", "keep the server running", append(vllmFlags, "-ngl", "--mlock")},
		{"llama.cpp C", llamaGPU, "C", "`--no-warmup`", append(vllmFlags, "graph bucket")},
		{"llama.cpp D", llamaGPU, "D", "`--cache-type-k q8_0 --cache-type-v q8_0`", vllmFlags},
		{"llama.cpp E", llamaGPU, "E", "compiled", pythonServer},
		{"llama.cpp F", llamaGPU, "F", "`--parallel N`", vllmFlags},
		{"ollama A", ollama, "A", "`OLLAMA_KEEP_ALIVE=-1`", []string{"--"}},
		{"ollama B", ollama, "B", "`num_gpu`", []string{"--", "cuMemHostRegister"}},
		{"ollama B cpu", ollamaCPU, "B", "`OLLAMA_KEEP_ALIVE=-1`", append([]string{"--"}, gpuOnly...)},
		{"ollama C", ollama, "C", "`OLLAMA_KEEP_ALIVE=-1`", []string{"--", "graph bucket"}},
		{"ollama D", ollama, "D", "`OLLAMA_KV_CACHE_TYPE=q8_0`", []string{"--"}},
		{"ollama E", ollama, "E", "runner process", append([]string{"--"}, pythonServer...)},
		{"ollama F", ollama, "F", "`OLLAMA_NUM_PARALLEL`", []string{"--"}},
		{"other gpu A", otherGPU, "A", "stream weights while loading", []string{"--"}},
		{"other gpu B", otherGPU, "B", "cuMemHostRegister", []string{"--"}},
		{"other gpu C", otherGPU, "C", "graph buckets", []string{"--"}},
		{"other gpu D", otherGPU, "D", "KV pool", []string{"--"}},
		{"other gpu E", otherGPU, "E", "interpreter", []string{"--"}},
		{"other gpu F", otherGPU, "F", "batched-token budget", []string{"--"}},
		{"other cpu B", otherCPU, "B", "pre-fault the mapping", gpuOnly},
		{"other cpu C", otherCPU, "C", "JIT caches", gpuOnly},
		{"other, device unknown B", otherUnknown, "B", "does not say", gpuOnly},
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
}

// TestAdviceEveryTarget: every hypothesis has a knob on every target, and
// a target on the CPU or whose device is not known yet gets no advice that
// only a GPU can follow.
func TestAdviceEveryTarget(t *testing.T) {
	for _, a := range AllAdvice() {
		if a.Kind != "next" {
			continue
		}
		if a.Text == "" {
			t.Errorf("%s/%s plain run %v: no knob for %s", a.Engine, a.Device, a.PlainRun, a.Code)
		}
		if a.Device == DeviceGPU {
			continue
		}
		for _, w := range gpuOnly {
			if strings.Contains(a.Text, w) {
				t.Errorf("%s on %q (device %q): %q advises %q, which needs a GPU", a.Code, a.Engine, a.Device, a.Text, w)
			}
		}
	}
}

// serverNames reads the checked-in list of a server's flags, environment
// variables and request options (one a line; # comments name the source
// and version).
func serverNames(t *testing.T, e Engine) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "serverflags", string(e)+".txt"))
	if err != nil {
		t.Fatalf("the flags of %s: %v", e, err)
	}
	defer f.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	source := false
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "# source: https://") {
			source = true
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		names[l] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !source || len(names) == 0 {
		t.Fatalf("testdata/serverflags/%s.txt: want a '# source: https://…' line and the names", e)
	}
	return names
}

// TestAdviceFlagsExist: every flag, environment variable and request
// option an external server's advice names is one that server has, by the
// list checked in from its source (testdata/serverflags, each with its
// version and URL); the generic row names none; the built-in engine's
// advice names every flag inside a command (the flags themselves are
// checked against the command tree in cmd/treni-top, TestAdviceFlagsOnCLI).
func TestAdviceFlagsExist(t *testing.T) {
	lists := map[Engine]map[string]bool{}
	for _, e := range []Engine{EngineVLLM, EngineSGLang, EngineTGI, EngineLlamaCpp, EngineOllama} {
		lists[e] = serverNames(t, e)
	}
	checked := 0
	for _, a := range AllAdvice() {
		for _, n := range AdviceNames(a.Text) {
			if n.Command == "?" {
				t.Errorf("%s on %q: %q names %s outside a `snippet`, so no command is said for it", a.Code, a.Engine, a.Text, n.Name)
				continue
			}
			switch e := a.Engine; {
			case a.Kind == "missing":
				if !strings.HasPrefix(n.Command, "treni-top ") {
					t.Errorf("probe %q names %s without the treni-top command it belongs to", a.Text, n.Name)
				}
			case e == EngineVLLM || e == EngineSGLang || e == EngineTGI || e == EngineLlamaCpp || e == EngineOllama:
				key := n.Name
				if n.Kind == NameOption {
					key = "option " + n.Name
				}
				if !lists[a.Engine][key] {
					t.Errorf("%s on %s: %q names %s %s, which is not in testdata/serverflags/%s.txt", a.Code, a.Engine, a.Text, n.Kind, n.Name, a.Engine)
				}
				checked++
			case e == EngineOther:
				t.Errorf("%s on any other server: %q names %s, a flag of some server but not of every server", a.Code, a.Text, n.Name)
			default: // the built-in engine, and probes that name treni-top's commands
				if !strings.HasPrefix(n.Command, "treni-top ") {
					t.Errorf("%s on %q: %q names %s without the treni-top command it belongs to", a.Code, a.Engine, a.Text, n.Name)
				}
				if a.PlainRun && n.Command == "treni-top serve" && !strings.Contains(a.Text, "--serve-arg="+n.Name) {
					t.Errorf("%s on %q, plain run: %q names serve's %s, which run does not take (say --serve-arg=%s)", a.Code, a.Engine, a.Text, n.Name, n.Name)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d external names checked; the advice format changed?", checked)
	}
}

// TestAdviceNames pins how advice texts are read for those checks.
func TestAdviceNames(t *testing.T) {
	got := AdviceNames("size it: `treni-top run … --serve-arg=--kv-gib=G`, or `--serve-arg=--kv-blocks=N`; `--cuda-graphs 1,2,4`, `OLLAMA_KEEP_ALIVE=-1`, the `num_ctx` option, `-c N`; loose --flag")
	want := []AdviceName{
		{NameFlag, "treni-top run", "--serve-arg"}, {NameFlag, "treni-top serve", "--kv-gib"},
		{NameFlag, "treni-top run", "--serve-arg"}, {NameFlag, "treni-top serve", "--kv-blocks"},
		{NameFlag, "treni-top run", "--cuda-graphs"},
		{NameEnv, "", "OLLAMA_KEEP_ALIVE"}, {NameOption, "", "num_ctx"},
		{NameFlag, "treni-top run", "-c"},
		{NameFlag, "?", "--flag"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("name %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestDiagnoseChoosesKnobForTarget: the target is read from the session
// (the process start's server kind and whether run started the built-in
// engine itself, the built-in engine's stages), so a CPU run with --load
// copy gets the host-copy knob, a CUDA run the upload knob, and a plain
// run the flags in run's form.
func TestDiagnoseChoosesKnobForTarget(t *testing.T) {
	run := func(kind string, plain bool, spans ...trace.Span) []trace.Event {
		ev := []trace.Event{
			{At: 0, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerResidency, Attrs: trace.Attrs{"resident_bytes": 4e8, "total_bytes": 4e8}}},
			{At: 0, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, PID: 1, ServerKind: kind, Builtin: plain}},
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
	cpuCopy := run("treni", false,
		span(trace.StageRuntimeInit, 0, 10, trace.Attrs{"device": "cpu"}),
		span(trace.StagePageCache, 10, 100, nil),
		span(trace.StageDecoderTensorUpload, 100, 990, trace.Attrs{"mode": "copy", "device": "host"}))
	cpuAuto := run("treni", true,
		span(trace.StageRuntimeInit, 0, 10, trace.Attrs{"device": "auto"}),
		span(trace.StagePageCache, 10, 980, nil),
		span(trace.StageKVAlloc, 980, 990, trace.Attrs{"backend": "cpu"}))
	cudaRun := run("treni", false,
		span(trace.StageRuntimeInit, 0, 10, trace.Attrs{"device": "cuda"}),
		span(trace.StageCUDAInit, 10, 50, nil),
		span(trace.StageDecoderTensorUpload, 100, 990, trace.Attrs{"mode": "staged"}))
	cudaMapped := run("treni", false,
		span(trace.StageCUDAInit, 10, 50, nil),
		span(trace.StageDecoderTensorUpload, 100, 990, trace.Attrs{"mode": "mapped"}))
	// --device auto on a GPU machine whose CUDA load failed: cuda_init
	// ran, but the backend that serves is the CPU's.
	fellBack := run("treni", true,
		span(trace.StageRuntimeInit, 0, 10, trace.Attrs{"device": "auto"}),
		span(trace.StageCUDAInit, 10, 50, nil),
		span(trace.StagePageCache, 50, 980, nil),
		span(trace.StageKVAlloc, 980, 990, trace.Attrs{"backend": "cpu"}))
	ollama := run("ollama", false, span(trace.StageModelLoad, 0, 990, nil))
	for _, c := range []struct {
		name   string
		ev     []trace.Event
		engine Engine
		device Device
		title  string
		want   string
	}{
		{"cpu copy", cpuCopy, EngineBuiltinCPU, DeviceCPU, "host memory load", "host copy (load mode copy)"},
		{"cpu auto, plain run", cpuAuto, EngineBuiltinCPU, DeviceCPU, "host memory load", "`treni-top run … --load=copy`"},
		{"cuda", cudaRun, EngineBuiltinCUDA, DeviceGPU, "HBM transfer", "staged upload (load mode copy)"},
		{"cuda mapped", cudaMapped, EngineBuiltinCUDA, DeviceGPU, "HBM transfer", "mapped upload (load mode mmap)"},
		{"auto fell back to the cpu", fellBack, EngineBuiltinCPU, DeviceCPU, "host memory load", "`treni-top run … --load=copy`"},
		{"ollama", ollama, EngineOllama, DeviceUnknown, "device not known", "OLLAMA_KEEP_ALIVE"},
	} {
		dg := Diagnose(c.ev)
		b, _ := dg.Hypothesis("B")
		if dg.Engine != c.engine || dg.Device != c.device || dg.Dominant != "B" || !strings.Contains(b.Title, c.title) ||
			!strings.Contains(b.NextKnob, c.want) || !strings.Contains(dg.Summary, c.want) {
			t.Errorf("%s: engine %q device %q dominant %q title %q knob %q summary %q", c.name, dg.Engine, dg.Device, dg.Dominant, b.Title, b.NextKnob, dg.Summary)
		}
		if c.device != DeviceGPU {
			for _, h := range dg.Hypotheses {
				for _, w := range gpuOnly {
					if strings.Contains(h.Title+" "+h.NextKnob, w) {
						t.Errorf("%s: %s %q / %q says %q on a run not known to use a GPU", c.name, h.Code, h.Title, h.NextKnob, w)
					}
				}
			}
		}
	}
}

// TestWakeKeepsTheTarget: a wake of a sleeping target is a run without a
// process start of its own; its knobs are still the built-in engine's, on
// the device the engine named when the run that started it began, in
// run's form.
func TestWakeKeepsTheTarget(t *testing.T) {
	s := wakeSession(400, 150)
	s.Events = append(s.Events,
		trace.Event{Run: 0, Kind: trace.KindProcess, Process: &trace.Process{Action: trace.ProcessStart, PID: 9, ServerKind: "treni", Builtin: true}},
		trace.Event{Run: 0, At: d(390), Kind: trace.KindStage, Stage: &trace.Span{Name: trace.StageKVAlloc, Start: d(389), End: d(390), Attrs: trace.Attrs{"backend": "cpu"}}},
		trace.Event{Run: 0, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerGPUStatus, Attrs: trace.Attrs{"status": "no NVIDIA GPU: libnvidia-ml.so.1 not found"}}})
	trace.SortEvents(s.Events)
	dg := Diagnose(s.Events)
	c, _ := dg.Hypothesis("C")
	if dg.Run != 1 || dg.Engine != EngineBuiltinCPU || dg.Device != DeviceCPU || !strings.Contains(c.NextKnob, "`treni-top run … --serve-arg=") {
		t.Errorf("wake: run %d engine %q device %q, C next %q", dg.Run, dg.Engine, dg.Device, c.NextKnob)
	}
}
