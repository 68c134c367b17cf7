package runner

import (
	"context"
	"strings"
	"sync"

	"github.com/treni-top/treni-top/probe/scrape"
	"github.com/treni-top/treni-top/trace"
)

// scraper owns the goroutine scraping the current target's /metrics page:
// started once the target is healthy, stopped with the target (a new cold
// run has a new server and new counters) or when Run's context ends.
type scraper struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	refused bool // the "no metrics page" marker was emitted this session
}

// stop ends the current scrape goroutine and waits for it.
func (s *scraper) stop() {
	s.mu.Lock()
	c := s.cancel
	s.cancel = nil
	s.mu.Unlock()
	if c != nil {
		c()
	}
	s.wg.Wait()
}

// wait waits for a goroutine whose context has already ended.
func (s *scraper) wait() { s.stop() }

// startScraper looks for the target's metrics page and, when it is a
// Prometheus page of a known server, scrapes it until the target is stopped.
// The page read here is the baseline, so the first sample after the cold
// request covers it. A target without one (a 404, an HTML page, Ollama)
// gets no scraper and one scrape.MarkerServerMetrics saying why, once per
// session rather than once per cold run.
func (r *Runner) startScraper(ctx context.Context, run int, t Target) {
	base := t.BaseURL()
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return
	}
	r.scrape.stop()
	sctx, cancel := context.WithCancel(ctx)
	s, err := scrape.Probe(sctx, nil, base)
	if err != nil {
		cancel()
		r.scrape.mu.Lock()
		first := !r.scrape.refused
		r.scrape.refused = true
		r.scrape.mu.Unlock()
		if first && ctx.Err() == nil {
			r.marker(run, scrape.MarkerServerMetrics, trace.Attrs{"enabled": false,
				"reason": err.Error()})
		}
		return
	}
	r.marker(run, scrape.MarkerServerMetrics, trace.Attrs{"enabled": true, "family": string(s.Family()), "url": s.URL()})
	r.scrape.mu.Lock()
	r.scrape.cancel = cancel
	r.scrape.wg.Add(1)
	r.scrape.mu.Unlock()
	go func() {
		defer r.scrape.wg.Done()
		_ = s.Run(sctx, r.cfg.Sink, r.cfg.Clock, run, r.cfg.ServerMetricsInterval)
	}()
}
