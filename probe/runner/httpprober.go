package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/trace"
)

// HTTPProber is the Prober of a live run: probe/prober's streaming client
// with one fixed request template. The model name, when not given, is the
// first model the server lists.
type HTTPProber struct {
	Sink  trace.Sink
	Clock trace.Clock
	// Prompt and MaxTokens are the fixed request.
	Prompt    string
	MaxTokens int
	// Model is sent in requests; empty: ask the server.
	Model string
	// Endpoint overrides the API: empty means chat completions, or Ollama's
	// native generate API for Ollama (it reports load and prompt-eval
	// durations there).
	Endpoint prober.Endpoint
	// ColdTimeout bounds the cold request (a lazy server loads its model
	// in it); warm requests get WarmTimeout. Zero: prober's defaults.
	ColdTimeout, WarmTimeout time.Duration
	// TraceContext, when set, puts a W3C traceparent on every request so
	// a traced server's request spans join the session's trace (see
	// sessions/otelexport).
	TraceContext prober.TraceContextFunc
	// Header goes with every request, the model lookup too (the API key:
	// prober.BearerHeader).
	Header http.Header

	mu     sync.Mutex
	models map[string]string // base URL → discovered model
	// One client per run, so warm requests reuse their keep-alive
	// connection as a serving benchmark's client does.
	client    *prober.Client
	clientRun int
}

// clientFor returns the run's client, closing the previous run's.
func (h *HTTPProber) clientFor(run int) *prober.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client == nil || h.clientRun != run {
		if h.client != nil {
			h.client.Close()
		}
		h.client, h.clientRun = prober.New(h.Clock, h.Sink, run), run
		if h.TraceContext != nil {
			h.client.SetTraceContext(h.TraceContext)
		}
	}
	return h.client
}

// Close releases the idle connections.
func (h *HTTPProber) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client != nil {
		h.client.Close()
		h.client = nil
	}
}

// Probe sends one request to the target.
func (h *HTTPProber) Probe(ctx context.Context, t Target, p Probe) (trace.Request, error) {
	base := t.BaseURL()
	if base == "" {
		return trace.Request{}, errors.New("the target's URL is not known; pass --url")
	}
	ep := h.Endpoint
	if ep == "" {
		ep = prober.Chat
		if t.Kind() == "ollama" {
			ep = prober.OllamaGenerate
		}
	}
	model, err := h.model(ctx, base, ep)
	if err != nil {
		return trace.Request{}, err
	}
	tmpl := prober.Template{BaseURL: base, Endpoint: ep, Model: model, Prompt: h.Prompt, MaxTokens: h.MaxTokens, Header: h.Header}
	zero := 0.0
	tmpl.Temperature = &zero // greedy: the same work every run
	switch {
	case p.Phase == trace.PhaseCold && h.ColdTimeout > 0:
		tmpl.Timeout = h.ColdTimeout
	case p.Phase == trace.PhaseCold:
		tmpl.Timeout = prober.DefaultColdTimeout
	case h.WarmTimeout > 0:
		tmpl.Timeout = h.WarmTimeout
	default:
		tmpl.Timeout = 5 * time.Minute
	}
	c := h.clientFor(p.Run)
	id := fmt.Sprintf("run%d-%s", p.Run, p.Label)
	res := c.Do(ctx, tmpl, id, p.Label, p.Phase)
	if st := res.Server; st != nil {
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		h.Sink.Emit(trace.Event{At: h.Clock.Now(), Kind: trace.KindMarker, Run: p.Run, Marker: &trace.Marker{
			Name: trace.MarkerServerTimings,
			Attrs: trace.Attrs{
				"request": id, "label": p.Label, "load_ms": ms(st.Load), "prompt_eval_ms": ms(st.PromptEval),
				"eval_ms": ms(st.Eval), "total_ms": ms(st.Total),
				"prompt_eval_count": st.PromptEvalCount, "eval_count": st.EvalCount,
			},
		}})
	}
	if res.Request.Error != "" {
		return res.Request, fmt.Errorf("%s (%s)", res.Request.Error, res.Request.ErrorKind)
	}
	return res.Request, nil
}

// model returns the configured model, or the first one the server lists
// (OpenAI /v1/models, Ollama /api/tags).
func (h *HTTPProber) model(ctx context.Context, base string, ep prober.Endpoint) (string, error) {
	if h.Model != "" {
		return h.Model, nil
	}
	h.mu.Lock()
	m, ok := h.models[base]
	h.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := listFirstModel(ctx, base, ep == prober.OllamaGenerate || ep == prober.OllamaChat, h.Header)
	var ae authError
	switch {
	case errors.As(err, &ae):
		// A model name would not help: the server wants a key first.
		return "", fmt.Errorf("find the model to request: %w", err)
	case err != nil:
		return "", fmt.Errorf("find the model to request (pass --request-model NAME): %w", err)
	}
	h.mu.Lock()
	if h.models == nil {
		h.models = map[string]string{}
	}
	h.models[base] = m
	h.mu.Unlock()
	return m, nil
}

// authError is a 401 or 403 answer: the server wants an API key.
type authError string

func (e authError) Error() string { return string(e) }

func listFirstModel(ctx context.Context, base string, ollama bool, header http.Header) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	path := "/v1/models"
	if ollama {
		path = "/api/tags"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return "", err
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		if hint := prober.AuthHint(resp.StatusCode, req.Header.Get("Authorization") != ""); hint != "" {
			return "", authError(fmt.Sprintf("GET %s: HTTP %d%s", path, resp.StatusCode, hint))
		}
		return "", fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	var v struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("GET %s: %w", path, err)
	}
	switch {
	case len(v.Data) > 0:
		return v.Data[0].ID, nil
	case len(v.Models) > 0:
		return v.Models[0].Name, nil
	}
	return "", fmt.Errorf("GET %s lists no model", path)
}
