// Package prober sends probe requests to an inference server and times
// their streamed responses exactly as docs/ARCHITECTURE.md ("Measurements")
// defines: time to first byte, to first event, to first token (the first
// chunk that carries a non-empty token: content, reasoning or a tool call —
// a role-only chunk is not one), the arrival of every token-bearing chunk (ITL), the end of the
// stream (E2E) and the server's token counts. It speaks the OpenAI
// streaming API (/v1/completions, /v1/chat/completions, server-sent events)
// and Ollama's native API (/api/generate, /api/chat, JSON lines), over
// net/http with a hand-written parser so every byte's arrival is seen.
//
// Clocks. All timings are offsets since Request.Sent, taken from the
// session's trace.Clock: FirstByte when the first byte of the response
// (its status line) arrives (net/http/httptrace); FirstEvent when the first
// SSE event or JSON line has been read; FirstToken and each entry of Tokens
// when a token-bearing chunk has been read (a chunk's events and tokens
// share one timestamp); End when the end marker ([DONE], "done": true) or
// the end of the stream is read. TTFT is FirstToken. "Read" means the
// kernel's receive time of the read that brought the bytes in where there
// is one (package netstamp: Linux, plain http), so that a probe beside a
// CPU engine that keeps every core busy is not timed by its own wake-up
// delay; elsewhere the moment the parser sees them. A request that fails
// ends when the failure is seen.
//
// Token-bearing chunks. Chat: a choice whose delta has non-empty content,
// reasoning_content, reasoning or tool_calls; completions: non-empty text;
// Ollama: non-empty response, thinking, message.content, message.thinking
// or message.tool_calls. A role-only or empty chunk is an event, not a
// token. A usage-only chunk is neither.
//
// Multi-token chunks. A chunk counts one token per choice that carries one
// (n > 1 requests give several), except when the server reports usage on
// every chunk (vLLM's continuous_usage_stats, recognised when the first
// token-bearing chunk carries usage): then the growth of
// usage.completion_tokens since the previous chunk counts when it is
// larger. A chunk that counts more than one token increments
// MultiTokenChunks, so its gap is flagged in ITL statistics. Without
// per-chunk usage, a server that packs several tokens into one delta
// (speculative decoding, detokenizer merges) cannot be caught chunk by
// chunk; the final usage still gives N for TPOT, and CompletionTokens >
// len(Tokens) shows that it happened.
//
// End of stream. OpenAI streams end with "data: [DONE]"; a stream that ends
// cleanly after a finish_reason but without [DONE] (some servers) is
// accepted; anything else is closed_early. Ollama streams end at the line
// with "done": true. Unparsable lines are counted and skipped, and the
// request is then marked malformed, keeping its timings.
package prober

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/treni-top/treni-top/probe/netstamp"
	"github.com/treni-top/treni-top/trace"
)

// DefaultColdTimeout bounds a cold request when the caller sets none: a
// lazy server loads its whole model inside it (minutes for a large model
// from a cold disk).
const DefaultColdTimeout = 10 * time.Minute

// Endpoint selects the API a request uses.
type Endpoint string

// Endpoints, also written to trace.Request.Endpoint.
const (
	Completions    Endpoint = "completions"     // POST /v1/completions (SSE)
	Chat           Endpoint = "chat"            // POST /v1/chat/completions (SSE)
	OllamaGenerate Endpoint = "ollama_generate" // POST /api/generate (JSON lines)
	OllamaChat     Endpoint = "ollama_chat"     // POST /api/chat (JSON lines)
)

// Path is the endpoint's URL path.
func (e Endpoint) Path() string {
	switch e {
	case Completions:
		return "/v1/completions"
	case OllamaGenerate:
		return "/api/generate"
	case OllamaChat:
		return "/api/chat"
	default:
		return "/v1/chat/completions"
	}
}

// ollama reports whether the endpoint is Ollama's native API.
func (e Endpoint) ollama() bool { return e == OllamaGenerate || e == OllamaChat }

// Error kinds written to trace.Request.ErrorKind.
const (
	KindTimeout     = "timeout"      // the request's deadline passed
	KindCanceled    = "canceled"     // the caller gave up (quit)
	KindConnect     = "connect"      // no connection (refused, DNS, reset before a response)
	KindHTTP4xx     = "http_4xx"     // the server refused the request
	KindHTTP5xx     = "http_5xx"     // the server failed
	KindClosedEarly = "closed_early" // the stream ended before its end marker
	KindMalformed   = "malformed"    // lines that are not the protocol (the rest was still read)
	KindServer      = "server_error" // an error object inside a 200 stream
)

// AuthHint is what to do about a 401 or 403 answer, for error messages:
// the server wants an API key (keySent: it refused the one sent). It is
// "" for any other status.
func AuthHint(status int, keySent bool) string {
	switch {
	case status != http.StatusUnauthorized && status != http.StatusForbidden:
		return ""
	case keySent:
		return " (the server refused the API key given: check --api-key or OPENAI_API_KEY)"
	}
	return " (the server wants an API key: pass --api-key KEY or set OPENAI_API_KEY)"
}

// BearerHeader is the header that carries key ("Authorization: Bearer
// KEY"), nil for no key.
func BearerHeader(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{"Authorization": {"Bearer " + key}}
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Template describes the request to send; the prober adds streaming and
// usage reporting.
type Template struct {
	// BaseURL is the server, e.g. http://127.0.0.1:8000 (no path).
	BaseURL  string
	Endpoint Endpoint
	Model    string
	// Prompt is the completions/generate prompt, and for the chat
	// endpoints the user message when Messages is empty.
	Prompt   string
	Messages []Message
	// MaxTokens bounds the output (max_tokens; Ollama: options.num_predict).
	// Zero leaves the server's default.
	MaxTokens int
	// Temperature, when set, is sent (Ollama: options.temperature).
	Temperature *float64
	// NoUsage leaves out stream_options.include_usage for servers that
	// reject it; token counts then come from counting chunks.
	NoUsage bool
	// Extra fields are merged into the JSON body last (ignore_eos, seed,
	// options, chat_template_kwargs…).
	Extra map[string]any
	// Header is added to the request (Authorization…).
	Header http.Header
	// Timeout bounds the whole request, stream included; zero means only
	// the caller's context.
	Timeout time.Duration
}

// URL is the request's URL.
func (t Template) URL() string { return strings.TrimRight(t.BaseURL, "/") + t.Endpoint.Path() }

// Body is the JSON request body.
func (t Template) Body() ([]byte, error) {
	b := map[string]any{"stream": true}
	if t.Model != "" {
		b["model"] = t.Model
	}
	msgs := t.Messages
	if len(msgs) == 0 {
		msgs = []Message{{Role: "user", Content: t.Prompt}}
	}
	switch t.Endpoint {
	case Completions, OllamaGenerate:
		b["prompt"] = t.Prompt
	default:
		b["messages"] = msgs
	}
	if t.Endpoint.ollama() {
		opts := map[string]any{}
		if t.MaxTokens > 0 {
			opts["num_predict"] = t.MaxTokens
		}
		if t.Temperature != nil {
			opts["temperature"] = *t.Temperature
		}
		if len(opts) > 0 {
			b["options"] = opts
		}
	} else {
		if t.MaxTokens > 0 {
			b["max_tokens"] = t.MaxTokens
		}
		if t.Temperature != nil {
			b["temperature"] = *t.Temperature
		}
		if !t.NoUsage {
			b["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	for k, v := range t.Extra {
		b[k] = v
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode the request body (check Template.Extra holds JSON values): %w", err)
	}
	return out, nil
}

// ServerTimings are Ollama's own figures from the final line of a native
// API stream; zero when absent. They are checked against the prober's own
// TTFT (cold TTFT ≈ Load + PromptEval).
type ServerTimings struct {
	Total      time.Duration `json:"total_duration"`
	Load       time.Duration `json:"load_duration"`
	PromptEval time.Duration `json:"prompt_eval_duration"`
	Eval       time.Duration `json:"eval_duration"`
	// PromptEvalCount and EvalCount are the prompt and output token counts.
	PromptEvalCount int `json:"prompt_eval_count"`
	EvalCount       int `json:"eval_count"`
}

// Result is one probed request: its trace record and what else the stream
// told.
type Result struct {
	Request trace.Request
	// Text is the generated text (content and completions text), Reasoning
	// the reasoning deltas; for checking what the server said.
	Text      string
	Reasoning string
	// Server holds Ollama's own durations when the stream gave them.
	Server *ServerTimings
	// Malformed counts stream lines that could not be parsed.
	Malformed int
}

// Client sends probe requests. The zero value is not usable: use New.
type Client struct {
	http  *http.Client
	clock trace.Clock
	sink  trace.Sink
	run   int
	seq   atomic.Int64
	// stamps keeps the kernel's receive timestamping on while the client
	// lives (nil without kernel support).
	stamps io.Closer
	// traceCtx, when set, names the span each request propagates.
	traceCtx TraceContextFunc
}

// TraceContextFunc gives the span context a probe request carries: the
// span that stands for the request in the session's trace (see
// sessions/otelexport.IDs.RequestSpanContext). An invalid context sends no
// header.
type TraceContextFunc func(run int, requestID string) oteltrace.SpanContext

// SetTraceContext makes every request carry a W3C traceparent header (and
// tracestate, when the context has one) for the span f names, so that a
// traced server's request span becomes its child in the same trace. Call
// it before the first Do.
func (c *Client) SetTraceContext(f TraceContextFunc) { c.traceCtx = f }

// New returns a client that timestamps with clock and, when sink is not
// nil, emits a not-done Request event at the first token and the done one
// at the end. run is stamped as Event.Run.
func New(clock trace.Clock, sink trace.Sink, run int) *Client {
	dialer := &netstamp.Dialer{Dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}, Clock: clock}
	return &Client{
		http: &http.Client{Transport: &http.Transport{
			Proxy:       http.ProxyFromEnvironment,
			DialContext: dialer.DialContext,
			// Compression would make the transport buffer the stream.
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}},
		clock:  clock,
		sink:   sink,
		run:    run,
		stamps: netstamp.KeepOn(),
	}
}

// Close releases idle connections and the timestamp keeper.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
	if c.stamps != nil {
		c.stamps.Close()
	}
}

func (c *Client) emit(r *trace.Request) {
	if c.sink == nil {
		return
	}
	cp := *r
	cp.Tokens = append([]time.Duration(nil), r.Tokens...)
	c.sink.Emit(trace.Event{At: c.clock.Now(), Kind: trace.KindRequest, Run: c.run, Request: &cp})
}

// Do sends one request and reads its stream to the end. It never returns an
// error: what went wrong is in Request.Error and Request.ErrorKind, and
// whatever was timed before that is kept. An empty id gets a generated one.
func (c *Client) Do(ctx context.Context, t Template, id, label string, phase trace.Phase) (res Result) {
	if id == "" {
		id = fmt.Sprintf("req-%d", c.seq.Add(1))
	}
	res = Result{Request: trace.Request{ID: id, Label: label, Phase: phase, Endpoint: string(t.Endpoint)}}
	r := &res.Request
	defer func() {
		r.Done = true
		if r.Error == "" && res.Malformed > 0 {
			r.Error = fmt.Sprintf("%d stream lines could not be parsed; the server does not speak the %s protocol as expected", res.Malformed, t.Endpoint)
			r.ErrorKind = KindMalformed
		}
		c.emit(r)
	}()

	body, err := t.Body()
	if err != nil {
		r.Error, r.ErrorKind = err.Error(), KindMalformed
		return res
	}
	if t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.Timeout)
		defer cancel()
	}
	var firstByte atomic.Int64
	conn := &netstamp.Tracker{}
	ctx = httptrace.WithClientTrace(ctx, conn.Trace(c.clock, func(at time.Duration) { firstByte.CompareAndSwap(0, int64(at)) }))
	hreq, err := c.newRequest(ctx, t, id, body)
	if err != nil {
		r.Error, r.ErrorKind = fmt.Sprintf("bad server URL %q: %v", t.BaseURL, err), KindConnect
		return res
	}

	r.Sent = c.clock.Now()
	since := func() time.Duration { return max(c.clock.Now()-r.Sent, 1) }
	arrived := func() time.Duration { return conn.Since(c.clock, r.Sent) }
	resp, err := c.http.Do(hreq)
	if fb := firstByte.Load(); fb != 0 {
		r.FirstByte = max(time.Duration(fb)-r.Sent, 1)
	}
	if err != nil {
		r.End = since()
		r.ErrorKind, r.Error = classify(ctx, err, false)
		return res
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	if r.FirstByte == 0 {
		r.FirstByte = since()
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		r.End = since()
		r.ErrorKind = KindHTTP4xx
		if resp.StatusCode >= 500 {
			r.ErrorKind = KindHTTP5xx
		}
		r.Error = fmt.Sprintf("HTTP %d from %s: %s%s", resp.StatusCode, t.URL(), ErrorMessage(b), AuthHint(resp.StatusCode, hreq.Header.Get("Authorization") != ""))
		return res
	}
	s := &stream{c: c, res: &res, arrived: arrived}
	var complete bool
	if t.Endpoint.ollama() {
		complete, err = s.readNDJSON(resp.Body)
	} else {
		complete, err = s.readSSE(resp.Body)
	}
	if err != nil {
		r.End = since()
	} else {
		r.End = arrived()
	}
	switch {
	case r.Error != "":
		// an error object in the stream, already recorded
	case err != nil:
		r.ErrorKind, r.Error = classify(ctx, err, true)
	case !complete:
		r.ErrorKind = KindClosedEarly
		r.Error = fmt.Sprintf("the server closed the stream after %d token chunks without its end marker (crashed or restarted?)", len(r.Tokens))
	}
	return res
}

// newRequest is t's HTTP request with body: its content types, t's
// headers, and the traceparent of request id when traces are propagated.
func (c *Client) newRequest(ctx context.Context, t Template, id string, body []byte) (*http.Request, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if t.Endpoint.ollama() {
		hreq.Header.Set("Accept", "application/x-ndjson")
	} else {
		hreq.Header.Set("Accept", "text/event-stream")
	}
	for k, vs := range t.Header {
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	if c.traceCtx != nil {
		if sc := c.traceCtx(c.run, id); sc.IsValid() {
			propagation.TraceContext{}.Inject(oteltrace.ContextWithSpanContext(ctx, sc), propagation.HeaderCarrier(hreq.Header))
		}
	}
	return hreq, nil
}

// classify names a transport error. started says whether the response had
// begun.
func classify(ctx context.Context, err error, started bool) (kind, msg string) {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || isTimeout(err):
		return KindTimeout, "timed out: " + err.Error() + " (raise the request timeout if the server is just slow, e.g. loading a model)"
	case errors.Is(ctx.Err(), context.Canceled):
		return KindCanceled, "canceled: " + err.Error()
	case started, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		if errors.Is(err, errLineTooLong) {
			return KindMalformed, err.Error()
		}
		return KindClosedEarly, "the server closed the connection early: " + err.Error()
	default:
		return KindConnect, "cannot reach the server: " + err.Error() + " (is it running and listening on that address?)"
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ErrorMessage extracts a readable message from an error body: OpenAI's
// {"error":{"message":…}}, {"error":"…"} (Ollama), {"message":…} (vLLM),
// {"detail":…} (FastAPI), or the text itself.
func ErrorMessage(b []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &v) == nil {
		if m := rawMessage(v.Error); m != "" {
			return m
		}
		if v.Message != "" {
			return v.Message
		}
		if m := rawMessage(v.Detail); m != "" {
			return m
		}
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}

// rawMessage reads an error field that is a string or an object with a
// message.
func rawMessage(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Message != "" {
		return o.Message
	}
	return string(raw)
}
