package serve

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCPUServingFigures measures the numbers docs/BENCHMARKS.md records for
// the CPU backend. It runs only when asked, because it takes minutes:
//
//	TRENI_SERVE_FIGURES_MODEL=DIR [TRENI_SERVE_FIGURES_RUNS=5] [TRENI_SERVE_FIGURES_DECODE=64] \
//	  go test -run CPUServingFigures -v -timeout 60m ./engine/serve
//
// Cold start: a fresh process per run (page cache warm: the weights were
// read by the previous run), process start → HTTP ready from its stage
// lines. TTFT: a 128-token prompt (token ids), from the server's TTFT
// histogram (arrival → first token). Decode: ignore_eos requests; batch 1
// is 1 ÷ the mean inter-token gap of one request, batch 16 is 16 ÷ the
// mean gap of 16 concurrent requests.
func TestCPUServingFigures(t *testing.T) {
	dir := os.Getenv("TRENI_SERVE_FIGURES_MODEL")
	if dir == "" {
		t.Skip("set TRENI_SERVE_FIGURES_MODEL=DIR to measure serving figures")
	}
	runs := envInt("TRENI_SERVE_FIGURES_RUNS", 5)
	decode := envInt("TRENI_SERVE_FIGURES_DECODE", 64)
	bin := buildBinary(t)
	id := filepath.Base(dir)
	args := []string{"--model", dir, "--addr", "127.0.0.1:0", "--max-batch", "16"}

	var cold []float64
	for i := 0; i < runs+1; i++ {
		s := startServe(t, bin, nil, args...)
		if i > 0 { // the first run fills the page cache
			cold = append(cold, s.coldStart().Seconds()*1000)
		}
		s.stop(t)
	}
	report(t, "cold start → HTTP ready (ms, page cache warm)", cold)

	s := startServe(t, bin, nil, args...)
	defer s.stop(t)
	rng := rand.New(rand.NewPCG(42, 0))
	prompt := func(n int) string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = strconv.Itoa(256 + rng.IntN(3000))
		}
		return "[" + strings.Join(ids, ",") + "]"
	}
	// One warm-up request, not counted.
	if err := complete(s.base, id, prompt(128), 2); err != nil {
		t.Fatal(err)
	}
	// Latencies come from the server's own TTFT and ITL histograms
	// (/metrics deltas around each measurement): a synthetic checkpoint's
	// tokens often decode to no text, so the SSE stream cannot time them.
	var ttft, e2e []float64
	for range runs {
		m0 := scrape(t, s.base)
		sent := time.Now()
		if err := complete(s.base, id, prompt(128), 1); err != nil {
			t.Fatal(err)
		}
		e2e = append(e2e, time.Since(sent).Seconds()*1000)
		m1 := scrape(t, s.base)
		ttft = append(ttft, 1000*delta(m0, m1, "treni_time_to_first_token_seconds_sum")/delta(m0, m1, "treni_time_to_first_token_seconds_count"))
	}
	report(t, "TTFT, 128-token prompt (ms, server)", ttft)
	report(t, "E2E of a 1-token reply, 128-token prompt (ms)", e2e)

	var b1 []float64
	for range runs {
		m0 := scrape(t, s.base)
		if err := complete(s.base, id, prompt(16), decode); err != nil {
			t.Fatal(err)
		}
		m1 := scrape(t, s.base)
		b1 = append(b1, delta(m0, m1, "treni_inter_token_latency_seconds_count")/delta(m0, m1, "treni_inter_token_latency_seconds_sum"))
	}
	report(t, "decode tok/s, batch 1", b1)

	var b16 []float64
	for range runs {
		m0 := scrape(t, s.base)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 16 {
			wg.Add(1)
			p := prompt(16)
			go func() {
				defer wg.Done()
				if err := complete(s.base, id, p, decode); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		m1 := scrape(t, s.base)
		// Sixteen sequences decoding together each wait one step per
		// token: the aggregate rate is 16 ÷ the mean inter-token gap.
		b16 = append(b16, 16*delta(m0, m1, "treni_inter_token_latency_seconds_count")/delta(m0, m1, "treni_inter_token_latency_seconds_sum"))
	}
	report(t, "decode tok/s, batch 16 (aggregate)", b16)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func report(t *testing.T, what string, v []float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	t.Logf("FIGURE %-45s n=%d min %.1f median %.1f max %.1f spread %.0f%%", what, len(s), s[0], med, s[len(s)-1], 100*(s[len(s)-1]-s[0])/med)
}

// complete sends a greedy, ignore_eos, non-streamed completion.
func complete(base, model, prompt string, maxTokens int) error {
	body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":%d,"temperature":0,"ignore_eos":true}`, model, prompt, maxTokens)
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf(`"completion_tokens":%d`, maxTokens)) {
		return fmt.Errorf("completion: %s %s", resp.Status, b)
	}
	return nil
}

// scrape reads /metrics into sample name (labels dropped) → value.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "_bucket") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

func delta(a, b map[string]float64, name string) float64 { return b[name] - a[name] }
