package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
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
	pollRefused      pollResult = iota // nothing listens yet
	pollNotReady                       // something answered, but not OK yet
	pollNoPath                         // the path is unknown to this server
	pollUnauthorized                   // 401 or 403: the server wants a key it did not get
	pollOK
)

// pollOutcome is a poll's result, the HTTP status when there was one, and
// why it was not OK, for messages ("connection refused", "HTTP 503").
type pollOutcome struct {
	res    pollResult
	status int
	reason string
}

func poll(ctx context.Context, c *http.Client, url, apiKey string) pollOutcome {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return pollOutcome{res: pollNotReady, reason: err.Error()}
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return pollOutcome{res: pollRefused, reason: "connection refused"}
		}
		var ue *neturl.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
			return pollOutcome{res: pollNotReady, reason: "no answer within a second"}
		case errors.As(err, &ue):
			return pollOutcome{res: pollNotReady, reason: ue.Err.Error()}
		}
		return pollOutcome{res: pollNotReady, reason: err.Error()}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	o := pollOutcome{status: resp.StatusCode, reason: "HTTP " + resp.Status}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		o.res = pollOK
	case resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusMethodNotAllowed:
		o.res = pollNoPath
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden:
		o.res = pollUnauthorized
	default:
		o.res = pollNotReady
	}
	return o
}

// noURLReason is why a target without a URL is not polled yet.
const noURLReason = "no URL to poll: none could be inferred from the command or the server kind; waiting for a listening line in its output (pass --url http://HOST:PORT to name it)"

// pollHealth is the health poller's goroutine: it polls every interval
// until the first success (then checks that the launched tree holds the
// listener, reports http_ready and the healthy marker and returns), a
// refusal for want of an API key, the target's exit, or ctx's end.
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
		if base == "" {
			p.noteWait("", noURLReason)
		} else {
			paths := healthPaths(serverlog.Kind(p.Kind()))
			for tries := 0; tries < len(paths); tries++ {
				path := paths[idx%len(paths)]
				o := poll(ctx, c, base+path, p.spec.APIKey)
				if ctx.Err() != nil {
					return
				}
				now := p.clock.Now()
				if o.res != pollRefused && acceptedAt == 0 {
					acceptedAt = now
				}
				switch o.res {
				case pollOK:
					owner := ""
					if !p.attached {
						var err error
						if owner, err = p.checkListener(ctx, base); err != nil {
							p.failHealth(err)
							return
						}
					}
					p.reportHealthy(now, acceptedAt, base, path, o.status, owner)
					return
				case pollUnauthorized:
					p.failHealth(authError(base+path, o.reason, p.spec.APIKey != ""))
					return
				case pollNoPath:
					idx++
					continue
				}
				p.noteWait(base+path, o.reason)
				break
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

// authError is a 401/403 answer to the health poll: waiting longer would
// not change it, so it ends the wait naming the flag.
func authError(url, reason string, keySent bool) error {
	if keySent {
		return fmt.Errorf("%s answered %s: the server refused the API key given (--api-key or OPENAI_API_KEY); check it", url, reason)
	}
	return fmt.Errorf("%s answered %s: the server wants an API key; pass --api-key KEY (or set OPENAI_API_KEY)", url, reason)
}

// noteWait records the last poll's outcome (for the timeout's message)
// and, when it is news, says why the wait goes on: for an attached server
// every new reason (it may never come up), for a launched one only the
// lack of a URL (refused connections are how every server starts).
func (p *Process) noteWait(url, reason string) {
	p.mu.Lock()
	p.lastPoll = reason
	if url != "" {
		p.lastPoll = url + ": " + reason
	}
	news := reason != p.waitReason && (p.attached || url == "")
	p.waitReason = reason
	p.mu.Unlock()
	if !news {
		return
	}
	attrs := trace.Attrs{"url": url, "reason": reason}
	if p.spec.HealthWait > 0 {
		attrs["timeout_s"] = p.spec.HealthWait.Seconds()
	}
	p.emit(trace.Event{At: p.clock.Now(), Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerHealthWait, Attrs: attrs}})
}

// failHealth ends the wait for healthy with err (WaitHealthy returns it).
func (p *Process) failHealth(err error) {
	p.mu.Lock()
	if p.healthErr == nil {
		p.healthErr = err
		close(p.unhealthy)
	}
	p.mu.Unlock()
}

// reportHealthy emits http_ready (listener up → health OK) and the healthy
// marker.
func (p *Process) reportHealthy(now, acceptedAt time.Duration, base, path string, status int, owner string) {
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
	if owner != "" {
		attrs["listener"] = owner
	}
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
