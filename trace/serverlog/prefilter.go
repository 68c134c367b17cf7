package serverlog

import "strings"

// Most lines of a production log are not stage lines (request chatter,
// progress bars, config dumps), and testing each against every rule's
// texts was most of the parser's cost. A kind's rules only fire on a line
// that contains one of their literal texts, so a line that contains none
// of them can skip the rules. The prefilter keeps, per text, one of its
// four-byte windows (its key: the window least made of spaces and small
// letters, which chatter is full of), and tests at every position of the
// line whether the four bytes there are a key (a hashed bit set of the
// keys); where one is, it compares the text whose key it is with the line
// around it. A line passes only when it contains a text: a key shared
// with chatter ("GPU " of "GPU KV cache size" in vLLM's periodic "GPU KV
// cache usage" line) costs a comparison, not the rules.
// TestPrefilterChangesNothing and FuzzFeed check that the parser returns
// the same with and without it.

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

// prefilter is a kind's texts, found by their keys.
type prefilter struct {
	bits  [1 << 16 / 64]uint64
	texts map[uint32][]keyedText // by the key's hash
}

// keyedText is a text and where its key begins in it.
type keyedText struct {
	text string
	off  int
}

func gramHash(g uint32) uint32 { return (g * 0x9E3779B1) >> 16 }

// gramAt is the four bytes of s at i, as mayMatch rolls them.
func gramAt(s string, i int) uint32 {
	return uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
}

func newPrefilter(texts []string) *prefilter {
	f := &prefilter{texts: map[uint32][]keyedText{}}
	for _, t := range texts {
		off := keyOffset(t)
		h := gramHash(gramAt(t, off))
		f.bits[h/64] |= 1 << (h % 64)
		f.texts[h] = append(f.texts[h], keyedText{t, off})
	}
	return f
}

// keyOffset picks a text's key: the four-byte window with the fewest
// spaces and small letters (the bytes log chatter is mostly made of), the
// first of equals.
func keyOffset(t string) int {
	weight := func(b byte) int {
		switch {
		case b == ' ':
			return 3
		case b >= 'a' && b <= 'z':
			return 2
		}
		return 1
	}
	best, bestW := 0, 0
	for i := 0; i+4 <= len(t); i++ {
		w := weight(t[i]) + weight(t[i+1]) + weight(t[i+2]) + weight(t[i+3])
		if i == 0 || w < bestW {
			best, bestW = i, w
		}
	}
	return best
}

// mayMatch reports whether s contains one of the texts.
func (f *prefilter) mayMatch(s string) bool {
	if len(s) < 4 {
		return false
	}
	g := uint32(s[0])<<8 | uint32(s[1])<<16 | uint32(s[2])<<24
	for i := 3; i < len(s); i++ {
		g = g>>8 | uint32(s[i])<<24
		h := gramHash(g)
		if f.bits[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		for _, k := range f.texts[h] {
			if at := i - 3 - k.off; at >= 0 && strings.HasPrefix(s[at:], k.text) {
				return true
			}
		}
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
