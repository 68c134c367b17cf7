package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go"

	"github.com/treni-top/treni-top/engine/sched"
)

// served is a Server behind its own HTTPServer and Listener, as serve
// runs it, on a loopback port.
type served struct {
	addr string
	srv  *Server
	s    *sched.Scheduler
}

func serveLimited(t *testing.T, be *fakeBackend, opt Options) *served {
	t.Helper()
	tok := testTokenizer(t)
	if be.vocab == 0 {
		be.vocab = tok.VocabSize()
	}
	if be.blocks == 0 {
		be.blocks = 2048
	}
	s, err := sched.New(be, sched.Config{MaxSeqLen: ctxLen, MaxBatch: 16, MaxBatchedTokens: 128})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	schedDone := make(chan error, 1)
	go func() { schedDone <- s.Run(ctx) }()
	opt.ModelID = modelID
	srv, err := New(s, tok, opt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	serveDone := make(chan error, 1)
	go func() { serveDone <- hs.Serve(srv.Listener(ln)) }()
	t.Cleanup(func() {
		_ = hs.Close()
		<-serveDone
		cancel()
		<-schedDone
	})
	return &served{addr: ln.Addr().String(), srv: srv, s: s}
}

// dial connects with a deadline that only guards against a hang.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	t.Cleanup(func() { c.Close() })
	return c
}

// apiErr decodes an OpenAI-style error body.
func apiErr(t *testing.T, resp *http.Response) (msg, code string) {
	t.Helper()
	var env struct {
		Error struct {
			Message string  `json:"message"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("error body is not JSON: %q", b)
	}
	if env.Error.Code != nil {
		code = *env.Error.Code
	}
	return env.Error.Message, code
}

// TestStalledBodyAnswered408: a body that stops arriving after a few bytes
// (declared with Content-Length or chunked) is answered 408 once the body
// timeout passes, and the connection is closed: nothing holds it forever.
func TestStalledBodyAnswered408(t *testing.T) {
	sv := serveLimited(t, &fakeBackend{}, Options{BodyTimeout: 300 * time.Millisecond})
	for name, head := range map[string]string{
		"content-length": "Content-Length: 100\r\n\r\n{\"model\":",
		"chunked":        "Transfer-Encoding: chunked\r\n\r\n9\r\n{\"model\":\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, sv.addr)
			fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s", head)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer to a stalled body: %v", err)
			}
			msg, code := apiErr(t, resp)
			if resp.StatusCode != http.StatusRequestTimeout || code != "request_timeout" || !strings.Contains(msg, "--body-timeout") {
				t.Fatalf("stalled body: %d %q %q, want 408 request_timeout naming --body-timeout", resp.StatusCode, code, msg)
			}
			if _, err := io.ReadAll(br); err != nil {
				t.Fatalf("the connection was not closed after the 408: %v", err)
			}
		})
	}
	// A body the handler never reads (GET /health) is discarded under the
	// same deadline: the connection is closed, not held.
	c := dial(t, sv.addr)
	fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health with a stalled body: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the answer, the connection with an unread, stalled body: %v, want EOF", err)
	}
}

// TestLongStreamOutlivesBodyTimeout: the body timeout bounds reading the
// request only; a streamed answer longer than it is not cut.
func TestLongStreamOutlivesBodyTimeout(t *testing.T) {
	const timeout, delay, n = 200 * time.Millisecond, 30 * time.Millisecond, 20 // ≥ 600 ms of tokens
	sv := serveLimited(t, &fakeBackend{delay: delay}, Options{BodyTimeout: timeout})
	c := openai.NewClient(clientOpts("http://" + sv.addr)...)
	stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model: modelID, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Hello")},
		MaxTokens: openai.Int(n), Temperature: openai.Float(0),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	got, finish := int64(0), ""
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			if c.FinishReason != "" {
				finish = string(c.FinishReason)
			}
		}
		if ch.Usage.CompletionTokens > 0 {
			got = ch.Usage.CompletionTokens
		}
	}
	if err := stream.Err(); err != nil || got != n || finish != "length" {
		t.Fatalf("a %d-token stream with a %v body timeout: %d tokens, finish %q, err %v", n, timeout, got, finish, err)
	}
}

// TestConnectionCap: with MaxConnections open, one more connection is
// answered 503 with a JSON error and closed; /metrics counts it; once a
// connection closes, a new one is served again.
func TestConnectionCap(t *testing.T) {
	sv := serveLimited(t, &fakeBackend{}, Options{MaxConnections: 2})
	held := []net.Conn{dial(t, sv.addr), dial(t, sv.addr)}
	// Connections are accepted in the order they connected: these two
	// hold the slots, idle, before the next one is made.
	c := dial(t, sv.addr)
	fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer beyond the cap: %v", err)
	}
	msg, code := apiErr(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || code != "too_many_connections" || !strings.Contains(msg, "--max-connections") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("beyond the cap: %d %q %q (Retry-After %q), want 503 too_many_connections naming --max-connections", resp.StatusCode, code, msg, resp.Header.Get("Retry-After"))
	}
	if sv.srv.conns.refused.Load() == 0 {
		t.Fatal("the refusal was not counted")
	}
	// A held connection still works, then closes: its slot is freed.
	fmt.Fprintf(held[0], "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(held[0]), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics on a held connection: %v %v", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	prom := parseProm(t, string(b))
	refused, open := prom[`treni_http_connections_refused_total{model_name="test-model"}`], prom[`treni_http_connections_open{model_name="test-model"}`]
	if refused < 1 || open != 2 {
		t.Fatalf("metrics: refused %v, open %v; want ≥ 1 and 2", refused, open)
	}
	held[0].Close()
	// The server frees the slot when it sees the close; poll for it.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + sv.addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served after one of the two closed: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
