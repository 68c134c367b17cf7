package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
)

// TestContextFitsKVPool: with a KV pool smaller than the model's context
// (8 blocks × 8 positions), /v1/models advertises what the pool holds, a
// request whose prompt plus max_tokens cannot fit is refused up front in
// vLLM's words, and one that fits runs to its max_tokens.
func TestContextFitsKVPool(t *testing.T) {
	e := newEnv(t, &fakeBackend{blocks: 8}, "")
	resp, err := http.Get(e.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			MaxModelLen int `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].MaxModelLen != 64 {
		t.Fatalf("/v1/models: %+v, want max_model_len 64 (8 blocks × 8 positions)", models)
	}
	var out map[string]map[string]any
	post(t, e.url+"/v1/completions", `{"model":"test-model","prompt":[65,66],"max_tokens":1000}`, 400, &out)
	msg, _ := out["error"]["message"].(string)
	want := "This model's maximum context length is 64 tokens. However, you requested 1002 tokens (2 in the prompt, 1000 in the completion)."
	if !strings.HasPrefix(msg, want) || out["error"]["code"] != "context_length_exceeded" || out["error"]["param"] != "max_tokens" {
		t.Fatalf("max_tokens 1000 with a 64-token pool: %v; want %q", out, want)
	}
	c := e.client()
	r, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: modelID,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{65, 66}},
		MaxTokens: openai.Int(62), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.CompletionTokens != 62 || r.Choices[0].FinishReason != "length" {
		t.Fatalf("a request that fits the pool exactly: %d tokens, finish %q; want 62, length", r.Usage.CompletionTokens, r.Choices[0].FinishReason)
	}
	e.waitNoBlocks(t)
}

// TestSamplingProcessors: logit_bias, min_p and repetition_penalty reach
// the sampler through the OpenAI client (logit_bias {"100": 100} at
// temperature 0 makes token 100 win every step), and bad values are
// refused naming the parameter.
func TestSamplingProcessors(t *testing.T) {
	e := newEnv(t, &fakeBackend{}, "")
	c := e.client()
	ctx := context.Background()
	complete := func(p openai.CompletionNewParams, opts ...option.RequestOption) string {
		t.Helper()
		p.Model, p.MaxTokens = modelID, openai.Int(8)
		p.Prompt = openai.CompletionNewParamsPromptUnion{OfString: openai.String("Hello there")}
		r, err := c.Completions.New(ctx, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return r.Choices[0].Text
	}
	tok100 := e.tok.Decode([]int32{100})
	biased := complete(openai.CompletionNewParams{Temperature: openai.Float(0), LogitBias: map[string]int64{"100": 100}})
	if want := strings.Repeat(tok100, 8); biased != want {
		t.Fatalf("logit_bias {\"100\": 100} at temperature 0: %q, want token 100 (%q) every step", biased, tok100)
	}
	// Token 100 biased by 20 wins the first step; seen from then on, a
	// repetition penalty of 100 takes it down to 0.2 against the fake
	// model's next token at 10.
	pen := complete(openai.CompletionNewParams{Temperature: openai.Float(0), LogitBias: map[string]int64{"100": 20}}, option.WithJSONSet("repetition_penalty", 100))
	if !strings.HasPrefix(pen, tok100) || pen == biased {
		t.Fatalf("logit_bias 20 on token 100 with repetition_penalty 100: %q; want %q first, then other tokens", pen, tok100)
	}
	// The fake model puts logit 10 on its next token and 0 on the rest;
	// token 100 biased to 9.5 is e^-0.5 = 0.61 as likely as it, below
	// min_p 0.7: sampling at temperature 1 then gives the greedy output,
	// where without min_p token 100 would be drawn 4 times in 10.
	minp := func(v float64) string {
		return complete(openai.CompletionNewParams{Temperature: openai.Float(1), Seed: openai.Int(3)},
			option.WithJSONSet("logit_bias", map[string]float64{"100": 9.5}), option.WithJSONSet("min_p", v))
	}
	greedy := e.tok.Decode(expected(e.tok.Encode("Hello there"), 8))
	if got := minp(0.7); got != greedy {
		t.Fatalf("min_p 0.7 at temperature 1: %q, want the greedy %q", got, greedy)
	}
	if got := minp(0); got == greedy {
		t.Fatalf("without min_p, token 100 at 0.61 of the top token's probability was never drawn in 8 steps (%q): the check above proves nothing", got)
	}
	for _, bad := range []struct{ body, param, msg string }{
		{`"logit_bias":{"x":1}`, "logit_bias", "token ids"},
		{`"logit_bias":{"999999":1}`, "logit_bias", "out-of-vocab token ids. Vocabulary size"},
		{`"logit_bias":{"5":"a"}`, "logit_bias", ""},
		{`"min_p":1.5`, "min_p", "[0, 1]"},
		{`"repetition_penalty":0`, "repetition_penalty", "greater than zero"},
		{`"repetition_penalty":-1`, "repetition_penalty", "greater than zero"},
	} {
		var out map[string]map[string]any
		post(t, e.url+"/v1/completions", `{"model":"test-model","prompt":"hi",`+bad.body+`}`, 400, &out)
		if msg, _ := out["error"]["message"].(string); out["error"]["param"] != bad.param || !strings.Contains(msg, bad.msg) {
			t.Errorf("%s: %v; want param %q and %q in the message", bad.body, out, bad.param, bad.msg)
		}
	}
	e.waitNoBlocks(t)
}
