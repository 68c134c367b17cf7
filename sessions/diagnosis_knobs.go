package sessions

import (
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
// (and a session that does not say), advised with the generic row.
const (
	EngineBuiltinCPU  Engine = "builtin-cpu"
	EngineBuiltinCUDA Engine = "builtin-cuda"
	EngineVLLM        Engine = "vllm"
	EngineSGLang      Engine = "sglang"
	EngineTGI         Engine = "tgi"
	EngineLlamaCpp    Engine = "llama.cpp"
	EngineOllama      Engine = "ollama"
	EngineOther       Engine = ""
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

// target is what the knob table needs to know about a run's target.
type target struct {
	Engine Engine
	// Load is the built-in engine's load mode (loadMmap or loadCopy).
	Load string
	// GPU says the target computes on a GPU (llama.cpp and Ollama offload
	// to one when a GPU was sampled).
	GPU bool
}

// targetOf reads the run's target from its events: the server kind of the
// process start (or of a late detection), and for the built-in engine its
// device and load mode from its own stage attributes.
func targetOf(events []trace.Event, run Run, f RunFacts) target {
	kind := ""
	for _, e := range events {
		if e.Run != run.Index {
			continue
		}
		switch {
		case e.Kind == trace.KindProcess && e.Process.Action == trace.ProcessStart && kind == "":
			kind = e.Process.ServerKind
		case e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerKindDetected:
			kind, _ = e.Marker.Attrs.String("server_kind")
		}
	}
	t := target{GPU: f.HaveGPU}
	switch serverlog.Kind(kind) {
	case serverlog.KindTreni:
		return builtinTarget(run)
	case serverlog.KindVLLM:
		t.Engine, t.GPU = EngineVLLM, true
	case serverlog.KindSGLang:
		t.Engine, t.GPU = EngineSGLang, true
	case serverlog.KindTGI:
		t.Engine, t.GPU = EngineTGI, true
	case serverlog.KindLlamaCpp:
		t.Engine = EngineLlamaCpp
	case serverlog.KindOllama:
		t.Engine = EngineOllama
	}
	return t
}

// builtinTarget tells the built-in engine's device and load mode: CUDA
// when it reported cuda_init or runtime_init says device cuda; a
// decoder_tensor_upload done on the host is the CPU backend's --load copy.
// Without an upload stage the CPU backend computed from the mapping
// (--load mmap) and the CUDA backend used its default, the staged upload
// (--load copy).
func builtinTarget(run Run) target {
	t := target{Engine: EngineBuiltinCPU}
	mode := ""
	for _, sp := range run.Spans {
		switch sp.Name {
		case trace.StageCUDAInit:
			t.Engine = EngineBuiltinCUDA
		case trace.StageRuntimeInit:
			if dev, _ := sp.Attrs.String("device"); strings.HasPrefix(dev, "cuda") {
				t.Engine = EngineBuiltinCUDA
			}
		case trace.StageDecoderTensorUpload:
			mode, _ = sp.Attrs.String("mode")
		}
	}
	t.GPU = t.Engine == EngineBuiltinCUDA
	switch {
	case mode == loadMmap || mode == loadMapped:
		t.Load = loadMmap
	case mode == loadCopy || mode == loadStaged || t.GPU:
		t.Load = loadCopy
	default:
		t.Load = loadMmap
	}
	return t
}

// nextKnob is the tuning direction for hypothesis code on target t: the
// knob table's cell for t's engine, or the generic row where the engine
// has no cell of its own.
func nextKnob(code string, t target) string {
	if row, ok := knobTable(t)[t.Engine]; ok {
		if k, ok := row[code]; ok {
			return k
		}
	}
	return knobTable(t)[EngineOther][code]
}

// knobTable is the next knob per (engine × hypothesis). The generic row
// is the tuning direction for a GPU server; every other row
// names the knobs that target really has. An empty cell means no knob.
func knobTable(t target) map[Engine]map[string]string {
	generic := map[string]string{
		"A": "pre-warm the page cache before scale-up (read the weight files once), keep weights on local NVMe or RAM-backed storage, or stream weights while loading",
		"B": "upload from pinned or cuMemHostRegister'd host memory in large chunks on two streams, overlapped with reads; fewer, larger copies",
		"C": "capture fewer graph buckets (or lazily), reuse compile caches, or pre-warm with a dummy request before reporting healthy",
		"D": "size the KV pool smaller (--max-model-len, --gpu-memory-utilization) or allocate it at start-up instead of on the first request",
		"E": "trim interpreter start and imports (lazy imports), keep a warm process pool, or use a compiled runtime",
		"F": "tune batching: --max-num-seqs, --max-num-batched-tokens, chunked prefill; or lower client concurrency",
	}
	if !t.GPU {
		// Without a GPU "resident memory" is the process's own mapping of
		// the weights: faulting the pages in, not a PCIe copy.
		generic["B"] = "pre-fault the mapping in parallel (madvise WILLNEED, MAP_POPULATE), use huge pages, or keep a warm process so the weights stay mapped"
	}
	prewarm := "pre-warm the page cache before launch (read the weight files once, e.g. cat them to /dev/null), or keep the weights on local NVMe or RAM-backed storage"
	builtinB := map[string]string{
		loadMmap: "serve with --load copy (parallel pread into the engine's own memory, like llama.cpp --no-mmap) instead of faulting the mapping in page by page, or keep the process warm so the weights stay mapped",
		loadCopy: "the host copy (--load copy) is the term: serve with --load mmap to compute from the page cache's pages without copying them",
	}
	cudaB := map[string]string{
		loadCopy: "the staged upload (--load copy) is the term: compare --load mmap (upload from the mapped files), and keep the process warm so the weights are uploaded once",
		loadMmap: "the mapped upload (--load mmap) is the term: compare --load copy (staged upload through pinned buffers), and keep the process warm so the weights are uploaded once",
	}
	return map[Engine]map[string]string{
		EngineOther: generic,
		EngineBuiltinCPU: {
			"A": prewarm,
			"B": builtinB[t.Load],
			"C": "skip or shorten the warm-up passes (--warmup-passes); the CPU backend has no graphs or compile step, so the rest is the first pass touching the weights: keep the process warm",
			"D": "size the KV cache smaller (--kv-blocks, --kv-gib, --max-model-len)",
			"E": "keep a warm process: the built-in engine is a compiled binary with nothing to trim at start, so a long start is the host (exec from slow storage, CPU contention)",
			"F": "tune batching: --max-batch, --max-batched-tokens (chunked prefill), --threads; or lower client concurrency",
		},
		EngineBuiltinCUDA: {
			"A": prewarm,
			"B": cudaB[t.Load],
			"C": "skip or shorten the warm-up passes (--warmup-passes), or keep the process warm: driver init, kernel load and the lazily captured decode graphs are paid once per process",
			"D": "size the KV cache smaller (--kv-blocks, --kv-gib, --max-model-len)",
			"E": "keep a warm process: the built-in engine is a compiled binary with nothing to trim at start, so a long start is the host (exec from slow storage, CPU contention)",
			"F": "tune batching: --max-batch, --max-batched-tokens (chunked prefill); or lower client concurrency",
		},
		EngineVLLM: {
			"A": "pre-warm the page cache before scale-up (read the weight files once), keep weights on local NVMe or RAM-backed storage, or stream them while loading (--load-format runai_streamer)",
			"C": "capture fewer CUDA graph sizes (compilation_config cudagraph_capture_sizes) or none (--enforce-eager), and keep the torch.compile cache (~/.cache/vllm) on persistent storage",
		},
		EngineSGLang: {
			"C": "capture graphs for fewer batch sizes (--cuda-graph-max-bs) or none (--disable-cuda-graph), and keep compile caches on persistent storage",
			"D": "size the KV pool smaller (--mem-fraction-static, --context-length) or allocate it at start-up instead of on the first request",
			"F": "tune batching: --max-running-requests, --chunked-prefill-size, --schedule-policy; or lower client concurrency",
		},
		EngineTGI: {
			"C": "capture fewer CUDA graph sizes (--cuda-graphs 1,2,4 or 0 for none) and warm up with a smaller --max-batch-prefill-tokens",
			"D": "size the KV budget smaller (--max-batch-total-tokens, --max-total-tokens)",
			"F": "tune batching: --max-concurrent-requests, --max-batch-total-tokens, --waiting-served-ratio; or lower client concurrency",
		},
		EngineLlamaCpp: {
			"A": prewarm + "; llama-server reads through mmap unless --no-mmap",
			"B": llamaCppB(t.GPU),
			"C": "skip llama-server's empty warm-up run (--no-warmup), or keep the server running",
			"D": "a smaller context (-c / --ctx-size) or a quantized KV cache (--cache-type-k q8_0 --cache-type-v q8_0)",
			"E": "keep the server running: llama-server is compiled, so a long start is loading its backends and the host",
			"F": "more slots (--parallel) with a context large enough for them (-c), continuous batching (--cont-batching); or lower client concurrency",
		},
		EngineOllama: {
			"A": prewarm + "; keep the model loaded (OLLAMA_KEEP_ALIVE=-1, or keep_alive in requests) so later requests skip the load",
			"B": "keep the model loaded (OLLAMA_KEEP_ALIVE=-1) so the weights move once; fewer GPU layers (num_gpu) move fewer bytes",
			"C": "keep the model loaded (OLLAMA_KEEP_ALIVE=-1) so the runner's warm-up happens once",
			"D": "a smaller context (num_ctx, OLLAMA_CONTEXT_LENGTH) or a quantized KV cache (OLLAMA_KV_CACHE_TYPE=q8_0 with OLLAMA_FLASH_ATTENTION=1)",
			"E": "keep the server running and the model loaded (OLLAMA_KEEP_ALIVE): the runner process starts at every model load",
			"F": "more parallel requests per model (OLLAMA_NUM_PARALLEL) or a longer queue (OLLAMA_MAX_QUEUE); or lower client concurrency",
		},
	}
}

// llamaCppB is llama.cpp's loading knob: with GPU offload the offloaded
// tensors are copied to device memory at every start; on CPU the weights
// are used from the mapping.
func llamaCppB(gpu bool) string {
	if gpu {
		return "offload fewer layers (-ngl) to move fewer bytes, or keep the server running so the upload happens once"
	}
	return "keep mmap on (drop --no-mmap) so the weights are used from the page cache, --mlock to keep them resident, or keep the server running"
}
