package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// coldServer is an OpenAI streaming server whose first slow requests wait
// slowTTFT before their first token and the rest fastTTFT: a cold engine
// warming up under the bench, induced rather than hoped for.
type coldServer struct {
	*httptest.Server
	calls              atomic.Int64
	slow               int64
	fastTTFT, slowTTFT time.Duration
	// started, when set, is served on /metrics as the process start time.
	started time.Time
}

func newColdServer(t *testing.T, slow int64, started time.Time) *coldServer {
	// The slow requests are 20× the fast ones, so the verdict does not hang
	// on this host's speed: the rule's threshold is 4× the warm median, and
	// the fast TTFT (100 ms) is long enough that the client's own first
	// request overhead (a fresh connection, first use of the code under
	// -race on a loaded 2-core host: up to ~0.2 s seen) stays below it.
	s := &coldServer{slow: slow, fastTTFT: 100 * time.Millisecond, slowTTFT: 2 * time.Second, started: started}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *coldServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/metrics" {
		if s.started.IsZero() {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
			float64(s.started.UnixNano())/1e9)
		return
	}
	var body struct {
		MaxTokens int `json:"max_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	wait := s.fastTTFT
	if s.calls.Add(1) <= s.slow {
		wait = s.slowTTFT
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	fl.Flush()
	time.Sleep(wait)
	for i := 0; i < body.MaxTokens; i++ {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n")
		fl.Flush()
	}
	fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", body.MaxTokens)
}

// benchCold runs a sequential 8-request workload against srv.
func benchCold(t *testing.T, srv *coldServer, warmup int) Report {
	t.Helper()
	clock := trace.NewClock()
	cl, err := NewClient(ClientConfig{BaseURL: srv.URL, Model: "m"}, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := &Bench{Client: cl, Clock: clock}
	spec := Spec{Name: "seq8", Requests: 8, PromptTokens: Fixed(8), MaxTokens: Fixed(3), Arrival: Arrival{Pattern: Sequential}}
	rep, err := b.Execute(context.Background(), Plan{Workloads: []Spec{spec}, Seed: 1, WarmupRuns: warmup, RepeatRuns: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Workloads[0].Runs[0].Completed; c != 8 {
		t.Fatalf("%d of 8 requests completed", c)
	}
	return rep
}

// jsonCold is what the JSON report says about cold contamination.
func jsonCold(t *testing.T, rep Report) (flag bool, indices []int, hasList bool) {
	t.Helper()
	data, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cold  *bool `json:"cold_contaminated"`
		Which []struct {
			Index int `json:"index"`
		} `json:"cold_requests"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Cold == nil {
		t.Fatalf("JSON report lacks cold_contaminated:\n%s", data)
	}
	for _, c := range doc.Which {
		indices = append(indices, c.Index)
	}
	return *doc.Cold, indices, strings.Contains(string(data), `"cold_requests"`)
}

func TestBenchFlagsColdFirstRequests(t *testing.T) {
	t.Parallel()
	rep := benchCold(t, newColdServer(t, 2, time.Now().Add(-30*time.Second)), 0)
	flag, idx, _ := jsonCold(t, rep)
	if !flag || fmt.Sprint(idx) != "[0 1]" {
		t.Fatalf("cold_contaminated %v, requests %v; want true, [0 1]", flag, idx)
	}
	// The server's uptime from its /metrics page: started 30 s before
	// the bench (give or take the bench's own start).
	if up := rep.ServerUptimeS; up == nil || *up < 29 || *up > 90 {
		t.Errorf("server_uptime_s = %v, want ≈30", up)
	}
	md := rep.Markdown()
	for _, want := range []string{"**Cold contamination**", "| seq8 | 1 | 0 |", "| seq8 | 1 | 1 |", "`--warmup-runs 1`", "had been up"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestBenchWarmServerNotFlagged(t *testing.T) {
	t.Parallel()
	rep := benchCold(t, newColdServer(t, 0, time.Time{}), 0)
	if flag, idx, list := jsonCold(t, rep); flag || len(idx) > 0 || list {
		t.Fatalf("a warm server flagged: cold_contaminated %v, requests %v", flag, idx)
	}
	if rep.ServerUptimeS != nil {
		t.Errorf("uptime %v from a server without /metrics", *rep.ServerUptimeS)
	}
	if md := rep.Markdown(); strings.Contains(md, "Cold contamination") || strings.Contains(md, "had been up") {
		t.Errorf("Markdown of a warm server mentions cold contamination:\n%s", md)
	}
	// A server that started moments ago: no flag (no request stood out),
	// but the report says how fresh it was and suggests a warm-up run.
	fresh := benchCold(t, newColdServer(t, 0, time.Now().Add(-5*time.Second)), 0)
	if flag, _, _ := jsonCold(t, fresh); flag {
		t.Error("a fresh but warm server flagged")
	}
	if md := fresh.Markdown(); !strings.Contains(md, "had been up only") || !strings.Contains(md, "`--warmup-runs 1`") {
		t.Errorf("Markdown for a fresh server lacks the uptime note:\n%s", md)
	}
}

// TestBenchWarmupAbsorbsCold is the advice checked: the same cold server
// with one warm-up run leaves the measured run clean.
func TestBenchWarmupAbsorbsCold(t *testing.T) {
	t.Parallel()
	srv := newColdServer(t, 2, time.Time{})
	rep := benchCold(t, srv, 1)
	if flag, idx, _ := jsonCold(t, rep); flag || len(idx) > 0 {
		t.Fatalf("with a warm-up run: cold_contaminated %v, requests %v", flag, idx)
	}
	if n := srv.calls.Load(); n != 16 {
		t.Errorf("server saw %d requests, want 16", n)
	}
}

// coldReq is a successful request sent at offset i seconds with the given
// TTFT in ms.
func coldReq(i int, ttftMs float64) trace.Request {
	ft := time.Duration(ttftMs * float64(time.Millisecond))
	return trace.Request{ID: fmt.Sprint(i), Sent: time.Duration(i+1) * time.Second, FirstToken: ft,
		Tokens: []time.Duration{ft}, End: ft + time.Millisecond, Done: true, Status: 200}
}

func reqsOf(ttfts ...float64) []trace.Request {
	out := make([]trace.Request, len(ttfts))
	for i, v := range ttfts {
		out[i] = coldReq(i, v)
	}
	return out
}

// TestColdLeadingRule pins the rule on synthetic runs.
func TestColdLeadingRule(t *testing.T) {
	failed := reqsOf(60_000, 40_000, 900, 700, 1200, 800, 600, 1400)
	failed[0].Error, failed[0].ErrorKind = "timed out", "timeout" // a timed-out first request has no TTFT
	sentLate := reqsOf(11, 12, 10, 11, 12, 11, 10, 11)
	sentLate[7].Sent = 0 // sent first: send order, not list order, decides
	sentLate[7].FirstToken, sentLate[7].Tokens = 900*time.Millisecond, []time.Duration{900 * time.Millisecond}
	for _, c := range []struct {
		name string
		reqs []trace.Request
		cold string
		ok   bool
	}{
		// The published shape: 40–57 s to first token, then 0.6–1.4 s.
		{"published", reqsOf(57_000, 40_000, 900, 700, 1200, 800, 600, 1400, 1000, 650), "[0 1]", true},
		{"warm", reqsOf(620, 1400, 900, 700, 1200, 800, 600, 1400, 1000, 650), "[]", true},
		// Identical warm TTFTs (MAD 0): a 2× first request is jitter.
		{"tight reference", reqsOf(24, 12, 12, 12, 12, 12, 12, 12), "[]", true},
		{"tight reference, cold", reqsOf(600, 12, 12, 12, 12, 12, 12, 12), "[0]", true},
		// A slow request in the middle is tail latency, not a cold start.
		{"middle outlier", reqsOf(11, 12, 5000, 11, 12, 11, 10, 11), "[]", true},
		// Only a leading run counts: the second slow one follows a warm one.
		{"leading run only", reqsOf(5000, 11, 5000, 11, 12, 11, 10, 11), "[0]", true},
		{"failed first", failed, "[1]", true},
		{"send order", sentLate, "[7]", true},
		// Few ms medians: the absolute floor keeps a host hiccup out.
		{"fast server hiccup", reqsOf(30, 2, 2, 2, 3, 2, 2, 2), "[]", true},
		{"too few", reqsOf(9000, 10, 11, 10), "[]", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cold, _, _, ok := ColdLeading(c.reqs)
			if ok != c.ok || fmt.Sprint(cold) != c.cold {
				t.Errorf("ColdLeading = %v, ok %v; want %s, ok %v", cold, ok, c.cold, c.ok)
			}
		})
	}
}

// TestServerStart reads process_start_time_seconds from Prometheus pages
// and treats anything else as unknown.
func TestServerStart(t *testing.T) {
	const vllmLike = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.76401234567e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
`
	for _, c := range []struct {
		name, page string
		status     int
		want       time.Time
		ok         bool
	}{
		{"vllm-like", vllmLike, 200, time.Unix(1764012345, 670000000).UTC(), true},
		{"untyped", "process_start_time_seconds 1764012345\n", 200, time.Unix(1764012345, 0).UTC(), true},
		{"no gauge", "# TYPE treni_steps_total counter\ntreni_steps_total 3\n", 200, time.Time{}, false},
		{"not a time", "process_start_time_seconds 12\n", 200, time.Time{}, false},
		{"html", "<html><body>metrics</body></html>", 200, time.Time{}, false},
		{"404", "not found", 404, time.Time{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer k" {
					http.Error(w, "wrong request", 400)
					return
				}
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.page)
			}))
			defer srv.Close()
			got, ok := ServerStart(context.Background(), srv.URL+"/", http.Header{"Authorization": {"Bearer k"}})
			if ok != c.ok || got.Sub(c.want).Abs() > time.Millisecond {
				t.Errorf("ServerStart = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
	if _, ok := ServerStart(context.Background(), "http://127.0.0.1:1", nil); ok {
		t.Error("no server: a start time")
	}
}
