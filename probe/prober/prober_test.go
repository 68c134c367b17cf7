package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

type recorder struct {
	mu  sync.Mutex
	evs []trace.Event
}

func (r *recorder) Emit(e trace.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) requests() []trace.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []trace.Request
	for _, e := range r.evs {
		if e.Kind == trace.KindRequest {
			out = append(out, *e.Request)
		}
	}
	return out
}

// step is one thing a fake server does: write raw bytes and flush, or
// sleep.
type step struct {
	write string
	sleep time.Duration
}

func w(s string) step            { return step{write: s} }
func pause(d time.Duration) step { return step{sleep: d} }
func data(json string) step      { return w("data: " + json + "\n\n") }
func chat(delta string) step     { return data(`{"choices":[{"index":0,"delta":` + delta + `}]}`) }
func doneStep() step             { return w("data: [DONE]\n\n") }
func ndjson(line string) step    { return w(line + "\n") }
func sleepy(ms int) step         { return pause(time.Duration(ms) * time.Millisecond) }
func usage(prompt, completion int) step {
	return data(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, prompt, completion))
}

// server plays steps on every request and records the last request body.
func server(t *testing.T, status int, ctype string, steps ...step) (*httptest.Server, *atomic.Value) {
	t.Helper()
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		body.Store(b)
		rw.Header().Set("Content-Type", ctype)
		rw.WriteHeader(status)
		fl := rw.(http.Flusher)
		fl.Flush()
		for _, s := range steps {
			if s.sleep > 0 {
				select {
				case <-time.After(s.sleep):
				case <-req.Context().Done():
					return
				}
				continue
			}
			io.WriteString(rw, s.write)
			fl.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &body
}

func do(t *testing.T, srv *httptest.Server, tmpl Template) (Result, *recorder) {
	t.Helper()
	rec := &recorder{}
	c := New(trace.NewClock(), rec, 1)
	defer c.Close()
	tmpl.BaseURL = srv.URL
	if tmpl.Endpoint == "" {
		tmpl.Endpoint = Chat
	}
	return c.Do(context.Background(), tmpl, "", "warm_1", trace.PhaseWarm), rec
}

func TestChatRoleOnlyReasoningToolCalls(t *testing.T) {
	srv, body := server(t, 200, "text/event-stream",
		chat(`{"role":"assistant","content":""}`), // role only: not a token
		sleepy(60),
		// Pauses between the token chunks: chunks that reach the socket
		// together are read together and share one arrival (netstamp).
		chat(`{"reasoning_content":"think"}`),
		sleepy(3),
		chat(`{"reasoning":" more"}`),
		sleepy(3),
		chat(`{"content":"Hello"}`),
		sleepy(3),
		chat(`{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]}`),
		data(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`),
		usage(7, 4),
		doneStep(),
	)
	res, rec := do(t, srv, Template{Model: "m", Prompt: "hi", MaxTokens: 8})
	r := res.Request
	if !r.OK() {
		t.Fatalf("request failed: %s (%s)", r.Error, r.ErrorKind)
	}
	if r.FirstByte <= 0 || r.FirstEvent < r.FirstByte || r.FirstToken < r.FirstEvent {
		t.Fatalf("clocks out of order: byte %v event %v token %v", r.FirstByte, r.FirstEvent, r.FirstToken)
	}
	// The role-only chunk came 60 ms before any token: TTFT must not be
	// taken from it.
	if r.FirstToken-r.FirstEvent < 50*time.Millisecond {
		t.Fatalf("TTFT %v taken from the role-only chunk (first event %v)", r.FirstToken, r.FirstEvent)
	}
	if len(r.Tokens) != 4 || r.Tokens[0] != r.FirstToken || r.MultiTokenChunks != 0 {
		t.Fatalf("tokens %v multi %d, want 4 single-token chunks", r.Tokens, r.MultiTokenChunks)
	}
	if r.PromptTokens != 7 || r.CompletionTokens != 4 || r.End < r.Tokens[3] {
		t.Fatalf("usage %d/%d end %v", r.PromptTokens, r.CompletionTokens, r.End)
	}
	if res.Text != "Hello" || res.Reasoning != "think more" {
		t.Fatalf("text %q reasoning %q", res.Text, res.Reasoning)
	}
	var sent map[string]any
	json.Unmarshal(body.Load().([]byte), &sent)
	if sent["stream"] != true || sent["max_tokens"] != 8.0 || sent["stream_options"].(map[string]any)["include_usage"] != true {
		t.Fatalf("request body %v", sent)
	}
	if sent["messages"].([]any)[0].(map[string]any)["content"] != "hi" {
		t.Fatalf("messages %v", sent["messages"])
	}
	evs := rec.requests()
	if len(evs) != 2 || evs[0].Done || evs[0].FirstToken == 0 || !evs[1].Done || evs[1].End == 0 {
		t.Fatalf("events: want a live one at the first token then the done one, got %+v", evs)
	}
	// Chunks that reach the socket together share one arrival, so on a
	// loaded machine the gaps may be zero; their number may not change.
	if r.TPOT() < 0 || len(r.ITLs()) != 3 {
		t.Fatalf("TPOT %v ITLs %v", r.TPOT(), r.ITLs())
	}
}

func TestCompletionsMultiLineEventsCommentsCRLF(t *testing.T) {
	srv, body := server(t, 200, "text/event-stream",
		w(": keep-alive\r\n\r\n"),
		w("data: {\"choices\":[{\"text\":\"\"}]}\r\n\r\n"), // empty text: an event, not a token
		sleepy(3), // so that it arrives, and is timed, apart from the first token
		w("data: {\"choices\":\r\ndata: [{\"text\":\"a\"}]}\r\n\r\n"),
		w("event: message\ndata: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"length\"}]}\nid: 3\n\n"),
		doneStep(),
	)
	res, _ := do(t, srv, Template{Endpoint: Completions, Model: "m", Prompt: "p"})
	r := res.Request
	if !r.OK() || len(r.Tokens) != 2 || res.Text != "ab" || res.Malformed != 0 {
		t.Fatalf("%+v text %q malformed %d", r, res.Text, res.Malformed)
	}
	// Which chunk set FirstEvent is pinned without timing by
	// TestEventTimesInOrder; here only the order of the stamps.
	if r.FirstEvent > r.FirstToken {
		t.Fatalf("first event %v after the first token %v", r.FirstEvent, r.FirstToken)
	}
	var sent map[string]any
	json.Unmarshal(body.Load().([]byte), &sent)
	if sent["prompt"] != "p" || sent["messages"] != nil {
		t.Fatalf("completions body %v", sent)
	}
}

func TestMultiTokenChunks(t *testing.T) {
	// Per-chunk usage (vLLM continuous_usage_stats): the second chunk
	// carries 3 tokens.
	srv, _ := server(t, 200, "text/event-stream",
		data(`{"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`),
		data(`{"choices":[{"delta":{"content":"bcd"}}],"usage":{"prompt_tokens":5,"completion_tokens":4}}`),
		data(`{"choices":[{"delta":{"content":"e"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":5}}`),
		doneStep(),
	)
	res, _ := do(t, srv, Template{})
	r := res.Request
	if !r.OK() || len(r.Tokens) != 3 || r.MultiTokenChunks != 1 || r.CompletionTokens != 5 {
		t.Fatalf("tokens %d multi %d completion %d (%s)", len(r.Tokens), r.MultiTokenChunks, r.CompletionTokens, r.Error)
	}
	// Without per-chunk usage, a chunk with two choices carrying tokens
	// (n=2) counts as a multi-token chunk; the final usage only gives N.
	srv2, _ := server(t, 200, "text/event-stream",
		data(`{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`),
		data(`{"choices":[{"index":0,"delta":{"content":"c"},"finish_reason":"stop"}]}`),
		usage(5, 3),
		doneStep(),
	)
	res, _ = do(t, srv2, Template{})
	r = res.Request
	if !r.OK() || len(r.Tokens) != 2 || r.MultiTokenChunks != 1 || r.CompletionTokens != 3 {
		t.Fatalf("n=2: tokens %d multi %d completion %d", len(r.Tokens), r.MultiTokenChunks, r.CompletionTokens)
	}
}

func TestHTTPErrors(t *testing.T) {
	cases := []struct {
		status int
		body   string
		kind   string
		msg    string
	}{
		{404, `{"error":{"message":"The model 'x' does not exist.","type":"NotFoundError","code":404}}`, KindHTTP4xx, "does not exist"},
		{400, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError"}`, KindHTTP4xx, "max_tokens is too large"},
		{503, `{"detail":"Service Unavailable"}`, KindHTTP5xx, "Service Unavailable"},
		{500, `Internal Server Error`, KindHTTP5xx, "Internal Server Error"},
		{404, `{"error":"model \"synth\" not found, try pulling it first"}`, KindHTTP4xx, "try pulling"},
	}
	for _, c := range cases {
		srv, _ := server(t, c.status, "application/json", w(c.body))
		res, rec := do(t, srv, Template{})
		r := res.Request
		if r.OK() || r.Status != c.status || r.ErrorKind != c.kind || !strings.Contains(r.Error, c.msg) {
			t.Errorf("%d %s: status %d kind %q error %q", c.status, c.body, r.Status, r.ErrorKind, r.Error)
		}
		if r.FirstByte == 0 || r.End == 0 || r.FirstToken != 0 || !r.Done {
			t.Errorf("error response timings: %+v", r)
		}
		if evs := rec.requests(); len(evs) != 1 || !evs[0].Done {
			t.Errorf("want one done event, got %d", len(evs))
		}
	}
}

func TestServerClosesMidStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(rw, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		io.WriteString(rw, "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n")
		rw.(http.Flusher).Flush()
		// Drop the connection without ending the chunked body, as a
		// crashing server does.
		conn, _, err := rw.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	res, _ := do(t, srv, Template{})
	r := res.Request
	if r.ErrorKind != KindClosedEarly || len(r.Tokens) != 2 || r.FirstToken == 0 || r.End == 0 {
		t.Fatalf("kind %q error %q tokens %d", r.ErrorKind, r.Error, len(r.Tokens))
	}
	// A clean end of stream without [DONE] and without finish_reason is
	// also early.
	srv2, _ := server(t, 200, "text/event-stream", chat(`{"content":"a"}`))
	res, _ = do(t, srv2, Template{})
	if res.Request.ErrorKind != KindClosedEarly {
		t.Fatalf("stream without its end: kind %q", res.Request.ErrorKind)
	}
	// But a server that ends after finish_reason without [DONE] is fine.
	srv3, _ := server(t, 200, "text/event-stream", data(`{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}`))
	res, _ = do(t, srv3, Template{})
	if !res.Request.OK() {
		t.Fatalf("finish_reason without [DONE]: %s", res.Request.Error)
	}
}

func TestTimeout(t *testing.T) {
	srv, _ := server(t, 200, "text/event-stream", chat(`{"content":"a"}`), pause(10*time.Second), doneStep())
	began := time.Now()
	res, _ := do(t, srv, Template{Timeout: 200 * time.Millisecond})
	r := res.Request
	if r.ErrorKind != KindTimeout || r.FirstToken == 0 || len(r.Tokens) != 1 {
		t.Fatalf("kind %q error %q tokens %d", r.ErrorKind, r.Error, len(r.Tokens))
	}
	if time.Since(began) > 5*time.Second {
		t.Fatal("the timeout did not stop the request")
	}
	// A server that never answers at all.
	srv2, _ := server(t, 200, "text/event-stream")
	srv2.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		// Reading the body lets the server notice the client hanging up.
		io.ReadAll(req.Body)
		select {
		case <-req.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	res, _ = do(t, srv2, Template{Timeout: 100 * time.Millisecond})
	if res.Request.ErrorKind != KindTimeout || res.Request.FirstByte != 0 {
		t.Fatalf("no answer: kind %q first byte %v", res.Request.ErrorKind, res.Request.FirstByte)
	}
}

func TestMalformedLinesAndStreamErrors(t *testing.T) {
	srv, _ := server(t, 200, "text/event-stream",
		chat(`{"content":"a"}`),
		data(`{not json`),
		w("garbage line without a field\n\n"),
		chat(`{"content":"b"}`),
		data(`{"choices":[{"delta":{},"finish_reason":"stop"}]}`),
		doneStep(),
	)
	res, _ := do(t, srv, Template{})
	r := res.Request
	if r.ErrorKind != KindMalformed || res.Malformed != 1 || len(r.Tokens) != 2 || r.End == 0 {
		t.Fatalf("kind %q malformed %d tokens %d", r.ErrorKind, res.Malformed, len(r.Tokens))
	}
	srv2, _ := server(t, 200, "text/event-stream",
		chat(`{"content":"a"}`),
		data(`{"error":{"message":"CUDA out of memory","type":"InternalServerError"}}`),
	)
	res, _ = do(t, srv2, Template{})
	if res.Request.ErrorKind != KindServer || !strings.Contains(res.Request.Error, "CUDA out of memory") {
		t.Fatalf("kind %q error %q", res.Request.ErrorKind, res.Request.Error)
	}
}

func TestConnectError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := New(trace.NewClock(), nil, 0)
	defer c.Close()
	res := c.Do(context.Background(), Template{BaseURL: "http://" + addr, Endpoint: Chat}, "x", "", trace.PhaseWarm)
	if res.Request.ErrorKind != KindConnect || !strings.Contains(res.Request.Error, "is it running") || !res.Request.Done {
		t.Fatalf("kind %q error %q", res.Request.ErrorKind, res.Request.Error)
	}
	// Cancelled by the caller.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res = c.Do(ctx, Template{BaseURL: "http://" + addr, Endpoint: Chat}, "y", "", trace.PhaseWarm)
	if res.Request.ErrorKind != KindCanceled {
		t.Fatalf("cancelled: kind %q", res.Request.ErrorKind)
	}
}

func TestOllamaGenerate(t *testing.T) {
	srv, body := server(t, 200, "application/x-ndjson",
		sleepy(50),
		ndjson(`{"model":"synth","created_at":"2026-11-22T03:00:00Z","response":"Hel","done":false}`),
		ndjson(`{"model":"synth","response":"lo","done":false}`),
		ndjson(`{"model":"synth","response":"","done":true,"done_reason":"stop","total_duration":2500000000,"load_duration":2000000000,"prompt_eval_count":9,"prompt_eval_duration":300000000,"eval_count":2,"eval_duration":150000000}`),
	)
	res, _ := do(t, srv, Template{Endpoint: OllamaGenerate, Model: "synth", Prompt: "hi", MaxTokens: 4})
	r := res.Request
	if !r.OK() || len(r.Tokens) != 2 || res.Text != "Hello" || r.PromptTokens != 9 || r.CompletionTokens != 2 {
		t.Fatalf("%+v text %q", r, res.Text)
	}
	if r.FirstToken < 40*time.Millisecond || r.FirstEvent != r.FirstToken {
		t.Fatalf("first event %v token %v", r.FirstEvent, r.FirstToken)
	}
	want := ServerTimings{Total: 2500 * time.Millisecond, Load: 2 * time.Second, PromptEval: 300 * time.Millisecond, Eval: 150 * time.Millisecond, PromptEvalCount: 9, EvalCount: 2}
	if res.Server == nil || *res.Server != want {
		t.Fatalf("server timings %+v", res.Server)
	}
	var sent map[string]any
	json.Unmarshal(body.Load().([]byte), &sent)
	if sent["prompt"] != "hi" || sent["options"].(map[string]any)["num_predict"] != 4.0 || sent["stream_options"] != nil {
		t.Fatalf("ollama body %v", sent)
	}
}

func TestOllamaChatThinkingAndErrors(t *testing.T) {
	srv, _ := server(t, 200, "application/x-ndjson",
		ndjson(`{"message":{"role":"assistant","content":""},"done":false}`),
		sleepy(3), // the role-only line arrives, and is timed, apart from the first token
		ndjson(`{"message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}`),
		ndjson(``),
		ndjson(`{"message":{"role":"assistant","content":"ok"},"done":false}`),
		ndjson(`{"message":{"role":"assistant","content":""},"done":true,"eval_count":2,"prompt_eval_count":3}`),
	)
	res, _ := do(t, srv, Template{Endpoint: OllamaChat, Model: "synth", Prompt: "hi"})
	r := res.Request
	if !r.OK() || len(r.Tokens) != 2 || r.FirstEvent > r.FirstToken || res.Reasoning != "hmm" || res.Text != "ok" {
		t.Fatalf("%+v", res)
	}
	srv2, _ := server(t, 200, "application/x-ndjson", ndjson(`{"response":"a","done":false}`))
	res, _ = do(t, srv2, Template{Endpoint: OllamaGenerate})
	if res.Request.ErrorKind != KindClosedEarly {
		t.Fatalf("no done line: kind %q", res.Request.ErrorKind)
	}
	srv3, _ := server(t, 200, "application/x-ndjson", ndjson(`{"error":"llama runner process has terminated: signal: killed"}`))
	res, _ = do(t, srv3, Template{Endpoint: OllamaGenerate})
	if res.Request.ErrorKind != KindServer || !strings.Contains(res.Request.Error, "runner process") {
		t.Fatalf("error line: kind %q %q", res.Request.ErrorKind, res.Request.Error)
	}
}

// TestEventTimesInOrder: the first event is the first protocol event read,
// whether or not it carries a token — a role-only SSE chunk, an empty
// completions text, an Ollama line without content. Each read gets its own
// arrival here (a counter), so the test does not depend on how the bytes
// were split into packets.
func TestEventTimesInOrder(t *testing.T) {
	c := New(trace.NewClock(), nil, 0)
	defer c.Close()
	for _, tc := range []struct {
		name   string
		ndjson bool
		in     string
	}{
		{"chat role only", false, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"},
		{"completions empty text", false, ": keep-alive\r\n\r\ndata: {\"choices\":[{\"text\":\"\"}]}\r\n\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata: [DONE]\r\n\r\n"},
		{"ollama no content", true, "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":false}\n{\"message\":{\"role\":\"assistant\",\"content\":\"a\"},\"done\":false}\n{\"done\":true}\n"},
	} {
		var clock time.Duration
		res := Result{}
		s := &stream{c: c, res: &res, arrived: func() time.Duration { clock++; return clock }}
		if tc.ndjson {
			s.readNDJSON(strings.NewReader(tc.in))
		} else {
			s.readSSE(strings.NewReader(tc.in))
		}
		r := res.Request
		if len(r.Tokens) != 1 || r.FirstEvent != 1 || r.FirstToken <= r.FirstEvent {
			t.Errorf("%s: first event %v, first token %v, tokens %v; want the first event at the first read (1) and the token after it", tc.name, r.FirstEvent, r.FirstToken, r.Tokens)
		}
	}
}

// FuzzSSE feeds arbitrary bytes to the stream parser: it must never panic
// and never report more tokens than events.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": c\r\ndata: {\"choices\":\r\ndata: [{\"text\":\"a\"}]}\r\n\r\n"))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":[1]}}],\"usage\":{\"completion_tokens\":-5}}\n\n"))
	c := New(trace.NewClock(), nil, 0)
	defer c.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		res := Result{}
		s := &stream{c: c, res: &res, arrived: func() time.Duration { return 1 }}
		s.readSSE(strings.NewReader(string(b)))
		res2 := Result{}
		s2 := &stream{c: s.c, res: &res2, arrived: s.arrived}
		s2.readNDJSON(strings.NewReader(string(b)))
	})
}
