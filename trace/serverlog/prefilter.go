package serverlog

import "strings"

// Most lines of a production log are not stage lines (request chatter,
// progress bars, config dumps), and testing each against every rule's
// texts was most of the parser's cost. A kind's rules only fire on a line
// that contains one of their literal texts, so a line that contains none
// of them can skip the rules. The prefilter finds the texts the way
// Wu and Manber's multi-pattern search does: it slides a window as long as
// the shortest text along the line and looks only at the two bytes that
// end it; where those two bytes end no text's first window-length bytes,
// the window moves on by as much as the texts allow (up to the window's
// length less one: most of a chatty line is skipped, not read), and where
// they do, the texts that end so are compared with the line. A line passes
// only when it contains a text. TestPrefilterFindsTexts and FuzzPrefilter
// hold it to strings.Contains over the texts; TestPrefilterChangesNothing
// and FuzzFeed check that the parser returns the same with and without
// it.

// ruleTexts are, per kind, the literal texts its rules (and noteOrigin)
// look for; every text is at least four bytes long.
var ruleTexts = map[Kind][]string{
	KindVLLM: {
		" blocks: ", "Application startup complete", "Autotuning process", "Available KV cache memory", "Cache the graph",
		"Capturing CUDA graphs", "Capturing a cudagraph", "Capturing the model for CUDA graphs", "Compiling a graph for",
		"Directly load the", "Dynamo bytecode transform time", "GPU KV cache size", "Graph capturing finished in",
		"Init Tokenizer took", "Initial profiling/warmup run took", "Initializing a V1 LLM engine", "Initializing an LLM engine",
		"Loading model from scratch", "Loading model weights took", "Loading weights took", "Maximum concurrency for",
		"Memory profiling takes", "Model loading took", "Overall time to stream", "Start compiling function",
		"Starting to load model", "Starting vLLM API server", "Starting vLLM server on", "Time spent downloading weights",
		"for vLLM's torch.compile", "in world size", "init engine (profile", "num_gpu_blocks is:", "torch.compile take",
		"torch.compile took", "Sleep mode freed", "seconds to fall asleep", "seconds to wake up",
		// noteOrigin
		"platform", "with config:", "API server version",
	},
	KindSGLang: {
		"Application startup complete", "CUDA graph begin", "CUDA graph end", "Capture cuda graph", "Engine startup timings",
		"Init torch distributed", "KV Cache is allocated", "Load weight begin", "Load weight end", "Memory pool end",
		"Started server process", "The server is fired up and ready to roll", "max_total_num_tokens=", "server_args=",
	},
	KindTGI: {
		"Connected", "Cuda Graphs are enabled for sizes", "KV-cache blocks:", "Setting max batch total tokens to",
		"Sharding model on", "Starting check and download process", "Starting download process", "Starting shard",
		"Warming up model", "ready in ",
		// noteOrigin
		"model_id: ", `version: "`,
	},
	KindLlamaCpp: llamaTexts,
	KindOllama: append([]string{
		"Listening on", "[GIN] ", "compute graph", "kv cache", "loading first model", "loading model", "model load",
		"model weights", "offloaded ", "started in", "starting llama server", "starting llama-server", "starting runner",
		"waiting for llama runner",
		// noteOrigin
		"library=", " version=", "(version ",
	}, llamaTexts...),
}

// llamaTexts are llama.cpp's, which Ollama's runner prints too.
var llamaTexts = []string{
	"  Device ", "HTTP server is listening", "] model loaded |", "all slots are idle", "ggml_cuda_init:", "ggml_metal_init:",
	"ggml_vulkan", "graph splits", "initializing slots", "llama_context:", "llama_init_from_model:", "llama_kv_cache",
	"llama_model_loader:", "llama_new_context_with_model:", "llm_load_", "load: ", "load_backend:", "load_model: loading model",
	"load_tensors:", "main: loading model", "model loaded", "print_info:", "sched_reserve:", "server is listening on", `"message":"model loaded"`, `"msg":"model loaded"`, "ggml_init_cublas:",
	"warming up the model",
	// noteOrigin
	"build: ", "using device ", "general.name", "Device ", `"build info"`,
}

// prefilter is a kind's texts, found by the two bytes that end a window
// as long as the shortest of them.
type prefilter struct {
	m int // the window: the shortest text's length
	// shift is, by the two bytes that end a window, how far it may move
	// on without passing over the first m bytes of a text: 0 where those
	// bytes end them.
	shift [1 << 16]uint8
	// group is, where shift is 0, 1 + the index in groups of the texts
	// whose first m bytes end with those two bytes.
	group  [1 << 16]uint16
	groups [][]string
}

// pairAt is the two bytes of s that end at i.
func pairAt(s string, i int) uint16 { return uint16(s[i-1]) | uint16(s[i])<<8 }

// newPrefilter makes the prefilter of texts (each at least two bytes long,
// fewer than 65,535 of them).
func newPrefilter(texts []string) *prefilter {
	f := &prefilter{m: len(texts[0])}
	for _, t := range texts {
		f.m = min(f.m, len(t))
	}
	for i := range f.shift {
		f.shift[i] = uint8(min(f.m-1, 255))
	}
	for _, t := range texts {
		head := t[:f.m]
		for j := 1; j < f.m; j++ {
			if p, sh := pairAt(head, j), f.m-1-j; sh < int(f.shift[p]) {
				f.shift[p] = uint8(sh)
			}
		}
		p := pairAt(head, f.m-1)
		if f.group[p] == 0 {
			f.groups = append(f.groups, nil)
			f.group[p] = uint16(len(f.groups))
		}
		f.groups[f.group[p]-1] = append(f.groups[f.group[p]-1], t)
	}
	return f
}

// mayMatch reports whether s contains one of the texts.
func (f *prefilter) mayMatch(s string) bool {
	for end := f.m - 1; end < len(s); {
		p := pairAt(s, end)
		if sh := f.shift[p]; sh > 0 {
			end += int(sh)
			continue
		}
		start := end - f.m + 1
		for _, t := range f.groups[f.group[p]-1] {
			if strings.HasPrefix(s[start:], t) {
				return true
			}
		}
		end++
	}
	return false
}

// prefilters are built once: they are read-only afterwards.
var prefilters = func() map[Kind]*prefilter {
	m := map[Kind]*prefilter{}
	for k, texts := range ruleTexts {
		m[k] = newPrefilter(texts)
	}
	return m
}()
