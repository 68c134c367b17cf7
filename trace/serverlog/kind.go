// Package serverlog turns the log lines of LLM inference servers (vLLM,
// SGLang, TGI, llama.cpp's llama-server, Ollama, and the built-in engine's
// JSON stage lines) into cold-stage spans on the session clock (docs/ARCHITECTURE.md,
// "Stages"). The launcher feeds it every output line of a live target; import
// feeds it every line of a log file someone already has. Lines it does not
// recognise stay plain log lines: the parser returns nothing for them.
package serverlog

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Kind names the server that wrote a log.
type Kind string

// Server kinds. KindAuto asks NewParser to detect the kind from the lines.
const (
	KindAuto     Kind = "auto"
	KindVLLM     Kind = "vllm"
	KindSGLang   Kind = "sglang"
	KindTGI      Kind = "tgi"
	KindLlamaCpp Kind = "llama.cpp"
	KindOllama   Kind = "ollama"
	KindTreni    Kind = "treni"
	KindUnknown  Kind = "unknown"
)

// Kinds lists the concrete kinds a parser understands, in the order the
// --kind flag documents them.
func Kinds() []Kind {
	return []Kind{KindVLLM, KindSGLang, KindTGI, KindLlamaCpp, KindOllama, KindTreni}
}

// ParseKind reads a --kind value ("auto" or one of Kinds; "llamacpp" and
// "llama-server" are accepted for llama.cpp).
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case "", KindAuto:
		return KindAuto, nil
	case "llamacpp", "llama-cpp", "llama-server", "llama_cpp":
		return KindLlamaCpp, nil
	case "text-generation-inference":
		return KindTGI, nil
	default:
		for _, c := range Kinds() {
			if k == c {
				return k, nil
			}
		}
	}
	return "", fmt.Errorf("unknown server kind %q: use auto, vllm, sglang, tgi, llama.cpp, ollama or treni", s)
}

// DetectKind tells which server a target is, from its command line first
// (program name, python -m module, container image) and then from the
// first lines of its output. It returns KindUnknown when neither says.
func DetectKind(command []string, firstLines []string) Kind {
	if k := kindFromCommand(command); k != KindUnknown {
		return k
	}
	return kindFromLines(firstLines)
}

// kindFromCommand looks at every word, so wrappers (python -m, docker run
// IMAGE, uv run, env …) are seen through.
func kindFromCommand(command []string) Kind {
	for i, arg := range command {
		a := strings.ToLower(arg)
		base := filepath.Base(a)
		switch {
		case base == "treni-top" && i+1 < len(command) && command[i+1] == "serve":
			return KindTreni
		case strings.Contains(a, "sglang"):
			return KindSGLang
		case strings.Contains(a, "text-generation-launcher"), strings.Contains(a, "text-generation-inference"):
			return KindTGI
		case base == "ollama" || strings.Contains(a, "ollama/ollama"):
			return KindOllama
		case base == "llama-server" || strings.Contains(a, "llama.cpp") || strings.Contains(a, "llama-cpp"):
			return KindLlamaCpp
		case base == "vllm" || strings.HasPrefix(a, "vllm.") || strings.Contains(a, "vllm/vllm-openai") || strings.Contains(a, "vllm-openai"):
			return KindVLLM
		}
	}
	return KindUnknown
}

// kindFromLines lets each line vote for the kind whose distinctive text it
// carries and returns the kind with most votes. Ollama embeds llama.cpp's
// loader lines, so llama.cpp loses ties and Ollama's own lines count double.
// Collectors' prefixes (Unwrap) are seen through.
func kindFromLines(lines []string) Kind {
	votes := map[Kind]int{}
	for _, l := range lines {
		u := Unwrap(l, time.Time{})
		if k := unitKind(u.Unit); k != KindUnknown {
			votes[k]++ // "ollama[812]:", "vllm-1  |": a hint, outvoted by the lines
		}
		if k := lineKind(u.Line); k != KindUnknown {
			votes[k]++
			if k == KindOllama || k == KindTreni {
				votes[k]++
			}
		}
	}
	if votes[KindOllama] > 0 {
		// Ollama's runner prints llama.cpp's loader lines; llama-server
		// never prints Ollama's.
		delete(votes, KindLlamaCpp)
	}
	best, n := KindUnknown, 0
	for _, k := range []Kind{KindTreni, KindTGI, KindOllama, KindSGLang, KindVLLM, KindLlamaCpp} {
		if votes[k] > n {
			best, n = k, votes[k]
		}
	}
	return best
}

// unitKind is the kind a collector's name for the program gives away.
func unitKind(unit string) Kind {
	u := strings.ToLower(unit)
	switch {
	case u == "":
	case strings.Contains(u, "sglang"):
		return KindSGLang
	case strings.Contains(u, "vllm"):
		return KindVLLM
	case strings.Contains(u, "ollama"):
		return KindOllama
	case strings.Contains(u, "text-generation") || strings.Contains(u, "tgi"):
		return KindTGI
	case strings.Contains(u, "llama-server") || strings.Contains(u, "llama.cpp") || strings.Contains(u, "llamacpp"):
		return KindLlamaCpp
	}
	return KindUnknown
}

// lineKind is the kind a single line gives away, or KindUnknown.
func lineKind(l string) Kind {
	if _, rest, ok := llamaElapsed(l); ok {
		l = rest // llama-server's 2026 builds: "0.07.611.221 I main: …"
	}
	if strings.HasPrefix(l, "(") {
		if i := strings.Index(l, " pid="); i > 0 && strings.Contains(strings.ToLower(l[:i]), "sglang") {
			return KindSGLang // a Ray actor of SGLang's ("(SGLangWorker pid=N)")
		}
		_, l = stripVLLMTags(l) // Ray actors' "(Name pid=N) " before SGLang's lines too
	}
	switch {
	case strings.Contains(l, `"treni_stage"`):
		return KindTreni
	case strings.Contains(l, "text_generation_launcher") || strings.Contains(l, "text_generation_router"):
		return KindTGI
	case strings.HasPrefix(l, "time=") && strings.Contains(l, " level=") && strings.Contains(l, " source="),
		strings.HasPrefix(l, "[GIN] "), strings.Contains(l, "llama runner started"), strings.Contains(l, "ollama"):
		return KindOllama
	case sglangPrefix(l), strings.Contains(l, "server_args=ServerArgs"), strings.Contains(l, "sglang"):
		return KindSGLang
	case strings.Contains(l, "vLLM"), strings.Contains(l, "vllm"), vllmPrefix(l):
		return KindVLLM
	case strings.HasPrefix(l, "{") && strings.Contains(l, `"timestamp":`) && strings.Contains(l, `"function":`), strings.HasPrefix(l, "ggml_init_cublas:"),
		strings.HasPrefix(l, "llama_model_loader:"), strings.HasPrefix(l, "load_tensors:"), strings.HasPrefix(l, "llm_load_"),
		strings.HasPrefix(l, "llama_context:"), strings.HasPrefix(l, "main: server is listening"), strings.HasPrefix(l, "srv "):
		return KindLlamaCpp
	}
	return KindUnknown
}

// sglangPrefix reports a "[YYYY-MM-DD HH:MM:SS" line start.
func sglangPrefix(l string) bool {
	return len(l) > 21 && l[0] == '[' && l[5] == '-' && l[8] == '-' && l[11] == ' ' && l[14] == ':' && isDigits(l[1:5])
}

// vllmPrefix reports a "LEVEL MM-DD HH:MM:SS" start after any worker tags.
func vllmPrefix(l string) bool {
	_, rest := stripVLLMTags(l)
	_, _, ok := vllmLevelDate(rest)
	return ok
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
