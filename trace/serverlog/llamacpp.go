package serverlog

import (
	"regexp"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// llama.cpp stage lines (PATTERNS.md §4), b3xxx to 2026 prefixes.
var (
	reLMeta      = regexp.MustCompile(`loaded meta data with (\d+) key-value pairs and (\d+) tensors`)
	reLOffloaded = regexp.MustCompile(`offloaded (\d+)/(\d+) layers to GPU`)
	reLBuffer    = regexp.MustCompile(`(\S+) (?:model )?buffer size =\s*([0-9.]+) MiB`)
	reLKVBuffer  = regexp.MustCompile(`KV buffer size =\s*([0-9.]+) MiB`)
	reLCells     = regexp.MustCompile(`\(\s*(\d+) cells`)
	reLCompute   = regexp.MustCompile(`compute buffer size =\s*([0-9.]+) MiB`)
	reLDevices   = regexp.MustCompile(`found (\d+) CUDA devices`)
)

// llamaState is what the llama.cpp rules remember between lines.
type llamaState struct {
	backend string // the device family whose init lines are being read
}

// llamacpp turns one llama.cpp line (llama-server's own, or the runner's
// inside Ollama when embedded) into hits.
//
// Mapping: cuda_init is the block of ggml_cuda_init / ggml_metal_init /
// load_backend lines; runtime_init is first line → "main: loading model"
// (the download that --hf-repo may do next has no canonical stage);
// tensor_index_build is "llama_model_loader: loaded meta data" → the first
// load_tensors line; decoder_tensor_upload is the load_tensors block (bytes:
// device buffers; host_bytes: CPU and mapped buffers); kv_alloc is the
// context block (llama_context / llama_new_context_with_model /
// llama_kv_cache…) up to "graph splits", with KV and compute buffer bytes;
// warmup is "warming up the model" → "initializing slots"; http_ready is
// "main: model loaded" (ready: /health answers from here) extended to
// "server is listening on" when a build prints it after loading. The
// 2024–2025 "main: HTTP server is listening" line comes before loading and
// is not readiness.
func (p *Parser) llamacpp(at time.Duration, line string, embedded bool) {
	msg := line
	if _, rest, ok := llamaElapsed(line); ok {
		msg = rest
	}
	p.deviceInit(at, msg)
	switch {
	case strings.HasPrefix(msg, "main: loading model") || strings.Contains(msg, "load_model: loading model"):
		if !embedded {
			p.add(hit{stage: trace.StageRuntimeInit, op: opEngineStart})
		}
		p.add(hit{stage: trace.StageModelLoad, op: opMark})
	case strings.HasPrefix(msg, "llama_model_loader: loaded meta data"):
		if !embedded {
			p.add(hit{stage: trace.StageRuntimeInit, op: opEngineStart})
		}
		h := hit{stage: trace.StageTensorIndexBuild, op: opOpen}
		if m := reLMeta.FindStringSubmatch(msg); m != nil {
			h.set = trace.Attrs{trace.AttrTensors: atof(m[2]), "kv_pairs": atof(m[1])}
		}
		p.add(h)
	case strings.HasPrefix(msg, "llama_model_loader:") || strings.HasPrefix(msg, "print_info:") || strings.HasPrefix(msg, "llm_load_print_meta:") ||
		strings.HasPrefix(msg, "llm_load_vocab:") || strings.HasPrefix(msg, "load: "):
		if g := p.latest(trace.StageTensorIndexBuild); g != nil && g.hasOpen() {
			p.add(hit{stage: trace.StageTensorIndexBuild, op: opExtend})
		}
	case strings.HasPrefix(msg, "load_tensors:") || strings.HasPrefix(msg, "llm_load_tensors:"):
		p.closeOpenStage(trace.StageTensorIndexBuild)
		h := hit{stage: trace.StageDecoderTensorUpload, op: opOpen}
		if m := reLOffloaded.FindStringSubmatch(msg); m != nil {
			h.set = trace.Attrs{"layers_offloaded": atof(m[1]), "layers_total": atof(m[2])}
		}
		if m := reLBuffer.FindStringSubmatch(msg); m != nil {
			key := trace.AttrBytes
			if strings.HasPrefix(m[1], "CPU") || strings.Contains(m[1], "Host") || strings.Contains(m[1], "Mapped") {
				key = "host_bytes"
			}
			h.add = trace.Attrs{key: atof(m[2]) * mib}
		}
		p.add(h)
	case strings.HasPrefix(msg, "llama_context:") || strings.HasPrefix(msg, "llama_new_context_with_model:") ||
		strings.HasPrefix(msg, "llama_init_from_model:") || strings.HasPrefix(msg, "llama_kv_cache") || strings.HasPrefix(msg, "sched_reserve:"):
		p.closeOpenStage(trace.StageDecoderTensorUpload)
		h := hit{stage: trace.StageKVAlloc, op: opOpen, set: trace.Attrs{}, add: trace.Attrs{}}
		if m := reLKVBuffer.FindStringSubmatch(msg); m != nil {
			h.add[trace.AttrBytes] = atof(m[1]) * mib
		} else if m := reLCompute.FindStringSubmatch(msg); m != nil {
			h.add["compute_bytes"] = atof(m[1]) * mib
		}
		if m := reLCells.FindStringSubmatch(msg); m != nil {
			h.set[trace.AttrTokens] = atof(m[1])
		}
		if strings.Contains(msg, "graph splits") {
			h.op = opClose
		}
		if g := p.latest(trace.StageKVAlloc); h.op == opOpen && g != nil && !g.hasOpen() && at-g.lastActivity <= settleWindow {
			// Context lines after the block closed belong to it.
			h.op = opMark
		}
		p.add(h)
	case strings.Contains(msg, "warming up the model"):
		p.closeOpenStage(trace.StageKVAlloc)
		p.add(hit{stage: trace.StageWarmup, op: opOpen})
	case strings.Contains(msg, "initializing slots") || strings.Contains(msg, "all slots are idle") || strings.HasSuffix(strings.TrimSpace(msg), "model loaded") ||
		strings.Contains(msg, "] model loaded |") || strings.Contains(msg, `"message":"model loaded"`) || strings.Contains(msg, `"msg":"model loaded"`):
		p.closeOpenStage(trace.StageKVAlloc)
		p.closeOpenStage(trace.StageWarmup)
		if embedded || !strings.Contains(msg, "model loaded") {
			break
		}
		p.add(hit{stage: trace.StageHTTPReady, op: opClose})
		p.add(hit{op: opReady})
	case !embedded && strings.Contains(msg, "server is listening on") && !strings.Contains(msg, "HTTP server is listening"):
		p.add(hit{stage: trace.StageHTTPReady, op: opClose})
		p.add(hit{op: opReady})
	}
}

// deviceInit tracks the block of device-initialisation lines: cuda_init
// opens at its first line and ends at the line before the first line that
// is not part of it.
func (p *Parser) deviceInit(at time.Duration, msg string) {
	backend := ""
	switch {
	case strings.HasPrefix(msg, "ggml_cuda_init:"), strings.HasPrefix(msg, "ggml_init_cublas:"):
		backend = "cuda"
	case strings.HasPrefix(msg, "ggml_metal_init:"):
		backend = "metal"
	case strings.HasPrefix(msg, "ggml_vulkan"):
		backend = "vulkan"
	case strings.HasPrefix(msg, "load_backend:"):
		backend = "ggml backend"
	case strings.HasPrefix(msg, "  Device ") && p.l.backend != "":
		backend = p.l.backend
	}
	g := p.latest(trace.StageCUDAInit)
	running := g != nil && g.hasOpen()
	if backend == "" {
		if running {
			p.add(hit{stage: trace.StageCUDAInit, op: opClose, end: p.lastAt, hasEnd: true})
		}
		p.l.backend = ""
		return
	}
	p.l.backend = backend
	h := hit{stage: trace.StageCUDAInit, op: opOpen, set: trace.Attrs{"backend": backend}}
	if m := reLDevices.FindStringSubmatch(msg); m != nil {
		h.set["devices"] = atof(m[1])
	}
	p.add(h)
}

// closeOpenStage ends the latest span of stage at this line if it runs.
func (p *Parser) closeOpenStage(stage trace.Stage) {
	if g := p.latest(stage); g != nil && g.hasOpen() {
		p.add(hit{stage: stage, op: opClose})
	}
}
