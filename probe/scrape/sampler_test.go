package scrape

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// pageServer serves whatever page it was last given.
type pageServer struct {
	mu   sync.Mutex
	page string
	ct   string
	code int
}

func (s *pageServer) set(page string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.page = page
}

func (s *pageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	if s.ct != "" {
		w.Header().Set("Content-Type", s.ct)
	}
	if s.code != 0 {
		w.WriteHeader(s.code)
	}
	_, _ = w.Write([]byte(s.page))
}

func TestProbeRefusesWhatIsNotAServerPage(t *testing.T) {
	for name, ps := range map[string]*pageServer{
		"404":             {code: http.StatusNotFound, page: "404 page not found"},
		"html":            {ct: "text/html; charset=utf-8", page: "<!doctype html><html><body>Ollama is running</body></html>"},
		"json":            {ct: "application/json", page: `{"error":"not found"}`},
		"not prometheus":  {ct: "text/plain", page: "Ollama is running"},
		"no server names": {ct: "text/plain; version=0.0.4", page: "# TYPE go_goroutines gauge\ngo_goroutines 8\n"},
	} {
		t.Run(name, func(t *testing.T) {
			hs := httptest.NewServer(ps)
			defer hs.Close()
			s, err := Probe(context.Background(), nil, hs.URL, nil)
			if s != nil || !errors.Is(err, ErrNoMetrics) {
				t.Fatalf("Probe = %v, %v; want ErrNoMetrics", s, err)
			}
			t.Log(err)
		})
	}
	// Nothing listening: an error, but not "no metrics" (the server may
	// simply be down).
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close()
	if _, err := Probe(context.Background(), nil, url, nil); err == nil {
		t.Fatal("Probe of a closed port succeeded")
	}
}

func TestSamplerCoversEachInterval(t *testing.T) {
	ps := &pageServer{ct: "text/plain; version=0.0.4; charset=utf-8"}
	ps.set(v1Page{ttftCum: []float64{0, 0, 0, 0}, running: 0}.text())
	hs := httptest.NewServer(ps)
	defer hs.Close()
	s, err := Probe(context.Background(), nil, hs.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Family() != FamilyVLLM || s.URL() != hs.URL+"/metrics" {
		t.Fatalf("family %q url %q", s.Family(), s.URL())
	}
	ps.set(v1Page{ttftCum: []float64{1, 1, 2, 2}, ttftCount: 2, ttftSum: 0.5, running: 1, kv: 0.25}.text())
	got, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Source != trace.SourceServer {
		t.Fatalf("samples %+v", got)
	}
	v := got[0].Values
	if v[trace.MetricServerTTFTMean] != 0.25 || v[trace.MetricServerRunning] != 1 || v[trace.MetricServerKVUsage] != 0.25 {
		t.Errorf("values %v", v)
	}
	// A failed scrape keeps the baseline: the next good page covers both
	// intervals.
	ps.mu.Lock()
	ps.code = http.StatusInternalServerError
	ps.mu.Unlock()
	if _, err := s.Sample(context.Background()); err == nil {
		t.Fatal("a 500 was not an error")
	}
	ps.mu.Lock()
	ps.code = 0
	ps.mu.Unlock()
	ps.set(v1Page{ttftCum: []float64{1, 1, 4, 4}, ttftCount: 4, ttftSum: 1.5, running: 0}.text())
	got, err = s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m := got[0].Values[trace.MetricServerTTFTMean]; m != 0.5 {
		t.Errorf("mean over the gap %v, want 0.5 = (1.5−0.5)/(4−2)", m)
	}
}

// TestRunStopsWithContext: Run's goroutine belongs to its caller's context.
func TestRunStopsWithContext(t *testing.T) {
	ps := &pageServer{}
	ps.set(v1Page{ttftCum: []float64{0, 0, 0, 0}, running: 2}.text())
	hs := httptest.NewServer(ps)
	defer hs.Close()
	s, err := Probe(context.Background(), nil, hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan trace.Event, 64)
	sink := trace.SinkFunc(func(e trace.Event) {
		select {
		case got <- e:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, sink, trace.NewClock(), 3, time.Millisecond) }()
	e := <-got
	if e.Kind != trace.KindSample || e.Run != 3 || e.Sample.Source != trace.SourceServer || e.Sample.Values[trace.MetricServerRunning] != 2 {
		t.Fatalf("event %+v", e)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
}
