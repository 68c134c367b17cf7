package runner

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/treni-top/treni-top/probe/scrape"
	"github.com/treni-top/treni-top/trace"
)

// scraper owns the goroutine scraping the current target's /metrics page:
// started once the target is healthy, stopped with the target (a new cold
// run has a new server and new counters) or when Run's context ends.
type scraper struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	// final takes the last reading once the goroutine has ended, so the
	// interval since the last tick (a short run may have no other) is
	// recorded before the target goes away.
	final   func()
	wg      sync.WaitGroup
	refused bool // the "no metrics page" marker was emitted this session
}

// finalScrapeTimeout bounds the last reading: a server that stopped
// answering must not hold up its own shutdown.
const finalScrapeTimeout = 2 * time.Second

// stop ends the current scrape goroutine, waits for it, and takes the
// last reading.
func (s *scraper) stop() {
	s.mu.Lock()
	c, final := s.cancel, s.final
	s.cancel, s.final = nil, nil
	s.mu.Unlock()
	if c != nil {
		c()
	}
	s.wg.Wait()
	if final != nil {
		final()
	}
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
	s, err := scrape.Probe(sctx, nil, base, r.cfg.Header)
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
	final := func() {
		fctx, done := context.WithTimeout(context.WithoutCancel(ctx), finalScrapeTimeout)
		defer done()
		samples, err := s.Sample(fctx)
		if err != nil {
			return
		}
		for i := range samples {
			r.emit(trace.Event{Kind: trace.KindSample, Run: run, Sample: &samples[i]})
		}
	}
	r.scrape.mu.Lock()
	r.scrape.cancel, r.scrape.final = cancel, final
	r.scrape.wg.Add(1)
	r.scrape.mu.Unlock()
	go func() {
		defer r.scrape.wg.Done()
		_ = s.Run(sctx, r.cfg.Sink, r.cfg.Clock, run, r.cfg.ServerMetricsInterval)
	}()
}
