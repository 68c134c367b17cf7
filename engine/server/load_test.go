package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
)

// Clients that go away mid-stream (closed connection or cancelled context)
// cancel their requests, and every KV block comes back.
func TestDisconnectFreesBlocks(t *testing.T) {
	// 25 ms a step gives every request ≥ 5 s of generation left after the
	// client's third event (≤ 246 tokens fit the context), so a client that
	// a loaded host runs late still hangs up mid-stream, never after the end.
	e := newEnv(t, &fakeBackend{delay: 25 * time.Millisecond}, "")
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Greedy: the fake model's argmax is always a letter, never a
			// stop token, so no request can end before its client hangs up
			// (sampled at the default temperature, one in a few thousand
			// steps drew a stop token and the request ended as "stop").
			path, body := "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"client %d says hello","max_tokens":200,"temperature":0,"stream":true}`, modelID, i)
			if i%2 == 1 {
				path, body = "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"client %d"}],"temperature":0,"stream":true}`, modelID, i)
			}
			req, _ := http.NewRequestWithContext(ctx, "POST", e.url+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			events := 0
			for events < 3 && sc.Scan() {
				if strings.HasPrefix(sc.Text(), "data: ") {
					events++
				}
			}
			if events < 3 {
				t.Errorf("client %d: stream ended after %d events", i, events)
			}
			// Half close the connection, half cancel the request.
			if i%3 == 0 {
				resp.Body.Close()
			} else {
				cancel()
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	e.waitNoBlocks(t)
	m := e.s.Metrics()
	if m.Requests["cancelled"] != 12 {
		t.Fatalf("finished requests %v, want 12 cancelled", m.Requests)
	}
}

// 64 concurrent streaming clients (the openai-go client) all finish with
// their full output, no error, and no leaked KV block.
func TestSixtyFourConcurrentStreams(t *testing.T) {
	e := newEnv(t, &fakeBackend{}, "")
	c := e.client()
	const clients, maxTok = 64, 24
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := fmt.Sprintf("request number %d asks", i)
			want := e.tok.Decode(expected(e.tok.Encode(prompt), maxTok))
			stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
				Model: modelID, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
				MaxTokens: openai.Int(maxTok), Temperature: openai.Float(0),
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			})
			var text strings.Builder
			var usage int64
			for stream.Next() {
				ch := stream.Current()
				for _, c := range ch.Choices {
					text.WriteString(c.Text)
				}
				usage += ch.Usage.CompletionTokens
			}
			if err := stream.Err(); err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
				return
			}
			if text.String() != want || usage != maxTok {
				errs <- fmt.Errorf("client %d: text %q usage %d, want %q %d", i, text.String(), usage, want, maxTok)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.waitNoBlocks(t)
	if m := e.s.Metrics(); m.GeneratedTokens != clients*maxTok || m.TTFT.Count != clients {
		t.Fatalf("metrics: generated %d ttft count %d", m.GeneratedTokens, m.TTFT.Count)
	}
}

func TestHealthModelsMetrics(t *testing.T) {
	e := newEnv(t, &fakeBackend{}, "")
	// Greedy: the counts below hold for a model that never emits a stop
	// token, which the fake guarantees only under argmax. Sampled at the
	// default temperature a request could stop early (about 1 run in 200
	// failed so).
	for range 3 {
		post(t, e.url+"/v1/completions", `{"model":"test-model","prompt":"hi","max_tokens":5,"temperature":0}`, 200, nil)
	}
	get := func(path string) string {
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	if h := get("/health"); !strings.Contains(h, "ok") {
		t.Fatalf("/health: %s", h)
	}
	if m := get("/v1/models"); !strings.Contains(m, `"id":"test-model"`) || !strings.Contains(m, `"max_model_len":256`) {
		t.Fatalf("/v1/models: %s", m)
	}
	// A response can reach the client a moment before the scheduler has
	// moved its finished sequence out of the running set.
	e.waitNoBlocks(t)
	text := get("/metrics")
	vals := parseProm(t, text)
	for name, want := range map[string]float64{
		`treni_kv_blocks_total{model_name="test-model"}`:                                 2048,
		`treni_kv_blocks_used{model_name="test-model"}`:                                  0,
		`treni_generation_tokens_total{model_name="test-model"}`:                         15,
		`treni_time_to_first_token_seconds_count{model_name="test-model"}`:               3,
		`treni_time_to_first_token_seconds_bucket{model_name="test-model",le="+Inf"}`:    3,
		`treni_inter_token_latency_seconds_count{model_name="test-model"}`:               12,
		`treni_num_requests_running{model_name="test-model"}`:                            0,
		`treni_request_finished_total{model_name="test-model",finished_reason="length"}`: 3,
	} {
		if got, ok := vals[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	// Buckets are cumulative.
	prev := -1.0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "treni_inter_token_latency_seconds_bucket") {
			v := vals[line[:strings.LastIndex(line, " ")]]
			if v < prev {
				t.Fatalf("bucket counts decrease at %s", line)
			}
			prev = v
		}
	}
}

// parseProm checks the exposition format line by line and returns
// sample → value.
func parseProm(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	typed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			if len(f) != 4 {
				t.Fatalf("bad TYPE line %q", line)
			}
			typed[f[2]] = true
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndex(line, " ")
		if i < 0 {
			t.Fatalf("bad sample line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad value in %q", line)
		}
		name := line[:i]
		base := name
		if j := strings.IndexByte(base, '{'); j >= 0 {
			base = base[:j]
		}
		base = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(base, "_bucket"), "_sum"), "_count")
		if !typed[base] {
			t.Fatalf("sample %q has no TYPE line before it", line)
		}
		out[name] = v
	}
	return out
}

// A repeated long prompt is served from the prefix cache: the response's
// usage says how many prompt tokens were cached (OpenAI's
// prompt_tokens_details.cached_tokens) and /metrics counts the hit.
func TestPrefixCacheInUsageAndMetrics(t *testing.T) {
	e := newEnv(t, &fakeBackend{}, "")
	prompt := strings.Repeat("the same long system prompt for every client; ", 6)
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":4}`, modelID, prompt)
	type resp struct {
		Text  string `json:"-"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	var first, second resp
	post(t, e.url+"/v1/completions", body, 200, &first)
	post(t, e.url+"/v1/completions", body, 200, &second)
	if first.Usage.Details == nil || first.Usage.Details.CachedTokens != 0 {
		t.Fatalf("first request: usage %+v, want 0 cached tokens reported", first.Usage)
	}
	n := second.Usage.PromptTokens
	if n < 16 || second.Usage.Details == nil || second.Usage.Details.CachedTokens < n-8 || second.Usage.Details.CachedTokens >= n {
		t.Fatalf("second request: %d prompt tokens, usage %+v; want all but the last block's worth cached", n, second.Usage.Details)
	}
	e.waitNoBlocks(t)
	resp2, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	b, _ := io.ReadAll(resp2.Body)
	vals := parseProm(t, string(b))
	hit := vals[`treni_prefix_cache_hit_tokens_total{model_name="test-model"}`]
	miss := vals[`treni_prefix_cache_miss_tokens_total{model_name="test-model"}`]
	if hit != float64(second.Usage.Details.CachedTokens) || hit+miss != float64(2*n) {
		t.Fatalf("metrics: hit %v miss %v, want %d hit of %d", hit, miss, second.Usage.Details.CachedTokens, 2*n)
	}
	if vals[`treni_prefix_cache_hit_blocks_total{model_name="test-model"}`] == 0 || vals[`treni_kv_blocks_cached{model_name="test-model"}`] == 0 {
		t.Fatalf("block metrics missing or zero:\n%s", b)
	}
}

// 64 concurrent streaming clients behind one long shared system prompt (the
// prefix cache's case) all get their full output, the cache is hit, and no
// KV block is left held.
func TestSixtyFourStreamsSharedPrefix(t *testing.T) {
	e := newEnv(t, &fakeBackend{}, "")
	c := e.client()
	const clients, maxTok = 64, 16
	system := strings.Repeat("You are a careful assistant who answers briefly. ", 3)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := fmt.Sprintf("%sQuestion %d?", system, i)
			want := e.tok.Decode(expected(e.tok.Encode(prompt), maxTok))
			stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
				Model: modelID, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
				MaxTokens: openai.Int(maxTok), Temperature: openai.Float(0),
			})
			var text strings.Builder
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					text.WriteString(ch.Text)
				}
			}
			if err := stream.Err(); err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
				return
			}
			if text.String() != want {
				errs <- fmt.Errorf("client %d: text %q, want %q", i, text.String(), want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.waitNoBlocks(t)
	if m := e.s.Metrics(); m.PrefixHitBlocks == 0 || m.GeneratedTokens != clients*maxTok {
		t.Fatalf("metrics: %d prefix blocks hit, %d tokens generated", m.PrefixHitBlocks, m.GeneratedTokens)
	}
}
