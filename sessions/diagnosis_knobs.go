package sessions

import (
	"fmt"
	"strings"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// Engine is the kind of target a next knob is chosen for: the built-in
// engine on each of its devices, or a server by its kind. A knob that does
// not exist for a target is never advised for it (no graph buckets on the
// CPU engine, no --max-num-seqs on llama.cpp).
type Engine string

// Engines with a row in the knob table. EngineOther is any other server
// (and a session that does not say), advised with the generic row, which
// names no flags: a flag of one server is not a flag of another.
const (
	EngineBuiltin     Engine = "builtin" // the built-in engine before it named its device
	EngineBuiltinCPU  Engine = "builtin-cpu"
	EngineBuiltinCUDA Engine = "builtin-cuda"
	EngineVLLM        Engine = "vllm"
	EngineSGLang      Engine = "sglang"
	EngineTGI         Engine = "tgi"
	EngineLlamaCpp    Engine = "llama.cpp"
	EngineOllama      Engine = "ollama"
	EngineOther       Engine = ""
)

// Device is what a target computes on, as far as its session says. A live
// run learns it during its start (the built-in engine names it in its
// stages; a GPU sampler that reads nothing, or reads GPUs), so until then it
// is unknown, and nothing GPU-specific is said of a run that may be a CPU
// run.
type Device string

// Devices. DeviceUnknown is a run that has not said yet, or a log that
// never says.
const (
	DeviceUnknown Device = ""
	DeviceCPU     Device = "cpu"
	DeviceGPU     Device = "gpu"
)

// Load modes of the built-in engine (its --load flag; docs/ARCHITECTURE.md,
// "Loading"), as the "mode" attribute of its decoder_tensor_upload stage
// spells them: mmap/copy on the CPU backend, mapped/staged on CUDA.
const (
	loadMmap   = "mmap"
	loadCopy   = "copy"
	loadMapped = "mapped"
	loadStaged = "staged"
)

// gpuStatusNone starts the gpu_status marker of a machine whose GPU
// sampler found no NVIDIA GPU (trace.MarkerGPUStatus).
const gpuStatusNone = "no NVIDIA GPU"

// target is what the knob table needs to know about a run's target.
type target struct {
	Engine Engine
	Device Device
	// Load is the built-in engine's load mode (loadMmap or loadCopy; ""
	// while its device, and so its default, is unknown).
	Load string
	// PlainRun: the built-in engine that `treni-top run` started itself,
	// whose engine flags are given through run's --serve-arg.
	PlainRun bool
	// WarmupPasses the built-in engine ran before healthy (its warmup
	// stage), 0 when none.
	WarmupPasses int
}

// gpu reports a target known to compute on a GPU.
func (t target) gpu() bool { return t.Device == DeviceGPU }

// targetOf reads the run's target from its events: the server kind of the
// process start (or of a late detection), whether run started the built-in
// engine itself, and the device: the built-in engine's own stages, the
// server kinds that run on GPUs, GPU samples, or a GPU sampler that found
// no GPU. A wake of a sleeping target is a run without a process start of
// its own: the process is the one an earlier run started.
func targetOf(events []trace.Event, run Run, f RunFacts) target {
	kind, plain, noGPU := "", false, false
	from := -1 // the run whose process start was read
	for _, e := range events {
		if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerGPUStatus {
			// Emitted once for the session, whatever the run.
			st, _ := e.Marker.Attrs.String("status")
			noGPU = strings.HasPrefix(st, gpuStatusNone)
			continue
		}
		if e.Run > run.Index || e.Run < from {
			continue
		}
		switch {
		case e.Kind == trace.KindProcess && e.Process.Action == trace.ProcessStart && (e.Run > from || kind == ""):
			kind, plain, from = e.Process.ServerKind, e.Process.Builtin, e.Run
		case e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerKindDetected && e.Run >= from:
			kind, _ = e.Marker.Attrs.String("server_kind")
			from = e.Run
		}
	}
	t := target{}
	switch {
	case f.HaveGPU, f.Imported && logOnGPU(f):
		t.Device = DeviceGPU
	case noGPU, f.Imported && f.LogDevice == "cpu":
		// An imported log sampled nothing: only what it states about its
		// device counts, never this machine's.
		t.Device = DeviceCPU
	}
	switch serverlog.Kind(kind) {
	case serverlog.KindTreni:
		t := builtinTarget(run.Spans, plain)
		if t.Device == DeviceUnknown && from >= 0 && from < run.Index {
			// A wake: the engine named its device in the run that
			// started it.
			var spans []trace.Span
			for _, e := range events {
				if e.Run == from && e.Kind == trace.KindStage {
					spans = append(spans, *e.Stage)
				}
			}
			started := builtinTarget(spans, plain)
			t.Device, t.Engine = started.Device, started.Engine
			if t.Load == "" {
				t.Load = started.Load
			}
		}
		return t
	case serverlog.KindVLLM:
		t.Engine = EngineVLLM
	case serverlog.KindSGLang:
		t.Engine = EngineSGLang
	case serverlog.KindTGI:
		t.Engine = EngineTGI
	case serverlog.KindLlamaCpp:
		t.Engine = EngineLlamaCpp
	case serverlog.KindOllama:
		t.Engine = EngineOllama
	}
	switch t.Engine {
	case EngineVLLM, EngineSGLang, EngineTGI:
		// GPU servers, unless a live run found no NVIDIA GPU (a CPU or
		// another vendor's build: which, the session does not say).
		switch {
		case f.Imported && f.LogDevice == "cpu":
			t.Device = DeviceCPU // a CPU build, as the log states
		case noGPU && !f.HaveGPU:
			t.Device = DeviceUnknown
		default:
			t.Device = DeviceGPU
		}
	}
	return t
}

// logOnGPU: an imported log names a GPU or a GPU platform.
func logOnGPU(f RunFacts) bool {
	switch f.LogDevice {
	case "cuda", "rocm", "hip", "metal", "vulkan", "xpu", "tpu", "npu":
		return true
	}
	return f.LogGPU
}

// builtinTarget reads the built-in engine's device and load mode from its
// own stages. The device: the backend its kv_alloc names (decided after
// any fallback of --device auto), else runtime_init's --device when it is
// cpu or cuda, else CUDA once cuda_init ran, else the CPU when its upload
// was a host copy; unknown until one of them arrives. The load mode: the
// decoder_tensor_upload's mode, else the device's default (mmap on the
// CPU, the staged copy on CUDA).
func builtinTarget(spans []trace.Span, plainRun bool) target {
	t := target{Engine: EngineBuiltin, PlainRun: plainRun}
	var backend, initDevice, mode string
	cudaInit, hostUpload := false, false
	for _, sp := range spans {
		switch sp.Name {
		case trace.StageCUDAInit:
			cudaInit = true
		case trace.StageRuntimeInit:
			initDevice, _ = sp.Attrs.String("device")
		case trace.StageKVAlloc:
			if b, ok := sp.Attrs.String("backend"); ok {
				backend = b
			}
		case trace.StageDecoderTensorUpload:
			mode, _ = sp.Attrs.String("mode")
			dev, _ := sp.Attrs.String("device")
			hostUpload = hostUpload || dev == "host"
		case trace.StageWarmup:
			if n, ok := sp.Attrs.Float("passes"); ok {
				t.WarmupPasses = int(n)
			}
		}
	}
	switch {
	case backend == "cpu":
		t.Device = DeviceCPU
	case backend != "":
		t.Device = DeviceGPU
	case initDevice == "cpu":
		t.Device = DeviceCPU
	case strings.HasPrefix(initDevice, "cuda") || cudaInit:
		t.Device = DeviceGPU
	case hostUpload:
		t.Device = DeviceCPU
	}
	switch t.Device {
	case DeviceCPU:
		t.Engine = EngineBuiltinCPU
	case DeviceGPU:
		t.Engine = EngineBuiltinCUDA
	}
	switch {
	case mode == loadMmap || mode == loadMapped:
		t.Load = loadMmap
	case mode == loadCopy || mode == loadStaged:
		t.Load = loadCopy
	case t.Device == DeviceCPU:
		t.Load = loadMmap
	case t.Device == DeviceGPU:
		t.Load = loadCopy
	}
	return t
}

// nextKnob is the tuning direction for hypothesis code on target t.
func nextKnob(code string, t target) string {
	switch t.Engine {
	case EngineBuiltin, EngineBuiltinCPU, EngineBuiltinCUDA:
		return builtinKnob(code, t)
	case EngineVLLM:
		return vllmKnob(code, t.Device)
	case EngineSGLang:
		return sglangKnob(code, t.Device)
	case EngineTGI:
		return tgiKnob(code, t.Device)
	case EngineLlamaCpp:
		return llamaCppKnob(code, t.Device)
	case EngineOllama:
		return ollamaKnob(code, t.Device)
	}
	return genericKnob(code, t.Device)
}

// The advice texts quote every flag, environment variable and request
// option in backticks, in a snippet that starts with the command it
// belongs to (`treni-top run … --load=copy`) or, for an external server,
// alone (`--enforce-eager`): TestAdviceFlagsExist and the command tree
// check in cmd/treni-top read them that way.

// prewarm is the page-cache knob every target shares: it needs no flag.
const prewarm = "pre-warm the page cache before launch (read the weight files once, e.g. cat them to /dev/null), or keep the weights on local NVMe or RAM-backed storage"

// serveFlag is how the user gives the built-in engine one of serve's
// flags: through run's --serve-arg for a plain run, on serve's command
// line otherwise (`run -- treni-top serve …`, or serve on its own).
func (t target) serveFlag(flag string) string {
	if t.PlainRun {
		return "`treni-top run … --serve-arg=" + flag + "`"
	}
	return "`treni-top serve … " + flag + "`"
}

// moreServeFlag is one more serve flag after a serveFlag snippet, in the
// same form.
func (t target) moreServeFlag(flag string) string {
	if t.PlainRun {
		return "`--serve-arg=" + flag + "`"
	}
	return "`" + flag + "`"
}

// loadFlag is the built-in engine's --load, which run has itself.
func (t target) loadFlag(mode string) string {
	if t.PlainRun {
		return "`treni-top run … --load=" + mode + "`"
	}
	return "`treni-top serve … --load=" + mode + "`"
}

// builtinKnob is the built-in engine's row: its own flags, said the way
// the user gives them for the way it was started.
func builtinKnob(code string, t target) string {
	warm := "or keep the process warm"
	switch code {
	case "A":
		return prewarm
	case "B":
		switch {
		case t.Device == DeviceCPU && t.Load == loadMmap:
			return "take the weights with a parallel read into the engine's own memory instead of faulting the mapping in page by page: " + t.loadFlag(loadCopy) + "; " + warm + " so the weights stay mapped"
		case t.Device == DeviceCPU:
			return "the host copy (load mode copy) is the term: " + t.loadFlag(loadMmap) + " computes from the page cache's pages without copying them; " + warm
		case t.gpu() && t.Load == loadMmap:
			return "the mapped upload (load mode mmap) is the term: compare the staged upload through pinned buffers, " + t.loadFlag(loadCopy) + ", and keep the process warm so the weights are uploaded once"
		case t.gpu():
			return "the staged upload (load mode copy) is the term: compare the upload from the mapped files, " + t.loadFlag(loadMmap) + ", and keep the process warm so the weights are uploaded once"
		}
		return "compare the load modes, " + t.loadFlag(loadCopy) + " and " + t.loadFlag(loadMmap) + ", and keep the process warm so the weights are loaded once (the engine has not said its device yet)"
	case "C":
		if t.WarmupPasses > 0 {
			passes := "the warm-up pass before healthy is"
			if t.WarmupPasses > 1 {
				passes = fmt.Sprintf("the %d warm-up passes before healthy are", t.WarmupPasses)
			}
			return fmt.Sprintf("%s part of the term: fewer end the start sooner (%s), the first request then paying the first pass; %s", passes, t.serveFlag("--warmup-passes=0"), warm)
		}
		switch t.Device {
		case DeviceCPU:
			return "the first pass touching the weights is the term (the CPU backend has no graphs or compile step): keep the process warm, or pay it before healthy with " + t.serveFlag("--warmup-passes=1") + " (a faster first request, a longer start)"
		case DeviceGPU:
			return "driver init, kernel load and the lazily captured decode graphs are paid once per process: keep the process warm, or pay the first pass before healthy with " + t.serveFlag("--warmup-passes=1") + " (a faster first request, a longer start)"
		}
		return "keep the process warm, or pay the first pass before healthy with " + t.serveFlag("--warmup-passes=1") + " (a faster first request, a longer start)"
	case "D":
		return "size the KV cache smaller: " + t.serveFlag("--kv-gib=G") + ", or " + t.moreServeFlag("--kv-blocks=N") + " or " + t.moreServeFlag("--max-model-len=L")
	case "E":
		return "keep a warm process: the built-in engine is a compiled binary with nothing to trim at start, so a long start is the host (exec from slow storage, CPU contention)"
	case "F":
		threads := ""
		if t.Device == DeviceCPU {
			threads = ", " + t.moreServeFlag("--threads=N")
		}
		return "tune batching: " + t.serveFlag("--max-batch=N") + ", " + t.moreServeFlag("--max-batched-tokens=T") + " (the step's token budget, prefill in chunks)" + threads + "; or lower client concurrency"
	}
	return ""
}

// genericKnob is the row of any other server: the direction to tune,
// with no flag of one server named for another.
func genericKnob(code string, dev Device) string {
	switch code {
	case "A":
		return "pre-warm the page cache before scale-up (read the weight files once), keep weights on local NVMe or RAM-backed storage, or stream weights while loading"
	case "B":
		switch dev {
		case DeviceGPU:
			return "upload from pinned or cuMemHostRegister'd host memory in large chunks on two streams, overlapped with reads; fewer, larger copies"
		case DeviceCPU:
			// Without a GPU "resident memory" is the process's own
			// mapping of the weights: faulting the pages in, not a copy
			// to a device.
			return "pre-fault the mapping in parallel (madvise WILLNEED, MAP_POPULATE), use huge pages, or keep a warm process so the weights stay mapped"
		}
		return "keep a warm process so the weights are loaded once; what to tune in the load (a copy to a device, or the host mapping) depends on the device, which the session does not say"
	case "C":
		if dev == DeviceGPU {
			return "capture fewer graph buckets (or lazily), reuse compile caches, or pre-warm with a dummy request before reporting healthy"
		}
		return "reuse compile or JIT caches, or pre-warm with a dummy request before reporting healthy"
	case "D":
		return "size the KV pool smaller (the server's context length and memory fraction) or allocate it at start-up instead of on the first request"
	case "E":
		return "trim interpreter start and imports (lazy imports), keep a warm process pool, or use a compiled runtime"
	case "F":
		return "tune batching (the server's limit of running requests, its batched-token budget, chunked prefill); or lower client concurrency"
	}
	return ""
}

// vllmKnob is vLLM's row (sessions/testdata/serverflags/vllm.txt). vLLM,
// SGLang and TGI run on a GPU unless the session says no NVIDIA GPU was
// found (a CPU or another vendor's build): then their graph knobs are not
// advised.
func vllmKnob(code string, dev Device) string {
	switch {
	case code == "A":
		return "pre-warm the page cache before scale-up (read the weight files once), keep weights on local NVMe or RAM-backed storage, or stream them while loading (`--load-format runai_streamer`)"
	case code == "C" && dev == DeviceGPU:
		return "capture fewer CUDA graph sizes (`--compilation-config '{\"cudagraph_capture_sizes\": [1, 2, 4, 8]}'`) or none (`--enforce-eager`), and keep the torch.compile cache (~/.cache/vllm) on persistent storage"
	case code == "C":
		return "keep the torch.compile cache (~/.cache/vllm) on persistent storage, or pre-warm with a dummy request before reporting healthy"
	case code == "D":
		return "size the KV pool smaller (`--max-model-len`, `--gpu-memory-utilization`)"
	case code == "F":
		return "tune batching: `--max-num-seqs`, `--max-num-batched-tokens`, `--enable-chunked-prefill`; or lower client concurrency"
	}
	return genericKnob(code, dev)
}

// sglangKnob is SGLang's row (sessions/testdata/serverflags/sglang.txt).
func sglangKnob(code string, dev Device) string {
	switch {
	case code == "C" && dev == DeviceGPU:
		return "capture graphs for fewer batch sizes (`--cuda-graph-max-bs`) or none (`--disable-cuda-graph`), and keep compile caches on persistent storage"
	case code == "D":
		return "size the KV pool smaller (`--mem-fraction-static`, `--context-length`)"
	case code == "F":
		return "tune batching: `--max-running-requests`, `--chunked-prefill-size`, `--schedule-policy`; or lower client concurrency"
	}
	return genericKnob(code, dev)
}

// tgiKnob is TGI's row (sessions/testdata/serverflags/tgi.txt).
func tgiKnob(code string, dev Device) string {
	switch {
	case code == "C" && dev == DeviceGPU:
		return "capture fewer CUDA graph sizes (`--cuda-graphs 1,2,4`, or `--cuda-graphs 0` for none) and warm up with a smaller `--max-batch-prefill-tokens`"
	case code == "C":
		return "warm up with a smaller `--max-batch-prefill-tokens`, or keep the server running"
	case code == "D":
		return "size the KV budget smaller (`--max-batch-total-tokens`, `--max-total-tokens`)"
	case code == "F":
		return "tune batching: `--max-concurrent-requests`, `--max-batch-total-tokens`, `--waiting-served-ratio`; or lower client concurrency"
	}
	return genericKnob(code, dev)
}

// llamaCppKnob is llama-server's row (sessions/testdata/serverflags/llama.cpp.txt).
func llamaCppKnob(code string, dev Device) string {
	switch code {
	case "A":
		return prewarm + "; llama-server reads through mmap unless `--no-mmap`"
	case "B":
		switch dev {
		case DeviceGPU:
			// The offloaded tensors are copied to device memory at every
			// start.
			return "offload fewer layers (`-ngl N`) to move fewer bytes, or keep the server running so the upload happens once"
		case DeviceCPU:
			return "keep mmap on (drop `--no-mmap`) so the weights are used from the page cache, `--mlock` to keep them resident, or keep the server running"
		}
		return "keep the server running so the weights load once (whether it offloads layers to a GPU is not in the session)"
	case "C":
		return "skip llama-server's empty warm-up run (`--no-warmup`), or keep the server running"
	case "D":
		return "a smaller context (`-c N`) or a quantized KV cache (`--cache-type-k q8_0 --cache-type-v q8_0`)"
	case "E":
		return "keep the server running: llama-server is compiled, so a long start is loading its backends and the host"
	case "F":
		return "more slots (`--parallel N`) with a context large enough for them (`-c N`), continuous batching (`--cont-batching`); or lower client concurrency"
	}
	return ""
}

// ollamaKnob is Ollama's row: its environment variables and request
// options (sessions/testdata/serverflags/ollama.txt).
func ollamaKnob(code string, dev Device) string {
	switch code {
	case "A":
		return prewarm + "; keep the model loaded (`OLLAMA_KEEP_ALIVE=-1`, or `keep_alive` in requests) so later requests skip the load"
	case "B":
		if dev == DeviceGPU {
			return "keep the model loaded (`OLLAMA_KEEP_ALIVE=-1`) so the weights move once; fewer GPU layers (the `num_gpu` option) move fewer bytes"
		}
		return "keep the model loaded (`OLLAMA_KEEP_ALIVE=-1`) so the weights are loaded once"
	case "C":
		return "keep the model loaded (`OLLAMA_KEEP_ALIVE=-1`) so the runner's warm-up happens once"
	case "D":
		return "a smaller context (the `num_ctx` option, `OLLAMA_CONTEXT_LENGTH`) or a quantized KV cache (`OLLAMA_KV_CACHE_TYPE=q8_0` with `OLLAMA_FLASH_ATTENTION=1`)"
	case "E":
		return "keep the server running and the model loaded (`OLLAMA_KEEP_ALIVE`): the runner process starts at every model load"
	case "F":
		return "more parallel requests per model (`OLLAMA_NUM_PARALLEL`) or a longer queue (`OLLAMA_MAX_QUEUE`); or lower client concurrency"
	}
	return ""
}
