package serverlog

import (
	"regexp"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// SGLang stage lines (PATTERNS.md §2), ≤0.4 and 2026 wording.
var (
	reSTP            = regexp.MustCompile(`\btp_size=(\d+)`)
	reSElapsed       = regexp.MustCompile(`elapsed=([0-9.]+) s`)
	reSAvail         = regexp.MustCompile(`avail mem=([0-9.]+) GB`)
	reSMemUsage      = regexp.MustCompile(`mem usage=([0-9.]+) GB`)
	reSTokens        = regexp.MustCompile(`#tokens: (\d+)`)
	reSKV            = regexp.MustCompile(`K size: ([0-9.]+) GB, V size: ([0-9.]+) GB`)
	reSKVOne         = regexp.MustCompile(`KV size: ([0-9.]+) GB`)
	reSCaptureOld    = regexp.MustCompile(`Time elapsed: ([0-9.]+) s`)
	reSCaptureNew    = regexp.MustCompile(`Capture (\w+) (\w+) CUDA graph (begin|end)`)
	reSMaxTokens     = regexp.MustCompile(`max_total_num_tokens=(\d+)`)
	reSStartupTiming = regexp.MustCompile(`(load_weight|kv_cache_allocation|tokenizer_e2e|scheduler_e2e)=([0-9.]+)`)
)

// sglang turns one SGLang line into hits and returns the rank it came from.
//
// Mapping: runtime_init is first line → "Init torch distributed begin" (or
// "Load weight begin"); cuda_init is the torch distributed init (device
// and NCCL setup, the first device work SGLang logs); "Load weight
// begin/end" is decoder_tensor_upload (bytes from "mem usage", else the
// drop in available memory); kv_alloc runs from the end of the upload to
// "Memory pool end"; graph_capture from "Capture … begin" to the last
// "… end" (prefill and decode captures make one span, their figures added);
// http_ready from uvicorn's "Started server process" to "Application
// startup complete"; warmup from there to "The server is fired up and
// ready to roll!", which SGLang prints after its own warm-up request.
func (p *Parser) sglang(at time.Duration, line string) string {
	if strings.HasPrefix(line, "(") {
		_, line = stripVLLMTags(line) // a Ray actor's "(SGLangWorker pid=N) "
	}
	msg, worker := line, ""
	if sglangPrefix(line) {
		if j := strings.IndexByte(line, ']'); j > 0 {
			tag := line[1:j]
			if len(tag) > 20 {
				worker = strings.TrimSpace(tag[20:])
			}
			msg = strings.TrimLeft(line[j+1:], " ")
		}
	}
	if worker != "" {
		p.sawWorkers = true
	}
	if strings.HasPrefix(msg, "INFO:") {
		msg = strings.TrimSpace(msg[5:])
	}
	switch {
	case strings.Contains(msg, "server_args=ServerArgs"):
		if m := reSTP.FindStringSubmatch(msg); m != nil {
			p.setWorkers(atoi(m[1]))
		}
	case strings.Contains(msg, "Init torch distributed begin"):
		p.add(hit{stage: trace.StageRuntimeInit, op: opEngineStart})
		p.add(hit{stage: trace.StageCUDAInit, op: opOpen, set: trace.Attrs{"what": "torch distributed init"}})
	case strings.Contains(msg, "Init torch distributed ends"):
		h := hit{stage: trace.StageCUDAInit, op: opClose}
		if m := reSElapsed.FindStringSubmatch(msg); m != nil {
			h.reported, h.hasReported, h.stated = atof(m[1]), true, true
			h.start, h.hasStart = at-seconds(h.reported), true
		}
		p.add(h)
	case strings.Contains(msg, "Load weight begin"):
		p.add(hit{stage: trace.StageRuntimeInit, op: opEngineStart})
		if g := p.latest(trace.StageCUDAInit); g != nil && g.hasOpen() {
			p.add(hit{stage: trace.StageCUDAInit, op: opClose})
		}
		h := hit{stage: trace.StageDecoderTensorUpload, op: opOpen}
		if m := reSAvail.FindStringSubmatch(msg); m != nil {
			h.set = trace.Attrs{"avail_mem_before_bytes": atof(m[1]) * gib}
		}
		p.add(h)
	case strings.Contains(msg, "Load weight end"):
		h := hit{stage: trace.StageDecoderTensorUpload, op: opClose, set: trace.Attrs{}}
		if m := reSElapsed.FindStringSubmatch(msg); m != nil {
			h.reported, h.hasReported, h.stated = atof(m[1]), true, true
			h.start, h.hasStart = at-seconds(h.reported), true
		}
		if m := reSMemUsage.FindStringSubmatch(msg); m != nil {
			h.set[trace.AttrBytes] = atof(m[1]) * gib
		} else if m := reSAvail.FindStringSubmatch(msg); m != nil {
			if g := p.latest(trace.StageDecoderTensorUpload); g != nil {
				if before, ok := g.attrs.Float("avail_mem_before_bytes"); ok && before > atof(m[1])*gib {
					h.set[trace.AttrBytes] = before - atof(m[1])*gib
				}
			}
		}
		p.add(h)
	case strings.Contains(msg, "KV Cache is allocated") || strings.Contains(msg, "Memory pool end"):
		start := at
		if e, ok := p.lastEnd(at, trace.StageDecoderTensorUpload, trace.StageModelLoad); ok {
			start = e
		}
		attrs := trace.Attrs{}
		if m := reSTokens.FindStringSubmatch(msg); m != nil {
			attrs[trace.AttrTokens] = atof(m[1])
		}
		if m := reSKV.FindStringSubmatch(msg); m != nil {
			attrs[trace.AttrBytes] = (atof(m[1]) + atof(m[2])) * gib
		} else if m := reSKVOne.FindStringSubmatch(msg); m != nil {
			attrs[trace.AttrBytes] = atof(m[1]) * gib
		}
		o := opExtend
		if strings.Contains(msg, "Memory pool end") {
			o = opClose
		}
		p.add(hit{stage: trace.StageKVAlloc, op: o, start: start, hasStart: true, set: attrs})
	case strings.Contains(msg, "max_total_num_tokens="):
		if m := reSMaxTokens.FindStringSubmatch(msg); m != nil {
			p.add(hit{stage: trace.StageKVAlloc, op: opAnnotate, set: trace.Attrs{trace.AttrTokens: atof(m[1])}})
		}
	case strings.Contains(msg, "Capture cuda graph begin"):
		p.add(hit{stage: trace.StageGraphCapture, op: opOpen})
	case strings.Contains(msg, "Capture cuda graph end"):
		h := hit{stage: trace.StageGraphCapture, op: opClose}
		if m := reSCaptureOld.FindStringSubmatch(msg); m != nil {
			h.reported, h.hasReported, h.stated = atof(m[1]), true, true
			h.start, h.hasStart = at-seconds(h.reported), true
		}
		p.add(h)
	case strings.Contains(msg, "CUDA graph begin") || strings.Contains(msg, "CUDA graph end"):
		m := reSCaptureNew.FindStringSubmatch(msg)
		if m == nil {
			break
		}
		if m[3] == "begin" {
			p.add(hit{stage: trace.StageGraphCapture, op: opOpen})
			break
		}
		h := hit{stage: trace.StageGraphCapture, op: opClose, sumReported: true}
		if e := reSElapsed.FindStringSubmatch(msg); e != nil {
			s := atof(e[1])
			h.reported, h.hasReported, h.stated = s, true, true
			h.start, h.hasStart = at-seconds(s), true
			h.set = trace.Attrs{m[1] + "_" + m[2] + "_s": s}
		}
		p.add(h)
	case strings.Contains(msg, "Engine startup timings"):
		for _, m := range reSStartupTiming.FindAllStringSubmatch(msg, -1) {
			switch m[1] {
			case "kv_cache_allocation":
				p.add(hit{stage: trace.StageKVAlloc, op: opAnnotate, reported: atof(m[2]), hasReported: true, stated: true})
			case "load_weight":
				p.add(hit{stage: trace.StageDecoderTensorUpload, op: opAnnotate, reported: atof(m[2]), hasReported: true, stated: true})
			}
		}
	case strings.HasPrefix(msg, "Started server process"):
		p.add(hit{stage: trace.StageHTTPReady, op: opOpen, main: true})
	case strings.HasPrefix(msg, "Application startup complete"):
		p.add(hit{stage: trace.StageHTTPReady, op: opClose, main: true})
		p.add(hit{stage: trace.StageWarmup, op: opOpen, main: true, set: trace.Attrs{"what": "SGLang's warm-up request"}})
	case strings.Contains(msg, "The server is fired up and ready to roll"):
		p.add(hit{stage: trace.StageWarmup, op: opClose, main: true})
		p.add(hit{op: opReady})
	}
	return worker
}
