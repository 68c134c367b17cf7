package serverlog

import (
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Ollama stage lines (PATTERNS.md §5).
var (
	reORunnerStarted = regexp.MustCompile(`(?:llama runner|llama-server|runner) started in ([0-9.]+) seconds`)
	reOGinPath       = regexp.MustCompile(`"(/[^"]*)"`)
	reOOffloaded     = regexp.MustCompile(`^offloaded (\d+)/(\d+) layers to GPU`)
	reOSize          = regexp.MustCompile(`\bsize="?([0-9.]+ ?[KMGT]i?B)"?`)
	reODevice        = regexp.MustCompile(`\b(?:device|buffer)=(\S+)`)
)

// ollamaState is what the Ollama rules remember between lines: the
// memory plan its own engine (ollama runner --ollama-engine, 2025–) logs
// before loading, kept for the model_load span that "started in" closes.
type ollamaState struct {
	plan trace.Attrs
}

// firstRequestPaths are the endpoints whose first call makes Ollama load
// the model.
var firstRequestPaths = []string{"/api/generate", "/api/chat", "/api/embed", "/v1/chat/completions", "/v1/completions", "/v1/embeddings"}

// ollama turns one Ollama line into hits. Ollama's own lines are Go slog
// text; its runner's (llama.cpp) lines are interleaved unprefixed and go
// through the llama.cpp rules, so a lazy load is decomposed into the same
// stages, inside the first request.
//
// Mapping: runtime_init is first line → "Listening on" (ready from there:
// Ollama answers /api/version before any model is loaded); model_load is
// "llama runner started in X seconds" (or "llama-server started in"), the
// server's own total, ending at the line; first_request is the first gin
// line of a generate, chat or embed call, ending at its line and starting
// its latency earlier, so the lazy load sits inside it.
func (p *Parser) ollama(at time.Duration, line string) {
	l := line
	msg, ok := "", false
	switch {
	case strings.HasPrefix(l, "time="):
		msg, ok = slogMsg(l), true
	case len(l) > 20 && l[4] == '/' && l[10] == ' ':
		msg, ok = goLogMsg(l) // before slog: "2023/10/06 13:38:58 routes.go:572: Listening on …"
	}
	if ok {
		switch {
		case strings.HasPrefix(msg, "Listening on"):
			p.add(hit{stage: trace.StageRuntimeInit, op: opEngineStart})
			p.add(hit{op: opReady})
		case strings.Contains(msg, "started in"):
			m := reORunnerStarted.FindStringSubmatch(msg)
			if m == nil {
				break
			}
			for _, s := range []trace.Stage{trace.StageCUDAInit, trace.StageTensorIndexBuild, trace.StageDecoderTensorUpload, trace.StageKVAlloc, trace.StageWarmup} {
				p.closeOpenStage(s)
			}
			h := took(trace.StageModelLoad, at, atof(m[1]))
			h.set, p.o.plan = p.o.plan, nil
			p.add(h)
		case msg == "model weights" || msg == "kv cache" || msg == "compute graph" || strings.HasPrefix(msg, "offloaded "):
			p.ollamaPlan(l, msg)
		case strings.HasPrefix(msg, "starting llama server") || strings.HasPrefix(msg, "starting runner") || strings.HasPrefix(msg, "starting llama-server") ||
			strings.HasPrefix(msg, "loading model") || strings.HasPrefix(msg, "loading first model") || strings.HasPrefix(msg, "waiting for llama runner") ||
			strings.HasPrefix(msg, "model load"):
			p.add(hit{stage: trace.StageModelLoad, op: opMark})
		}
		return
	}
	if strings.HasPrefix(l, "[GIN] ") {
		p.gin(at, l)
		return
	}
	p.llamacpp(at, l, true)
}

// ollamaPlan keeps the memory plan Ollama's own engine logs before it
// loads (2025–): "offloaded 41/41 layers to GPU", then per device
// msg="model weights" buffer=CUDA0 size="11.9 GiB", msg="kv cache",
// msg="compute graph". The runner's llama.cpp lines carry the same figures
// for the llama.cpp engine; this engine prints no timed steps, so the
// figures go onto model_load (bytes on GPUs, host_bytes on the CPU,
// kv_bytes, compute_bytes, layers_offloaded/layers_total).
func (p *Parser) ollamaPlan(l, msg string) {
	if p.o.plan == nil {
		p.o.plan = trace.Attrs{}
	}
	add := func(k string, v float64) {
		if old, _ := p.o.plan.Float(k); finite(old + v) {
			p.o.plan[k] = old + v
		}
	}
	if m := reOOffloaded.FindStringSubmatch(msg); m != nil {
		p.o.plan["layers_offloaded"], p.o.plan["layers_total"] = atof(m[1]), atof(m[2])
	} else if m := reOSize.FindStringSubmatch(l); m != nil {
		b, ok := parseSize(m[1])
		if !ok || math.IsInf(b, 0) {
			return // a size no JSON session could hold
		}
		host := false
		if d := reODevice.FindStringSubmatch(l); d != nil && strings.HasPrefix(d[1], "CPU") {
			host = true
		}
		switch {
		case msg == "model weights" && host:
			add("host_bytes", b)
		case msg == "model weights":
			add(trace.AttrBytes, b)
		case msg == "kv cache":
			add("kv_bytes", b)
		case msg == "compute graph":
			add("compute_bytes", b)
		}
	}
	p.add(hit{stage: trace.StageModelLoad, op: opMark})
}

// gin reads "[GIN] 2026/05/05 - 01:30:24 | 200 |  4.006473015s |  127.0.0.1 | POST  "/api/generate"".
func (p *Parser) gin(at time.Duration, l string) {
	if p.firstReq {
		return
	}
	f := strings.Split(l, "|")
	if len(f) < 5 {
		return
	}
	m := reOGinPath.FindStringSubmatch(f[len(f)-1])
	if m == nil {
		return
	}
	path := m[1]
	known := false
	for _, fp := range firstRequestPaths {
		if path == fp {
			known = true
		}
	}
	if !known {
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(f[2]))
	if err != nil || d < 0 {
		return
	}
	p.firstReq = true
	h := took(trace.StageFirstRequest, at, d.Seconds())
	h.set = trace.Attrs{"endpoint": path, "status": atof(strings.TrimSpace(f[1]))}
	p.add(h)
}

// goLogMsg returns the message of a Go log line "2006/01/02 15:04:05
// file.go:123: [INFO ]msg".
func goLogMsg(l string) (string, bool) {
	rest := l[20:]
	if dot := strings.IndexByte(rest, ' '); dot > 0 && strings.HasPrefix(rest, ".") {
		rest = rest[dot+1:] // fractional seconds
	}
	i := strings.Index(rest, ".go:")
	if i <= 0 || i > 40 {
		return "", false
	}
	j := strings.Index(rest[i:], ": ")
	if j < 0 {
		return "", false
	}
	msg := rest[i+j+2:]
	for _, lvl := range []string{"INFO ", "WARN ", "ERROR ", "DEBUG "} {
		msg = strings.TrimPrefix(msg, lvl)
	}
	return msg, true
}

// slogMsg returns the msg value of a slog text line (quoted or bare).
func slogMsg(l string) string {
	i := strings.Index(l, " msg=")
	if i < 0 {
		return ""
	}
	s := l[i+5:]
	if s == "" || s[0] != '"' {
		if sp := strings.IndexByte(s, ' '); sp >= 0 {
			return s[:sp]
		}
		return s
	}
	if end := strings.IndexByte(s[1:], '"'); end >= 0 && !strings.Contains(s[1:end+1], `\`) {
		return s[1 : end+1] // the usual case: no escapes, no copy
	}
	var b strings.Builder
	for j := 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			if j+1 < len(s) {
				j++
				b.WriteByte(s[j])
			}
		case '"':
			return b.String()
		default:
			b.WriteByte(s[j])
		}
	}
	return b.String()
}
