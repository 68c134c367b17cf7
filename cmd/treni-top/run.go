package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/treni-top/treni-top/engine/demo"
	"github.com/treni-top/treni-top/engine/launch"
	"github.com/treni-top/treni-top/probe/gpu"
	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/probe/runner"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
	"github.com/treni-top/treni-top/tui"
)

// runOptions are run's own flags.
type runOptions struct {
	liveOptions
	engine   string
	model    string
	device   string
	load     string
	url      string
	evict    bool
	coldRuns int
	// sleep cycles (sleep mode): how many, at which level, asleep how long
	sleepCycles, sleepLevel int
	sleepFor                time.Duration
	// serveArgs are passed on to the built-in engine's serve command.
	serveArgs []string
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
--keep-running.

--cold-runs N records N independent cold starts in one session, one after
the other: each a fresh process (its weights evicted and the eviction
verified first with --evict-page-cache), each with its cold request and warm
requests. They are the samples 'treni-top diff' compares. The first run that
fails (the target crashes or never becomes healthy, a request fails, the
eviction cannot be verified) ends the series: no later run is started, the
session keeps the completed runs and the failed one (marked failed), and run
exits 2 naming the failed run and how many completed.

--sleep-cycles N then puts the target to sleep and wakes it N times
(sleep mode: vLLM's POST /sleep?level=L and POST /wake_up; the built-in
engine is started with --enable-sleep-mode, vLLM must be started with
--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1). Each wake is a run of its
own in the same process, with its stages (weights_restore, kv_alloc, graph
capture, first_request), its cold request and its warm requests; --sleep-for
is how long the target stays asleep before each wake.

--serve-arg passes one more argument to the built-in engine's serve command
(repeat it for more): every flag of 'treni-top serve' but the ones run sets
itself (--model, --device, --load, --addr, --demo), e.g.
--serve-arg=--warmup-passes=2 --serve-arg=--kv-blocks=512. The diagnosis
names its engine knobs this way for a plain run.`,
		Example: `  treni-top run --model ./qwen3-tiny
  treni-top run --headless --evict-page-cache --model ./qwen3-tiny
  treni-top run --headless --cold-runs 5 --record base.jsonl --model ./qwen3-tiny
  treni-top run --headless --sleep-cycles 5 --sleep-level 1 --model ./qwen3-tiny
  treni-top run --model ./qwen3-tiny --serve-arg=--warmup-passes=1 --serve-arg=--kv-blocks=512
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
	f.BoolVar(&o.evict, "evict-page-cache", false, "evict the weight files from the page cache before each launch and record residency before and after")
	f.IntVar(&o.coldRuns, "cold-runs", 1, "independent cold starts to record in this session, each a fresh process with its cold and warm requests (the samples diff compares)")
	f.IntVar(&o.sleepCycles, "sleep-cycles", 0, "after the cold runs, put the target to sleep and wake it this many times (sleep mode), each wake a run of its own")
	f.IntVar(&o.sleepLevel, "sleep-level", 1, "sleep level of --sleep-cycles: 1 (weights kept in host memory) or 2 (dropped, read from their files on wake)")
	f.DurationVar(&o.sleepFor, "sleep-for", runner.DefaultSleepFor, "how long the target stays asleep before each wake of --sleep-cycles")
	f.StringArrayVar(&o.serveArgs, "serve-arg", nil, "one more argument for the built-in engine's serve command, e.g. --serve-arg=--warmup-passes=0 (repeatable; see treni-top serve --help)")
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
	f.StringVar(&o.apiKey, "api-key", "", apiKeyUsage)
	addFleetFlags(f, &o.fleet)
}

// apiKeyUsage is the --api-key help of run, attach and bench.
const apiKeyUsage = `API key sent as "Authorization: Bearer KEY" with every request to the server (health polls, probes, /metrics; default $OPENAI_API_KEY)`

// apiKey is the key to send: the flag's, else $OPENAI_API_KEY (what the
// OpenAI clients read), else none.
func apiKey(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("OPENAI_API_KEY")
}

func (o *runOptions) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := o.check(); err != nil {
		return withExit(2, err)
	}
	if o.coldRuns < 1 {
		return withExit(2, fmt.Errorf("--cold-runs %d: give the number of cold starts to record, 1 or more", o.coldRuns))
	}
	switch {
	case o.sleepCycles < 0:
		return withExit(2, fmt.Errorf("--sleep-cycles %d: give the number of sleep and wake cycles, 0 or more", o.sleepCycles))
	case o.sleepLevel != 1 && o.sleepLevel != 2:
		return withExit(2, fmt.Errorf("--sleep-level %d: use 1 (weights kept in host memory) or 2 (dropped)", o.sleepLevel))
	case o.sleepFor <= 0:
		return withExit(2, fmt.Errorf("--sleep-for %v: give a positive duration, e.g. 1s", o.sleepFor))
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
		if err := checkServeArgs(o.serveArgs); err != nil {
			return withExit(2, err)
		}
		var extra []string
		if o.load != "" {
			extra = append(extra, "--load", o.load)
		}
		if o.sleepCycles > 0 {
			extra = append(extra, "--enable-sleep-mode")
		}
		extra = append(extra, o.serveArgs...)
		s, err := launch.BuiltinSpec(model, o.device, extra...)
		if err != nil {
			return withExit(2, err)
		}
		spec = s
		target = sessions.Target{Kind: sessions.TargetBuiltin, ServerKind: string(serverlog.KindTreni), Command: s.Command, URL: s.URL, Model: model, Device: o.device}
		weightArgs = []string{model}
	case "external":
		if len(args) == 0 {
			return withExit(2, errors.New("--engine external needs the server command after --, e.g. treni-top run -- vllm serve MODEL"))
		}
		if len(o.serveArgs) > 0 {
			return withExit(2, fmt.Errorf("--serve-arg %q is for the built-in engine; put the server's own flags in its command after --", strings.Join(o.serveArgs, " ")))
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
	spec.APIKey = apiKey(o.apiKey)
	spec.HealthWait = o.timeout
	if target.ServerKind == "" {
		target.ServerKind = string(serverlog.DetectKind(args, nil))
	}

	// Weight files: for the residency evidence, eviction and the page-cache
	// sampler. A lazy server's files (Ollama) may appear only after the
	// first request, so they are looked up again while empty.
	wf := runner.NewWeightFiles(weightArgs)
	files := wf.Get()
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
	h.ModelFiles = sessions.ModelFilesOf(files)
	h.ColdRuns = o.coldRuns

	label := target.ServerKind
	if label == "" || label == string(serverlog.KindUnknown) {
		label = filepath.Base(spec.Command[0])
	}
	l, err := startLive(ctx, &o.liveOptions, h, label, clock, stderr)
	if err != nil {
		return withExit(2, err)
	}
	defer l.close(ctx)
	samplers := runner.NewSamplers(wf.Get)
	defer samplers.Close()
	r, err := runner.New(runner.Config{
		Sink:  l.Bus,
		Clock: clock,
		Launcher: runner.LaunchFunc(func(ctx context.Context, run int) (runner.Target, error) {
			return launch.Start(ctx, spec, l.Bus, clock, run)
		}),
		BeforeLaunch:      func(ctx context.Context) error { return launch.CheckFree(ctx, spec) },
		Prober:            l.prober,
		Samplers:          samplers.Build,
		ServerMetrics:     true,
		Header:            l.prober.Header,
		WeightFiles:       wf.Get,
		PageCache:         runner.PageCacheFuncs{},
		EvictPageCache:    o.evict,
		ColdRuns:          o.coldRuns,
		SleepCycles:       o.sleepCycles,
		SleepLevel:        o.sleepLevel,
		SleepFor:          o.sleepFor,
		Sleeper:           runner.HTTPSleep{APIKey: apiKey(o.apiKey)},
		Warmup:            o.warmup,
		Repeat:            o.repeat,
		HealthTimeout:     o.timeout,
		Grace:             o.grace,
		ExitAfterSequence: o.headless && !o.keepRunning,
		Save:              l.Save,
	})
	if err != nil {
		_, _ = l.Finish()
		return withExit(2, err)
	}
	l.runner.Store(r)
	samplers.Emit(l.Bus, clock)
	return drive(ctx, &o.liveOptions, r, l.Live, clock, stdout, stderr)
}

// runOwnedServeFlags are the serve flags that run sets itself: passing
// them again through --serve-arg would silently override run's own.
var runOwnedServeFlags = map[string]string{
	"model":  "pass run's own --model",
	"demo":   "run without --model serves the demo checkpoint",
	"device": "pass run's own --device",
	"load":   "pass run's own --load",
	"addr":   "run picks a free port itself (to choose the address, run -- treni-top serve --addr …)",
}

// checkServeArgs parses --serve-arg values with serve's own flags, so a
// misspelt flag is refused before the launch instead of killing the
// engine at its start.
func checkServeArgs(args []string) error {
	if len(args) == 0 {
		return nil
	}
	fs := newServeCmd().Flags()
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("--serve-arg %q: %w (see treni-top serve --help; give each flag as one argument, e.g. --serve-arg=--warmup-passes=0)", strings.Join(args, " "), err)
	}
	if rest := fs.Args(); len(rest) > 0 {
		return fmt.Errorf("--serve-arg %q: serve takes flags only; give each as one --serve-arg, e.g. --serve-arg=--warmup-passes=0", strings.Join(rest, " "))
	}
	var err error
	fs.Visit(func(f *pflag.Flag) {
		if use, ok := runOwnedServeFlags[f.Name]; ok && err == nil {
			err = fmt.Errorf("--serve-arg=--%s: run sets --%s itself; %s", f.Name, f.Name, use)
		}
	})
	return err
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
		return sessions.LiveOptions{Record: o.record, NoRecord: o.noRecord}.Check()
	case o.jsonOut && !o.headless:
		return errors.New("--json prints the final report of a headless run; add --headless")
	}
	return nil
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
	return &runner.HTTPProber{Sink: sink, Clock: clock, Prompt: o.prompt, MaxTokens: o.maxTokens, Model: o.reqModel, Header: prober.BearerHeader(apiKey(o.apiKey))}
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
	apiKey      string
	fleet       fleetOptions
}

// defaultPrompt is the fixed prompt of the cold sequence: the same text
// every run, so runs compare.
const defaultPrompt = "Explain in one paragraph why the first request to a freshly started inference server is slower than the next ones."

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

// interactive reports whether the TUI can run: a terminal on both ends.
func interactive() bool {
	return isatty.IsTerminal(os.Stdout.Fd()) && isatty.IsTerminal(os.Stdin.Fd())
}

// liveSession is a live session with what feeds it from outside the
// runner: the prober and the fleet outputs (OTLP export and receive, fleet
// metrics; cmd/treni-top/export.go).
type liveSession struct {
	*sessions.Live
	prober *runner.HTTPProber
	fleet  *fleet
	runner atomic.Pointer[runner.Runner]
}

// startLive resolves headless (no terminal means headless) and starts the
// live session: recorded unless --no-record, the headless transcript on
// stderr, the fleet outputs the flags or OTEL_ variables ask for, and the
// prober (carrying a traceparent when traces are exported or received).
// close releases them once the session is finished.
func startLive(ctx context.Context, o *liveOptions, h sessions.Header, label string, clock trace.Clock, stderr io.Writer) (*liveSession, error) {
	if !o.headless && !interactive() {
		fmt.Fprintln(stderr, "treni-top: no terminal: running headless")
		o.headless = true
	}
	lo := sessions.LiveOptions{Record: o.record, NoRecord: o.noRecord, Label: label, UI: !o.headless, KeepEvents: true, Clock: clock}
	if o.headless {
		lo.Progress = stderr
	}
	l, err := sessions.StartLive(h, lo)
	if err != nil {
		return nil, err
	}
	ls := &liveSession{Live: l}
	fl, err := startFleet(ctx, o.fleet, h, clock, l.Bus, ls.runIndex, stderr)
	if err != nil {
		_, _ = l.Finish()
		return nil, err
	}
	ls.fleet = fl
	l.OnClose(fl.stopInputs)
	ls.prober = newProber(o, l.Bus, clock)
	ls.prober.TraceContext = fl.TraceContext()
	return ls, nil
}

// runIndex is the runner's current run, for spans received from the server.
func (ls *liveSession) runIndex() int {
	if r := ls.runner.Load(); r != nil {
		return r.RunIndex()
	}
	return 0
}

// close releases the prober and flushes the fleet outputs; the session
// (its bus) must be finished first.
func (ls *liveSession) close(ctx context.Context) {
	ls.prober.Close()
	ls.fleet.finish(context.WithoutCancel(ctx))
}

// drive runs the runner under the TUI, or headless, then prints the report
// (headless) and the session's path.
func drive(ctx context.Context, o *liveOptions, r *runner.Runner, l *sessions.Live, clock trace.Clock, stdout, stderr io.Writer) error {
	var ui sessions.UI
	if !o.headless {
		ui = func(ctx context.Context, sub *trace.Subscription) error {
			return tui.Run(ctx, tui.Options{Header: l.Header(), Sub: sub, Controller: r, Clock: clock.Now, File: l.Path()})
		}
	}
	sess, runErr, fileErr := l.Drive(ctx, r, ui)
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
	if p := l.Path(); p != "" {
		fmt.Fprintf(stderr, "session recorded: %s\n", p)
	}
	if fileErr != nil {
		return fileErr
	}
	if err := interrupted(ctx); err != nil {
		return err // the session is marked interrupted (sessions.Live.Drive)
	}
	if runErr != nil {
		return runErr
	}
	// A target that crashed while the TUI was up (the runner goes on
	// serving keys, so Run returned nil) is a failure all the same.
	if err := sessions.Failure(sess.Events); err != nil {
		return withExit(2, err)
	}
	return nil
}
