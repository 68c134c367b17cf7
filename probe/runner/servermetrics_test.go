package runner

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/treni-top/treni-top/probe/scrape"
	"github.com/treni-top/treni-top/trace"
)

// servedTarget is a fakeTarget that answers at a real URL.
type servedTarget struct {
	*fakeTarget
	url string
}

func (t servedTarget) BaseURL() string { return t.url }

// serverSink records events and closes seen at the first server sample.
type serverSink struct {
	sink
	once sync.Once
	seen chan struct{}
}

func (s *serverSink) Emit(e trace.Event) {
	s.sink.Emit(e)
	if e.Kind == trace.KindSample && e.Sample.Source == trace.SourceServer {
		s.once.Do(func() { close(s.seen) })
	}
}

func (s *serverSink) samples() []trace.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []trace.Sample
	for _, e := range s.evs {
		if e.Kind == trace.KindSample && e.Sample.Source == trace.SourceServer {
			out = append(out, *e.Sample)
		}
	}
	return out
}

// runWithServer runs one cold sequence against a target served by h; the
// warm request waits until wait returns.
func runWithServer(t *testing.T, h http.Handler, wait func(ctx context.Context, s *serverSink)) *serverSink {
	t.Helper()
	return runWithServerEvery(t, h, time.Millisecond, wait)
}

// runWithServerEvery is runWithServer with the scrape interval given.
func runWithServerEvery(t *testing.T, h http.Handler, every time.Duration, wait func(ctx context.Context, s *serverSink)) *serverSink {
	t.Helper()
	hs := httptest.NewServer(h)
	defer hs.Close()
	s := &serverSink{seen: make(chan struct{})}
	r, err := New(Config{
		Sink:  s,
		Clock: trace.NewClock(),
		Launcher: LaunchFunc(func(_ context.Context, run int) (Target, error) {
			return servedTarget{&fakeTarget{run: run, exited: make(chan struct{})}, hs.URL}, nil
		}),
		Prober: proberFunc(func(ctx context.Context, _ Target, p Probe) (trace.Request, error) {
			wait(ctx, s)
			return trace.Request{Label: p.Label, Done: true}, nil
		}),
		Repeat:                1,
		ExitAfterSequence:     true,
		ServerMetrics:         true,
		ServerMetricsInterval: every,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRunnerScrapesServerMetrics(t *testing.T) {
	var scrapes atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		scrapes.Add(1)
		_, _ = w.Write([]byte("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 1\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"))
	})
	// The requests wait for the first server sample: the scraper runs
	// beside the cold sequence.
	s := runWithServer(t, h, func(ctx context.Context, s *serverSink) {
		select {
		case <-s.seen:
		case <-ctx.Done():
		}
	})
	m := s.markers(scrape.MarkerServerMetrics)
	if len(m) != 1 || m[0].Marker.Attrs["enabled"] != true || m[0].Marker.Attrs["family"] != "vllm" {
		t.Fatalf("server_metrics markers %+v", m)
	}
	got := s.samples()
	if len(got) == 0 {
		t.Fatal("no server sample")
	}
	for _, sm := range got {
		if sm.Values[trace.MetricServerKVUsage] != 0.5 || sm.Values[trace.MetricServerRunning] != 1 {
			t.Errorf("server sample %v", sm.Values)
		}
	}
	// Run has returned, so the scraper's goroutine has too: no scrape
	// can start any more.
	n := scrapes.Load()
	if after := len(s.samples()); after != len(got) || scrapes.Load() != n {
		t.Errorf("scraping went on after Run returned")
	}
}

// TestRunnerTakesFinalServerReading: requests served after the last tick
// are still recorded, because stopping the target takes one last reading.
// The interval is an hour, so the only tick is the first one (which the
// requests wait for); the final reading alone must carry their TTFTs.
func TestRunnerTakesFinalServerReading(t *testing.T) {
	var served atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		n := served.Load()
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"+
			"# TYPE vllm:time_to_first_token_seconds histogram\n"+
			"vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} %d\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} %d\n"+
			"vllm:time_to_first_token_seconds_sum %g\nvllm:time_to_first_token_seconds_count %d\n", n, n, 0.05*float64(n), n)
	})
	var requests int64
	s := runWithServerEvery(t, h, time.Hour, func(ctx context.Context, s *serverSink) {
		select {
		case <-s.seen:
		case <-ctx.Done():
		}
		served.Add(1)
		requests++
	})
	var counted float64
	for _, sm := range s.samples() {
		counted += sm.Values[trace.MetricServerTTFTCount]
	}
	if requests == 0 || counted != float64(requests) {
		t.Fatalf("server samples count %v first tokens, the server served %d", counted, requests)
	}
}

func TestRunnerNoMetricsPageOnce(t *testing.T) {
	var hits atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>Ollama is running</html>"))
	})
	s := runWithServer(t, h, func(context.Context, *serverSink) {})
	m := s.markers(scrape.MarkerServerMetrics)
	if len(m) != 1 || m[0].Marker.Attrs["enabled"] != false {
		t.Fatalf("markers %+v", m)
	}
	t.Log(m[0].Marker.Attrs["reason"])
	if hits.Load() != 1 {
		t.Errorf("%d GETs of an HTML page, want the one probe", hits.Load())
	}
	if got := s.samples(); len(got) != 0 {
		t.Fatalf("server samples without a metrics page: %v", got)
	}
}

// proberFunc adapts a function to Prober.
type proberFunc func(ctx context.Context, target Target, p Probe) (trace.Request, error)

func (f proberFunc) Probe(ctx context.Context, target Target, p Probe) (trace.Request, error) {
	return f(ctx, target, p)
}
