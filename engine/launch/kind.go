package launch

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/treni-top/treni-top/trace/serverlog"
)

// Default ports of the servers whose kind is known, when the command does
// not name one.
var defaultPorts = map[serverlog.Kind]int{
	serverlog.KindVLLM:     8000,
	serverlog.KindSGLang:   30000,
	serverlog.KindLlamaCpp: 8080,
	serverlog.KindTGI:      3000,
	serverlog.KindOllama:   11434,
}

// InferURL finds the base URL a server will listen on: --port/--host (and
// --addr, --hostname, --bind) in its command, OLLAMA_HOST for Ollama (env
// holds the overrides given to the child, then the inherited environment),
// else the kind's default port on 127.0.0.1. explicit is true when the
// command or environment named it; false for a kind default or a guess.
func InferURL(command []string, env []string, kind serverlog.Kind) (u string, explicit bool) {
	host, port := "", 0
	for i := 0; i < len(command); i++ {
		a := command[i]
		name, val, hasVal := strings.Cut(a, "=")
		if !hasVal && i+1 < len(command) {
			val = command[i+1]
		}
		switch name {
		case "--port", "-p":
			if n, err := strconv.Atoi(val); err == nil && n > 0 && n < 65536 {
				port = n
			}
		case "--host", "--hostname", "--bind":
			host = val
		case "--addr", "--address", "--listen":
			if h, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(val, "http://"), "https://")); err == nil {
				host = h
				port, _ = strconv.Atoi(p)
			}
		}
	}
	if kind == serverlog.KindOllama && port == 0 {
		if v, ok := lookupEnv(env, "OLLAMA_HOST"); ok && v != "" {
			if h, p := parseHostPort(v, 11434); p > 0 {
				host, port = h, p
			}
		}
	}
	if port > 0 {
		return "http://" + net.JoinHostPort(dialHost(host), strconv.Itoa(port)), true
	}
	if p, ok := defaultPorts[kind]; ok {
		return "http://" + net.JoinHostPort(dialHost(host), strconv.Itoa(p)), false
	}
	return "", false
}

// lookupEnv finds key in env (last assignment wins, as exec does), then in
// the inherited environment.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return os.LookupEnv(key)
}

// parseHostPort reads OLLAMA_HOST-style values: "host", "host:port",
// ":port", "http://host:port".
func parseHostPort(v string, defPort int) (string, int) {
	if strings.Contains(v, "://") {
		if pu, err := url.Parse(v); err == nil {
			v = pu.Host
		}
	}
	if h, p, err := net.SplitHostPort(v); err == nil {
		n, _ := strconv.Atoi(p)
		return h, n
	}
	return v, defPort
}

// dialHost turns a bind address into one to connect to: the wildcard
// addresses mean "this machine".
func dialHost(h string) string {
	h = strings.Trim(h, "[]")
	switch h {
	case "", "0.0.0.0", "::", "*", "localhost":
		return "127.0.0.1"
	}
	return h
}

// listenRE matches the line a server prints when its listener is up:
// treni-top serve ("listening on http://127.0.0.1:8000"), Ollama ("Listening
// on 127.0.0.1:11434 (version 0.9.6)"), uvicorn under vLLM and SGLang
// ("Uvicorn running on http://0.0.0.0:8000"), llama-server ("server is
// listening on http://127.0.0.1:8080").
var listenRE = regexp.MustCompile(`(?i)(?:listening on|running on|listening at|serving on)\s*:?\s*(?:https?://)?(\[[0-9a-f:]*\]|[\w.\-]+)?:(\d{2,5})`)

// listenURL extracts the base URL from a listener-up line.
func listenURL(line string) (string, bool) {
	m := listenRE.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return fmt.Sprintf("http://%s", net.JoinHostPort(dialHost(m[1]), m[2])), true
}
