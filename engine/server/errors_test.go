package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestInvalidRequests checks that each kind of bad request gets a 4xx with
// an OpenAI-style error object naming the offending parameter.
func TestInvalidRequests(t *testing.T) {
	e := newEnv(t, &fakeBackend{}, "")
	long := strings.Repeat("hello world ", ctxLen)
	longIDs := make([]string, ctxLen+5)
	for i := range longIDs {
		longIDs[i] = "65"
	}
	cases := []struct {
		name, path, body string
		status           int
		param, code      string
	}{
		{"malformed json", "/v1/completions", `{"model":`, 400, "", "invalid_json"},
		{"not an object", "/v1/completions", `[1,2]`, 400, "", "invalid_type"},
		{"trailing garbage", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":"hi"}]} x`, 400, "", "invalid_json"},
		{"unknown model", "/v1/completions", `{"model":"gpt-9","prompt":"hi"}`, 404, "model", "model_not_found"},
		{"missing model", "/v1/completions", `{"prompt":"hi"}`, 400, "model", "missing_required_parameter"},
		{"negative max_tokens", "/v1/completions", `{"model":"test-model","prompt":"hi","max_tokens":-1}`, 400, "max_tokens", "invalid_value"},
		{"zero max_tokens", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "max_tokens", "invalid_value"},
		{"huge max_tokens", "/v1/completions", `{"model":"test-model","prompt":"hi","max_tokens":1000000000}`, 400, "max_tokens", "context_length_exceeded"},
		{"max_tokens beyond int", "/v1/completions", `{"model":"test-model","prompt":"hi","max_tokens":1e30}`, 400, "max_tokens", "invalid_type"},
		{"huge max_completion_tokens", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":99999}`, 400, "max_completion_tokens", "context_length_exceeded"},
		{"prompt longer than context", "/v1/completions", fmt.Sprintf(`{"model":"test-model","prompt":%q}`, long), 400, "prompt", "context_length_exceeded"},
		{"token prompt longer than context", "/v1/completions", `{"model":"test-model","prompt":[` + strings.Join(longIDs, ",") + `]}`, 400, "prompt", "context_length_exceeded"},
		{"chat longer than context", "/v1/chat/completions", fmt.Sprintf(`{"model":"test-model","messages":[{"role":"user","content":%q}]}`, long), 400, "messages", "context_length_exceeded"},
		{"max_tokens as string", "/v1/completions", `{"model":"test-model","prompt":"hi","max_tokens":"ten"}`, 400, "max_tokens", "invalid_type"},
		{"max_tokens as float", "/v1/completions", `{"model":"test-model","prompt":"hi","max_tokens":2.5}`, 400, "max_tokens", "invalid_type"},
		{"temperature as string", "/v1/completions", `{"model":"test-model","prompt":"hi","temperature":"hot"}`, 400, "temperature", "invalid_type"},
		{"stream as string", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, 400, "stream", "invalid_type"},
		{"model as number", "/v1/completions", `{"model":7,"prompt":"hi"}`, 400, "model", "invalid_type"},
		{"messages as string", "/v1/chat/completions", `{"model":"test-model","messages":"hi"}`, 400, "messages", "invalid_type"},
		{"content as number", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", "invalid_type"},
		{"prompt as object", "/v1/completions", `{"model":"test-model","prompt":{"a":1}}`, 400, "prompt", "invalid_type"},
		{"stop as number", "/v1/completions", `{"model":"test-model","prompt":"hi","stop":5}`, 400, "stop", "invalid_type"},
		{"empty messages", "/v1/chat/completions", `{"model":"test-model","messages":[]}`, 400, "messages", "missing_required_parameter"},
		{"bad role", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role", "invalid_value"},
		{"n=2", "/v1/completions", `{"model":"test-model","prompt":"hi","n":2}`, 400, "n", "invalid_value"},
		{"temperature out of range", "/v1/completions", `{"model":"test-model","prompt":"hi","temperature":5}`, 400, "temperature", "invalid_value"},
		{"top_p zero", "/v1/completions", `{"model":"test-model","prompt":"hi","top_p":0}`, 400, "top_p", "invalid_value"},
		{"token out of vocab", "/v1/completions", `{"model":"test-model","prompt":[1,999999]}`, 400, "", "invalid_value"},
		{"stream_options without stream", "/v1/completions", `{"model":"test-model","prompt":"hi","stream_options":{"include_usage":true}}`, 400, "stream_options", "invalid_value"},
		{"GET on completions", "/v1/completions", "", 405, "", "method_not_allowed"},
		{"unknown route", "/v2/nothing", "", 404, "", "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var resp *http.Response
			var err error
			if c.body == "" {
				resp, err = http.Get(e.url + c.path)
			} else {
				resp, err = http.Post(e.url+c.path, "application/json", strings.NewReader(c.body))
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, b)
			}
			var env map[string]map[string]json.RawMessage
			if err := json.Unmarshal(b, &env); err != nil {
				t.Fatalf("error body is not JSON: %s", b)
			}
			obj := env["error"]
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := obj[k]; !ok {
					t.Fatalf("error object lacks %q: %s", k, b)
				}
			}
			var msg, param, code string
			_ = json.Unmarshal(obj["message"], &msg)
			_ = json.Unmarshal(obj["param"], &param)
			_ = json.Unmarshal(obj["code"], &code)
			if msg == "" || param != c.param || code != c.code {
				t.Fatalf("error param %q code %q (want %q %q): %s", param, code, c.param, c.code, b)
			}
		})
	}
	e.waitNoBlocks(t)
}
