package load

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/treni-top/treni-top/probe/netstamp"
	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/trace"
)

func corpus(t testing.TB) *Corpus {
	t.Helper()
	c, err := DefaultCorpus()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBuiltinWorkloadsMatchTheLog(t *testing.T) {
	want := map[string]struct {
		n        int
		arrival  Arrival
		maxTok   Range
		describe string
	}{
		"baseline":            {10, Arrival{Pattern: Sequential}, Fixed(256), "256"},
		"continuous_batching": {32, Arrival{Pattern: Uniform, Rate: 4}, Range{64, 256}, "[64, 512]"},
		"paged_attention":     {48, Arrival{Pattern: Burst}, Range{128, 256}, "[128, 384]"},
		"chunked_prefill":     {48, Arrival{Pattern: Poisson, Rate: 6}, Range{64, 256}, "75% [1024, 2048] + 25% [64, 128]"},
		"prefix_caching":      {48, Arrival{Pattern: Uniform, Rate: 8}, Fixed(256), "1024 shared prefix + [32, 128] suffix"},
	}
	specs := Builtin()
	if len(specs) != len(want) {
		t.Fatalf("%d workloads, want %d", len(specs), len(want))
	}
	for _, s := range specs {
		w, ok := want[s.Name]
		if !ok {
			t.Fatalf("unexpected workload %s", s.Name)
		}
		if s.Requests != w.n || s.Arrival != w.arrival || s.MaxTokens != w.maxTok || s.PromptDescription() != w.describe {
			t.Errorf("%s = %d %v %v %q, want %d %v %v %q", s.Name, s.Requests, s.Arrival, s.MaxTokens, s.PromptDescription(), w.n, w.arrival, w.maxTok, w.describe)
		}
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "baseline") {
		t.Errorf("Lookup(nope) = %v, want an error listing the workloads", err)
	}
}

func TestGenerateLengthsAndArrivals(t *testing.T) {
	c := corpus(t)
	for _, s := range Builtin() {
		items, err := s.Generate(DefaultSeed, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != s.Requests {
			t.Fatalf("%s: %d items, want %d", s.Name, len(items), s.Requests)
		}
		long := 0
		for i, it := range items {
			if it.MaxTokens < s.MaxTokens.Min || it.MaxTokens > s.MaxTokens.Max {
				t.Errorf("%s[%d]: max_tokens %d outside %s", s.Name, i, it.MaxTokens, s.MaxTokens)
			}
			suffix := it.PromptTokens - s.SharedPrefixTokens
			lo, hi := s.PromptTokens.Min, s.PromptTokens.Max
			if len(s.PromptMix) > 0 {
				lo, hi = 64, 2048
				if suffix >= 1024 {
					long++
				}
			}
			if suffix < lo || suffix > hi {
				t.Errorf("%s[%d]: prompt %d tokens outside [%d, %d]", s.Name, i, suffix, lo, hi)
			}
			// ~4 characters per token, cut at a word boundary.
			chars := float64(len(it.Prompt)) / CharsPerToken
			if math.Abs(chars-float64(it.PromptTokens)) > 0.05*float64(it.PromptTokens)+8 {
				t.Errorf("%s[%d]: prompt of %d chars for %d tokens", s.Name, i, len(it.Prompt), it.PromptTokens)
			}
			switch s.Arrival.Pattern {
			case Sequential, Burst:
				if it.At != 0 {
					t.Errorf("%s[%d] at %v, want 0", s.Name, i, it.At)
				}
			case Uniform:
				if want := time.Duration(float64(i) / s.Arrival.Rate * float64(time.Second)); it.At != want {
					t.Errorf("%s[%d] at %v, want %v", s.Name, i, it.At, want)
				}
			case Poisson:
				if i > 0 && it.At < items[i-1].At {
					t.Errorf("%s[%d] arrives before its predecessor", s.Name, i)
				}
			}
		}
		if s.Name == "chunked_prefill" && long != 36 {
			t.Errorf("chunked_prefill: %d long prompts, want exactly 36 of 48 (75%%)", long)
		}
		if s.Name == "prefix_caching" {
			p0 := items[0].Prompt[:1024*CharsPerToken]
			for i, it := range items {
				if !strings.HasPrefix(it.Prompt, p0) {
					t.Fatalf("prefix_caching[%d] does not share the prefix", i)
				}
			}
			if items[0].Prompt == items[1].Prompt {
				t.Error("prefix_caching suffixes are identical")
			}
		}
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	c := corpus(t)
	s, _ := Lookup("chunked_prefill")
	a, _ := s.Generate(42, c)
	b, _ := s.Generate(42, c)
	d, _ := s.Generate(43, c)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 42 gave two different runs at %d", i)
		}
		same = same && a[i] == d[i]
	}
	if same {
		t.Fatal("seeds 42 and 43 gave the same run")
	}
}

func TestPoissonMeanRate(t *testing.T) {
	c, _ := NewCorpus(strings.Repeat("A short sentence for the corpus. ", 10))
	for _, rate := range []float64{1, 6, 100} {
		s := Spec{Name: "p", Requests: 20000, PromptTokens: Fixed(1), MaxTokens: Fixed(1), Arrival: Arrival{Pattern: Poisson, Rate: rate}}
		items, err := s.Generate(DefaultSeed, c)
		if err != nil {
			t.Fatal(err)
		}
		got := float64(len(items)-1) / items[len(items)-1].At.Seconds()
		if math.Abs(got-rate)/rate > 0.03 {
			t.Errorf("Poisson %g RPS: mean rate %.3f", rate, got)
		}
		// Exponential gaps: the coefficient of variation is 1.
		var sum, sq float64
		for i := 1; i < len(items); i++ {
			g := (items[i].At - items[i-1].At).Seconds()
			sum += g
			sq += g * g
		}
		n := float64(len(items) - 1)
		mean := sum / n
		cv := math.Sqrt(sq/n-mean*mean) / mean
		if math.Abs(cv-1) > 0.05 {
			t.Errorf("Poisson %g RPS: gap CV %.3f, want ≈1", rate, cv)
		}
	}
}

func TestSweepDefaults(t *testing.T) {
	specs, err := Sweep([]float64{1, 2.5}, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if specs[0].Name != "qps_1" || specs[1].Name != "qps_2_5" || specs[0].PromptTokens != Fixed(1024) ||
		specs[0].MaxTokens != Fixed(128) || specs[1].Arrival != (Arrival{Pattern: Poisson, Rate: 2.5}) ||
		specs[0].Requests != 30 || specs[1].Requests != 75 {
		t.Fatalf("sweep = %+v", specs)
	}
	if _, err := Sweep([]float64{0}, 0, 0, 0, 0); err == nil {
		t.Fatal("QPS 0 accepted")
	}
	// Each level sends prompts of its own; the first level's are the
	// seed's, as before levels had their own.
	a, err := specs[0].Generate(42, corpus(t))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := specs[1].Generate(42, corpus(t))
	plain := specs[0]
	plain.PromptSeed = 0
	c, _ := plain.Generate(42, corpus(t))
	if specs[0].PromptSeed != 0 || specs[1].PromptSeed != 1 || a[0].Prompt == b[0].Prompt || a[0].Prompt != c[0].Prompt {
		t.Errorf("sweep levels' prompts: seeds %d, %d; level 1's first prompt equals level 0's: %v", specs[0].PromptSeed, specs[1].PromptSeed, a[0].Prompt == b[0].Prompt)
	}
	// A shorter span per level: 4 s of arrivals, still at least 16.
	specs, err = Sweep([]float64{2, 32}, 0, 0, 0, 4)
	if err != nil || specs[0].Requests != 16 || specs[1].Requests != 128 {
		t.Fatalf("4 s levels: %+v, %v", specs, err)
	}
	if _, err := Sweep([]float64{1}, 0, 0, 0, -1); err == nil {
		t.Fatal("a negative span accepted")
	}
}

func TestParseSpecs(t *testing.T) {
	specs, err := ParseSpecs(strings.NewReader(`[{"name":"mix","requests":8,"prompt_mix":[{"weight":3,"tokens":{"min":100,"max":200}},{"weight":1,"tokens":{"min":10,"max":10}}],"max_tokens":{"min":16,"max":16},"arrival":{"pattern":"poisson","rate":2}}]`))
	if err != nil || len(specs) != 1 || specs[0].PromptMix[0].Weight != 3 {
		t.Fatalf("ParseSpecs = %+v, %v", specs, err)
	}
	items, _ := specs[0].Generate(1, corpus(t))
	short := 0
	for _, it := range items {
		if it.PromptTokens == 10 {
			short++
		}
	}
	if short != 2 {
		t.Errorf("%d short prompts, want 2 of 8", short)
	}
	for _, bad := range []string{
		`{"name":"x","requests":1,"prompt_tokens":{"min":1,"max":1},"max_tokens":{"min":1,"max":1},"arrival":{"pattern":"sequential"},"typo":1}`,
		`{"name":"x","requests":0,"prompt_tokens":{"min":1,"max":1},"max_tokens":{"min":1,"max":1},"arrival":{"pattern":"sequential"}}`,
		`{"name":"x","requests":1,"prompt_tokens":{"min":5,"max":1},"max_tokens":{"min":1,"max":1},"arrival":{"pattern":"sequential"}}`,
		`{"name":"x","requests":1,"prompt_tokens":{"min":1,"max":1},"max_tokens":{"min":1,"max":1},"arrival":{"pattern":"uniform"}}`,
		`{"name":"x","requests":1,"prompt_tokens":{"min":1,"max":1},"max_tokens":{"min":1,"max":1},"arrival":{"pattern":"zigzag"}}`,
		`[]`, `not json`,
	} {
		if _, err := ParseSpecs(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestSummarize(t *testing.T) {
	d := Summarize([]float64{4, 1, 3, 2})
	if d.N != 4 || d.Mean != 2.5 || d.Min != 1 || d.Max != 4 || d.P50 != 2.5 {
		t.Errorf("Summarize = %+v", d)
	}
}

// req makes a finished request: ttft and gap in ms, n tokens.
func req(ttft, gap float64, n int) trace.Request {
	r := trace.Request{Done: true, FirstByte: time.Millisecond, PromptTokens: 10, CompletionTokens: n}
	at := time.Duration(ttft * float64(time.Millisecond))
	r.FirstToken = at
	for i := 0; i < n; i++ {
		r.Tokens = append(r.Tokens, at)
		at += time.Duration(gap * float64(time.Millisecond))
	}
	r.End = r.Tokens[n-1]
	return r
}

func TestMeasureGoodputAndErrors(t *testing.T) {
	reqs := []trace.Request{
		req(100, 10, 11), // TTFT 100, TPOT 10: meets both
		req(600, 10, 11), // TTFT too slow
		req(100, 60, 11), // TPOT too slow
		req(50, 0, 1),    // one token: no TPOT, meets
		{Done: true, Error: "HTTP 400", ErrorKind: prober.KindHTTP4xx},
		{Done: true, Error: "HTTP 503", ErrorKind: prober.KindHTTP5xx},
		{Done: true, Error: "timed out", ErrorKind: prober.KindTimeout},
		{Done: true, Error: "closed", ErrorKind: prober.KindClosedEarly},
	}
	m := Measure(1, reqs, 2*time.Second, SLO{TTFTms: 500, TPOTms: 50}, nil)
	if m.Completed != 4 || m.Failed != 4 {
		t.Fatalf("completed %d failed %d", m.Completed, m.Failed)
	}
	for _, k := range []string{prober.KindHTTP4xx, prober.KindHTTP5xx, prober.KindTimeout, prober.KindClosedEarly} {
		if m.ErrorsByKind[k] != 1 {
			t.Errorf("errors_by_kind[%s] = %d", k, m.ErrorsByKind[k])
		}
	}
	if m.Goodput == nil || m.Goodput.Met != 2 || m.Goodput.ReqPerSec != 1 || m.Goodput.Fraction != 0.25 {
		t.Fatalf("goodput = %+v", m.Goodput)
	}
	if m.OutputTokens != 34 || m.OutputTokPerSec != 17 || m.ReqPerSec != 2 || !m.InputTokensFromServer {
		t.Errorf("tokens %d tok/s %g req/s %g", m.OutputTokens, m.OutputTokPerSec, m.ReqPerSec)
	}
	if m.ITL.N != 30 || m.TTFT.N != 4 || m.TPOT.N != 3 {
		t.Errorf("ITL n %d TTFT n %d TPOT n %d", m.ITL.N, m.TTFT.N, m.TPOT.N)
	}
	if m := Measure(1, reqs, time.Second, SLO{}, nil); m.Goodput != nil {
		t.Error("goodput without SLOs")
	}
}

func TestAggregateRepeats(t *testing.T) {
	runs := []RunMetrics{{OutputTokPerSec: 100}, {OutputTokPerSec: 120}, {OutputTokPerSec: 80}}
	runs[0].TTFT.P50, runs[1].TTFT.P50, runs[2].TTFT.P50 = 10, 30, 20
	a := Aggregate(runs)
	if a.Repeats != 3 || a.OutputTokPerSec != (Spread{80, 100, 120, 0.4}) || a.TTFTP50.Median != 20 || a.TTFTP50.Spread != 1 {
		t.Fatalf("across = %+v", a)
	}
}

func TestParseChunk(t *testing.T) {
	cases := []struct {
		in   string
		want chunk
		ok   bool
	}{
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, chunk{}, true},
		{`{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`, chunk{tokens: 1}, true},
		{`{"choices":[{"text":" a \"quoted\" {brace}","finish_reason":null}],"usage":null}`, chunk{tokens: 1}, true},
		{`{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, chunk{tokens: 1}, true},
		{`{"choices":[{"delta":{"tool_calls":[{"id":"1"}]}}]}`, chunk{tokens: 1}, true},
		{`{"choices":[{"delta":{"content":[]}}]}`, chunk{}, true},
		{`{"choices":[{"delta":{},"finish_reason":"stop"}]}`, chunk{finished: true}, true},
		{`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`, chunk{usage: true, promptTokens: 12, completionTokens: 34}, true},
		{`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}`, chunk{tokens: 2}, true},
		{`{"error":{"message":"boom"}}`, chunk{errored: true}, true},
		{`{"id":"x","created":1700000000,"system_fingerprint":null,"choices":[{"logprobs":{"content":[{"token":"}"}]},"delta":{"content":"x"}}]}`, chunk{tokens: 1}, true},
		{`{"choices":[{"delta":{"content":"x"}}`, chunk{}, false},
		{`garbage`, chunk{}, false},
	}
	for _, c := range cases {
		var got chunk
		ok := parseChunk([]byte(c.in), &got)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("parseChunk(%s) = %+v %v, want %+v %v", c.in, got, ok, c.want, c.ok)
		}
	}
	var ch chunk
	in := []byte(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}`)
	if n := testing.AllocsPerRun(100, func() { parseChunk(in, &ch) }); n != 0 {
		t.Errorf("parseChunk allocates %v times per chunk", n)
	}
}

// fakeServer is an in-process OpenAI streaming server for functional
// tests; mode picks a misbehaviour.
type fakeServer struct {
	*httptest.Server
	inflight, peak atomic.Int64
	calls          atomic.Int64
	mode           string
}

func newFake(t *testing.T, mode string) *fakeServer {
	f := &fakeServer{mode: mode}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
		return
	}
	if r.URL.Path == "/metrics" { // no metrics page: the bench's uptime probe
		http.NotFound(w, r)
		return
	}
	f.calls.Add(1)
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	var body struct {
		MaxTokens int    `json:"max_tokens"`
		Model     string `json:"model"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	switch f.mode {
	case "400":
		http.Error(w, `{"error":{"message":"max_tokens too large"}}`, 400)
		return
	case "503":
		http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
		return
	case "slow":
		// Hold the response until the client gives up, so its timeout fires
		// however slowly this host runs the client.
		select {
		case <-r.Context().Done():
			return
		case <-time.After(time.Minute):
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	fl.Flush()
	for i := 0; i < body.MaxTokens; i++ {
		time.Sleep(2 * time.Millisecond)
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n")
		fl.Flush()
		if f.mode == "early" && i == 2 {
			return // ends the response without finish_reason or [DONE]
		}
		if f.mode == "midstream" && i == 1 {
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"out of KV blocks\"}}\n\n")
			return
		}
	}
	fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", body.MaxTokens)
	if f.mode == "hold" {
		fl.Flush()
		select { // keeps the response open after [DONE]
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
}

func TestClientErrorKinds(t *testing.T) {
	for _, c := range []struct{ mode, kind string }{
		{"", ""},
		{"400", prober.KindHTTP4xx},
		{"503", prober.KindHTTP5xx},
		{"slow", prober.KindTimeout},
		{"early", prober.KindClosedEarly},
		{"midstream", prober.KindServer},
	} {
		f := newFake(t, c.mode)
		// Only "slow" is meant to time out (its server never answers); the
		// others get a timeout no loaded host reaches, so a slow client is
		// never mistaken for the error kind under test.
		timeout := time.Minute
		if c.mode == "slow" {
			timeout = 100 * time.Millisecond
		}
		cl, err := NewClient(ClientConfig{BaseURL: f.URL, Model: "m", Timeout: timeout}, trace.NewClock())
		if err != nil {
			t.Fatal(err)
		}
		r := cl.Do(context.Background(), Item{Prompt: "hi", MaxTokens: 5}, "id", "l", trace.PhaseBench, nil)
		if r.ErrorKind != c.kind || !r.Done {
			t.Errorf("mode %q: kind %q (%s), want %q", c.mode, r.ErrorKind, r.Error, c.kind)
		}
		if c.mode == "" && (len(r.Tokens) != 5 || r.CompletionTokens != 5 || r.PromptTokens != 7 || r.FirstToken <= 0 ||
			r.FirstToken != r.Tokens[0] || r.FirstByte <= 0 || r.FirstEvent > r.FirstToken || r.End < r.Tokens[4]) {
			t.Errorf("ok request timed wrong: %+v", r)
		}
		cl.Close()
	}
	// A server that keeps the response open after [DONE] does not hold
	// the request: E2E ends at [DONE] and Do returns within the drain limit.
	f := newFake(t, "hold")
	hc, _ := NewClient(ClientConfig{BaseURL: f.URL, Model: "m"}, trace.NewClock())
	start := time.Now()
	if r := hc.Do(context.Background(), Item{Prompt: "hi", MaxTokens: 2}, "id", "l", trace.PhaseBench, nil); !r.OK() || r.End > time.Second {
		t.Errorf("hold: %+v", r)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("hold: Do took %v", d)
	}
	cl, _ := NewClient(ClientConfig{BaseURL: "http://127.0.0.1:1", Model: "m"}, trace.NewClock())
	if r := cl.Do(context.Background(), Item{Prompt: "hi", MaxTokens: 1}, "id", "l", trace.PhaseBench, nil); r.ErrorKind != prober.KindConnect {
		t.Errorf("no server: kind %q", r.ErrorKind)
	}
}

// collect is a trace.Sink for tests.
type collect struct {
	mu  sync.Mutex
	evs []trace.Event
}

func (c *collect) Emit(e trace.Event) {
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
}

func TestExecuteWarmupExcludedAndRecorded(t *testing.T) {
	f := newFake(t, "")
	model, err := DetectModel(context.Background(), f.URL, nil)
	if err != nil || model != "fake-model" {
		t.Fatalf("DetectModel = %q, %v", model, err)
	}
	clock := trace.NewClock()
	cl, _ := NewClient(ClientConfig{BaseURL: f.URL, Model: model}, clock)
	defer cl.Close()
	sink := &collect{}
	prog := &Progress{}
	b := &Bench{Client: cl, Clock: clock, Sink: sink, Progress: prog}
	spec := Spec{Name: "tiny", Requests: 6, PromptTokens: Range{8, 16}, MaxTokens: Fixed(4), Arrival: Arrival{Pattern: Burst}}
	rep, err := b.Execute(context.Background(), Plan{Workloads: []Spec{spec}, Seed: 42, WarmupRuns: 1, RepeatRuns: 2, Concurrency: 2,
		SLO: SLO{TTFTms: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != 18 {
		t.Errorf("server saw %d requests, want 18 (6 warm-up + 2×6)", f.calls.Load())
	}
	if p := f.peak.Load(); p > 2 {
		t.Errorf("%d requests in flight under --concurrency 2", p)
	}
	w := rep.Workloads[0]
	if len(w.Runs) != 2 || w.Runs[0].Repeat != 1 || w.Runs[1].Repeat != 2 || w.Across.Repeats != 2 {
		t.Fatalf("runs = %+v", w.Runs)
	}
	for _, r := range w.Runs {
		if r.Requests != 6 || r.Completed != 6 || r.OutputTokens != 24 || r.InputTokens != 42 || r.Goodput == nil || r.Goodput.Met != 6 {
			t.Errorf("run %+v", r)
		}
	}
	phases := map[trace.Phase]int{}
	markers := map[string]int{}
	for _, e := range sink.evs {
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case trace.KindRequest:
			phases[e.Request.Phase]++
			if !e.Request.Done || e.Request.Sent <= 0 {
				t.Errorf("request event %+v", e.Request)
			}
		case trace.KindMarker:
			markers[e.Marker.Name]++
			if e.Marker.Attrs["workload"] != "tiny" {
				t.Errorf("marker without workload: %+v", e.Marker)
			}
		}
	}
	if phases[trace.PhaseWarmup] != 6 || phases[trace.PhaseBench] != 12 {
		t.Errorf("phases %v", phases)
	}
	if markers[trace.MarkerBenchStart] != 3 || markers[trace.MarkerBenchEnd] != 3 {
		t.Errorf("markers %v", markers)
	}
	s := prog.Snapshot()
	if s.Done != 6 || s.Total != 6 || s.Repeat != 2 || s.TTFT.N != 6 || s.ITL.N != 18 || s.OutputTokens != 24 {
		t.Errorf("progress %+v", s)
	}
	if line := s.Line(-1); !strings.Contains(line, "tiny run 2/2  6/6 done") {
		t.Errorf("progress line %q", line)
	}

	// The JSON report carries every documented field.
	data, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["schema"] != "treni-top-bench/1" {
		t.Errorf("schema %v", doc["schema"])
	}
	for _, k := range []string{"started", "url", "model", "endpoint", "seed", "concurrency", "warmup_runs", "repeat_runs", "slo", "workloads"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	wl := doc["workloads"].([]any)[0].(map[string]any)
	for _, k := range []string{"spec", "runs", "across_repeats"} {
		if _, ok := wl[k]; !ok {
			t.Errorf("workload lacks %q", k)
		}
	}
	run := wl["runs"].([]any)[0].(map[string]any)
	for _, k := range []string{"repeat", "requests", "completed", "failed", "errors_by_kind", "duration_s", "input_tokens",
		"output_tokens", "input_tokens_from_server", "output_tok_per_s", "total_tok_per_s", "req_per_s", "ttft_ms", "ttfb_ms",
		"itl_ms", "tpot_ms", "e2e_ms", "multi_token_chunks", "goodput"} {
		if _, ok := run[k]; !ok {
			t.Errorf("run lacks %q", k)
		}
	}
	for _, k := range []string{"n", "mean", "min", "p50", "p90", "p95", "p99", "max"} {
		if _, ok := run["itl_ms"].(map[string]any)[k]; !ok {
			t.Errorf("itl_ms lacks %q", k)
		}
	}
	across := wl["across_repeats"].(map[string]any)
	for _, k := range []string{"repeats", "output_tok_per_s", "ttft_p50_ms", "itl_p99_ms", "goodput_req_per_s"} {
		if _, ok := across[k]; !ok {
			t.Errorf("across_repeats lacks %q", k)
		}
	}
	md := rep.Markdown()
	for _, want := range []string{"| Throughput (tok/s) |", "| TTFT P99 (ms) |", "| ITL P50 (ms) |", "### tiny — 2 runs", "| **median** |", "Goodput"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestSequentialIsOneAtATime(t *testing.T) {
	f := newFake(t, "")
	clock := trace.NewClock()
	cl, _ := NewClient(ClientConfig{BaseURL: f.URL, Model: "m"}, clock)
	defer cl.Close()
	b := &Bench{Client: cl, Clock: clock}
	spec := Spec{Name: "seq", Requests: 4, PromptTokens: Fixed(4), MaxTokens: Fixed(3), Arrival: Arrival{Pattern: Sequential}}
	items, _ := spec.Generate(1, corpus(t))
	res := b.RunOnce(context.Background(), spec, items, Plan{RepeatRuns: 1}, 1, false)
	if f.peak.Load() != 1 {
		t.Errorf("peak in flight %d, want 1", f.peak.Load())
	}
	for i := 1; i < len(res.Requests); i++ {
		if prev := res.Requests[i-1]; res.Requests[i].Sent < prev.Sent+prev.End {
			t.Errorf("request %d sent before %d ended", i, i-1)
		}
	}
}

func TestCancelStopsSending(t *testing.T) {
	f := newFake(t, "")
	clock := trace.NewClock()
	cl, _ := NewClient(ClientConfig{BaseURL: f.URL, Model: "m"}, clock)
	defer cl.Close()
	b := &Bench{Client: cl, Clock: clock}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	spec := Spec{Name: "slow", Requests: 100, PromptTokens: Fixed(4), MaxTokens: Fixed(2), Arrival: Arrival{Pattern: Uniform, Rate: 10}}
	rep, err := b.Execute(ctx, Plan{Workloads: []Spec{spec}, Seed: 1, RepeatRuns: 1})
	if err == nil {
		t.Fatal("no error after cancel")
	}
	if n := f.calls.Load(); n > 6 {
		t.Errorf("%d requests sent in 300 ms at 10 RPS", n)
	}
	if len(rep.Workloads) != 1 || rep.Workloads[0].Runs[0].ErrorsByKind["canceled"] < 90 {
		t.Errorf("report after cancel: %+v", rep.Workloads)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	q := h.quantiles()
	for _, c := range []struct{ got, want time.Duration }{{q.P50, 500 * time.Millisecond}, {q.P99, 990 * time.Millisecond}} {
		if r := float64(c.got) / float64(c.want); r < 0.93 || r > 1.07 {
			t.Errorf("histogram quantile %v, want ≈%v", c.got, c.want)
		}
	}
}

// BenchmarkParseChunk compares the chunk walker with encoding/json decoding
// the same fields (what a reflection-based reader costs per token).
func BenchmarkParseChunk(b *testing.B) {
	in := []byte(`{"id":"chatcmpl-123","object":"chat.completion.chunk","created":1700000000,"model":"Qwen/Qwen3-4B","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`)
	b.Run("walker", func(b *testing.B) {
		b.ReportAllocs()
		var ch chunk
		for b.Loop() {
			parseChunk(in, &ch)
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v struct {
				Choices []struct {
					Text  json.RawMessage `json:"text"`
					Delta *struct {
						Content json.RawMessage `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			_ = json.Unmarshal(in, &v)
		}
	})
}

// fakeStamper is a connection whose every read arrived at one instant.
type fakeStamper struct{ at time.Duration }

func (f fakeStamper) Arrival() (time.Duration, bool) { return f.at, true }

// TestReadUsesArrival: the stream reader times events by the connection's
// arrival stamp, not by when it parses them.
func TestReadUsesArrival(t *testing.T) {
	c := &Client{clock: trace.NewClock()}
	conn := &netstamp.Tracker{}
	conn.Track(fakeStamper{at: 5 * time.Second})
	r := trace.Request{Sent: time.Second}
	body := io.NopCloser(strings.NewReader("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n"))
	complete, malformed, err := c.read(body, &r, nil, conn)
	if err != nil || !complete || malformed != 0 {
		t.Fatalf("read: complete %v, malformed %d, err %v", complete, malformed, err)
	}
	if len(r.Tokens) != 1 || r.Tokens[0] != 4*time.Second || r.FirstToken != 4*time.Second {
		t.Errorf("tokens %v, first token %v; want [4s] and 4s (arrival 5 s − sent 1 s)", r.Tokens, r.FirstToken)
	}
}

// TestClientDialsStamped: a plain-http client's connections carry stamps
// where the system has them, and ReadTimestamps turns them off.
func TestClientDialsStamped(t *testing.T) {
	for _, readStamps := range []bool{false, true} {
		c, err := NewClient(ClientConfig{BaseURL: "http://127.0.0.1:1", ReadTimestamps: readStamps}, trace.NewClock())
		if err != nil {
			t.Fatal(err)
		}
		want := "read"
		if netstamp.Supported && !readStamps {
			want = "kernel"
		}
		if got := c.TimestampSource(); got != want {
			t.Errorf("ReadTimestamps=%v: TimestampSource = %q, want %q", readStamps, got, want)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := c.tr.DialContext(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, stamped := conn.(netstamp.Stamper)
		if stamped != (want == "kernel") {
			t.Errorf("ReadTimestamps=%v: dialled a %T (stamped %v)", readStamps, conn, stamped)
		}
		conn.Close()
		ln.Close()
		c.Close()
	}
	c, err := NewClient(ClientConfig{BaseURL: "https://127.0.0.1:1"}, trace.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.TimestampSource(); got != "read" {
		t.Errorf("https: TimestampSource = %q, want read (TLS records hide which packet brought a token)", got)
	}
}
