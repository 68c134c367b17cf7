package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/trace"
)

// client talks to one served engine with an API key.
type client struct {
	t    *testing.T
	base string
	key  string
}

// do sends method path with body (may be empty) and returns the status,
// the headers and the decoded JSON body.
func (c client) do(method, path, body string) (int, http.Header, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if len(raw) > 0 && json.Unmarshal(raw, &v) != nil {
		c.t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, resp.Header, v
}

// greedy is a greedy completion's text (fails the test unless 200).
func (c client) greedy() string {
	c.t.Helper()
	code, _, v := c.do("POST", "/v1/completions", `{"model":"tiny","prompt":"hello there, sleepy","max_tokens":12,"temperature":0,"ignore_eos":true}`)
	if code != 200 {
		c.t.Fatalf("completion: %d %v", code, v)
	}
	return v["choices"].([]any)[0].(map[string]any)["text"].(string)
}

// expect asserts a sleep-endpoint answer: status and is_sleeping.
func (c client) expect(method, path string, code int, sleeping bool) map[string]any {
	c.t.Helper()
	got, _, v := c.do(method, path, "")
	if got != code || (code == 200 && v["is_sleeping"] != sleeping) {
		c.t.Fatalf("%s %s: %d %v; want %d, is_sleeping %v", method, path, got, v, code, sleeping)
	}
	return v
}

// stageLines are the stage lines in a serve's stderr, by stage.
func stageLines(t *testing.T, stderr string) map[trace.Stage][]trace.StageLine {
	t.Helper()
	out := map[trace.Stage][]trace.StageLine{}
	for _, line := range strings.Split(stderr, "\n") {
		if l, err := trace.ParseStageLine(line); err == nil {
			out[l.Stage] = append(out[l.Stage], l)
		}
	}
	return out
}

// TestSleepModeEndpoints drives vLLM's sleep endpoints on the CPU backend,
// for both load modes: both levels round-trip with the same greedy text;
// requests while asleep are refused with 503 and Retry-After; a sleep while
// asleep and a wake while awake change nothing; tags wake part of the
// engine; the endpoints sit behind the API key; and each sleep and wake
// reports its stage lines, the first request after each wake its own
// first_request.
func TestSleepModeEndpoints(t *testing.T) {
	dir := tinyModel(t)
	for _, load := range []string{model.LoadMmap, model.LoadCopy} {
		t.Run(load, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addr, done, stderr := startRun(ctx, t, Options{ModelDir: dir, Device: "cpu", KVBlocks: 64, Load: load, APIKey: "k", TokenizerCacheDir: "-", EnableSleepMode: true})
			c := client{t: t, base: "http://" + addr, key: "k"}
			want := c.greedy()

			if code, _, _ := (client{t: t, base: c.base}).do("POST", "/sleep?level=1", ""); code != 401 {
				t.Fatalf("POST /sleep without the API key: %d, want 401", code)
			}
			c.expect("GET", "/is_sleeping", 200, false)
			c.expect("GET", "/sleep", 405, false)
			c.expect("POST", "/sleep?level=3", 400, false)
			c.expect("POST", "/sleep?mode=keep", 400, false)
			if v := c.expect("POST", "/wake_up", 200, false); v["note"] == nil {
				t.Fatalf("a wake while awake says nothing: %v", v)
			}

			for _, level := range []int{1, 2} {
				lv := strconv.Itoa(level)
				if v := c.expect("POST", "/sleep?level="+lv, 200, true); v["level"] != float64(level) {
					t.Fatalf("sleep: %v", v)
				}
				// Sleeping twice changes nothing, whatever the level.
				if v := c.expect("POST", "/sleep?level="+strconv.Itoa(3-level), 200, true); v["level"] != float64(level) || v["note"] == nil {
					t.Fatalf("a second sleep: %v, want level %d kept and a note", v, level)
				}
				code, h, v := c.do("POST", "/v1/completions", `{"model":"tiny","prompt":"hi","max_tokens":2}`)
				if ra, _ := strconv.Atoi(h.Get("Retry-After")); code != 503 || ra < 1 || v["error"].(map[string]any)["code"] != "engine_asleep" {
					t.Fatalf("a completion while asleep: %d Retry-After %q %v", code, h.Get("Retry-After"), v)
				}
				if code, _, _ := c.do("GET", "/v1/models", ""); code != 200 {
					t.Fatalf("/v1/models while asleep: %d", code)
				}
				c.expect("POST", "/wake_up?tags=everything", 400, true)
				if v := c.expect("POST", "/wake_up?tags=kv_cache", 200, true); !equalJSON(v["sleeping_tags"], []any{"weights"}) {
					t.Fatalf("after waking the KV cache only: %v", v)
				}
				if code, _, _ := c.do("POST", "/v1/completions", `{"model":"tiny","prompt":"hi","max_tokens":2}`); code != 503 {
					t.Fatalf("a completion with the weights asleep: %d, want 503", code)
				}
				if v := c.expect("POST", "/wake_up", 200, false); !equalJSON(v["woken_tags"], []any{"weights"}) {
					t.Fatalf("wake: %v", v)
				}
				if got := c.greedy(); got != want {
					t.Fatalf("level %d: greedy text after the wake %q, before the sleep %q", level, got, want)
				}
			}
			mresp, err := http.Get(c.base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(mresp.Body)
			mresp.Body.Close()
			if !strings.Contains(string(metrics), `treni_engine_sleep_state{model_name="tiny",sleep_state="awake"} 1`) {
				t.Fatalf("/metrics does not say awake:\n%s", metrics)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			st := stageLines(t, stderr.String())
			if len(st[trace.StageSleep]) != 2 || len(st[trace.StageWeightsRestore]) != 2 || len(st[trace.StageFirstRequest]) != 3 {
				t.Fatalf("%d sleep, %d weights_restore and %d first_request stage lines, want 2, 2 and 3:\n%s",
					len(st[trace.StageSleep]), len(st[trace.StageWeightsRestore]), len(st[trace.StageFirstRequest]), stderr.String())
			}
			// The startup's kv_alloc and one a wake.
			if n := len(st[trace.StageKVAlloc]); n != 3 {
				t.Fatalf("%d kv_alloc stage lines, want 3", n)
			}
			for i, l := range st[trace.StageSleep] {
				if l.Attrs["level"] != float64(i+1) {
					t.Fatalf("sleep line %d: %v", i, l.Attrs)
				}
			}
			if r := st[trace.StageWeightsRestore][1]; r.Attrs["from"] != "files" || r.Attrs["load"] != load {
				t.Fatalf("the level-2 weights_restore: %v", r.Attrs)
			}
		})
	}
}

// TestWakeOnRequest: with --wake-on-request the first request after a
// sleep wakes the engine and is served, the same greedy text as before,
// and its first_request stage holds the wake (it starts before the
// weights_restore and ends after the kv_alloc).
func TestWakeOnRequest(t *testing.T) {
	dir := tinyModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, stderr := startRun(ctx, t, Options{ModelDir: dir, Device: "cpu", KVBlocks: 64, TokenizerCacheDir: "-", EnableSleepMode: true, WakeOnRequest: true})
	c := client{t: t, base: "http://" + addr}
	want := c.greedy()
	c.expect("POST", "/sleep?level=2", 200, true)
	// A streamed request, as a serverless client sends it.
	resp, err := http.Post(c.base+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tiny","prompt":"hello there, sleepy","max_tokens":12,"temperature":0,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		for _, ch := range chunk.Choices {
			text.WriteString(ch.Text)
		}
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || text.String() != want {
		t.Fatalf("the waking request: %d %q, want %q", resp.StatusCode, text.String(), want)
	}
	c.expect("GET", "/is_sleeping", 200, false)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := stageLines(t, stderr.String())
	if len(st[trace.StageFirstRequest]) != 2 || len(st[trace.StageWeightsRestore]) != 1 {
		t.Fatalf("stage lines: %d first_request, %d weights_restore; want 2 and 1:\n%s", len(st[trace.StageFirstRequest]), len(st[trace.StageWeightsRestore]), stderr.String())
	}
	first, restore, kv := st[trace.StageFirstRequest][1], st[trace.StageWeightsRestore][0], st[trace.StageKVAlloc][len(st[trace.StageKVAlloc])-1]
	if first.StartNS > restore.StartNS || first.EndNS < kv.EndNS {
		t.Fatalf("first_request [%d, %d] does not hold the wake (weights_restore from %d, kv_alloc to %d)", first.StartNS, first.EndNS, restore.StartNS, kv.EndNS)
	}
}

// equalJSON compares a decoded JSON value with want.
func equalJSON(got any, want []any) bool {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	return string(g) == string(w)
}
