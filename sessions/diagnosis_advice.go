package sessions

import (
	"regexp"
	"strings"
)

// Advice is one piece of advice the diagnosis can give, with the target it
// is given for, so that a test can check every flag it names against the
// command it names (cmd/treni-top walks its own command tree; the external
// servers' flags are listed in sessions/testdata/serverflags).
type Advice struct {
	Engine Engine
	Device Device
	// PlainRun: said to a user of plain `treni-top run` (engine flags
	// through --serve-arg).
	PlainRun bool
	// Code is the hypothesis ("" for a probe); Kind says "next" (its knob)
	// or "missing" (a probe it asks for).
	Code, Kind, Text string
}

// AllAdvice lists every next knob (hypothesis × target kind × device ×
// load mode × how the built-in engine was started × its warm-up passes)
// and every missing-probe text that names a command.
func AllAdvice() []Advice {
	var out []Advice
	devices := []Device{DeviceUnknown, DeviceCPU, DeviceGPU}
	builtin := map[Device]Engine{DeviceUnknown: EngineBuiltin, DeviceCPU: EngineBuiltinCPU, DeviceGPU: EngineBuiltinCUDA}
	for _, r := range rules() {
		for _, plain := range []bool{false, true} {
			for _, dev := range devices {
				for _, load := range []string{"", loadMmap, loadCopy} {
					for _, passes := range []int{0, 2} {
						t := target{Engine: builtin[dev], Device: dev, Load: load, PlainRun: plain, WarmupPasses: passes}
						out = append(out, Advice{Engine: t.Engine, Device: dev, PlainRun: plain, Code: r.code, Kind: "next", Text: nextKnob(r.code, t)})
					}
				}
			}
		}
		for _, e := range []Engine{EngineVLLM, EngineSGLang, EngineTGI, EngineLlamaCpp, EngineOllama, EngineOther} {
			for _, dev := range devices {
				out = append(out, Advice{Engine: e, Device: dev, Code: r.code, Kind: "next", Text: nextKnob(r.code, target{Engine: e, Device: dev})})
			}
		}
	}
	for _, m := range probeAdvice() {
		out = append(out, Advice{Kind: "missing", Text: m})
	}
	return out
}

// Kinds of names an advice text gives the user to set.
const (
	NameFlag   = "flag"   // a command-line flag, --long or -short
	NameEnv    = "env"    // an environment variable (OLLAMA_KEEP_ALIVE)
	NameOption = "option" // a request option (Ollama's num_ctx)
)

// AdviceName is one flag, environment variable or request option an
// advice text names. Command is the command it is given to when the text
// names one ("treni-top run", "treni-top serve"), "" for the target's own
// (an external server's flag), and "?" for a flag outside any backtick
// snippet, which the advice format does not allow.
type AdviceName struct {
	Kind, Command, Name string
}

var (
	// envName is an environment variable, with or without its value.
	envName = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+(=.*)?$`)
	// optionName is a request option quoted on its own.
	optionName = regexp.MustCompile(`^[a-z]+(_[a-z]+)+$`)
	// looseFlag is a flag-like word outside the snippets.
	looseFlag = regexp.MustCompile(`(^|[\s(,;])(--?[A-Za-z][A-Za-z0-9-]*)`)
)

// AdviceNames reads the names an advice text gives the user: every
// `snippet` in backticks; a snippet that starts with a program
// ("treni-top run …") names that command for its flags, and one that
// starts with a flag continues the last snippet's command. A
// --serve-arg=--flag=value names --serve-arg on run and --flag on serve,
// where run passes it.
func AdviceNames(text string) []AdviceName {
	var out []AdviceName
	parts := strings.Split(text, "`")
	command := ""
	for i, part := range parts {
		if i%2 == 0 {
			// Outside the snippets: no flag may hide here.
			for _, m := range looseFlag.FindAllStringSubmatch(part, -1) {
				out = append(out, AdviceName{Kind: NameFlag, Command: "?", Name: m[2]})
			}
			continue
		}
		words := strings.Fields(part)
		if len(words) == 1 && optionName.MatchString(words[0]) {
			out = append(out, AdviceName{Kind: NameOption, Name: words[0]})
			continue
		}
		var program []string
		for _, w := range words {
			if strings.HasPrefix(w, "-") || w == "…" || envName.MatchString(w) {
				break
			}
			program = append(program, w)
		}
		if len(program) > 0 {
			command = strings.Join(program, " ")
		}
		for _, w := range words[len(program):] {
			switch {
			case envName.MatchString(w):
				name, _, _ := strings.Cut(w, "=")
				out = append(out, AdviceName{Kind: NameEnv, Name: name})
			case strings.HasPrefix(w, "-") && len(w) > 1 && !isNumber(w[1:]):
				name, value, _ := strings.Cut(w, "=")
				out = append(out, AdviceName{Kind: NameFlag, Command: command, Name: name})
				if name == "--serve-arg" && strings.HasPrefix(value, "-") {
					inner, _, _ := strings.Cut(value, "=")
					out = append(out, AdviceName{Kind: NameFlag, Command: "treni-top serve", Name: inner})
				}
			}
		}
	}
	return out
}

// isNumber reports a value such as the 1 of -1.
func isNumber(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.") == ""
}
