// Package runner orchestrates a traced run: optional page-cache eviction
// with residency evidence, the launch of the target, samplers on its process
// tree (every 10 ms during the cold start, every 100 ms after), the cold
// request sequence once it is healthy (cold_1, warm-up, warm repeats), and
// the interactive actions the TUI's keys ask for (new cold run, warm probe,
// evict and restart, save, quit).
//
// It knows the target only through the small Target and Launcher
// interfaces, which engine/launch's Process satisfies; cmd wires the two
// together, so probe does not depend on engine.
package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/treni-top/treni-top/probe"
	"github.com/treni-top/treni-top/trace"
)

// Target is a launched or attached server.
type Target interface {
	// PID is the main process (0 when unknown, e.g. attach without --pid).
	PID() int
	// PIDs is the live process tree.
	PIDs() []int
	// BaseURL is where the server answers (http://host:port).
	BaseURL() string
	// Kind is the server kind (treni, vllm, ollama, …).
	Kind() string
	// WaitHealthy blocks until the first successful health poll, the
	// target's exit (an error), or ctx's end.
	WaitHealthy(ctx context.Context) error
	// Exited is closed when the target has exited.
	Exited() <-chan struct{}
	// Stop stops the target's whole tree (or stops watching an attached
	// server) and waits for it.
	Stop(grace time.Duration)
}

// Launcher starts the target for cold run number run; every event the
// target produces carries that run index.
type Launcher interface {
	Launch(ctx context.Context, run int) (Target, error)
}

// LaunchFunc adapts a function to Launcher.
type LaunchFunc func(ctx context.Context, run int) (Target, error)

// Launch calls f.
func (f LaunchFunc) Launch(ctx context.Context, run int) (Target, error) { return f(ctx, run) }

// Probe describes one request of the sequence.
type Probe struct {
	Run   int
	Label string // cold_1, warmup_1, warm_3, …
	Phase trace.Phase
}

// Prober sends one request to the target and reports it on the event
// stream itself (live updates and the final request event, with Run set).
// It returns the finished request.
type Prober interface {
	Probe(ctx context.Context, target Target, p Probe) (trace.Request, error)
}

// PageCache evicts weight files and measures their residency; probe/pagecache
// provides it (see PageCacheFuncs).
type PageCache interface {
	Residency(files []string) (resident, total int64, err error)
	Evict(files []string) error
}

// Config is what a Runner needs. Sink, Clock and Launcher are required.
type Config struct {
	Sink     trace.Sink
	Clock    trace.Clock
	Launcher Launcher
	// Prober sends the cold sequence; nil sends no requests.
	Prober Prober
	// Samplers are built for the current target; nil means none. See
	// DefaultSamplers.
	Samplers func(pid func() int, pids func() []int) []probe.Sampler
	// WeightFiles lists the model's weight files (residency evidence,
	// eviction); nil or empty means unknown.
	WeightFiles func() []string
	// PageCache measures and evicts; nil disables both.
	PageCache PageCache
	// EvictPageCache evicts the weight files (and verifies it) before
	// each of the ColdRuns launches; a run whose eviction fails or cannot
	// be verified fails before its launch (see ColdRuns).
	EvictPageCache bool
	// BeforeLaunch, when set, is asked before each launch, after the
	// eviction and before the run_start marker, so its time is not in the
	// cold window: an error (the target's port already taken) fails the
	// run without launching it.
	BeforeLaunch func(ctx context.Context) error
	// ColdRuns is how many independent cold starts Run records before it
	// serves the controller's actions (0 or 1: one). Each is a fresh
	// process with its own cold request and warm requests, evicted first
	// with EvictPageCache. The first run that fails ends the series: the
	// runs after it are not started, so a session never holds silently
	// fewer runs than asked (Run's error says how many completed).
	ColdRuns int
	// SleepCycles, when positive, puts the target to sleep and wakes it
	// that many times after the cold runs (sleep.go): each wake is a run of
	// its own, with its cold request and warm requests. SleepLevel is the
	// sleep level (1, the default, or 2), SleepFor how long the target
	// sleeps before each wake (0: DefaultSleepFor), Sleeper how (nil:
	// HTTPSleep).
	SleepCycles int
	SleepLevel  int
	SleepFor    time.Duration
	Sleeper     SleepController
	// Warmup and Repeat count the warm-up (not measured) and measured warm
	// requests after cold_1.
	Warmup, Repeat int
	// Attached: the target was already running, so there is no cold
	// request and no cold restart (NewColdRun and EvictAndRestart are
	// refused).
	Attached bool
	// HealthTimeout bounds the wait for healthy (0: 10 minutes).
	HealthTimeout time.Duration
	// Grace is the SIGINT→SIGKILL delay when stopping the target (0: 10 s).
	Grace time.Duration
	// ExitAfterSequence makes Run return after the first cold sequence
	// (headless without --keep-running), stopping the target.
	ExitAfterSequence bool
	// Save makes the session durable now (the recorder's Sync) and
	// returns its path.
	Save func() (string, error)
	// ServerMetrics scrapes the target's own Prometheus page (/metrics)
	// once it is healthy, when it has one (see probe/scrape).
	ServerMetrics bool
	// ServerMetricsInterval is the scrape interval (0: scrape.DefaultInterval).
	ServerMetricsInterval time.Duration
	// Header goes with every /metrics scrape (the API key, as the prober
	// and the health poll send it).
	Header http.Header
}

// Runner runs one traced session of one target. Create it with New, call Run
// from the goroutine that owns the session, and the controller methods from
// anywhere (the TUI).
type Runner struct {
	cfg     Config
	sampler *probe.Runner

	cmds chan command

	mu      sync.Mutex
	target  Target
	run     int
	quit    context.CancelFunc
	quitReq bool
	lastErr error
	extra   map[int]int // warm probes sent by WarmProbe, per run

	scrape scraper // the current target's /metrics scraper

	sleeper SleepController // sleep cycles (sleep.go)
	wakes   int             // wakes done (Run's goroutine)
}

type command int

const (
	cmdColdRun command = iota
	cmdWarmProbe
	cmdEvictRestart
	cmdSleepWake
)

// New checks cfg and builds a Runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Sink == nil || cfg.Launcher == nil {
		return nil, errors.New("runner: Sink and Launcher are required")
	}
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = 10 * time.Minute
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 10 * time.Second
	}
	if cfg.ColdRuns <= 0 {
		cfg.ColdRuns = 1
	}
	if cfg.Attached && cfg.ColdRuns > 1 {
		return nil, errors.New("runner: an attached server has no cold start to repeat; ColdRuns must be 1")
	}
	switch {
	case cfg.SleepCycles < 0:
		return nil, fmt.Errorf("runner: %d sleep cycles; give 0 or more", cfg.SleepCycles)
	case cfg.SleepLevel == 0:
		cfg.SleepLevel = 1
	case cfg.SleepLevel != 1 && cfg.SleepLevel != 2:
		return nil, fmt.Errorf("runner: sleep level %d: use 1 (weights kept in host memory) or 2 (dropped)", cfg.SleepLevel)
	}
	if cfg.SleepFor <= 0 {
		cfg.SleepFor = DefaultSleepFor
	}
	r := &Runner{cfg: cfg, cmds: make(chan command, 8), extra: map[int]int{}, sleeper: cfg.Sleeper}
	if r.sleeper == nil {
		r.sleeper = HTTPSleep{}
	}
	var samplers []probe.Sampler
	if cfg.Samplers != nil {
		samplers = cfg.Samplers(r.pid, r.pids)
	}
	r.sampler = probe.NewRunner(cfg.Sink, cfg.Clock, probe.ColdInterval, samplers...)
	return r, nil
}

func (r *Runner) current() Target {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.target
}

func (r *Runner) pid() int {
	if t := r.current(); t != nil {
		return t.PID()
	}
	return 0
}

func (r *Runner) pids() []int {
	if t := r.current(); t != nil {
		return t.PIDs()
	}
	return nil
}

// RunIndex is the current cold run's index.
func (r *Runner) RunIndex() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.run
}

// Target is the current target (nil before the first launch).
func (r *Runner) Target() Target { return r.current() }

// Err is the last cold run's failure, if any.
func (r *Runner) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

func (r *Runner) emit(e trace.Event) {
	if e.At == 0 {
		e.At = r.cfg.Clock.Now()
	}
	r.cfg.Sink.Emit(e)
}

func (r *Runner) marker(run int, name string, attrs trace.Attrs) {
	r.emit(trace.Event{Kind: trace.KindMarker, Run: run, Marker: &trace.Marker{Name: name, Attrs: attrs}})
}

// Run launches the target and runs the cold sequence, ColdRuns times (each
// a fresh launch), then serves the controller's actions, sampling all
// along, until ctx ends or Quit is called (or, with ExitAfterSequence,
// until the planned cold runs are done). It stops the target before
// returning. The error is the failed cold run's when ExitAfterSequence is
// set; otherwise failures are reported on the event stream and Run returns
// nil on a quit.
func (r *Runner) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	r.quit = cancel
	quitEarly := r.quitReq
	r.mu.Unlock()
	if quitEarly {
		return nil
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = r.sampler.Run(ctx)
	}()
	defer func() {
		r.stopTarget()
		cancel()
		wg.Wait()
		r.scrape.wait()
	}()

	err := r.plannedRuns(ctx)
	if err == nil && r.cfg.SleepCycles > 0 && ctx.Err() == nil {
		err = r.sleepCycles(ctx)
	}
	if r.cfg.ExitAfterSequence {
		if ctx.Err() != nil && err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-r.cmds:
			switch c {
			case cmdColdRun, cmdEvictRestart:
				r.stopTarget()
				_ = r.coldRun(ctx, r.nextRun(), c == cmdEvictRestart)
			case cmdWarmProbe:
				r.warmProbe(ctx)
			case cmdSleepWake:
				r.wakes++
				_ = r.sleepCycle(ctx, r.wakes, max(r.wakes, r.cfg.SleepCycles))
			}
		}
	}
}

// plannedRuns records the ColdRuns cold starts one after the other, each
// after the previous target has stopped, and stops at the first that
// fails: later runs would most likely fail the same way (a crash, a port in
// use, an eviction that cannot be verified) and, for up to --timeout each,
// add nothing a comparison could use.
func (r *Runner) plannedRuns(ctx context.Context) error {
	n := r.cfg.ColdRuns
	for i := 0; i < n; i++ {
		run := 0
		if i > 0 {
			r.stopTarget()
			run = r.nextRun()
		}
		err := r.coldRun(ctx, run, r.cfg.EvictPageCache)
		switch {
		case err != nil && n > 1 && ctx.Err() == nil:
			return fmt.Errorf("cold run %d of %d failed, so %s not started (the session holds %s): %w", i+1, n, plural(n-i-1, "the run after it was", "the %d runs after it were"), plural(i, "1 complete cold run", "%d complete cold runs"), err)
		case err != nil || ctx.Err() != nil:
			return err
		}
	}
	return nil
}

// plural is one when n is 1, else many with n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}

// nextRun advances the run index for a new cold run and returns it.
func (r *Runner) nextRun() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.run++
	return r.run
}

// stopTarget stops the current target, if any, and waits for it.
func (r *Runner) stopTarget() {
	r.scrape.stop()
	if t := r.current(); t != nil {
		t.Stop(r.cfg.Grace)
	}
}

// coldRun is one cold start: evidence, eviction, launch, healthy, the
// request sequence.
func (r *Runner) coldRun(ctx context.Context, run int, evict bool) error {
	err := r.coldRunInner(ctx, run, evict)
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		r.marker(run, trace.MarkerRunFailed, trace.Attrs{"error": err.Error()})
	}
	r.sampler.SetInterval(probe.DefaultInterval)
	return err
}

func (r *Runner) coldRunInner(ctx context.Context, run int, evict bool) error {
	r.sampler.SetRun(run)
	r.sampler.SetInterval(probe.ColdInterval)
	evicted := false
	if !r.cfg.Attached {
		var err error
		evicted, err = r.pageCacheEvidence(run, evict)
		if err != nil && evict {
			// The user asked for a page-cache-cold run. Launching anyway
			// would record a run that is not what was asked for (and,
			// among --cold-runs, mix warm starts into the cold ones), so
			// the run fails before its launch; the markers say why.
			return err
		}
	}
	if !r.cfg.Attached && r.cfg.BeforeLaunch != nil {
		if err := r.cfg.BeforeLaunch(ctx); err != nil {
			return err
		}
	}
	if r.cfg.Attached {
		// No cold start to time: a run_start marker would make the
		// analysis read "session start → healthy" as one.
		r.marker(run, trace.MarkerAttached, nil)
	} else {
		attrs := trace.Attrs{"run": run, "page_cache_evicted": evicted}
		if n := r.cfg.ColdRuns; n > 1 && run < n {
			// Its place in the series --cold-runs asked for.
			attrs["cold_runs"] = n
		}
		r.marker(run, trace.MarkerRunStart, attrs)
	}
	t, err := r.cfg.Launcher.Launch(ctx, run)
	if err != nil {
		return fmt.Errorf("launch run %d: %w", run, err)
	}
	r.mu.Lock()
	r.target = t
	r.mu.Unlock()

	hctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
	err = t.WaitHealthy(hctx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			if t.BaseURL() == "" {
				// Waiting longer would not help: nothing was polled.
				return fmt.Errorf("target not healthy after %v: %w", r.cfg.HealthTimeout, err)
			}
			return fmt.Errorf("target not healthy after %v at %s (raise --timeout, or check --url): %w", r.cfg.HealthTimeout, t.BaseURL(), err)
		}
		return err
	}
	if r.cfg.ServerMetrics {
		r.startScraper(ctx, run, t)
	}
	return r.sequence(ctx, t, run)
}

// pageCacheEvidence records the weight files' residency before launch and,
// when asked, evicts them and records residency again: the evidence a
// "page-cache cold" label needs (docs/ARCHITECTURE.md, "Measurements"). It reports whether the
// eviction was done and verified to have dropped most of the bytes.
func (r *Runner) pageCacheEvidence(run int, evict bool) (bool, error) {
	pc := r.cfg.PageCache
	var files []string
	if r.cfg.WeightFiles != nil {
		files = r.cfg.WeightFiles()
	}
	if pc == nil || len(files) == 0 {
		if evict {
			err := errors.New("cannot evict the page cache: the model's weight files are not known (pass --model DIR, or a model path in the command)")
			r.marker(run, trace.MarkerEvicted, trace.Attrs{"ok": false, "error": err.Error()})
			return false, err
		}
		return false, nil
	}
	res, total, err := pc.Residency(files)
	if err != nil {
		r.marker(run, trace.MarkerResidency, trace.Attrs{"when": "before_launch", "error": err.Error(), "files": len(files)})
		return false, fmt.Errorf("measure residency of the weight files: %w", err)
	}
	when := "before_launch"
	if evict {
		when = "before_evict"
	}
	r.marker(run, trace.MarkerResidency, trace.Attrs{"when": when, "resident_bytes": res, "total_bytes": total, "files": len(files)})
	if !evict {
		return false, nil
	}
	if err := pc.Evict(files); err != nil {
		r.marker(run, trace.MarkerEvicted, trace.Attrs{"ok": false, "error": err.Error(), "files": len(files)})
		return false, fmt.Errorf("evict the weight files from the page cache: %w", err)
	}
	res2, total2, err := pc.Residency(files)
	if err != nil {
		r.marker(run, trace.MarkerEvicted, trace.Attrs{"ok": false, "error": "eviction done but not verified: " + err.Error()})
		return false, fmt.Errorf("verify the eviction: %w", err)
	}
	// Verified cold: at most 1% of the weight bytes still resident (a few
	// pages can be re-read by anything touching the files meanwhile).
	ok := total2 > 0 && float64(res2) <= 0.01*float64(total2)
	r.marker(run, trace.MarkerResidency, trace.Attrs{"when": "after_evict", "resident_bytes": res2, "total_bytes": total2, "files": len(files)})
	r.marker(run, trace.MarkerEvicted, trace.Attrs{"ok": ok, "resident_bytes": res2, "total_bytes": total2, "files": len(files)})
	if !ok {
		return false, fmt.Errorf("eviction left %d of %d weight bytes resident (mapped by a running process?); this run is not page-cache cold", res2, total2)
	}
	return true, nil
}

// sequence sends cold_1 (not for an attached server), the warm-ups and the
// measured warm requests.
func (r *Runner) sequence(ctx context.Context, t Target, run int) error {
	if r.cfg.Prober == nil {
		r.sampler.SetInterval(probe.DefaultInterval)
		return nil
	}
	var plan []Probe
	if !r.cfg.Attached {
		plan = append(plan, Probe{Run: run, Label: "cold_1", Phase: trace.PhaseCold})
	}
	for i := 1; i <= r.cfg.Warmup; i++ {
		plan = append(plan, Probe{Run: run, Label: "warmup_" + strconv.Itoa(i), Phase: trace.PhaseWarmup})
	}
	for i := 1; i <= r.cfg.Repeat; i++ {
		plan = append(plan, Probe{Run: run, Label: "warm_" + strconv.Itoa(i), Phase: trace.PhaseWarm})
	}
	var firstErr error
	failed := 0
	for _, p := range plan {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-t.Exited():
			return fmt.Errorf("target exited during the request sequence (before %s)", p.Label)
		default:
		}
		if _, err := r.cfg.Prober.Probe(ctx, t, p); err != nil {
			failed++
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", p.Label, err)
			}
		}
		if p.Phase == trace.PhaseCold {
			// The cold start is over with the cold request; warm requests
			// are sampled at the normal rate (issue 5).
			r.sampler.SetInterval(probe.DefaultInterval)
		}
	}
	r.marker(run, trace.MarkerSequenceDone, trace.Attrs{"requests": len(plan), "errors": failed})
	if firstErr != nil {
		return fmt.Errorf("%d of %d requests failed, first %w", failed, len(plan), firstErr)
	}
	return nil
}

// warmProbe sends one more measured warm request to the current target.
func (r *Runner) warmProbe(ctx context.Context) {
	t := r.current()
	if t == nil || r.cfg.Prober == nil {
		return
	}
	select {
	case <-t.Exited():
		return
	default:
	}
	r.mu.Lock()
	run := r.run
	r.mu.Unlock()
	r.mu.Lock()
	r.extra[run]++
	n := r.cfg.Repeat + r.extra[run]
	r.mu.Unlock()
	// Numbered after the sequence's warm requests: warm_6 follows warm_5.
	_, _ = r.cfg.Prober.Probe(ctx, t, Probe{Run: run, Label: "warm_" + strconv.Itoa(n), Phase: trace.PhaseWarm})
}

// send queues an action for Run's goroutine, or reports why not.
func (r *Runner) send(c command, what string) {
	select {
	case r.cmds <- c:
	default:
		// A full queue means the key was pressed many times while a cold
		// run was in progress; the extra presses are dropped, visibly.
		r.refuse(what, "busy: earlier actions are still queued")
	}
}

// refuse reports an action that cannot be done, on the stream the UI reads.
func (r *Runner) refuse(what, why string) {
	r.marker(r.RunIndex(), trace.MarkerActionRefused, trace.Attrs{"action": what, "reason": why})
}

// NewColdRun stops the target and starts it again as a new cold run (the
// `r` key); its events carry the next run index. It returns at once; the
// run happens on Run's goroutine after whatever is in progress. Refusals
// are reported as trace.MarkerActionRefused.
func (r *Runner) NewColdRun() {
	if r.cfg.Attached {
		r.refuse("new_cold_run", "an attached server cannot be restarted cold by treni-top; restart it yourself and attach again")
		return
	}
	r.send(cmdColdRun, "new_cold_run")
}

// WarmProbe sends one more warm request (the `w` key).
func (r *Runner) WarmProbe() {
	if r.cfg.Prober == nil {
		r.refuse("warm_probe", "no request prober is wired")
		return
	}
	r.send(cmdWarmProbe, "warm_probe")
}

// EvictAndRestart stops the target, evicts the weight files from the page
// cache (with residency evidence) and starts a new cold run (the `e` key).
func (r *Runner) EvictAndRestart() {
	if r.cfg.Attached {
		r.refuse("evict_and_restart", "an attached server cannot be restarted cold by treni-top")
		return
	}
	if r.cfg.PageCache == nil {
		r.refuse("evict_and_restart", "page-cache eviction is not available")
		return
	}
	r.send(cmdEvictRestart, "evict_and_restart")
}

// Save makes the session file durable now (the `s` key), marks it, and
// returns the file's path.
func (r *Runner) Save() (string, error) {
	if r.cfg.Save == nil {
		return "", errors.New("this session is not being recorded (--no-record)")
	}
	path, err := r.cfg.Save()
	if err != nil {
		return path, err
	}
	r.marker(r.RunIndex(), trace.MarkerSaved, trace.Attrs{"path": path})
	return path, nil
}

// Quit ends Run: the target is stopped cleanly and Run returns (the `q`
// key). Safe to call before Run starts and more than once.
func (r *Runner) Quit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.quitReq = true
	if r.quit != nil {
		r.quit()
	}
}
