package launch

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/httpserve"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// AttachSpec names a server that is already running.
type AttachSpec struct {
	// URL is its base URL (http://host:port).
	URL string
	// PID, when given, is its main process: the samplers watch its tree.
	PID int
	// Kind forces the server kind ("" probes as a generic OpenAI server;
	// ollama switches the health path).
	Kind serverlog.Kind
	// APIKey, when set, is sent as "Authorization: Bearer KEY" with every
	// health poll.
	APIKey string
	// HealthWait is how long the caller waits for the server to answer
	// (--timeout), for the message that says it waits.
	HealthWait time.Duration
}

// Attach wraps a running server. It polls health in the background (the
// healthy marker carries attached=true; no cold stages are reported) and
// never signals the server: Stop only stops watching it.
func Attach(ctx context.Context, spec AttachSpec, sink trace.Sink, clock trace.Clock, run int) (*Process, error) {
	u, ok := httpserve.ParseHTTPURL(spec.URL)
	if !ok {
		return nil, fmt.Errorf("attach: %q is not a server URL; give its base, e.g. http://127.0.0.1:8000", spec.URL)
	}
	if spec.PID < 0 {
		return nil, fmt.Errorf("attach: pid %d is not a process id", spec.PID)
	}
	if spec.PID > 0 {
		if _, err := readStat(spec.PID); err != nil {
			return nil, fmt.Errorf("attach: no process %d on this machine (%w); drop --pid to attach without process samplers", spec.PID, err)
		}
	}
	p := newProcess(Spec{URL: spec.URL, Kind: spec.Kind, APIKey: spec.APIKey, HealthWait: spec.HealthWait}, sink, clock, run)
	p.attached = true
	p.pid = spec.PID
	p.kind = spec.Kind
	if p.kind == "" {
		p.kind = serverlog.KindUnknown
		if u.Port() == "11434" {
			p.kind = serverlog.KindOllama
		}
	}
	p.parser = serverlog.NewParser(p.kind, clock)
	p.url, p.urlFixed = strings.TrimRight(spec.URL, "/"), true
	bgCtx, cancel := context.WithCancel(ctx)
	p.cancelBG = cancel
	p.bg.Add(1)
	go p.pollHealth(bgCtx)
	go func() {
		// Watching ends when Stop cancels bgCtx or ctx ends, not when the
		// poller returns after the first success.
		<-bgCtx.Done()
		p.bg.Wait()
		p.mu.Lock()
		if p.exit == nil {
			p.exit = &Exit{Expected: true, At: clock.Now()}
		}
		p.mu.Unlock()
		close(p.exited)
		close(p.done)
	}()
	return p, nil
}
