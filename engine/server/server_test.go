package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/engine/tokenizer"
)

const (
	modelID = "test-model"
	ctxLen  = 256
)

// fakeBackend is a real sched.Backend whose next token depends on the last
// input token and the position: plain text tokens, never a special one
// unless eosAt says so.
type fakeBackend struct {
	vocab  int
	delay  time.Duration
	eosAt  int   // sequence length at which to emit eos (0 = never)
	eos    int32 // the token emitted at eosAt
	blocks int
}

func (f *fakeBackend) VocabSize() int { return f.vocab }
func (f *fakeBackend) BlockSize() int { return 8 }
func (f *fakeBackend) NumBlocks() int { return f.blocks }
func (f *fakeBackend) Name() string   { return "fake" }
func (f *fakeBackend) Close() error   { return nil }
func (f *fakeBackend) Forward(ctx context.Context, b *sched.Batch, logits [][]float32) error {
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i, c := range b.Seqs {
		if !c.WantLogits {
			continue
		}
		row := logits[i]
		clear(row)
		n := c.Pos + len(c.Tokens)
		next := fakeNext(c.Tokens[len(c.Tokens)-1], n)
		if f.eosAt > 0 && n == f.eosAt {
			next = f.eos
		}
		row[next] = 10
	}
	return nil
}

// fakeNext picks byte-level tokens of printable ASCII letters (ids 97..122
// are 'a'..'z' in a byte-level BPE whose first 256 ids are the bytes).
func fakeNext(last int32, n int) int32 { return int32(97 + (int(last)*7+n)%26) }

// expected is the greedy output of the fake for a prompt.
func expected(prompt []int32, k int) []int32 {
	last, n := prompt[len(prompt)-1], len(prompt)
	var out []int32
	for range k {
		t := fakeNext(last, n)
		out = append(out, t)
		last, n = t, n+1
	}
	return out
}

type env struct {
	url string
	s   *sched.Scheduler
	tok *tokenizer.Tokenizer
	be  *fakeBackend
}

var tokOnce struct {
	sync.Once
	tok *tokenizer.Tokenizer
	err error
}

func testTokenizer(t *testing.T) *tokenizer.Tokenizer {
	tokOnce.Do(func() {
		j, c, err := tokenizer.TrainDefault(512)
		if err != nil {
			tokOnce.err = err
			return
		}
		tokOnce.tok, tokOnce.err = tokenizer.Parse(j, c)
	})
	if tokOnce.err != nil {
		t.Fatal(tokOnce.err)
	}
	return tokOnce.tok
}

func newEnv(t *testing.T, be *fakeBackend, apiKey string) *env {
	t.Helper()
	return newEnvWith(t, be, testTokenizer(t), apiKey)
}

// newEnvWith is newEnv with the server given srvTok, a wrapper of the
// test tokenizer (env.tok, which sizes the vocabulary).
func newEnvWith(t *testing.T, be *fakeBackend, srvTok Tokenizer, apiKey string) *env {
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
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	srv, err := New(s, srvTok, Options{ModelID: modelID, APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		cancel()
		<-done
	})
	return &env{url: hs.URL, s: s, tok: tok, be: be}
}

func (e *env) client(opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append(clientOpts(e.url), opts...)...)
}

// clientOpts points an openai-go client at the server at url.
func clientOpts(url string) []option.RequestOption {
	return []option.RequestOption{option.WithBaseURL(url + "/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0)}
}

// waitNoBlocks waits for the scheduler to release every KV block (it frees
// a cancelled request at the next step boundary) and checks the pool.
func (e *env) waitNoBlocks(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.s.KV().Used() != 0 || e.s.Metrics().Running+e.s.Metrics().Waiting != 0 {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.s.KV().CheckLeaks(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenAIClientCompletions(t *testing.T) {
	e := newEnv(t, &fakeBackend{}, "")
	c := e.client()
	ctx := context.Background()
	prompt := "Hello there, general"
	ids := e.tok.Encode(prompt)
	want := e.tok.Decode(expected(ids, 12))

	resp, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:       modelID,
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens:   openai.Int(12),
		Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text != want || string(resp.Choices[0].FinishReason) != "length" {
		t.Fatalf("completion %+v, want text %q", resp.Choices, want)
	}
	if resp.Usage.PromptTokens != int64(len(ids)) || resp.Usage.CompletionTokens != 12 || resp.Usage.TotalTokens != int64(len(ids)+12) {
		t.Fatalf("usage %+v", resp.Usage)
	}

	stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:         modelID,
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens:     openai.Int(12),
		Temperature:   openai.Float(0),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var gotUsage bool
	finish := ""
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			text.WriteString(c.Text)
			if c.FinishReason != "" {
				finish = string(c.FinishReason)
			}
		}
		if ch.Usage.CompletionTokens > 0 {
			gotUsage = ch.Usage.CompletionTokens == 12 && ch.Usage.PromptTokens == int64(len(ids))
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != want || finish != "length" || !gotUsage {
		t.Fatalf("stream text %q finish %q usage %v; want %q length true", text.String(), finish, gotUsage, want)
	}
	e.waitNoBlocks(t)
}

func TestOpenAIClientChat(t *testing.T) {
	e := newEnv(t, &fakeBackend{}, "secret")
	c := e.client(option.WithAPIKey("secret"))
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say something.")}
	rendered, err := e.tok.ApplyChat([]tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Say something."}}, true)
	if err != nil {
		t.Fatal(err)
	}
	ids := e.tok.Encode(rendered)
	want := e.tok.Decode(expected(ids, 9))

	resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: modelID, Messages: msgs, MaxCompletionTokens: openai.Int(9), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != want || resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != 9 || resp.Usage.PromptTokens != int64(len(ids)) {
		t.Fatalf("chat %+v usage %+v, want %q", resp.Choices, resp.Usage, want)
	}

	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: modelID, Messages: msgs, MaxTokens: openai.Int(9), Temperature: openai.Float(0),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != want || acc.Choices[0].FinishReason != "length" || acc.Usage.CompletionTokens != 9 {
		t.Fatalf("streamed chat %+v usage %+v, want %q", acc.Choices, acc.Usage, want)
	}

	// Without the key: 401 as an OpenAI error.
	bad := e.client(option.WithAPIKey("wrong"))
	_, err = bad.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: modelID, Messages: msgs})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
		t.Fatalf("wrong key: %v", err)
	}
	e.waitNoBlocks(t)
}

func TestStopReasonsAndStopStrings(t *testing.T) {
	tok := testTokenizer(t)
	eos := tok.StopTokenIDs()[0]
	e := newEnv(t, &fakeBackend{eosAt: 0, eos: eos}, "")
	prompt := "abc"
	ids := e.tok.Encode(prompt)
	e.be.eosAt = len(ids) + 5 // the 6th generated token is EOS
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":50,"temperature":0}`, modelID, prompt)
	var out completionResponse
	post(t, e.url+"/v1/completions", body, 200, &out)
	if *out.Choices[0].FinishReason != "stop" || out.Usage.CompletionTokens != 6 || out.Choices[0].Text != e.tok.Decode(expected(ids, 5)) {
		t.Fatalf("eos: %+v %+v", out.Choices[0], out.Usage)
	}
	// ignore_eos keeps going to max_tokens.
	body = fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":8,"temperature":0,"ignore_eos":true}`, modelID, prompt)
	post(t, e.url+"/v1/completions", body, 200, &out)
	if *out.Choices[0].FinishReason != "length" || out.Usage.CompletionTokens != 8 {
		t.Fatalf("ignore_eos: %+v %+v", out.Choices[0], out.Usage)
	}
	// A stop string cuts the text before it, streamed or not.
	full := e.tok.Decode(expected(ids, 4))
	stop := full[2:4]
	for _, stream := range []bool{false, true} {
		body = fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":5,"temperature":0,"stop":[%q],"stream":%v}`, modelID, prompt, stop, stream)
		text, finish := completionText(t, e.url, body, stream)
		if !strings.HasPrefix(full, text) || strings.Contains(text, stop) || finish != "stop" || text != full[:strings.Index(full, stop)] {
			t.Fatalf("stream=%v stop %q: text %q finish %q (full %q)", stream, stop, text, finish, full)
		}
	}
	e.waitNoBlocks(t)
}

func completionText(t *testing.T, url, body string, stream bool) (string, string) {
	t.Helper()
	if !stream {
		var out completionResponse
		post(t, url+"/v1/completions", body, 200, &out)
		return out.Choices[0].Text, *out.Choices[0].FinishReason
	}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var text strings.Builder
	finish := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ch completionResponse
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatalf("bad SSE chunk %q: %v", line, err)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Text)
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	return text.String(), finish
}

func post(t *testing.T, url, body string, status int, out any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("POST %s %s: status %d, want %d: %s", url, body, resp.StatusCode, status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("response %s: %v", b, err)
		}
	}
}

func TestTextOutHoldsBackStopPrefixes(t *testing.T) {
	tok := testTokenizer(t)
	o := newTextOut(tok.NewStreamDecoder(), []string{"xyz"})
	var got strings.Builder
	for _, id := range tok.Encode("abcxy") {
		got.WriteString(o.push(id))
	}
	if got.String() != "abc" {
		t.Fatalf("emitted %q before a possible stop string, want \"abc\"", got.String())
	}
	got.WriteString(o.flush())
	if got.String() != "abcxy" || o.stopped {
		t.Fatalf("flush gave %q stopped %v", got.String(), o.stopped)
	}
}

// countingTok counts StopTokenIDs calls: the piece index it may build cost
// the first request ~5–10 ms while requests asked for it.
type countingTok struct {
	*tokenizer.Tokenizer
	stops atomic.Int32
}

func (c *countingTok) StopTokenIDs() []int32 {
	c.stops.Add(1)
	return c.Tokenizer.StopTokenIDs()
}

// TestStopTokensAskedOnce: New asks the tokenizer for its stop tokens once;
// requests, which still stop on them, never ask again.
func TestStopTokensAskedOnce(t *testing.T) {
	tok := &countingTok{Tokenizer: testTokenizer(t)}
	e := newEnvWith(t, &fakeBackend{eos: tok.Tokenizer.StopTokenIDs()[0]}, tok, "")
	if n := tok.stops.Load(); n != 1 {
		t.Fatalf("New asked for the stop tokens %d times, want 1", n)
	}
	ids := tok.Encode("abc")
	for i := range 3 {
		e.be.eosAt = len(ids) + 2 // the 3rd generated token is EOS
		body := fmt.Sprintf(`{"model":%q,"prompt":"abc","max_tokens":20,"temperature":0,"stream":%v}`, modelID, i%2 == 1)
		if text, finish := completionText(t, e.url, body, i%2 == 1); finish != "stop" {
			t.Fatalf("request %d: finish %q (text %q), want stop at EOS", i, finish, text)
		}
	}
	if n := tok.stops.Load(); n != 1 {
		t.Fatalf("after 3 requests the stop tokens were asked for %d times, want 1 (at New)", n)
	}
}
