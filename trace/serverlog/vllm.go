package serverlog

import (
	"regexp"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// vLLM stage lines, V0 and V1, old and new wording (PATTERNS.md §1).
var (
	reVEngineVersion = regexp.MustCompile(`LLM engine \(v([^)\s]+)\)`)
	reVTP            = regexp.MustCompile(`tensor_parallel_size=(\d+)`)
	reVWorld         = regexp.MustCompile(`in world size (\d+)`)
	reVDownload      = regexp.MustCompile(`Time spent downloading weights for .*?: ([0-9.]+) seconds`)
	reVWeightsTook   = regexp.MustCompile(`Loading weights took ([0-9.]+) seconds`)
	reVRunai         = regexp.MustCompile(`Overall time to stream ([0-9.]+ ?[KMGT]i?B) of all files(?: to cpu)?: ([0-9.]+)s`)
	reVModelLoading  = regexp.MustCompile(`Model loading took ([0-9.]+) ?(GiB|GB)(?: memory)? and ([0-9.]+) seconds`)
	reVV0Weights     = regexp.MustCompile(`Loading model weights took ([0-9.]+) ?(GiB|GB)`)
	reVDynamo        = regexp.MustCompile(`Dynamo bytecode transform time: ([0-9.]+) s`)
	reVCompiling     = regexp.MustCompile(`Compiling a graph for .*? takes ([0-9.]+) s`)
	reVDirectTook    = regexp.MustCompile(`Directly load the compiled graph.*? took ([0-9.]+) s`)
	reVCompileTotal  = regexp.MustCompile(`torch\.compile (?:takes|took) ([0-9.]+) s in total`)
	reVMemProfile    = regexp.MustCompile(`Memory profiling takes ([0-9.]+) seconds`)
	reVAvailKV       = regexp.MustCompile(`Available KV cache memory: ([0-9.]+) GiB`)
	reVKVTokens      = regexp.MustCompile(`GPU KV cache size: ([0-9,]+) tokens`)
	reVBlocks        = regexp.MustCompile(`# (?:GPU|cuda) blocks: (\d+)(?:, # CPU blocks: (\d+))?`)
	reVNumBlocks     = regexp.MustCompile(`num_gpu_blocks is: (\d+)`)
	reVGraphDone     = regexp.MustCompile(`Graph capturing finished in ([0-9.]+) secs?(?:, took ([0-9.]+) GiB)?`)
	reVWarmupRun     = regexp.MustCompile(`Initial profiling/warmup run took ([0-9.]+) s`)
	reVTokenizer     = regexp.MustCompile(`Init Tokenizer took ([0-9.]+) seconds`)
	reVAsleep        = regexp.MustCompile(`It took ([0-9.]+) seconds to fall asleep`)
	reVWoke          = regexp.MustCompile(`It took ([0-9.]+) seconds to wake up(?: tags (.*?))?\.?\s*$`)
	reVSleepFreed    = regexp.MustCompile(`Sleep mode freed ([0-9.]+) GiB memory, ([0-9.]+) GiB memory is still in use`)
	reVInitEngine    = regexp.MustCompile(`init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s(?:econds)?(?: \(compilation: ([0-9.]+) s)?`)
)

// vllmState is what the vLLM rules remember between lines.
type vllmState struct {
	loadStart   map[string]time.Duration // "Starting to load model" per worker
	uploadStart map[string]time.Duration // start of "Loading weights took" per worker
	downloadS   float64
	// sleepFreed: the workers' "Sleep mode freed" figures, for the sleep
	// span the executor's "fall asleep" line closes.
	sleepFreed trace.Attrs
}

// vllm turns one vLLM line into hits and returns the worker it came from.
//
// Mapping (DESIGN §3): runtime_init runs from the first line to the first
// engine line ("Initializing … LLM engine" or "Starting to load model");
// "Loading weights took" is decoder_tensor_upload; "Model loading took"
// (V1) and "Loading model weights took" (V0) are model_load, a total that
// includes download and model construction (0.8.5.post1: 226.8 s of which
// 225.2 s download), trimmed to end where the upload starts so that the two
// do not nest; when nothing is left its attributes go to the upload span.
// compile spans from Dynamo's start to the last compile or cache-load line,
// with the "torch.compile takes … in total" figure as reported; kv_alloc
// runs from the end of compile (or load) to the KV sizing line; graph
// capture ends at "Graph capturing finished"; http_ready from "Starting
// vLLM API server" to uvicorn's "Application startup complete".
func (p *Parser) vllm(at time.Duration, line string) string {
	worker, rest := stripVLLMTags(line)
	if worker != "" {
		p.sawWorkers = true
	}
	msg := rest
	if _, m, ok := vllmLevelDate(rest); ok {
		msg = m
	} else if strings.HasPrefix(rest, "INFO:") {
		msg = strings.TrimSpace(rest[5:])
	} else if pyAsctimeLike(rest) {
		if m := rePyAsctime.FindStringIndex(rest); m != nil {
			msg = rest[m[1]:]
		}
	}
	st := &p.v
	switch {
	case strings.Contains(msg, "Initializing a V1 LLM engine") || strings.Contains(msg, "Initializing an LLM engine"):
		h := hit{stage: trace.StageRuntimeInit, op: opEngineStart}
		if m := reVEngineVersion.FindStringSubmatch(msg); m != nil {
			h.set = trace.Attrs{"version": m[1]}
		}
		if m := reVTP.FindStringSubmatch(msg); m != nil {
			p.setWorkers(atoi(m[1]))
		}
		p.add(h)
	case strings.Contains(msg, "in world size"):
		if m := reVWorld.FindStringSubmatch(msg); m != nil {
			p.setWorkers(atoi(m[1]))
		}
	case strings.Contains(msg, "Starting to load model") || strings.Contains(msg, "Loading model from scratch"):
		p.add(hit{stage: trace.StageRuntimeInit, op: opEngineStart})
		if st.loadStart == nil {
			st.loadStart = map[string]time.Duration{}
		}
		if _, ok := st.loadStart[worker]; !ok || strings.Contains(msg, "Starting") {
			st.loadStart[worker] = at
		}
		p.add(hit{stage: trace.StageModelLoad, op: opMark})
	case strings.Contains(msg, "Time spent downloading weights"):
		if m := reVDownload.FindStringSubmatch(msg); m != nil {
			st.downloadS = atof(m[1])
		}
		p.add(hit{stage: trace.StageModelLoad, op: opMark})
	case strings.Contains(msg, "Loading weights took"):
		if m := reVWeightsTook.FindStringSubmatch(msg); m != nil {
			s := atof(m[1])
			p.add(took(trace.StageDecoderTensorUpload, at, s))
			if st.uploadStart == nil {
				st.uploadStart = map[string]time.Duration{}
			}
			st.uploadStart[worker] = at - seconds(s)
		}
	case strings.Contains(msg, "Overall time to stream"):
		if m := reVRunai.FindStringSubmatch(msg); m != nil {
			h := took(trace.StageDecoderTensorUpload, at, atof(m[2]))
			if b, ok := parseSize(m[1]); ok {
				h.set = trace.Attrs{trace.AttrBytes: b, "loader": "runai_streamer"}
			}
			p.add(h)
		}
	case strings.Contains(msg, "Model loading took"):
		if m := reVModelLoading.FindStringSubmatch(msg); m != nil {
			p.modelLoading(at, worker, atof(m[1])*gib, atof(m[3]))
		}
	case strings.Contains(msg, "Loading model weights took"):
		if m := reVV0Weights.FindStringSubmatch(msg); m != nil {
			start := at
			if s, ok := st.loadStart[worker]; ok && s <= at {
				start = s
			} else if p.engineSeen && p.engineAt <= at {
				start = p.engineAt
			}
			h := hit{stage: trace.StageModelLoad, op: opClose, start: start, hasStart: true, set: trace.Attrs{trace.AttrBytes: atof(m[1]) * gib}}
			p.add(h)
		}
	case strings.Contains(msg, "Dynamo bytecode transform time"):
		if m := reVDynamo.FindStringSubmatch(msg); m != nil {
			s := atof(m[1])
			p.add(hit{stage: trace.StageCompile, op: opExtend, start: at - seconds(s), hasStart: true, set: trace.Attrs{"dynamo_s": s}})
		}
	case strings.Contains(msg, "Start compiling function"):
		p.add(hit{stage: trace.StageCompile, op: opExtend})
	case strings.Contains(msg, "Compiling a graph for"):
		h := hit{stage: trace.StageCompile, op: opExtend, terminal: true}
		if m := reVCompiling.FindStringSubmatch(msg); m != nil {
			s := atof(m[1])
			h.start, h.hasStart = at-seconds(s), true
			h.max = trace.Attrs{"graph_compile_s": s}
		}
		p.add(h)
	case strings.Contains(msg, "Directly load the"):
		h := hit{stage: trace.StageCompile, op: opExtend, terminal: true}
		if m := reVDirectTook.FindStringSubmatch(msg); m != nil {
			s := atof(m[1])
			h.start, h.hasStart = at-seconds(s), true
			h.set = trace.Attrs{"cache_load_s": s, "cache_hit": true}
		} else if strings.Contains(msg, "from the cache") {
			h.set = trace.Attrs{"cache_hit": true}
		}
		p.add(h)
	case strings.Contains(msg, "Cache the graph") || strings.Contains(msg, "for vLLM's torch.compile"):
		p.add(hit{stage: trace.StageCompile, op: opExtend})
	case strings.Contains(msg, "torch.compile take") || strings.Contains(msg, "torch.compile took"):
		if m := reVCompileTotal.FindStringSubmatch(msg); m != nil {
			h := took(trace.StageCompile, at, atof(m[1]))
			// Up to 0.11 "in total" counts Dynamo and the graph compiles
			// but not cache loads or what follows them: a figure, not the
			// stage's length, and the stage keeps the end its last compile
			// line set. When the figure reaches back to the stage's start
			// (2026 builds also count saving the AOT artefact), it is the
			// stage's length and ends it here.
			h.keepEnd, h.stated = true, false
			if g := p.latest(trace.StageCompile); g != nil {
				if s, ok := g.earliest(); ok && h.start <= s+time.Second {
					h.keepEnd, h.stated = false, true
				}
			}
			p.add(h)
		}
	case strings.Contains(msg, "Memory profiling takes"):
		if m := reVMemProfile.FindStringSubmatch(msg); m != nil {
			s := atof(m[1])
			start := at - seconds(s)
			// The profile run is what triggers torch.compile in V1: the
			// server's figure includes it. Start after compile and load so
			// that the stages do not nest (the figure stays in reported_s).
			if e, ok := p.lastEnd(at, trace.StageCompile, trace.StageModelLoad, trace.StageDecoderTensorUpload); ok && e > start {
				start = e
			}
			p.add(hit{stage: trace.StageKVAlloc, op: opExtend, start: start, hasStart: true, reported: s, hasReported: true, main: true})
		}
	case strings.Contains(msg, "Available KV cache memory"):
		if m := reVAvailKV.FindStringSubmatch(msg); m != nil {
			p.add(p.kvHit(at, opExtend, trace.Attrs{trace.AttrBytes: atof(m[1]) * gib}))
		}
	case strings.Contains(msg, "GPU KV cache size"):
		if m := reVKVTokens.FindStringSubmatch(msg); m != nil {
			h := p.kvHit(at, opClose, trace.Attrs{trace.AttrTokens: atof(strings.ReplaceAll(m[1], ",", ""))})
			h.main = true
			p.add(h)
		}
	case strings.Contains(msg, "Maximum concurrency for"):
		p.add(hit{stage: trace.StageKVAlloc, op: opMark})
	case strings.Contains(msg, " blocks: ") && strings.HasPrefix(msg, "# "):
		if m := reVBlocks.FindStringSubmatch(msg); m != nil {
			start := at
			if e, ok := p.lastEnd(at, trace.StageModelLoad, trace.StageDecoderTensorUpload); ok {
				start = e
			}
			attrs := trace.Attrs{trace.AttrBlocks: atof(m[1])}
			if m[2] != "" {
				attrs["cpu_blocks"] = atof(m[2])
			}
			p.add(hit{stage: trace.StageKVAlloc, op: opClose, start: start, hasStart: true, set: attrs, main: true})
		}
	case strings.Contains(msg, "num_gpu_blocks is:"):
		if m := reVNumBlocks.FindStringSubmatch(msg); m != nil {
			p.add(hit{stage: trace.StageKVAlloc, op: opAnnotate, set: trace.Attrs{trace.AttrBlocks: atof(m[1])}})
		}
	case strings.Contains(msg, "Initial profiling/warmup run took"):
		if m := reVWarmupRun.FindStringSubmatch(msg); m != nil {
			p.add(took(trace.StageWarmup, at, atof(m[1])))
		}
	case strings.Contains(msg, "Capturing the model for CUDA graphs") || strings.Contains(msg, "Capturing a cudagraph"):
		p.add(hit{stage: trace.StageGraphCapture, op: opExtend})
	case strings.Contains(msg, "Graph capturing finished in"):
		if m := reVGraphDone.FindStringSubmatch(msg); m != nil {
			h := took(trace.StageGraphCapture, at, atof(m[1]))
			if m[2] != "" {
				h.set = trace.Attrs{trace.AttrBytes: atof(m[2]) * gib}
			}
			p.add(h)
		}
	case strings.HasPrefix(msg, "Capturing CUDA graphs"):
		p.add(hit{stage: trace.StageGraphCapture, op: opMark})
	case strings.Contains(msg, "Autotuning process starts"):
		p.add(hit{stage: trace.StageKernelLoad, op: opOpen, set: trace.Attrs{"what": "autotune"}})
	case strings.Contains(msg, "Autotuning process ends"):
		p.add(hit{stage: trace.StageKernelLoad, op: opClose})
	case strings.Contains(msg, "init engine (profile"):
		// The engine core's total for profiling (which runs
		// torch.compile), KV allocation and graph capture: a figure over
		// several stages, kept on the last of them. Nothing after it up to
		// the API server is a stage, so that gap stays unattributed.
		if m := reVInitEngine.FindStringSubmatch(msg); m != nil {
			set := trace.Attrs{"init_engine_s": atof(m[1])}
			if m[2] != "" {
				set["compilation_s"] = atof(m[2])
			}
			st := trace.StageKVAlloc
			if g := p.latest(trace.StageGraphCapture); g != nil {
				st = trace.StageGraphCapture
			}
			p.add(hit{stage: st, op: opAnnotate, set: set})
		}
	case strings.Contains(msg, "Sleep mode freed"):
		// Each worker's share, logged before the executor's line.
		if m := reVSleepFreed.FindStringSubmatch(msg); m != nil {
			if st.sleepFreed == nil {
				st.sleepFreed = trace.Attrs{"freed_bytes": 0.0, "in_use_bytes": 0.0}
			}
			st.sleepFreed["freed_bytes"] = st.sleepFreed["freed_bytes"].(float64) + atof(m[1])*gib
			st.sleepFreed["in_use_bytes"] = st.sleepFreed["in_use_bytes"].(float64) + atof(m[2])*gib
		}
		p.add(hit{stage: trace.StageSleep, op: opMark})
	case strings.Contains(msg, "seconds to fall asleep"):
		// Sleep mode (docs/ARCHITECTURE.md, "Sleep and wake"): every
		// sleep is a span of its own, however soon the next one comes.
		if m := reVAsleep.FindStringSubmatch(msg); m != nil {
			h := took(trace.StageSleep, at, atof(m[1]))
			h.fresh, h.main, h.set = true, true, st.sleepFreed
			st.sleepFreed = nil
			p.add(h)
		}
	case strings.Contains(msg, "seconds to wake up"):
		// A wake of the weights (with or without the KV cache) puts the
		// weights back; one of the KV cache alone allocates it.
		if m := reVWoke.FindStringSubmatch(msg); m != nil {
			stage := trace.StageWeightsRestore
			if m[2] != "" && !strings.Contains(m[2], "weights") {
				stage = trace.StageKVAlloc
			}
			h := took(stage, at, atof(m[1]))
			h.fresh, h.main = true, true
			if m[2] != "" {
				h.set = trace.Attrs{"tags": strings.Trim(m[2], " .")}
			}
			p.add(h)
		}
	case strings.Contains(msg, "Init Tokenizer took"):
		if m := reVTokenizer.FindStringSubmatch(msg); m != nil {
			p.add(took(trace.StageTokenizerLoad, at, atof(m[1])))
		}
	case strings.Contains(msg, "Starting vLLM API server") || strings.Contains(msg, "Starting vLLM server on"):
		p.add(hit{stage: trace.StageHTTPReady, op: opOpen, main: true})
	case strings.Contains(msg, "Application startup complete"):
		p.add(hit{stage: trace.StageHTTPReady, op: opClose, main: true})
		p.add(hit{op: opReady})
	}
	return worker
}

// modelLoading handles V1's "Model loading took G GiB and Y seconds".
func (p *Parser) modelLoading(at time.Duration, worker string, bytes, secs float64) {
	st := &p.v
	start := at - seconds(secs)
	end := at
	if u, ok := st.uploadStart[worker]; ok && u < at {
		end = u
	}
	set := trace.Attrs{trace.AttrBytes: bytes}
	if st.downloadS > 0 {
		set["download_s"] = st.downloadS
	}
	if end < at && (end <= start || float64(end-start) < 0.1*float64(at-start)) {
		// Loading the weights was nearly all of it: keep the figures on
		// the upload span rather than a sliver of model_load.
		set["model_load_s"] = secs
		p.add(hit{stage: trace.StageDecoderTensorUpload, op: opAnnotate, set: set})
		return
	}
	p.add(hit{stage: trace.StageModelLoad, op: opClose, start: start, hasStart: true, end: end, hasEnd: true,
		reported: secs, hasReported: true, set: set})
}

// kvHit starts kv_alloc where the last load or compile stage ended: vLLM
// logs KV sizing only when it is done.
func (p *Parser) kvHit(at time.Duration, o op, attrs trace.Attrs) hit {
	start := at
	if e, ok := p.lastEnd(at, trace.StageCompile, trace.StageModelLoad, trace.StageDecoderTensorUpload, trace.StageWarmup); ok {
		start = e
	}
	return hit{stage: trace.StageKVAlloc, op: o, start: start, hasStart: true, set: attrs}
}
