package prober

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// TestRealServer runs a cold sequence against a real server when
// TRENI_PROBE_URL is set (e.g. an Ollama started by make e2e-ollama):
//
//	TRENI_PROBE_URL=http://127.0.0.1:11500 TRENI_PROBE_MODEL=synth \
//	TRENI_PROBE_ENDPOINT=ollama_generate go test -run RealServer -v ./probe/prober/
func TestRealServer(t *testing.T) {
	url := os.Getenv("TRENI_PROBE_URL")
	if url == "" {
		t.Skip("TRENI_PROBE_URL not set")
	}
	ep := Endpoint(os.Getenv("TRENI_PROBE_ENDPOINT"))
	if ep == "" {
		ep = Chat
	}
	temp := 0.0
	tmpl := Template{BaseURL: url, Endpoint: ep, Model: os.Getenv("TRENI_PROBE_MODEL"),
		Prompt: "Count from one to ten.", MaxTokens: 16, Temperature: &temp, Timeout: time.Minute}
	c := New(trace.NewClock(), trace.SinkFunc(func(trace.Event) {}), 0)
	defer c.Close()
	// The cold sequence of probe/runner, one request at a time: the lazy
	// server loads its model inside cold_1.
	cold := tmpl
	cold.Timeout = DefaultColdTimeout
	var res []Result
	res = append(res, c.Do(context.Background(), cold, "cold_1", "cold_1", trace.PhaseCold))
	res = append(res, c.Do(context.Background(), tmpl, "warmup_1", "warmup_1", trace.PhaseWarmup))
	for i := 1; i <= 3; i++ {
		l := fmt.Sprintf("warm_%d", i)
		res = append(res, c.Do(context.Background(), tmpl, l, l, trace.PhaseWarm))
	}
	for _, r := range res {
		q := r.Request
		t.Logf("%-9s ok=%v ttfb=%v first_event=%v ttft=%v e2e=%v chunks=%d multi=%d usage=%d/%d tpot=%v err=%q",
			q.Label, q.OK(), q.FirstByte, q.FirstEvent, q.TTFT(), q.E2E(), len(q.Tokens), q.MultiTokenChunks,
			q.PromptTokens, q.CompletionTokens, q.TPOT(), q.Error)
		if s := r.Server; s != nil {
			t.Logf("          server: load %v prompt_eval %v eval %v total %v (load+prompt_eval %v)",
				s.Load, s.PromptEval, s.Eval, s.Total, s.Load+s.PromptEval)
		}
		if !q.OK() {
			t.Errorf("%s failed: %s", q.Label, q.Error)
		}
	}
}
