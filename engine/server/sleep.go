package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/treni-top/treni-top/engine/sched"
)

// Sleep mode (docs/ARCHITECTURE.md, "Sleep and wake"), vLLM's endpoints:
//
//	POST /sleep?level=1|2[&mode=abort|wait]   give the memory back
//	POST /wake_up[?tags=weights&tags=kv_cache] take it back (all by default)
//	GET  /is_sleeping                          {"is_sleeping": bool, ...}
//
// The state machine: awake → (sleep) → asleep with both tags, weights and
// kv_cache → (wake, all or some tags) → awake once no tag sleeps. One
// transition runs at a time. From the moment a sleep begins until the last
// tag wakes, completions are refused with 503 and Retry-After, or, with
// WakeOnRequest, the first request wakes the engine and is served. Requests
// already submitted when a sleep begins end at once with finish reason
// "abort" (mode=abort, vLLM's default) or run to their end before the
// engine sleeps (mode=wait). A sleep while asleep and a wake while awake
// change nothing and answer 200, as vLLM does.

// Wake-up tags, vLLM's names.
const (
	TagWeights = "weights"
	TagKVCache = "kv_cache"
)

// SleepOptions enable sleep mode on a Server (Options.Sleep).
type SleepOptions struct {
	// WakeOnRequest has a completion request that arrives while the
	// engine sleeps wake it and be served (scale to zero), instead of
	// the 503.
	WakeOnRequest bool
	// Phase, if set, is called with each timed part of a sleep or a wake
	// (serve reports them as stage lines).
	Phase func(sched.Phase)
}

// sleeper is the server's sleep mode: the state machine over the
// backend's sched.Sleeper.
type sleeper struct {
	s   *sched.Scheduler
	be  sched.Sleeper
	opt SleepOptions
	log func(format string, args ...any)
	// ctl serialises transitions (sleeps and wakes).
	ctl sync.Mutex
	// mu guards the state below. Handlers hold it for reading from their
	// gate check to their Submit, so that a sleep, which closes the gate
	// under the write lock, knows every request submitted before it.
	mu       sync.RWMutex
	gated    bool            // completions refused (or waking): a sleep began, some tag still sleeps
	level    int             // the current sleep's level; 0 awake
	sleeping map[string]bool // tags still asleep
	lastWake time.Duration   // the last full wake, for Retry-After
	// rearm is called when the engine is fully awake again, so that the
	// next request is reported as the wake's first_request.
	rearm func()
}

// asleepError refuses a request while the engine sleeps.
type asleepError struct{ retryAfter int }

func (e *asleepError) Error() string {
	return "the engine is asleep (POST /sleep); wake it with POST /wake_up, or start the server with --wake-on-request"
}

func newSleeper(s *sched.Scheduler, opt SleepOptions, logf func(string, ...any), rearm func()) (*sleeper, error) {
	be, ok := s.Backend().(sched.Sleeper)
	if !ok {
		return nil, fmt.Errorf("server: sleep mode: the %s backend cannot sleep", s.Backend().Name())
	}
	return &sleeper{s: s, be: be, opt: opt, log: logf, sleeping: map[string]bool{}, rearm: rearm}, nil
}

// routes adds the sleep mode's endpoints, behind auth.
func (sl *sleeper) routes(srv *Server) {
	srv.mux.HandleFunc("/sleep", srv.auth(srv.sleepHandler))
	srv.mux.HandleFunc("/wake_up", srv.auth(srv.wakeHandler))
	srv.mux.HandleFunc("/is_sleeping", srv.auth(srv.isSleepingHandler))
}

// state is a consistent snapshot of the sleep state.
func (sl *sleeper) state() (level int, tags []string) {
	sl.mu.RLock()
	defer sl.mu.RUnlock()
	for t, on := range sl.sleeping {
		if on {
			tags = append(tags, t)
		}
	}
	slices.Sort(tags)
	return sl.level, tags
}

// submit is Scheduler.Submit behind the sleep gate: refused while asleep
// (asleepError), or, with WakeOnRequest, after waking the engine.
func (srv *Server) submit(ctx context.Context, req sched.Request) (*sched.Stream, error) {
	sl := srv.sl
	if sl == nil {
		return srv.s.Submit(ctx, req)
	}
	for {
		sl.mu.RLock()
		if !sl.gated {
			st, err := srv.s.Submit(ctx, req)
			sl.mu.RUnlock()
			return st, err
		}
		retry := max(1, int(math.Ceil(sl.lastWake.Seconds())))
		sl.mu.RUnlock()
		if !sl.opt.WakeOnRequest {
			return nil, &asleepError{retryAfter: retry}
		}
		if _, err := sl.wake(ctx, nil, "request"); err != nil {
			return nil, fmt.Errorf("wake the engine for this request: %w", err)
		}
	}
}

// refusal maps a submit error of the sleep gate to its answer, setting
// Retry-After; nil for any other error.
func refusal(w http.ResponseWriter, err error) *apiError {
	var ae *asleepError
	if !errors.As(err, &ae) {
		return nil
	}
	w.Header().Set("Retry-After", strconv.Itoa(ae.retryAfter))
	return &apiError{status: http.StatusServiceUnavailable, Message: ae.Error(), Type: "server_error", Code: strp("engine_asleep")}
}

// sleep puts the engine to sleep at level (abort: end the requests under
// way; else let them finish first). It reports whether it slept (false:
// already asleep).
func (sl *sleeper) sleep(ctx context.Context, level int, abort bool) (bool, time.Duration, error) {
	sl.ctl.Lock()
	defer sl.ctl.Unlock()
	sl.mu.Lock()
	if sl.level != 0 {
		sl.mu.Unlock()
		return false, 0, nil
	}
	sl.gated = true
	sl.mu.Unlock()
	t0 := time.Now()
	var phases []sched.Phase
	ran := false
	err := sl.s.Exclusive(ctx, abort, func() error {
		ran = true
		sl.s.ResetPrefixCache() // the KV contents are about to be lost
		var err error
		phases, err = sl.be.Sleep(context.WithoutCancel(ctx), level)
		return err
	})
	took := time.Since(t0)
	sl.report(phases)
	if err != nil {
		if !ran {
			sl.mu.Lock()
			sl.gated = false // nothing happened: serve on
			sl.mu.Unlock()
			return false, took, fmt.Errorf("sleep: %w", err)
		}
		// The backend failed part-way: whatever it freed comes back, or
		// the engine stays gated and says so.
		w, k := sl.be.Asleep()
		sl.mu.Lock()
		sl.level, sl.sleeping = level, map[string]bool{}
		if w {
			sl.sleeping[TagWeights] = true
		}
		if k {
			sl.sleeping[TagKVCache] = true
		}
		if !w && !k {
			sl.level, sl.gated = 0, false
		}
		sl.mu.Unlock()
		if _, werr := sl.wakeLocked(context.WithoutCancel(ctx), nil); werr != nil {
			return false, took, fmt.Errorf("sleep at level %d failed (%w) and the engine could not be woken again (%v); restart the server", level, err, werr)
		}
		return false, took, fmt.Errorf("sleep at level %d failed, and the engine is awake again: %w", level, err)
	}
	sl.mu.Lock()
	sl.level, sl.sleeping = level, map[string]bool{TagWeights: true, TagKVCache: true}
	sl.mu.Unlock()
	sl.log("asleep at level %d after %.1f ms", level, float64(took)/float64(time.Millisecond))
	return true, took, nil
}

// wake wakes tags (nil: every tag still asleep), weights before the KV
// cache; why names the caller in the log. It returns the tags it woke.
func (sl *sleeper) wake(ctx context.Context, tags []string, why string) ([]string, error) {
	sl.ctl.Lock()
	defer sl.ctl.Unlock()
	t0 := time.Now()
	woke, err := sl.wakeLocked(ctx, tags)
	if err == nil && len(woke) > 0 {
		sl.log("woke %v (%s) in %.1f ms", woke, why, float64(time.Since(t0))/float64(time.Millisecond))
	}
	return woke, err
}

// wakeLocked is wake with ctl held.
func (sl *sleeper) wakeLocked(ctx context.Context, tags []string) ([]string, error) {
	sl.mu.RLock()
	want := map[string]bool{}
	if tags == nil {
		for t, on := range sl.sleeping {
			want[t] = on
		}
	} else {
		for _, t := range tags {
			want[t] = true
		}
	}
	for t := range want {
		if !sl.sleeping[t] {
			// vLLM does nothing when asked for a tag that is not asleep.
			sl.mu.RUnlock()
			return nil, nil
		}
	}
	sl.mu.RUnlock()
	if len(want) == 0 {
		return nil, nil
	}
	t0 := time.Now()
	var woke []string
	var phases []sched.Phase
	err := sl.s.Exclusive(ctx, false, func() error {
		// The parts run to their end once started, whoever went away.
		var err error
		phases, err = sl.be.Wake(context.WithoutCancel(ctx), want[TagWeights], want[TagKVCache])
		return err
	})
	// What woke, also when the wake failed part-way.
	w, k := sl.be.Asleep()
	for t, still := range map[string]bool{TagWeights: w, TagKVCache: k} {
		if want[t] && !still {
			woke = append(woke, t)
		}
	}
	slices.Sort(woke)
	sl.report(phases)
	sl.mu.Lock()
	for _, t := range woke {
		delete(sl.sleeping, t)
	}
	if len(sl.sleeping) == 0 && len(woke) > 0 {
		sl.level, sl.gated, sl.lastWake = 0, false, time.Since(t0)
		if sl.rearm != nil {
			sl.rearm()
		}
	}
	sl.mu.Unlock()
	return woke, err
}

func (sl *sleeper) report(phases []sched.Phase) {
	if sl.opt.Phase == nil {
		return
	}
	for _, p := range phases {
		sl.opt.Phase(p)
	}
}

// sleepHandler is POST /sleep?level=1|2[&mode=abort|wait].
func (srv *Server) sleepHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, "POST")
		return
	}
	q := r.URL.Query()
	level := sched.SleepLevel1
	if v := q.Get("level"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || (n != sched.SleepLevel1 && n != sched.SleepLevel2) {
			srv.fail(w, r, badRequest("level", "invalid_value", "level %q: use 1 (keep the weights in host memory, drop the KV cache) or 2 (drop both; a wake reads the weights from their files)", v))
			return
		}
		level = n
	}
	abort := true
	switch m := q.Get("mode"); m {
	case "", "abort":
	case "wait":
		abort = false
	default:
		srv.fail(w, r, badRequest("mode", "invalid_value", "mode %q: use abort (end the requests under way; the default) or wait (let them finish first)", m))
		return
	}
	slept, took, err := srv.sl.sleep(r.Context(), level, abort)
	if err != nil {
		srv.fail(w, r, &apiError{status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"})
		return
	}
	cur, tags := srv.sl.state()
	body := map[string]any{"is_sleeping": cur != 0, "level": cur, "sleeping_tags": tags}
	if slept {
		body["sleep_ms"] = float64(took) / float64(time.Millisecond)
	} else {
		body["note"] = fmt.Sprintf("already asleep at level %d; nothing done", cur)
	}
	writeJSON(w, 200, body)
}

// wakeHandler is POST /wake_up[?tags=weights&tags=kv_cache].
func (srv *Server) wakeHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, "POST")
		return
	}
	tags := r.URL.Query()["tags"]
	for _, t := range tags {
		if t != TagWeights && t != TagKVCache {
			srv.fail(w, r, badRequest("tags", "invalid_value", "tag %q: use %s or %s, or no tags to wake both", t, TagWeights, TagKVCache))
			return
		}
	}
	if len(tags) == 0 {
		tags = nil
	}
	t0 := time.Now()
	woke, err := srv.sl.wake(r.Context(), tags, "POST /wake_up")
	if err != nil {
		srv.fail(w, r, &apiError{status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"})
		return
	}
	cur, left := srv.sl.state()
	body := map[string]any{"is_sleeping": cur != 0, "level": cur, "sleeping_tags": left, "woken_tags": woke}
	if len(woke) > 0 {
		body["wake_ms"] = float64(time.Since(t0)) / float64(time.Millisecond)
	} else {
		body["note"] = "nothing asleep among the tags asked for; nothing done"
	}
	writeJSON(w, 200, body)
}

// isSleepingHandler is GET /is_sleeping.
func (srv *Server) isSleepingHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET")
		return
	}
	cur, tags := srv.sl.state()
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, 200, map[string]any{"is_sleeping": cur != 0, "level": cur, "sleeping_tags": tags})
}

// sleepMetrics writes treni_engine_sleep_state, vLLM's
// vllm:engine_sleep_state: 1 for the current state among awake,
// weights_offloaded (level 1) and discard_all (level 2).
func (srv *Server) sleepMetrics(b *bufio.Writer, model string) {
	if srv.sl == nil {
		return
	}
	cur, _ := srv.sl.state()
	fmt.Fprintf(b, "# HELP treni_engine_sleep_state Sleep mode: 1 for the current state (awake, weights_offloaded at level 1, discard_all at level 2).\n# TYPE treni_engine_sleep_state gauge\n")
	for i, name := range []string{"awake", "weights_offloaded", "discard_all"} {
		v := 0
		if cur == i {
			v = 1
		}
		fmt.Fprintf(b, "treni_engine_sleep_state{model_name=%s,sleep_state=%q} %d\n", model, name, v)
	}
}

// interrupted is the answer to a request the scheduler ended without a
// result: aborted by a sleep (503: send it again once the engine is
// awake), or failed (500); nil for a request that ended normally.
func interrupted(res sched.Result) *apiError {
	switch res.Finish {
	case sched.FinishAbort:
		return &apiError{status: http.StatusServiceUnavailable, Message: fmt.Sprintf("generation %v", res.Err), Type: "server_error", Code: strp("aborted_by_sleep")}
	case sched.FinishError, sched.FinishCancelled:
		return &apiError{status: http.StatusInternalServerError, Message: fmt.Sprintf("generation failed: %v", res.Err), Type: "server_error"}
	}
	return nil
}
