package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/treni-top/treni-top/probe"
	"github.com/treni-top/treni-top/trace"
)

// Sleep cycles (docs/ARCHITECTURE.md, "Sleep and wake"): after its cold
// runs the runner puts the target to sleep and wakes it, Config.SleepCycles
// times, through vLLM's sleep mode endpoints. Each wake is a run of its
// own in the same process: its run_start is the wake's request, its stages
// are the target's own (the built-in engine's weights_restore, kv_alloc,
// graph_capture and first_request lines, vLLM's "It took … to wake up"),
// its cold request is the first after the wake, and the warm requests
// follow as after a cold start.

// DefaultSleepFor is how long a target sleeps before each wake when
// Config.SleepFor is zero: long enough that the wake is not measured while
// the driver still finishes giving the sleep's memory back (the lent H200
// copied the weights back 13% slower when woken at once than 25 ms or more
// after the sleep; docs/BENCHMARKS.md).
const DefaultSleepFor = time.Second

// SleepController puts a target to sleep and wakes it.
type SleepController interface {
	// Sleep puts t to sleep at level (1: weights kept in host memory, 2:
	// dropped) and returns once it sleeps.
	Sleep(ctx context.Context, t Target, level int) error
	// Wake wakes t and returns once it can serve again.
	Wake(ctx context.Context, t Target) error
}

// HTTPSleep is SleepController over vLLM's endpoints, POST /sleep?level=N
// and POST /wake_up, which the built-in engine serves too (serve
// --enable-sleep-mode).
type HTTPSleep struct {
	// Client sends the requests (nil: a client without timeout; the
	// caller's context bounds them).
	Client *http.Client
	// APIKey, when set, is sent as "Authorization: Bearer KEY".
	APIKey string
}

// Sleep is POST /sleep?level=level.
func (h HTTPSleep) Sleep(ctx context.Context, t Target, level int) error {
	return h.post(ctx, strings.TrimRight(t.BaseURL(), "/")+"/sleep?level="+strconv.Itoa(level))
}

// Wake is POST /wake_up.
func (h HTTPSleep) Wake(ctx context.Context, t Target) error {
	return h.post(ctx, strings.TrimRight(t.BaseURL(), "/")+"/wake_up")
}

func (h HTTPSleep) post(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	if h.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+h.APIKey)
	}
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusNotFound:
		return fmt.Errorf("POST %s answered 404: the target serves no sleep mode; start the built-in engine with serve --enable-sleep-mode (run --sleep-cycles does), or vLLM with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1", url)
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("POST %s answered %s: the target wants an API key; pass the one it was started with", url, resp.Status)
	}
	return fmt.Errorf("POST %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
}

// sleepCycles runs the planned sleep cycles, stopping at the first that
// fails (the target most likely cannot sleep at all).
func (r *Runner) sleepCycles(ctx context.Context) error {
	for i := 1; i <= r.cfg.SleepCycles; i++ {
		r.wakes = i
		if err := r.sleepCycle(ctx, i, r.cfg.SleepCycles); err != nil {
			if ctx.Err() == nil && i < r.cfg.SleepCycles {
				return fmt.Errorf("sleep cycle %d of %d failed, so the cycles after it were not run: %w", i, r.cfg.SleepCycles, err)
			}
			return err
		}
	}
	return nil
}

// sleepCycle puts the current target to sleep, waits SleepFor, and wakes
// it as run wake (of wakes), then sends the request sequence. Failures are
// reported on the event stream (the sleep marker's error, or the wake
// run's run_failed) and returned.
func (r *Runner) sleepCycle(ctx context.Context, wake, wakes int) error {
	t := r.current()
	if t == nil {
		return errors.New("no target to put to sleep")
	}
	select {
	case <-t.Exited():
		return errors.New("the target has exited; there is nothing to put to sleep")
	default:
	}
	level := r.cfg.SleepLevel
	prev := r.RunIndex()
	t0 := r.cfg.Clock.Now()
	err := r.sleeper.Sleep(ctx, t, level)
	attrs := trace.Attrs{trace.AttrSleepLevel: level, trace.AttrWake: wake, trace.AttrWakes: wakes, "http_ms": float64(r.cfg.Clock.Now()-t0) / float64(time.Millisecond)}
	if err != nil {
		attrs["error"] = err.Error()
		r.marker(prev, trace.MarkerSleep, attrs)
		r.setErr(err)
		return fmt.Errorf("put the target to sleep: %w", err)
	}
	r.marker(prev, trace.MarkerSleep, attrs)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.cfg.SleepFor):
	}
	run := r.nextRun()
	r.sampler.SetRun(run)
	r.sampler.SetInterval(probe.ColdInterval)
	defer r.sampler.SetInterval(probe.DefaultInterval)
	r.marker(run, trace.MarkerRunStart, trace.Attrs{"run": run, trace.AttrWake: wake, trace.AttrWakes: wakes, trace.AttrSleepLevel: level})
	if rs, ok := t.(interface{ SetRun(int) }); ok {
		rs.SetRun(run) // the target's own lines from now on belong to the wake
	}
	err = r.sleeper.Wake(ctx, t)
	if err != nil {
		err = fmt.Errorf("wake the target: %w", err)
	} else {
		err = r.sequence(ctx, t, run)
	}
	r.setErr(err)
	if err != nil && ctx.Err() == nil {
		r.marker(run, trace.MarkerRunFailed, trace.Attrs{"error": err.Error()})
	}
	return err
}

// setErr records the last run's outcome (Err).
func (r *Runner) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
}

// SleepWake puts the target to sleep and wakes it once more (the z key),
// a wake run of its own after the planned ones. It returns at once; the
// cycle happens on Run's goroutine after whatever is in progress.
func (r *Runner) SleepWake() {
	r.send(cmdSleepWake, "sleep_wake")
}
