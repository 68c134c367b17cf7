package serverlog

import (
	"regexp"
	"strings"
)

// Origin is what a log says about the machine and the server that wrote
// it: the facts an imported session records instead of the importing
// machine's. Each field is empty unless a line states it.
type Origin struct {
	// Device is the compute platform the server names: "cuda", "rocm",
	// "metal", "vulkan", "cpu", …
	Device string `json:"device,omitempty"`
	// GPUs are the accelerator names the log prints, in order, once each.
	GPUs []string `json:"gpus,omitempty"`
	// TP is the tensor-parallel size (shards, ranks) the log states.
	TP int `json:"tp,omitempty"`
	// Version is the server's version as the log prints it.
	Version string `json:"version,omitempty"`
	// Model is the model the server loads, as the log names it.
	Model string `json:"model,omitempty"`
}

// Origin returns what the lines fed so far state about where the log was
// written.
func (p *Parser) Origin() Origin {
	o := p.origin
	o.GPUs = append([]string(nil), o.GPUs...)
	if o.TP == 0 && p.workersKnown > 1 {
		o.TP = p.workersKnown
	}
	return o
}

// maxOriginGPUs bounds the GPU names kept (a node has at most a few
// dozen devices; a garbled log must not grow the list).
const maxOriginGPUs = 64

func (p *Parser) noteGPU(name string) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 120 || len(p.origin.GPUs) >= maxOriginGPUs {
		return
	}
	for _, g := range p.origin.GPUs {
		if g == name {
			return
		}
	}
	p.origin.GPUs = append(p.origin.GPUs, strings.Clone(name))
}

func (p *Parser) noteDevice(d string) {
	if p.origin.Device == "" && d != "" && len(d) < 32 {
		p.origin.Device = strings.Clone(strings.ToLower(d))
	}
}

func (p *Parser) noteVersion(v string) {
	if p.origin.Version == "" && v != "" && len(v) < 64 {
		p.origin.Version = strings.Clone(v)
	}
}

func (p *Parser) noteModel(m string) {
	if p.origin.Model == "" && m != "" && len(m) < 256 {
		p.origin.Model = strings.Clone(m)
	}
}

// Lines that state the origin, per server.
var (
	reOVLLMPlatform = regexp.MustCompile(`(?:detected platform|Detected platform:?) ([a-z]+)`)
	reOVLLMDevice   = regexp.MustCompile(`\bdevice_config=([a-z]+)`)
	reOVLLMModel    = regexp.MustCompile(`with config: model='([^']*)'`)
	reOVLLMAPIVer   = regexp.MustCompile(`vLLM API server version (\S+)`)
	reOSGModel      = regexp.MustCompile(`\bmodel_path='([^']*)'`)
	reOSGDevice     = regexp.MustCompile(`\bdevice='([a-z]+)'`)
	reOTGIModel     = regexp.MustCompile(`model_id: "([^"]*)"`)
	reOTGIVersion   = regexp.MustCompile(`\bversion: "([^"]+)"`)
	reOLlamaBuild   = regexp.MustCompile(`^(?:main: )?build: (\d+) \(([0-9a-f]+)\)`)
	reOLlamaJSONBld = regexp.MustCompile(`"(?:message|msg)":"build info".*"build":(\d+),"commit":"([0-9a-f]+)"`)
	reOLlamaCUDADev = regexp.MustCompile(`^\s*Device \d+: ([^,]+),`)
	reOLlamaUsing   = regexp.MustCompile(`using device (\S+) \(([^)]+)\)`)
	reOLlamaMetal   = regexp.MustCompile(`ggml_metal_init: found device: (.+)$`)
	reOLlamaName    = regexp.MustCompile(`general\.name\s+str\s+=\s+(.+)$`)
	reOOllamaLib    = regexp.MustCompile(`\blibrary=([a-zA-Z]+)`)
	reOOllamaName   = regexp.MustCompile(`\bname="([^"]+)"`)
	reOOllamaVer    = regexp.MustCompile(`\bversion=([0-9][^\s"]*)|Listening on .*\(version ([0-9][^)\s]*)\)`)
)

// noteOrigin reads the origin facts of one line (msg is the line without
// the server's own prefix where the rules cut one). Every pattern sits
// behind a literal test, so ordinary lines cost a few byte searches.
func (p *Parser) noteOrigin(msg string) {
	switch p.kind {
	case KindVLLM:
		if strings.Contains(msg, "platform") {
			if m := reOVLLMPlatform.FindStringSubmatch(msg); m != nil {
				p.noteDevice(m[1])
			}
		}
		if strings.Contains(msg, "with config:") {
			if m := reOVLLMDevice.FindStringSubmatch(msg); m != nil {
				p.noteDevice(m[1])
			}
			if m := reOVLLMModel.FindStringSubmatch(msg); m != nil {
				p.noteModel(m[1])
			}
			if m := reVEngineVersion.FindStringSubmatch(msg); m != nil {
				p.noteVersion(m[1])
			}
		}
		if strings.Contains(msg, "API server version") {
			if m := reOVLLMAPIVer.FindStringSubmatch(msg); m != nil {
				p.noteVersion(m[1])
			}
		}
	case KindSGLang:
		if strings.Contains(msg, "server_args=") {
			if m := reOSGModel.FindStringSubmatch(msg); m != nil {
				p.noteModel(m[1])
			}
			if m := reOSGDevice.FindStringSubmatch(msg); m != nil {
				p.noteDevice(m[1])
			}
		}
	case KindTGI:
		if strings.Contains(msg, "model_id: ") {
			if m := reOTGIModel.FindStringSubmatch(msg); m != nil {
				p.noteModel(m[1])
			}
		}
		if strings.Contains(msg, `version: "`) {
			if m := reOTGIVersion.FindStringSubmatch(msg); m != nil {
				p.noteVersion(m[1])
			}
		}
	case KindLlamaCpp, KindOllama:
		p.noteLlamaOrigin(msg)
		if p.kind == KindOllama && (strings.HasPrefix(msg, "time=") || strings.Contains(msg, "Listening on")) {
			if strings.Contains(msg, "library=") {
				if m := reOOllamaLib.FindStringSubmatch(msg); m != nil {
					p.noteDevice(m[1])
				}
				if strings.Contains(msg, "inference compute") {
					if m := reOOllamaName.FindStringSubmatch(msg); m != nil {
						p.noteGPU(m[1])
					}
				}
			}
			if strings.Contains(msg, " version=") || strings.Contains(msg, "(version ") {
				if m := reOOllamaVer.FindStringSubmatch(msg); m != nil {
					p.noteVersion(m[1] + m[2])
				}
			}
		}
	}
}

// noteLlamaOrigin reads llama.cpp's build line, its backends' device
// lines and the model's name from the GGUF metadata.
func (p *Parser) noteLlamaOrigin(msg string) {
	if _, rest, ok := llamaElapsed(msg); ok {
		msg = rest
	}
	switch {
	case strings.Contains(msg, "build: "):
		if m := reOLlamaBuild.FindStringSubmatch(msg); m != nil && p.kind == KindLlamaCpp {
			p.noteVersion("b" + m[1] + " (" + m[2] + ")")
		}
	case strings.Contains(msg, `"build info"`):
		if m := reOLlamaJSONBld.FindStringSubmatch(msg); m != nil && p.kind == KindLlamaCpp && m[1] != "0" {
			p.noteVersion("b" + m[1] + " (" + m[2] + ")")
		}
	case strings.HasPrefix(msg, "ggml_cuda_init:"), strings.HasPrefix(msg, "ggml_init_cublas:"):
		p.noteDevice("cuda")
	case strings.HasPrefix(msg, "ggml_metal_init:"):
		p.noteDevice("metal")
		if m := reOLlamaMetal.FindStringSubmatch(msg); m != nil {
			p.noteGPU(m[1])
		}
	case strings.HasPrefix(msg, "ggml_vulkan"):
		p.noteDevice("vulkan")
	case strings.Contains(msg, "Device ") && p.l.backend != "":
		if m := reOLlamaCUDADev.FindStringSubmatch(msg); m != nil {
			p.noteGPU(m[1])
		}
	case strings.Contains(msg, "using device "):
		if m := reOLlamaUsing.FindStringSubmatch(msg); m != nil {
			if strings.HasPrefix(m[1], "CUDA") {
				p.noteDevice("cuda")
			}
			p.noteGPU(m[2])
		}
	case strings.Contains(msg, "general.name"):
		if m := reOLlamaName.FindStringSubmatch(msg); m != nil {
			p.noteModel(strings.TrimSpace(m[1]))
		}
	}
}
