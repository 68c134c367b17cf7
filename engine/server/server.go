// Package server is the built-in engine's OpenAI-compatible HTTP API:
// /v1/completions and /v1/chat/completions (streamed as SSE or not),
// /v1/models, /health and Prometheus /metrics, in front of a sched.Scheduler.
// It validates requests strictly and answers mistakes with OpenAI-style JSON
// errors, and a client that goes away cancels its request so its KV blocks
// are freed.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/engine/tokenizer"
)

// Tokenizer is what the server needs from a tokenizer; *tokenizer.Tokenizer
// implements it, and tests or other tokenizers may plug in their own.
type Tokenizer interface {
	// Encode tokenizes text without adding special tokens.
	Encode(text string) []int32
	// ApplyChat renders messages with the model's chat template.
	ApplyChat(msgs []tokenizer.Message, addGenerationPrompt bool) (string, error)
	// NewStreamDecoder turns ids into text without splitting characters.
	NewStreamDecoder() *tokenizer.StreamDecoder
	// StopTokenIDs end generation unless the request sets ignore_eos;
	// New asks once and shares the slice among requests, read-only.
	StopTokenIDs() []int32
	// AddBOS says whether prompts start with BOS; BOS returns it.
	AddBOS() bool
	BOS() (int32, bool)
}

// Options configure a Server.
type Options struct {
	// ModelID is the name served by /v1/models and required in requests.
	ModelID string
	// APIKey, when set, is required as "Authorization: Bearer KEY" on /v1/*.
	APIKey string
	// Created is the model's creation time reported by /v1/models.
	Created time.Time
	// Log receives one line per failed request; nil discards.
	Log *log.Logger
	// MaxBodyBytes caps a request body (default 8 MiB).
	MaxBodyBytes int64
	// FirstRequest, if set, is called once, for the first request that
	// produces a token: when its handler started, when the token was
	// generated, and its prompt length. serve reports it as the
	// first_request stage.
	FirstRequest func(arrived, firstToken time.Time, promptTokens int)
	// Sleep, when set, enables sleep mode: POST /sleep, POST /wake_up and
	// GET /is_sleeping (sleep.go); the scheduler's backend must be a
	// sched.Sleeper.
	Sleep *SleepOptions
	// ProcessStart, when set, is exported as process_start_time_seconds
	// (the standard Prometheus name), so a client can tell a freshly
	// started server from a warm one (treni-top bench's cold check).
	ProcessStart time.Time
	// BodyTimeout bounds the time a request's head and body may take to
	// arrive (the ReadTimeout of HTTPServer): a client that stalls in
	// the middle of its body is answered 408 and its connection closed,
	// instead of holding it, and a file descriptor, forever. An idle
	// keep-alive connection is closed after as long. Default 30 s.
	BodyTimeout time.Duration
	// MaxConnections caps the open connections of a Listener: one more
	// is answered 503 and closed. Default DefaultMaxConnections.
	MaxConnections int
}

// DefaultMaxConnections is the default cap on open connections: far
// above what a batch of MaxBatch streams and their clients' spare
// connections need, far below the descriptors a process may hold.
const DefaultMaxConnections = 1024

// DefaultBodyTimeout is the default of Options.BodyTimeout.
const DefaultBodyTimeout = 30 * time.Second

// Server serves the API for one model. Create it with New.
type Server struct {
	s   *sched.Scheduler
	tok Tokenizer
	opt Options
	mux *http.ServeMux
	// stopIDs end a request's generation unless it sets ignore_eos:
	// asked of the tokenizer once, not on every request.
	stopIDs []int32
	sl      *sleeper // sleep mode, or nil

	// firstPending says the next request to produce a token is reported
	// through FirstRequest: the first one, and the first after each wake.
	firstPending atomic.Bool
	conns        *connLimit
}

// New creates a server in front of s. The caller runs s.Run.
func New(s *sched.Scheduler, tok Tokenizer, opt Options) (*Server, error) {
	if s == nil || tok == nil {
		return nil, errors.New("server: need a scheduler and a tokenizer")
	}
	if opt.ModelID == "" {
		return nil, errors.New("server: empty model id; name the model (e.g. its directory name)")
	}
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 8 << 20
	}
	if opt.Created.IsZero() {
		opt.Created = time.Now()
	}
	if opt.Log == nil {
		opt.Log = log.New(io.Discard, "", 0)
	}
	if opt.BodyTimeout <= 0 {
		opt.BodyTimeout = DefaultBodyTimeout
	}
	if opt.MaxConnections <= 0 {
		opt.MaxConnections = DefaultMaxConnections
	}
	srv := &Server{s: s, tok: tok, opt: opt, mux: http.NewServeMux(), stopIDs: tok.StopTokenIDs(), conns: newConnLimit(opt.MaxConnections)}
	srv.firstPending.Store(true)
	if opt.Sleep != nil {
		sl, err := newSleeper(s, *opt.Sleep, opt.Log.Printf, func() { srv.firstPending.Store(true) })
		if err != nil {
			return nil, err
		}
		srv.sl = sl
		sl.routes(srv)
	}
	srv.mux.HandleFunc("/health", srv.health)
	srv.mux.HandleFunc("/metrics", srv.metrics)
	srv.mux.HandleFunc("/v1/models", srv.auth(srv.models))
	srv.mux.HandleFunc("/v1/completions", srv.auth(srv.completions))
	srv.mux.HandleFunc("/v1/chat/completions", srv.auth(srv.chat))
	srv.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: 404, Message: fmt.Sprintf("no route %s %s; this server serves /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics", r.Method, r.URL.Path), Type: "invalid_request_error", Code: strp("not_found")})
	})
	return srv, nil
}

// ServeHTTP makes Server an http.Handler.
func (srv *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { srv.mux.ServeHTTP(w, r) }

// HTTPServer is an http.Server for srv with its read limits: a request's
// head and body must arrive within BodyTimeout (net/http's ReadTimeout
// covers both, and the discarding of a body a handler left unread; it is
// lifted once the body is read, so a long streamed answer is not cut).
// Serve it from srv.Listener.
func (srv *Server) HTTPServer() *http.Server {
	return &http.Server{Handler: srv, ReadHeaderTimeout: srv.opt.BodyTimeout, ReadTimeout: srv.opt.BodyTimeout}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]*apiError{"error": e})
}

func (srv *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if srv.opt.APIKey == "" {
		return h
	}
	want := []byte("Bearer " + srv.opt.APIKey)
	return func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			writeError(w, &apiError{status: 401, Message: "missing or wrong API key; send \"Authorization: Bearer KEY\" with the key the server was started with (--api-key)", Type: "invalid_request_error", Code: strp("invalid_api_key")})
			return
		}
		h(w, r)
	}
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allowed string) {
	w.Header().Set("Allow", allowed)
	writeError(w, &apiError{status: 405, Message: fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, allowed), Type: "invalid_request_error", Code: strp("method_not_allowed")})
}

func (srv *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET")
		return
	}
	writeJSON(w, 200, map[string]string{"status": "ok"})
}

func (srv *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r, "GET")
		return
	}
	writeJSON(w, 200, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": srv.opt.ModelID, "object": "model", "created": srv.opt.Created.Unix(), "owned_by": "treni-top",
			"max_model_len": srv.s.Config().MaxSeqLen,
		}},
	})
}

// job is a validated request ready for the scheduler.
type job struct {
	// arrived is when the handler began: parsing, templating and
	// tokenizing belong to the request's time, so the first request's
	// span starts here.
	arrived      time.Time
	req          sched.Request
	stops        []string
	stream       bool
	includeUsage bool
}

// readBody reads and strictly decodes the JSON body into v.
func (srv *Server) readBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, "POST")
		return &apiError{status: 0}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &apiError{status: 415, Message: fmt.Sprintf("Content-Type %q is not supported; send application/json", ct), Type: "invalid_request_error"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, srv.opt.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: 413, Message: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit), Type: "invalid_request_error"}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return &apiError{status: 408, Message: fmt.Sprintf("the request did not arrive whole within %s (the server's --body-timeout); send the body without pausing", srv.opt.BodyTimeout),
				Type: "invalid_request_error", Code: strp("request_timeout")}
		}
		return badRequest("", "", "could not read the request body: %v", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return decodeError(err)
	}
	return nil
}

// common validates the shared fields and fills j. maxDefault is the
// max_tokens used when the request gives none; inputParam names the
// prompt's field ("messages", "prompt") in errors.
func (srv *Server) common(p commonParams, maxTokens *int, maxParam, inputParam string, promptLen int, maxDefault int, j *job) *apiError {
	if p.Model == nil || *p.Model == "" {
		return badRequest("model", "missing_required_parameter", "field \"model\" is required; this server serves %q", srv.opt.ModelID)
	}
	if *p.Model != srv.opt.ModelID {
		return &apiError{status: 404, Message: fmt.Sprintf("the model %q does not exist; this server serves %q (see /v1/models)", *p.Model, srv.opt.ModelID), Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found")}
	}
	// The context is what the KV pool holds too (sched.New fits it), so
	// a request that could not run to its max_tokens is refused here, in
	// vLLM's words, instead of stopping early with finish_reason length.
	ctxLen := srv.s.Config().MaxSeqLen
	if promptLen >= ctxLen {
		return badRequest(inputParam, "context_length_exceeded", "This model's maximum context length is %d tokens. However, you requested %d tokens in the %s, which leaves none for the completion. Please reduce the length of the %s.",
			ctxLen, promptLen, inputParam, inputParam)
	}
	room := ctxLen - promptLen
	if maxTokens != nil {
		switch {
		case *maxTokens < 1:
			return badRequest(maxParam, "invalid_value", "%s must be at least 1, got %d", maxParam, *maxTokens)
		case *maxTokens > room:
			return badRequest(maxParam, "context_length_exceeded", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion (%s of at most %d).",
				ctxLen, promptLen+*maxTokens, promptLen, inputParam, *maxTokens, inputParam, maxParam, room)
		}
		j.req.MaxTokens = *maxTokens
	} else {
		j.req.MaxTokens = min(maxDefault, room)
	}
	if p.N != nil && *p.N != 1 {
		return badRequest("n", "invalid_value", "n must be 1 on this server, got %d; send separate requests", *p.N)
	}
	for name, v := range map[string]*float64{"presence_penalty": p.PresencePenalty, "frequency_penalty": p.FrequencyPenalty} {
		if v != nil && *v != 0 {
			return badRequest(name, "unsupported_parameter", "%s is not supported by this server; leave it at 0", name)
		}
	}
	smp := sched.Sampling{Temperature: 1, TopP: 1}
	if p.Temperature != nil {
		smp.Temperature = *p.Temperature
		if math.IsNaN(smp.Temperature) || smp.Temperature < 0 || smp.Temperature > 2 {
			return badRequest("temperature", "invalid_value", "temperature must be between 0 and 2, got %v", *p.Temperature)
		}
	}
	if p.TopP != nil {
		smp.TopP = *p.TopP
		if math.IsNaN(smp.TopP) || smp.TopP <= 0 || smp.TopP > 1 {
			return badRequest("top_p", "invalid_value", "top_p must be in (0, 1], got %v", *p.TopP)
		}
	}
	if p.TopK != nil {
		switch {
		case *p.TopK == -1 || *p.TopK == 0:
		case *p.TopK < -1:
			return badRequest("top_k", "invalid_value", "top_k must be -1 (off) or positive, got %d", *p.TopK)
		default:
			smp.TopK = *p.TopK
		}
	}
	if p.Seed != nil {
		smp.Seed, smp.Seeded = *p.Seed, true
	}
	if e := srv.processors(p, &smp); e != nil {
		return e
	}
	j.req.Sampling = smp
	stops, err := p.stops()
	if err != nil {
		return decodeError(err)
	}
	j.stops = stops
	if p.IgnoreEOS == nil || !*p.IgnoreEOS {
		j.req.StopTokens = srv.stopIDs
	}
	j.stream = p.Stream != nil && *p.Stream
	if p.StreamOptions != nil {
		if !j.stream {
			return badRequest("stream_options", "invalid_value", "stream_options is only allowed with \"stream\": true")
		}
		j.includeUsage = p.StreamOptions.IncludeUsage
	}
	return nil
}

// maxLogitBias is the bound vLLM and OpenAI put on a logit_bias value;
// vLLM clamps to it, and so does this server.
const maxLogitBias = 100

// processors reads logit_bias, min_p and repetition_penalty into smp,
// with vLLM's rules: logit_bias keys are token ids of the vocabulary and
// its values are clamped to ±100, min_p is in [0, 1], repetition_penalty
// is greater than zero (1 leaves repeats alone).
func (srv *Server) processors(p commonParams, smp *sched.Sampling) *apiError {
	if len(p.LogitBias) > 0 {
		vocab := srv.s.Backend().VocabSize()
		smp.LogitBias = make(map[int32]float32, len(p.LogitBias))
		var outside []string
		for k, v := range p.LogitBias {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return badRequest("logit_bias", "invalid_value", "logit_bias keys must be token ids (integers as strings, e.g. {\"100\": 5}), got %q", k)
			}
			if id < 0 || id >= int64(vocab) {
				outside = append(outside, k)
				continue
			}
			smp.LogitBias[int32(id)] = float32(max(-maxLogitBias, min(maxLogitBias, v)))
		}
		if len(outside) > 0 {
			slices.Sort(outside)
			return badRequest("logit_bias", "invalid_value", "token_id(s) [%s] in logit_bias contain out-of-vocab token ids. Vocabulary size: %d", strings.Join(outside, ", "), vocab)
		}
	}
	if p.MinP != nil {
		if v := *p.MinP; math.IsNaN(v) || v < 0 || v > 1 {
			return badRequest("min_p", "invalid_value", "min_p must be in [0, 1], got %v", v)
		}
		smp.MinP = *p.MinP
	}
	if p.RepetitionPenalty != nil {
		if v := *p.RepetitionPenalty; !(v > 0) || math.IsInf(v, 1) {
			return badRequest("repetition_penalty", "invalid_value", "repetition_penalty must be greater than zero (1 leaves repeats alone), got %v", v)
		}
		smp.RepetitionPenalty = *p.RepetitionPenalty
	}
	return nil
}

func (srv *Server) withBOS(ids []int32) []int32 {
	if !srv.tok.AddBOS() {
		return ids
	}
	bos, ok := srv.tok.BOS()
	if !ok || (len(ids) > 0 && ids[0] == bos) {
		return ids
	}
	return append([]int32{bos}, ids...)
}

func (srv *Server) completions(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	var req completionRequest
	if e := srv.readBody(w, r, &req); e != nil {
		srv.fail(w, r, e)
		return
	}
	in, err := req.prompt()
	if err != nil {
		srv.fail(w, r, decodeError(err))
		return
	}
	switch {
	case req.Echo != nil && *req.Echo:
		srv.fail(w, r, badRequest("echo", "unsupported_parameter", "echo is not supported by this server"))
		return
	case req.Logprobs != nil:
		srv.fail(w, r, badRequest("logprobs", "unsupported_parameter", "logprobs are not supported by this server"))
		return
	case req.BestOf != nil && *req.BestOf != 1:
		srv.fail(w, r, badRequest("best_of", "unsupported_parameter", "best_of must be 1 on this server"))
		return
	case req.Suffix != nil && *req.Suffix != "":
		srv.fail(w, r, badRequest("suffix", "unsupported_parameter", "suffix is not supported by this server"))
		return
	}
	ids := in.tokens
	if !in.isIDs {
		ids = srv.withBOS(srv.tok.Encode(in.text))
	}
	if len(ids) == 0 {
		srv.fail(w, r, badRequest("prompt", "invalid_value", "the prompt is empty; send at least one token"))
		return
	}
	var j job
	if e := srv.common(req.commonParams, req.MaxTokens, "max_tokens", "prompt", len(ids), 16, &j); e != nil {
		srv.fail(w, r, e)
		return
	}
	j.req.Prompt = ids
	j.arrived = arrived
	srv.run(w, r, j, false)
}

func (srv *Server) chat(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	var req chatRequest
	if e := srv.readBody(w, r, &req); e != nil {
		srv.fail(w, r, e)
		return
	}
	if len(req.Messages) == 0 {
		srv.fail(w, r, badRequest("messages", "missing_required_parameter", "field \"messages\" must be a non-empty array"))
		return
	}
	if req.Logprobs != nil && *req.Logprobs {
		srv.fail(w, r, badRequest("logprobs", "unsupported_parameter", "logprobs are not supported by this server"))
		return
	}
	msgs := make([]tokenizer.Message, 0, len(req.Messages))
	for i, m := range req.Messages {
		role := m.Role
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			role = "system" // OpenAI's newer name for the system role
		default:
			srv.fail(w, r, badRequest(fmt.Sprintf("messages[%d].role", i), "invalid_value", "messages[%d].role %q is not one of system, developer, user, assistant, tool", i, m.Role))
			return
		}
		text, err := m.text(i)
		if err != nil {
			srv.fail(w, r, decodeError(err))
			return
		}
		msgs = append(msgs, tokenizer.Message{Role: role, Content: text})
	}
	rendered, err := srv.tok.ApplyChat(msgs, true)
	if err != nil {
		srv.fail(w, r, badRequest("messages", "invalid_value", "could not apply the chat template: %v", err))
		return
	}
	ids := srv.withBOS(srv.tok.Encode(rendered))
	maxTok, param := req.MaxCompletionTokens, "max_completion_tokens"
	if maxTok == nil {
		maxTok, param = req.MaxTokens, "max_tokens"
	}
	var j job
	if e := srv.common(req.commonParams, maxTok, param, "messages", len(ids), math.MaxInt, &j); e != nil {
		srv.fail(w, r, e)
		return
	}
	j.req.Prompt = ids
	j.arrived = arrived
	srv.run(w, r, j, true)
}

func (srv *Server) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	if e.status == 0 {
		return // already answered
	}
	srv.opt.Log.Printf("%s %s: %d %s", r.Method, r.URL.Path, e.status, e.Message)
	writeError(w, e)
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// run submits the job and writes the response, streamed or not.
func (srv *Server) run(w http.ResponseWriter, r *http.Request, j job, chat bool) {
	arrived := j.arrived
	if arrived.IsZero() {
		arrived = time.Now()
	}
	// The request lives as long as the handler: a client disconnect (r's
	// context) or an early return (a failed write, a stop string) cancels
	// it, and the scheduler frees its KV blocks at the next step.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st, err := srv.submit(ctx, j.req)
	if err != nil {
		if e := refusal(w, err); e != nil {
			srv.fail(w, r, e)
		} else if errors.Is(err, sched.ErrInvalid) {
			srv.fail(w, r, badRequest("", "invalid_value", "%v", err))
		} else {
			srv.fail(w, r, &apiError{status: 503, Message: fmt.Sprintf("the server cannot take requests: %v", err), Type: "server_error"})
		}
		return
	}
	id := newID(map[bool]string{false: "cmpl-", true: "chatcmpl-"}[chat])
	created := time.Now().Unix()
	out := newTextOut(srv.tok.NewStreamDecoder(), j.stops)
	if srv.opt.FirstRequest != nil {
		defer func() {
			if ft := st.FirstToken(); !ft.IsZero() && srv.firstPending.CompareAndSwap(true, false) {
				srv.opt.FirstRequest(arrived, ft, len(j.req.Prompt))
			}
		}()
	}
	if !j.stream {
		srv.runPlain(ctx, w, r, st, out, j, chat, id, created)
		return
	}
	srv.runStream(ctx, w, r, st, out, j, chat, id, created)
}

// newUsage is a request's usage block from its prompt and result.
func newUsage(prompt int, res sched.Result) *usage {
	return &usage{PromptTokens: prompt, CompletionTokens: res.CompletionTokens, TotalTokens: prompt + res.CompletionTokens,
		PromptTokensDetails: &promptDetail{CachedTokens: res.CachedTokens}}
}

// finish maps the scheduler's outcome and the stop-string state to an
// OpenAI finish_reason.
func finishReason(res sched.Result, stopped bool) string {
	if stopped || res.Finish == sched.FinishStop {
		return "stop"
	}
	return "length"
}

func (srv *Server) runPlain(ctx context.Context, w http.ResponseWriter, r *http.Request, st *sched.Stream, out *textOut, j job, chat bool, id string, created int64) {
	var text strings.Builder
	n := 0
	for !out.stopped {
		t, err := st.Recv(ctx)
		if err == io.EOF {
			text.WriteString(out.flush())
			break
		}
		if err != nil {
			return // client gone
		}
		n++
		text.WriteString(out.push(t.ID))
	}
	res := st.Result()
	if out.stopped {
		res.CompletionTokens = n
	} else if e := interrupted(res); e != nil {
		srv.fail(w, r, e)
		return
	}
	u := newUsage(len(j.req.Prompt), res)
	fr := finishReason(res, out.stopped)
	if chat {
		writeJSON(w, 200, chatResponse{ID: id, Object: "chat.completion", Created: created, Model: srv.opt.ModelID,
			Choices: []chatChoice{{Message: chatOutMessage{Role: "assistant", Content: text.String()}, FinishReason: fr}}, Usage: *u})
		return
	}
	writeJSON(w, 200, completionResponse{ID: id, Object: "text_completion", Created: created, Model: srv.opt.ModelID,
		Choices: []completionChoice{{Text: text.String(), FinishReason: &fr}}, Usage: u})
}

func (srv *Server) runStream(ctx context.Context, w http.ResponseWriter, r *http.Request, st *sched.Stream, out *textOut, j job, chat bool, id string, created int64) {
	fl, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(200)
	send := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	piece := func(text string, fr *string) any {
		if chat {
			d := chatDelta{}
			if fr == nil {
				d.Content = &text
			}
			return chatChunk{ID: id, Object: object, Created: created, Model: srv.opt.ModelID, Choices: []chatChunkChoice{{Delta: d, FinishReason: fr}}}
		}
		return completionResponse{ID: id, Object: object, Created: created, Model: srv.opt.ModelID, Choices: []completionChoice{{Text: text, FinishReason: fr}}}
	}
	if chat {
		empty := ""
		if !send(chatChunk{ID: id, Object: object, Created: created, Model: srv.opt.ModelID, Choices: []chatChunkChoice{{Delta: chatDelta{Role: "assistant", Content: &empty}}}}) {
			return
		}
	}
	n := 0
	for !out.stopped {
		t, err := st.Recv(ctx)
		if err == io.EOF {
			if rest := out.flush(); rest != "" && !send(piece(rest, nil)) {
				return
			}
			break
		}
		if err != nil {
			return // client gone: the deferred cancel frees the request
		}
		n++
		if text := out.push(t.ID); text != "" && !send(piece(text, nil)) {
			return
		}
	}
	res := st.Result()
	if out.stopped {
		res.CompletionTokens = n
	} else if e := interrupted(res); e != nil {
		send(map[string]*apiError{"error": e})
		return
	}
	fr := finishReason(res, out.stopped)
	if chat {
		if !send(chatChunk{ID: id, Object: object, Created: created, Model: srv.opt.ModelID, Choices: []chatChunkChoice{{FinishReason: &fr}}}) {
			return
		}
	} else if !send(piece("", &fr)) {
		return
	}
	if j.includeUsage {
		u := newUsage(len(j.req.Prompt), res)
		var v any
		if chat {
			v = chatChunk{ID: id, Object: object, Created: created, Model: srv.opt.ModelID, Choices: []chatChunkChoice{}, Usage: u}
		} else {
			v = completionResponse{ID: id, Object: object, Created: created, Model: srv.opt.ModelID, Choices: []completionChoice{}, Usage: u}
		}
		if !send(v) {
			return
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err == nil && fl != nil {
		fl.Flush()
	}
}

// textOut turns tokens into text and applies stop strings, holding back any
// tail that could be the start of a stop string so none is ever streamed.
type textOut struct {
	dec     *tokenizer.StreamDecoder
	stops   []string
	held    string
	stopped bool
}

func newTextOut(dec *tokenizer.StreamDecoder, stops []string) *textOut {
	return &textOut{dec: dec, stops: stops}
}

// push adds one token and returns the text that is safe to emit.
func (o *textOut) push(id int32) string {
	return o.feed(o.dec.Push(id), false)
}

// flush returns the remaining text at the end of the request.
func (o *textOut) flush() string {
	return o.feed(o.dec.Flush(), true)
}

func (o *textOut) feed(piece string, final bool) string {
	if o.stopped {
		return ""
	}
	o.held += piece
	if len(o.stops) == 0 {
		s := o.held
		o.held = ""
		return s
	}
	cut := -1
	for _, s := range o.stops {
		if i := strings.Index(o.held, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		o.stopped = true
		s := o.held[:cut]
		o.held = ""
		return s
	}
	keep := 0
	if !final {
		for _, s := range o.stops {
			for k := min(len(s)-1, len(o.held)); k > keep; k-- {
				if strings.HasSuffix(o.held, s[:k]) {
					keep = k
					break
				}
			}
		}
	}
	s := o.held[:len(o.held)-keep]
	o.held = o.held[len(o.held)-keep:]
	return s
}
