// Package launch starts, watches and stops the target of a traced run: the
// built-in engine as a child process or any external server command, in its
// own process group. It turns the target's output into log events and, via
// a log parser, into stage spans; polls its health endpoint every 10 ms; and
// reports its exit, distinguishing a stop treni-top asked for from a crash.
// Attach wraps a server that is already running.
package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// Defaults.
const (
	// DefaultGrace is how long a target gets between SIGINT and SIGKILL
	// when its context ends (Stop takes its own grace).
	DefaultGrace = 10 * time.Second
	// HealthInterval is the health polling period (issue 5: every 10 ms, so
	// http_ready is measured to within a poll).
	HealthInterval = 10 * time.Millisecond
	// TailLines is how many of the last output lines a crash report carries.
	TailLines = 20
	// detectLines is how many first lines kind detection may look at when
	// the command alone does not tell.
	detectLines = 50
	// maxLineBytes bounds one log line; the rest of a longer line is dropped.
	maxLineBytes = 64 << 10
	// drainAfterExit bounds how long output still in the pipes is read
	// after the target exits, before its exit is reported.
	drainAfterExit = 500 * time.Millisecond
)

// Spec says what to launch.
type Spec struct {
	// Command is the program and its arguments.
	Command []string
	// Env is added to the inherited environment (KEY=VALUE; later wins).
	Env []string
	// Dir is the working directory ("" for ours).
	Dir string
	// URL is the server's base URL (http://host:port). Empty: inferred from
	// the command (--port/--host), the kind's default port, or the
	// listener-up log line.
	URL string
	// Kind forces the server kind; empty means detect.
	Kind serverlog.Kind
	// Builtin says the command is the built-in engine that run starts
	// itself (BuiltinSpec); its process start event says so.
	Builtin bool
	// Grace is the SIGINT→SIGKILL delay used when ctx ends; 0 means
	// DefaultGrace.
	Grace time.Duration
	// HealthInterval overrides HealthInterval (tests).
	HealthInterval time.Duration
	// APIKey, when set, is sent as "Authorization: Bearer KEY" with every
	// health poll.
	APIKey string
	// HealthWait is how long the caller waits for healthy (--timeout),
	// for the messages that say so; 0: not said.
	HealthWait time.Duration
}

// Exit is how the target ended.
type Exit struct {
	Code     int    // exit status, -1 when killed by a signal
	Signal   string // the signal that killed it, if any
	Expected bool   // treni-top asked it to stop
	At       time.Duration
}

// Process is a launched (or attached) target. Its methods are safe for
// concurrent use.
type Process struct {
	spec  Spec
	sink  trace.Sink
	clock trace.Clock
	run   int // the cold run's index; later runs of the same process in runs (runs.go)

	runMu sync.Mutex
	runs  []runFrom

	cmd      *exec.Cmd // nil when attached
	pid      int
	spawnAt  time.Duration
	attached bool

	mu         sync.Mutex
	kind       serverlog.Kind
	parser     *serverlog.Parser
	firstLines []string // buffered while the kind is unknown
	firstAts   []time.Duration
	sawLine    bool
	url        string
	urlFixed   bool // URL came from the flag or the command: log lines do not override it
	listenAt   time.Duration
	// logHTTPReady: the server's own log reported http_ready, so the
	// launcher does not add a second one.
	logHTTPReady bool
	tail         []string
	known        map[int]uint64 // every tree member seen: pid → start time
	exit         *Exit
	// lastPoll is the last health poll's outcome ("URL: reason"), and
	// waitReason the last reason a health_wait marker said.
	lastPoll, waitReason string
	// healthErr ends the wait for healthy: a foreign listener, a refused
	// key. unhealthy is closed when it is set.
	healthErr error
	unhealthy chan struct{}

	stopping atomic.Bool
	stopOnce sync.Once

	reaped     chan struct{} // closed once the tree has been stopped or reaped
	reapedOnce sync.Once

	healthy  chan struct{} // closed at the first successful health poll
	exited   chan struct{} // closed after the exit was reported
	done     chan struct{} // closed when every goroutine of this process has returned
	readers  sync.WaitGroup
	bg       sync.WaitGroup
	cancelBG context.CancelFunc
}

// Start launches spec.Command in its own process group and starts watching
// it: output lines become KindLog events (and stage spans through the
// parser), health is polled every 10 ms, and the exit is reported. Every
// event carries Run = run. When ctx ends the target is stopped with
// spec.Grace. The caller must eventually call Stop or Wait, and should
// call CheckFree first, before its clock for the cold start begins.
func Start(ctx context.Context, spec Spec, sink trace.Sink, clock trace.Clock, run int) (*Process, error) {
	if len(spec.Command) == 0 {
		return nil, errors.New("launch: no command given; pass the server command after --, e.g. treni-top run -- vllm serve MODEL")
	}
	p := newProcess(spec, sink, clock, run)
	p.kind = spec.Kind
	if p.kind == "" {
		p.kind = serverlog.DetectKind(spec.Command, nil)
	}
	p.parser = serverlog.NewParser(p.kind, clock)
	p.setURL(spec)

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("launch %s: create output pipe: %w", spec.Command[0], err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("launch %s: create output pipe: %w", spec.Command[0], err)
	}
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Dir = spec.Dir
	// Passing *os.File ends means no copying goroutine inside os/exec, so
	// Wait does not hang on a grandchild that keeps the pipe open; our own
	// readers drain the pipes until every writer is gone.
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = targetProcAttr()

	p.spawnAt = clock.Now()
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, fmt.Errorf("launch %q: %w (is it installed and on PATH?)", strings.Join(spec.Command, " "), err)
	}
	outW.Close()
	errW.Close()
	p.cmd = cmd
	p.pid = cmd.Process.Pid
	p.known[p.pid] = 0
	if info, err := readStat(p.pid); err == nil {
		p.known[p.pid] = info.start
	}
	p.emit(trace.Event{At: p.spawnAt, Kind: trace.KindProcess, Process: &trace.Process{
		Action: trace.ProcessStart, PID: p.pid, Command: append([]string(nil), spec.Command...), ServerKind: string(p.kind),
		Builtin: spec.Builtin,
	}})

	bgCtx, cancel := context.WithCancel(context.Background())
	p.cancelBG = cancel
	p.readers.Add(2)
	go p.read(outR, "stdout")
	go p.read(errR, "stderr")
	p.bg.Add(3)
	go p.waitExit(outR, errR)
	go p.pollHealth(bgCtx)
	go func() {
		// Owner of the target's lifetime against ctx: a cancelled run
		// never leaves the server behind.
		defer p.bg.Done()
		select {
		case <-ctx.Done():
			p.stop(p.grace())
		case <-p.exited:
		}
	}()
	go func() {
		p.bg.Wait()
		close(p.done)
	}()
	return p, nil
}

func newProcess(spec Spec, sink trace.Sink, clock trace.Clock, run int) *Process {
	return &Process{
		spec: spec, sink: sink, clock: clock, run: run,
		known:     map[int]uint64{},
		healthy:   make(chan struct{}),
		unhealthy: make(chan struct{}),
		reaped:    make(chan struct{}),
		exited:    make(chan struct{}),
		done:      make(chan struct{}),
	}
}

func (p *Process) grace() time.Duration {
	if p.spec.Grace > 0 {
		return p.spec.Grace
	}
	return DefaultGrace
}

// setURL decides the base URL before launch.
func (p *Process) setURL(spec Spec) {
	p.url, p.urlFixed = spec.baseURL(p.kind)
}

// baseURL is where the target of kind will answer, as far as is known
// before its launch: URL, else inferred from the command (fixed: true for
// both), else the kind's default port, else "".
func (spec Spec) baseURL(kind serverlog.Kind) (string, bool) {
	if spec.URL != "" {
		return strings.TrimRight(spec.URL, "/"), true
	}
	return InferURL(spec.Command, spec.Env, kind)
}

// CheckFree refuses a launch of spec whose address already answers or has
// a listener (a *PortInUseError naming its holder): whatever answers
// there is not the target, and timing it would report another server's
// health and TTFT as the launch's. A target whose URL is not known before
// its launch passes (its first healthy answer is checked instead). It
// reads the kernel's socket tables, so call it before the cold start's
// clock begins.
func CheckFree(ctx context.Context, spec Spec) error {
	kind := spec.Kind
	if kind == "" {
		kind = serverlog.DetectKind(spec.Command, nil)
	}
	base, _ := spec.baseURL(kind)
	if base == "" {
		return nil
	}
	return checkPortFree(ctx, base, liveProc)
}

func (p *Process) emit(e trace.Event) {
	at := e.At
	if e.Kind == trace.KindStage && e.Stage != nil {
		at = e.Stage.Start
	}
	e.Run = p.runAt(at)
	p.sink.Emit(e)
}

// PID is the target's main process (0 for an attach without --pid).
func (p *Process) PID() int { return p.pid }

// Kind is the detected (or forced) server kind.
func (p *Process) Kind() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.kind)
}

// BaseURL is the server's base URL as currently known ("" until a
// listener line names it, for a server of unknown kind).
func (p *Process) BaseURL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.url
}

// Run is the run index stamped on this process's events now: its cold
// run's, or the latest SetRun's.
func (p *Process) Run() int { return p.runAt(p.clock.Now()) }

// PIDs is the live process tree: the main process, its descendants and the
// members of its process group, for the samplers. Empty once it is gone.
func (p *Process) PIDs() []int {
	if p.pid == 0 {
		return nil
	}
	pgid := p.pid
	if p.attached {
		pgid = 0
	}
	p.mu.Lock()
	rootStart := p.known[p.pid]
	p.mu.Unlock()
	tree := treeOf(p.pid, rootStart, pgid)
	out := make([]int, 0, len(tree))
	p.mu.Lock()
	for _, t := range tree {
		out = append(out, t.pid)
		if !p.attached {
			p.known[t.pid] = t.start
		}
	}
	p.mu.Unlock()
	return out
}

// Healthy is closed at the first successful health poll.
func (p *Process) Healthy() <-chan struct{} { return p.healthy }

// Exited is closed once the target has exited and the exit was reported.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitStatus is how the target ended; ok is false while it runs.
func (p *Process) ExitStatus() (Exit, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return Exit{}, false
	}
	return *p.exit, true
}

// Tail returns the last output lines (at most TailLines).
func (p *Process) Tail() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.tail...)
}

// WaitHealthy blocks until the target is healthy, has exited, the wait
// failed (another process holds the listener, the server wants an API
// key), or ctx ends.
func (p *Process) WaitHealthy(ctx context.Context) error {
	select {
	case <-p.healthy:
		return nil
	case <-p.unhealthy:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.healthErr
	case <-p.exited:
		// Both may be ready; healthy wins.
		select {
		case <-p.healthy:
			return nil
		default:
		}
		ex, _ := p.ExitStatus()
		return fmt.Errorf("target exited before it became healthy (%s); see its log tail in the session or above", ex)
	case <-ctx.Done():
		p.mu.Lock()
		base, last := p.url, p.lastPoll
		p.mu.Unlock()
		if base == "" {
			return &waitError{msg: "no URL to poll: none could be inferred from the command, the server kind or its output; pass --url http://HOST:PORT", err: ctx.Err()}
		}
		if last == "" {
			last = base + ": not polled yet"
		}
		return &waitError{msg: "no healthy answer (last poll " + last + ")", err: ctx.Err()}
	}
}

// waitError is a wait for healthy that ctx ended: the message says what
// was seen, and it unwraps to ctx's error.
type waitError struct {
	msg string
	err error
}

func (e *waitError) Error() string { return e.msg }
func (e *waitError) Unwrap() error { return e.err }

// Wait blocks until the target has exited and every watcher goroutine has
// returned, and returns how it ended.
func (p *Process) Wait() Exit {
	<-p.done
	ex, _ := p.ExitStatus()
	return ex
}

// Done is closed when Wait would return.
func (p *Process) Done() <-chan struct{} { return p.done }

// String describes the exit for messages.
func (e Exit) String() string {
	switch {
	case e.Signal != "":
		return "killed by " + e.Signal
	default:
		return fmt.Sprintf("exit status %d", e.Code)
	}
}
