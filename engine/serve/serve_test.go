package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/engine/cuda"
	"github.com/treni-top/treni-top/engine/model/synth"
	"github.com/treni-top/treni-top/engine/tokenizer"
	"github.com/treni-top/treni-top/trace"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes Run makes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tinyModel(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(context.Background(), synth.Options{Arch: "qwen3", Preset: synth.PresetTiny, OutDir: dir, Seed: 5, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startRun runs Run with o until ctx ends (Addr 127.0.0.1:0; Stderr and
// Ready set here) and returns, once the server answers, its address, the
// channel Run's result arrives on and what it wrote to stderr.
func startRun(ctx context.Context, t *testing.T, o Options) (string, <-chan error, *syncBuffer) {
	t.Helper()
	var stderr syncBuffer
	ready := make(chan string, 1)
	done := make(chan error, 1)
	o.Addr, o.Stderr, o.Ready = "127.0.0.1:0", &stderr, func(a string) { ready <- a }
	go func() { done <- Run(ctx, o) }()
	select {
	case addr := <-ready:
		return addr, done, &stderr
	case err := <-done:
		t.Fatalf("Run (device %q, load %q) ended before ready: %v\n%s", o.Device, o.Load, err, stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("Run (device %q, load %q): not ready after a minute", o.Device, o.Load)
	}
	return "", nil, nil
}

func TestRunInProcess(t *testing.T) {
	dir := tinyModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, stderr := startRun(ctx, t, Options{ModelDir: dir, KVBlocks: 64, KVTouchGiB: 0.01, WarmupPasses: 2, TokenizerCacheDir: "-", APIKey: "k"})
	// Greedy, so that the three tokens asserted below do not depend on a
	// draw that could land on a stop token (the server's default
	// temperature is 1).
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0}`))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"completion_tokens":3`) {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	var kv, first, tokLoad trace.StageLine
	for _, line := range strings.Split(stderr.String(), "\n") {
		if l, err := trace.ParseStageLine(line); err == nil {
			switch l.Stage {
			case trace.StageTokenizerLoad:
				tokLoad = l
			case trace.StageKVAlloc:
				kv = l
			case trace.StageFirstRequest:
				first = l
			}
		}
	}
	if first.Stage == "" || first.EndNS <= first.StartNS || first.Attrs["prompt_tokens"] == nil {
		t.Fatalf("no first_request stage line for the first request:\n%s", stderr.String())
	}
	// The stop tokens are worked out while loading, not on the first
	// request (the piece index they need took it ~5–10 ms).
	if n, _ := tokLoad.Attrs["stop_tokens"].(float64); n < 1 {
		t.Fatalf("tokenizer_load attrs %v, want stop_tokens ≥ 1", tokLoad.Attrs)
	}
	gib := 0.01
	if kv.Attrs["touched_bytes"] != float64(int64(gib*(1<<30))) {
		t.Fatalf("kv_alloc attrs %v, want the touched pool reported", kv.Attrs)
	}
	// With --device auto the device is decided at the backend: kv_alloc
	// names it, for the diagnosis (here no CUDA driver: the CPU).
	if kv.Attrs["backend"] != "cpu" {
		t.Fatalf("kv_alloc attrs %v, want backend cpu", kv.Attrs)
	}
	if !strings.Contains(stderr.String(), "device auto") {
		t.Fatalf("auto device choice not logged:\n%s", stderr.String())
	}
	// No budget given: the CPU backend's default, said in the serving
	// line; the context is what 64 blocks of 16 hold, not the model's 4096.
	if want := fmt.Sprintf("on cpu: 64 KV blocks × 16 positions, context 1024, max batch 16, %d tokens a step", DefaultBatchedTokens("cpu")); !strings.Contains(stderr.String(), want) {
		t.Fatalf("serving line does not say %q:\n%s", want, stderr.String())
	}
	if want := "context 1024 instead of 4096: the KV pool of 64 blocks × 16 positions holds no more"; !strings.Contains(stderr.String(), want) {
		t.Fatalf("the shortened context is not explained (%q):\n%s", want, stderr.String())
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{ModelDir: "x", Device: "cuda"},
		{ModelDir: "x", Device: "tpu"},
		{ModelDir: "x", Device: "cpu", WarmupPasses: -1},
		{ModelDir: "x", Device: "cpu", KVTouchGiB: -2},
		{ModelDir: "x", Device: "cpu", MaxBatchedTokens: -1},
		{ModelDir: "x", Device: "cpu", BodyTimeout: -time.Second},
		{ModelDir: "x", Device: "cpu", MaxConnections: -1},
		{ModelDir: filepath.Join(t.TempDir(), "missing"), Device: "cpu"},
	} {
		o.Stderr = io.Discard
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) succeeded", o)
		}
	}
	// 1000 GiB is more than 90% of what any machine this runs on has
	// available: refused in one line before anything loads (TestCheckTouch
	// has the rule), where it crashed the Go runtime.
	err := Run(context.Background(), Options{ModelDir: t.TempDir(), Device: "cpu", KVTouchGiB: 1000, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "--kv-touch-gib 1000: 1000.0 GiB is more than 90% of the") {
		t.Errorf("--kv-touch-gib 1000: %v", err)
	}
}

// TestContextLength: --max-model-len may raise the context above the
// default cap up to the model's own limit, and is refused beyond it.
func TestContextLength(t *testing.T) {
	for _, c := range []struct {
		model, asked, want int
		err                bool
	}{
		{40960, 0, 8192, false},
		{4096, 0, 4096, false},
		{0, 0, 8192, false},
		{40960, 20480, 20480, false},
		{40960, 1024, 1024, false},
		{4096, 8192, 0, true},
		{0, 16384, 16384, false},
	} {
		got, err := contextLength(c.model, c.asked)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("contextLength(%d, %d) = %d, %v; want %d (error %v)", c.model, c.asked, got, err, c.want, c.err)
		}
	}
}

// TestRunLoadCopy: --load copy on the CPU backend reads the weights into the
// engine's memory as the decoder_tensor_upload stage (after a page_cache
// stage that only checks residency), the served tokens are the same as
// with the mapped weights, and an unknown mode is refused before loading.
func TestRunLoadCopy(t *testing.T) {
	dir := tinyModel(t)
	complete := func(load string) (string, string) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		addr, done, stderr := startRun(ctx, t, Options{ModelDir: dir, Device: "cpu", KVBlocks: 64, Load: load, MaxBatchedTokens: 40, TokenizerCacheDir: "-"})
		resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"tiny","prompt":"hello there","max_tokens":6,"temperature":0}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("--load %s: %d %s", load, resp.StatusCode, b)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("--load %s: Run: %v", load, err)
		}
		var text struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &text); err != nil || len(text.Choices) != 1 {
			t.Fatalf("--load %s: %v %s", load, err, b)
		}
		return text.Choices[0].Text, stderr.String()
	}
	mapped, _ := complete("mmap")
	copied, log := complete("copy")
	if !strings.Contains(log, "40 tokens a step") {
		t.Errorf("the budget asked for (40) is not the one served with:\n%s", log)
	}
	if copied != mapped {
		t.Errorf("greedy text with --load copy %q differs from --load mmap %q", copied, mapped)
	}
	var pc, up trace.StageLine
	for _, line := range strings.Split(log, "\n") {
		if l, err := trace.ParseStageLine(line); err == nil {
			switch l.Stage {
			case trace.StagePageCache:
				pc = l
			case trace.StageDecoderTensorUpload:
				up = l
			}
		}
	}
	if up.Stage == "" || up.Attrs["mode"] != "copy" || up.Attrs["device"] != "host" {
		t.Fatalf("no decoder_tensor_upload stage of mode copy:\n%s", log)
	}
	if b, _ := up.Attrs["bytes"].(float64); b <= 0 || pc.Attrs["resident_bytes"] == nil || up.StartNS != pc.EndNS {
		t.Errorf("page_cache %v then decoder_tensor_upload %v: want residency checked, then the copy", pc, up)
	}
	err := Run(context.Background(), Options{ModelDir: dir, Device: "cpu", Load: "direct", Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "--load") {
		t.Errorf("--load direct: %v, want an error naming --load", err)
	}
}

// TestShutdownClosesFreshConnections: a connection that never sent a
// request (an HTTP client's spare dial) does not hold up the server's
// exit. net/http's Shutdown waits 5 s for such a connection; Run closes
// it at once, so it returns well inside that.
func TestShutdownClosesFreshConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, _ := startRun(ctx, t, Options{ModelDir: tinyModel(t), KVBlocks: 64, TokenizerCacheDir: "-"})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The server has accepted it once a request on another connection
	// has been answered after the dial (one listener, accepted in order).
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("Run did not return within 4 s of its context's end with a connection that sent no request open (net/http waits 5 s for one)")
	}
	// The connection was closed by the server: a read ends.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the fresh connection is still open after Run returned")
	}
}

// TestRunContextFitsKVPool: with --kv-blocks 8 (128 positions) the served
// context is what the pool holds: /v1/models says so, max_tokens 1000 is
// refused up front (it used to stop silently at 126 tokens with
// finish_reason length), and --max-model-len beyond the pool is refused
// at start, as vLLM refuses it.
func TestRunContextFitsKVPool(t *testing.T) {
	dir := tinyModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, _ := startRun(ctx, t, Options{ModelDir: dir, Device: "cpu", KVBlocks: 8, TokenizerCacheDir: "-"})
	resp, err := http.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"max_model_len":128`) {
		t.Fatalf("/v1/models with 8 KV blocks of 16: %s, want max_model_len 128", b)
	}
	resp, err = http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"model":"tiny","prompt":[1,2],"max_tokens":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "This model's maximum context length is 128 tokens. However, you requested 1002 tokens (2 in the prompt, 1000 in the completion).") {
		t.Fatalf("max_tokens 1000 with a 128-position pool: %d %s", resp.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), Options{ModelDir: dir, Device: "cpu", KVBlocks: 8, MaxSeqLen: 512, Stderr: io.Discard, TokenizerCacheDir: "-"})
	if err == nil || !strings.Contains(err.Error(), "--max-model-len 512 is longer than the KV pool holds") {
		t.Fatalf("--max-model-len 512 with a 128-position pool: %v", err)
	}
}

// TestRunLogitBiasOnCPU: logit_bias {"100": 100} at temperature 0 makes
// token 100 win every step on the real CPU backend (which chooses tokens
// itself, like the CUDA one: the scheduler draws this request on the host).
func TestRunLogitBiasOnCPU(t *testing.T) {
	dir := tinyModel(t)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, _ := startRun(ctx, t, Options{ModelDir: dir, Device: "cpu", KVBlocks: 64, TokenizerCacheDir: "-"})
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tiny","prompt":"hello there","max_tokens":6,"temperature":0,"logit_bias":{"100":100},"ignore_eos":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || len(out.Choices) != 1 {
		t.Fatalf("%d: %v %+v", resp.StatusCode, err, out)
	}
	if want := tok.Decode([]int32{100, 100, 100, 100, 100, 100}); out.Choices[0].Text != want {
		t.Fatalf("logit_bias {\"100\": 100} at temperature 0: %q, want token 100 six times (%q)", out.Choices[0].Text, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunStoppedWhileLoading: a context that ends (SIGTERM, Ctrl-C) while
// the checkpoint loads makes Run return, saying so, instead of serving or
// hanging.
func TestRunStoppedWhileLoading(t *testing.T) {
	dir := tinyModel(t)
	for _, load := range []string{"mmap", "copy"} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := Run(ctx, Options{ModelDir: dir, Device: "cpu", Load: load, Stderr: io.Discard, TokenizerCacheDir: "-"})
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped while loading") {
			t.Errorf("--load %s, stopped before loading: %v, want context.Canceled and \"stopped while loading\"", load, err)
		}
	}
}

// TestCPUFallbackNote: a machine without an NVIDIA driver gets one short
// line (it used to be the driver loader's ~400-character list of every
// path it tried); any other CUDA failure keeps its cause.
func TestCPUFallbackNote(t *testing.T) {
	noDriver := fmt.Errorf("%w (tried libcuda.so.1, /usr/lib/x86_64-linux-gnu/libcuda.so.1, /usr/lib64/libcuda.so.1; install the NVIDIA driver): not found", cuda.ErrNoDriver)
	if n := cpuFallbackNote(noDriver); len(n) > 120 || strings.Contains(n, "tried") || !strings.Contains(n, "serving on the CPU") {
		t.Errorf("no driver: %q (%d bytes), want one short line", n, len(n))
	}
	other := errors.New("cuCtxCreate: CUDA_ERROR_OUT_OF_MEMORY")
	if n := cpuFallbackNote(other); !strings.Contains(n, other.Error()) || !strings.Contains(n, "serving on the CPU") {
		t.Errorf("driver present, context failed: %q should name the cause", n)
	}
}
