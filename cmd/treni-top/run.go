package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/engine/demo"
	"github.com/treni-top/treni-top/engine/launch"
	"github.com/treni-top/treni-top/probe/gpu"
	"github.com/treni-top/treni-top/probe/pagecache"
	"github.com/treni-top/treni-top/probe/runner"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/tui"
)

// runOptions are run's own flags.
type runOptions struct {
	liveOptions
	engine string
	model  string
	device string
	load   string
	url    string
	evict  bool
}

func newRunCmd() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [flags] [-- CMD ARGS...]",
		Short: "Launch a target (built-in engine or any server command) and trace its cold start",
		Long: `run launches a target, traces its cold start stage by stage, probes the cold
request and the warm ones, and records everything as a session.

Without a command it starts the built-in engine as a child process
(treni-top serve --model DIR). With a command after --, it starts that server
in its own process group, reads its log, polls its health endpoint every
10 ms, and stops the whole process tree on exit (SIGINT, then SIGKILL after
--grace).

Interactive by default; --headless prints progress lines and ends with the
report (--json for JSON), stopping the target after the warm requests unless
--keep-running.`,
		Example: `  treni-top run --model ./qwen3-tiny
  treni-top run --headless --evict-page-cache --model ./qwen3-tiny
  treni-top run -- vllm serve Qwen/Qwen3-4B --port 8000
  OLLAMA_HOST=127.0.0.1:11500 treni-top run --headless --request-model synth -- ollama serve`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.engine, "engine", "", "target: builtin (the built-in engine) or external (the command after --); default builtin without a command")
	f.StringVar(&o.model, "model", "", "model directory for the built-in engine (default: the demo checkpoint)")
	f.StringVar(&o.device, "device", "", "device for the built-in engine (cpu, cuda, cuda:1; default: the engine's choice)")
	f.StringVar(&o.load, "load", "", "how the built-in engine takes the weights: mmap or copy (see treni-top serve --help; default: the engine's choice)")
	f.StringVar(&o.url, "url", "", "the target's base URL for health and requests (default: inferred from the command, the server kind or its log)")
	f.BoolVar(&o.evict, "evict-page-cache", false, "evict the weight files from the page cache before launch and record residency before and after")
	addLiveFlags(cmd, &o.liveOptions)
	return cmd
}

// addLiveFlags declares the flags run and attach share.
func addLiveFlags(cmd *cobra.Command, o *liveOptions) {
	f := cmd.Flags()
	f.IntVar(&o.warmup, "warmup", 1, "warm-up requests after the cold one (not measured)")
	f.IntVar(&o.repeat, "repeat", 5, "measured warm requests")
	f.IntVar(&o.maxTokens, "max-tokens", 64, "tokens to generate per request")
	f.StringVar(&o.prompt, "prompt", defaultPrompt, "the prompt of every probe request")
	f.StringVar(&o.reqModel, "request-model", "", "model name sent in requests (default: the first of the server's /v1/models)")
	f.StringVar(&o.record, "record", "", "session file to write (default: a new file under the user's data directory)")
	f.BoolVar(&o.noRecord, "no-record", false, "do not record a session file")
	f.BoolVar(&o.headless, "headless", false, "plain progress lines instead of the TUI, ending with the report")
	f.BoolVar(&o.jsonOut, "json", false, "with --headless: print the final report as JSON")
	f.BoolVar(&o.keepRunning, "keep-running", false, "with --headless: keep sampling after the warm requests until interrupted")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "how long to wait for the target to become healthy")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "time between SIGINT and SIGKILL when stopping the target")
}

func (o *runOptions) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := o.check(); err != nil {
		return withExit(2, err)
	}
	engine := o.engine
	if engine == "" {
		engine = "builtin"
		if len(args) > 0 {
			engine = "external"
		}
	}
	var spec launch.Spec
	target := sessions.Target{}
	var weightArgs []string
	switch engine {
	case "builtin":
		if len(args) > 0 {
			return withExit(2, fmt.Errorf("--engine builtin takes no command, got %q; drop --engine to trace that command", strings.Join(args, " ")))
		}
		model := o.model
		if model == "" {
			m, err := demoModel(ctx, stderr)
			if err != nil {
				return withExit(2, err)
			}
			model = m
		}
		if st, err := os.Stat(model); err != nil || !st.IsDir() {
			return withExit(2, fmt.Errorf("--model %s is not a model directory; make one with 'treni-top model synth' or point at a Hugging Face checkout", model))
		}
		var extra []string
		if o.load != "" {
			extra = append(extra, "--load", o.load)
		}
		s, err := launch.BuiltinSpec(model, o.device, extra...)
		if err != nil {
			return withExit(2, err)
		}
		spec = s
		target = sessions.Target{Kind: sessions.TargetBuiltin, ServerKind: launch.KindTreni, Command: s.Command, URL: s.URL, Model: model, Device: o.device}
		weightArgs = []string{model}
	case "external":
		if len(args) == 0 {
			return withExit(2, errors.New("--engine external needs the server command after --, e.g. treni-top run -- vllm serve MODEL"))
		}
		spec = launch.Spec{Command: args, URL: o.url}
		target = sessions.Target{Kind: sessions.TargetCommand, Command: args, URL: o.url, Model: o.reqModel}
		weightArgs = append(append([]string(nil), args...), o.reqModel)
	default:
		return withExit(2, fmt.Errorf("--engine %q: use builtin or external", o.engine))
	}
	if o.url != "" {
		spec.URL = o.url
	}
	spec.Grace = o.grace
	if target.ServerKind == "" {
		target.ServerKind = launch.DefaultParsers().Detect(args, nil)
	}

	// Weight files: for the residency evidence, eviction and the page-cache
	// sampler. A lazy server's files (Ollama) may appear only after the
	// first request, so they are looked up again while empty.
	wf := &weightFiles{args: weightArgs}
	files := wf.get()
	if o.evict && len(files) == 0 {
		return withExit(2, fmt.Errorf("--evict-page-cache: no weight files found from %q; pass --model DIR or a model path in the command (a run cannot be labelled page-cache cold without them)", strings.Join(weightArgs, " ")))
	}

	gpus, device := gpuHeader()
	if target.Device == "" {
		target.Device = device
	}
	clock := trace.NewClock()
	h := sessions.NewHeader(version, clock.Start(), target)
	h.GPUs = gpus
	h.ModelFiles = modelFiles(files)

	headless := o.headless || !interactive()
	if !o.headless && headless {
		fmt.Fprintln(stderr, "treni-top: no terminal: running headless")
	}
	o.headless = headless
	var progress io.Writer
	if headless {
		progress = stderr
	}
	label := target.ServerKind
	if label == "" || label == launch.KindUnknown {
		label = filepath.Base(spec.Command[0])
	}
	s, err := startSession(&o.liveOptions, h, clock, label, progress)
	if err != nil {
		return withExit(2, err)
	}
	pr := newProber(&o.liveOptions, s.bus, clock)
	defer pr.Close()
	samplers := runner.NewSamplers(wf.get)
	defer samplers.Close()
	r, err := runner.New(runner.Config{
		Sink:  s.bus,
		Clock: clock,
		Launcher: runner.LaunchFunc(func(ctx context.Context, run int) (runner.Target, error) {
			return launch.Start(ctx, spec, s.bus, clock, run)
		}),
		Prober:            pr,
		Samplers:          samplers.Build,
		WeightFiles:       wf.get,
		PageCache:         runner.PageCacheFuncs{},
		EvictPageCache:    o.evict,
		Warmup:            o.warmup,
		Repeat:            o.repeat,
		HealthTimeout:     o.timeout,
		Grace:             o.grace,
		ExitAfterSequence: headless && !o.keepRunning,
		Save:              s.save,
	})
	if err != nil {
		s.finish()
		return withExit(2, err)
	}
	samplers.Emit(s.bus, clock)
	return drive(ctx, &o.liveOptions, r, s, stdout, stderr)
}

// check validates the numbers.
func (o *liveOptions) check() error {
	switch {
	case o.warmup < 0 || o.repeat < 0:
		return errors.New("--warmup and --repeat must be 0 or more")
	case o.maxTokens < 1:
		return errors.New("--max-tokens must be at least 1")
	case o.timeout <= 0:
		return errors.New("--timeout must be positive, e.g. 10m")
	case o.record != "" && o.noRecord:
		return errors.New("--record and --no-record contradict each other; pick one")
	case o.jsonOut && !o.headless:
		return errors.New("--json prints the final report of a headless run; add --headless")
	}
	return nil
}

// weightFiles finds the target's weight files once they exist (a server
// may download them after it starts).
type weightFiles struct {
	args  []string
	mu    sync.Mutex
	files []string
	last  time.Time
}

// get returns the files; while none were found it looks again, at most
// once a second (the page-cache sampler calls it at every reading).
func (w *weightFiles) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.files) == 0 && len(w.args) > 0 && time.Since(w.last) >= time.Second {
		w.last = time.Now()
		if fs, err := pagecache.FindWeightFiles(w.args); err == nil {
			w.files = fs
		}
	}
	return w.files
}

// demoModel is the default model of plain treni-top: the built-in engine's
// demo checkpoint, created once in the user's cache directory. It is made
// here, before the launch, so that creating it is not timed as part of the
// engine's cold start and its weight files are known for the residency
// evidence.
func demoModel(ctx context.Context, progress io.Writer) (string, error) {
	start := time.Now()
	dir, created, err := demo.Ensure(ctx, "")
	if err != nil {
		return "", fmt.Errorf("prepare the demo checkpoint (or pass --model DIR; make one with 'treni-top model synth'): %w", err)
	}
	if created {
		fmt.Fprintf(progress, "treni-top: created the demo checkpoint in %s (%s, once per machine)\n", dir, time.Since(start).Round(time.Millisecond))
	}
	return dir, nil
}

// newProber is the request prober of the cold sequence.
func newProber(o *liveOptions, sink trace.Sink, clock trace.Clock) *runner.HTTPProber {
	return &runner.HTTPProber{Sink: sink, Clock: clock, Prompt: o.prompt, MaxTokens: o.maxTokens, Model: o.reqModel}
}

// The live runner is the TUI's controller.
var _ tui.Controller = (*runner.Runner)(nil)

// liveOptions are the flags run and attach share: recording, output and the
// request sequence.
type liveOptions struct {
	record      string
	noRecord    bool
	headless    bool
	jsonOut     bool
	keepRunning bool
	warmup      int
	repeat      int
	maxTokens   int
	prompt      string
	reqModel    string
	timeout     time.Duration
	grace       time.Duration
}

// defaultPrompt is the fixed prompt of the cold sequence: the same text
// every run, so runs compare.
const defaultPrompt = "Explain in one paragraph why the first request to a freshly started inference server is slower than the next ones."

// liveSession is the plumbing of a live run: the bus, the recorder, an
// in-memory copy for the final report, and the headless progress printer.
type liveSession struct {
	bus    *trace.Bus
	clock  trace.Clock
	header sessions.Header
	rec    *sessions.Recorder
	// uiSub is the TUI's subscription, taken before any event is emitted
	// so the UI sees the session from its first event (nil headless).
	uiSub *trace.Subscription

	mu     sync.Mutex
	events []trace.Event

	wg sync.WaitGroup // recorder, collector and printer goroutines
}

// startSession opens the bus and the recorder and starts the consumers that
// must see every event from the first one.
func startSession(o *liveOptions, h sessions.Header, clock trace.Clock, label string, progress io.Writer) (*liveSession, error) {
	s := &liveSession{bus: trace.NewBus(), clock: clock, header: h}
	if !o.noRecord {
		path := o.record
		if path == "" {
			p, err := sessions.DefaultPath(clock.Start(), label)
			if err != nil {
				return nil, fmt.Errorf("%w (or pass --no-record)", err)
			}
			path = p
		}
		rec, err := sessions.Create(path, h)
		if err != nil {
			return nil, fmt.Errorf("%w; pass --record FILE elsewhere, or --no-record", err)
		}
		s.rec = rec
		sub := s.bus.Subscribe()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			rec.Record(sub)
		}()
	}
	col := s.bus.Subscribe()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for e := range col.Events() {
			s.mu.Lock()
			s.events = append(s.events, e)
			s.mu.Unlock()
		}
	}()
	if !o.headless {
		s.uiSub = s.bus.Subscribe()
	}
	if progress != nil {
		sub := s.bus.Subscribe()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			printProgress(progress, sub)
		}()
	}
	return s, nil
}

// save is the `s` key: the recorder's Sync.
func (s *liveSession) save() (string, error) {
	if s.rec == nil {
		return "", errors.New("this session is not being recorded (--no-record)")
	}
	return s.rec.Path(), s.rec.Sync()
}

// finish closes the bus, waits for every consumer, closes the file and
// returns the session as recorded in memory.
func (s *liveSession) finish() (*sessions.Session, error) {
	s.bus.Close()
	s.wg.Wait()
	var err error
	if s.rec != nil {
		err = s.rec.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &sessions.Session{Header: s.header, Events: s.events}, err
}

// gpuHeader lists the GPUs for the session header; none without a driver.
func gpuHeader() ([]sessions.GPU, string) {
	devs, err := gpu.Inventory()
	if err != nil {
		return nil, "cpu"
	}
	var out []sessions.GPU
	for _, d := range devs {
		out = append(out, sessions.GPU{Index: d.Index, Name: d.Name, MemBytes: d.MemoryTotal, Driver: d.Driver})
	}
	name := "cpu"
	if len(out) > 0 {
		name = out[0].Name
	}
	return out, name
}

// modelFiles lists weight files with sizes for the header.
func modelFiles(files []string) []sessions.ModelFile {
	var out []sessions.ModelFile
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			out = append(out, sessions.ModelFile{Path: f, Bytes: st.Size()})
		}
	}
	return out
}

// interactive reports whether the TUI can run: a terminal on both ends.
func interactive() bool {
	return isatty.IsTerminal(os.Stdout.Fd()) && isatty.IsTerminal(os.Stdin.Fd())
}

// drive runs the runner under the TUI, or headless, then finishes the
// session, prints the report (headless) and the session's path.
func drive(ctx context.Context, o *liveOptions, r *runner.Runner, s *liveSession, stdout, stderr io.Writer) error {
	var runErr error
	if o.headless {
		runErr = r.Run(ctx)
	} else {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		uiErr := tui.Run(ctx, tui.Options{Header: s.header, Sub: s.uiSub, Controller: r, Clock: s.clock.Now})
		// The UI cancels its subscription when it exits; make sure, so a UI
		// that failed to start does not leave the subscription's pump
		// blocked.
		s.uiSub.Cancel()
		r.Quit()
		runErr = <-done
		cancel()
		if uiErr != nil && runErr == nil {
			runErr = fmt.Errorf("terminal UI: %w", uiErr)
		}
	}
	sess, recErr := s.finish()
	if o.headless {
		rep := sessions.BuildReport(sess)
		if o.jsonOut {
			b, err := rep.JSON()
			if err != nil {
				return fmt.Errorf("render the report as JSON: %w", err)
			}
			fmt.Fprintln(stdout, string(b))
		} else {
			fmt.Fprintln(stdout, rep.Markdown())
		}
	}
	if s.rec != nil {
		fmt.Fprintf(stderr, "session recorded: %s\n", s.rec.Path())
	}
	if recErr != nil {
		return fmt.Errorf("the session file is incomplete: %w", recErr)
	}
	if runErr != nil && ctx.Err() == nil {
		return runErr
	}
	return nil
}

// printProgress is the headless view: one plain line per thing that
// happened (no log lines except a crash's tail).
func printProgress(w io.Writer, sub *trace.Subscription) {
	line := func(at time.Duration, run int, format string, args ...any) {
		prefix := fmt.Sprintf("[%8.3fs]", at.Seconds())
		if run > 0 {
			prefix += fmt.Sprintf(" run %d:", run)
		}
		fmt.Fprintf(w, prefix+" "+format+"\n", args...)
	}
	for e := range sub.Events() {
		switch e.Kind {
		case trace.KindProcess:
			p := e.Process
			if p.Action == trace.ProcessStart {
				line(e.At, e.Run, "started pid %d (%s): %s", p.PID, p.ServerKind, strings.Join(p.Command, " "))
			} else {
				how := fmt.Sprintf("exit status %d", p.ExitCode)
				if p.Signal != "" {
					how = p.Signal
				}
				if p.Expected {
					line(e.At, e.Run, "stopped pid %d (%s)", p.PID, how)
				} else {
					line(e.At, e.Run, "TARGET EXITED on its own: pid %d, %s", p.PID, how)
				}
			}
		case trace.KindStage:
			if sp := e.Stage; !sp.Open {
				line(e.At, e.Run, "stage %-22s %10s  (%s)", sp.Name, sessions.FormatDuration(sp.Duration()), sp.Source)
			}
		case trace.KindRequest:
			q := e.Request
			if !q.Done {
				continue
			}
			if q.Error != "" {
				line(e.At, e.Run, "request %-10s FAILED: %s", q.Label, q.Error)
				continue
			}
			line(e.At, e.Run, "request %-10s TTFT %s  E2E %s  %d tokens", q.Label,
				sessions.FormatDuration(q.TTFT()), sessions.FormatDuration(q.E2E()), q.OutputTokens())
		case trace.KindMarker:
			m := e.Marker
			switch m.Name {
			case trace.MarkerHealthy:
				u, _ := m.Attrs.String("url")
				p, _ := m.Attrs.String("path")
				line(e.At, e.Run, "healthy: %s%s", u, p)
			case trace.MarkerResidency:
				res, _ := m.Attrs.Float("resident_bytes")
				tot, _ := m.Attrs.Float("total_bytes")
				when, _ := m.Attrs.String("when")
				if msg, ok := m.Attrs.String("error"); ok {
					line(e.At, e.Run, "weights residency (%s): %s", when, msg)
				} else if tot > 0 {
					line(e.At, e.Run, "weights residency (%s): %.1f%% of %.1f MiB in page cache", when, 100*res/tot, tot/(1<<20))
				}
			case trace.MarkerEvicted:
				if msg, ok := m.Attrs.String("error"); ok {
					line(e.At, e.Run, "page-cache eviction FAILED: %s", msg)
				} else {
					line(e.At, e.Run, "page-cache eviction verified: %v", m.Attrs["ok"])
				}
			case trace.MarkerTargetCrashed:
				tail, _ := m.Attrs.String("log_tail")
				line(e.At, e.Run, "target crashed; last lines of its output:")
				for _, l := range strings.Split(tail, "\n") {
					fmt.Fprintf(w, "    | %s\n", l)
				}
			case trace.MarkerRunFailed, trace.MarkerActionRefused:
				msg, _ := m.Attrs.String("error")
				if msg == "" {
					msg, _ = m.Attrs.String("reason")
				}
				line(e.At, e.Run, "%s: %s", m.Name, msg)
			case trace.MarkerGPUStatus:
				st, _ := m.Attrs.String("status")
				line(e.At, e.Run, "gpu: %s", st)
			case trace.MarkerKindDetected:
				k, _ := m.Attrs.String("server_kind")
				line(e.At, e.Run, "server kind detected from its output: %s", k)
			case trace.MarkerRunStart:
				line(e.At, e.Run, "cold run %d: launching", e.Run)
			case trace.MarkerAttached:
				line(e.At, e.Run, "attached (no cold start: the server was already running)")
			}
		}
	}
}
