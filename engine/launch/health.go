package launch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// healthPaths are tried in order; a 404 or 405 moves on to the next one,
// so the first path the server knows is the one that is polled. Ollama has
// no /health: its /api/version answers as soon as it listens.
func healthPaths(kind serverlog.Kind) []string {
	switch kind {
	case serverlog.KindOllama:
		return []string{"/api/version", "/"}
	case serverlog.KindUnknown, "":
		// A server we do not know: any of the usual endpoints, and as a
		// last resort its root page.
		return []string{"/health", "/v1/models", "/api/version", "/"}
	}
	return []string{"/health", "/v1/models", "/api/version"}
}

// healthClient is the poller's HTTP client: short timeouts (a poll must not
// hold up the next by long), no proxy (the target is local, or named by
// the user).
func healthClient() *http.Client {
	return &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, DisableCompression: true},
	}
}

// pollResult is one health poll's outcome.
type pollResult int

const (
	pollRefused  pollResult = iota // nothing listens yet
	pollNotReady                   // something answered, but not OK yet
	pollNoPath                     // the path is unknown to this server
	pollOK
)

func poll(ctx context.Context, c *http.Client, url string) (pollResult, int) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return pollNotReady, 0
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return pollRefused, 0
		}
		return pollNotReady, 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return pollOK, resp.StatusCode
	case resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusMethodNotAllowed:
		return pollNoPath, resp.StatusCode
	}
	return pollNotReady, resp.StatusCode
}

// pollHealth is the health poller's goroutine: it polls every interval
// until the first success (then reports http_ready and the healthy marker
// and returns), the target exits, or ctx ends.
func (p *Process) pollHealth(ctx context.Context) {
	defer p.bg.Done()
	iv := p.spec.HealthInterval
	if iv <= 0 {
		iv = HealthInterval
	}
	c := healthClient()
	defer c.CloseIdleConnections()
	idx := 0
	var acceptedAt time.Duration
	tick := time.NewTicker(iv)
	defer tick.Stop()
	for {
		base := p.BaseURL()
		if base != "" {
			paths := healthPaths(serverlog.Kind(p.Kind()))
			for tries := 0; tries < len(paths); tries++ {
				path := paths[idx%len(paths)]
				res, status := poll(ctx, c, base+path)
				if ctx.Err() != nil {
					return
				}
				now := p.clock.Now()
				if res != pollRefused && acceptedAt == 0 {
					acceptedAt = now
				}
				if res == pollOK {
					p.reportHealthy(now, acceptedAt, base, path, status)
					return
				}
				if res != pollNoPath {
					break
				}
				idx++
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.exited:
			return
		case <-tick.C:
		}
	}
}

// reportHealthy emits http_ready (listener up → health OK) and the healthy
// marker.
func (p *Process) reportHealthy(now, acceptedAt time.Duration, base, path string, status int) {
	p.mu.Lock()
	start, from := p.listenAt, "listen_log_line"
	// The built-in engine reports http_ready in its own stage lines (which
	// may arrive just after the first OK poll); another server's log may
	// have too. One span per stage and run.
	own := p.logHTTPReady || p.kind == serverlog.KindTreni
	p.mu.Unlock()
	if start == 0 || start > now {
		start, from = acceptedAt, "first_accepted_connection"
	}
	if start == 0 || start > now {
		start, from = now, "first_ok_poll"
	}
	attrs := trace.Attrs{"url": base, "path": path, "status": status}
	if !p.attached && !own {
		p.emit(trace.Event{At: now, Kind: trace.KindStage, Stage: &trace.Span{
			Name: trace.StageHTTPReady, Start: start, End: now, Source: "launcher",
			Attrs: trace.Attrs{"url": base, "path": path, "from": from},
		}})
	} else {
		attrs["attached"] = true
	}
	p.emit(trace.Event{At: now, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthy, Attrs: attrs}})
	close(p.healthy)
}
