package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/treni-top/treni-top/engine/demo"
	"github.com/treni-top/treni-top/engine/launch"
	"github.com/treni-top/treni-top/probe/gpu"
	"github.com/treni-top/treni-top/probe/runner"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// RunOptions are what run launches and how often: the target (the
// built-in engine or a command) and the series of cold runs and sleep
// cycles.
type RunOptions struct {
	// Engine is builtin, external or empty (builtin without a command).
	Engine string
	// Model, Device and Load are the built-in engine's (empty Model: the
	// demo checkpoint).
	Model, Device, Load string
	// URL is the target's base URL (empty: inferred).
	URL string
	// Evict evicts the weight files from the page cache before each launch.
	Evict    bool
	ColdRuns int
	// SleepCycles, SleepLevel and SleepFor: sleep mode's cycles after the
	// cold runs.
	SleepCycles, SleepLevel int
	SleepFor                time.Duration
	// ServeArgs go on to the built-in engine's serve command;
	// CheckServeArgs refuses a bad one before the launch (the CLI parses
	// them with serve's own flags).
	ServeArgs      []string
	CheckServeArgs func([]string) error
}

// check validates the numbers of the series.
func (o RunOptions) check() error {
	switch {
	case o.ColdRuns < 1:
		return fmt.Errorf("--cold-runs %d: give the number of cold starts to record, 1 or more", o.ColdRuns)
	case o.SleepCycles < 0:
		return fmt.Errorf("--sleep-cycles %d: give the number of sleep and wake cycles, 0 or more", o.SleepCycles)
	case o.SleepLevel != 1 && o.SleepLevel != 2:
		return fmt.Errorf("--sleep-level %d: use 1 (weights kept in host memory) or 2 (dropped)", o.SleepLevel)
	case o.SleepFor <= 0:
		return fmt.Errorf("--sleep-for %v: give a positive duration, e.g. 1s", o.SleepFor)
	}
	return nil
}

// Plan is a live session prepared before anything is started: its header
// and clock, the label of its default file, and how its target is reached.
type Plan struct {
	Header sessions.Header
	Clock  trace.Clock
	// Label names the default session file.
	Label string
	// launcher starts (or attaches to) the target of one run on sink.
	launcher func(ctx context.Context, sink trace.Sink, clock trace.Clock, run int) (runner.Target, error)
	// config is the rest of the runner's configuration for this kind of
	// session (Session.StartRunner adds the shared part).
	config      runner.Config
	weightFiles func() []string
}

// PlanRun checks run's options, resolves its target (making the demo
// checkpoint when no model is given, with a line on progress) and finds
// its weight files; nothing is launched yet.
func PlanRun(ctx context.Context, lo *Options, o RunOptions, args []string, progress io.Writer) (*Plan, error) {
	if err := lo.Check(); err != nil {
		return nil, err
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	spec, target, weightArgs, err := resolveTarget(ctx, lo, o, args, progress)
	if err != nil {
		return nil, err
	}
	if o.URL != "" {
		spec.URL = o.URL
	}
	spec.Grace = lo.Grace
	spec.APIKey = APIKey(lo.APIKey)
	spec.HealthWait = lo.Timeout
	if target.ServerKind == "" {
		target.ServerKind = string(serverlog.DetectKind(args, nil))
	}

	// Weight files: for the residency evidence, eviction and the page-cache
	// sampler. A lazy server's files (Ollama) may appear only after the
	// first request, so they are looked up again while empty.
	wf := runner.NewWeightFiles(weightArgs)
	files := wf.Get()
	if o.Evict && len(files) == 0 {
		return nil, fmt.Errorf("--evict-page-cache: no weight files found from %q; pass --model DIR or a model path in the command (a run cannot be labelled page-cache cold without them)", strings.Join(weightArgs, " "))
	}

	gpus, device := GPUs()
	if target.Device == "" {
		target.Device = device
	}
	clock := trace.NewClock()
	h := sessions.NewHeader(lo.Version, clock.Start(), target)
	h.GPUs = gpus
	h.ModelFiles = sessions.ModelFilesOf(files)
	h.ColdRuns = o.ColdRuns

	label := target.ServerKind
	if label == "" || label == string(serverlog.KindUnknown) {
		label = filepath.Base(spec.Command[0])
	}
	return &Plan{
		Header: h, Clock: clock, Label: label, weightFiles: wf.Get,
		launcher: func(ctx context.Context, sink trace.Sink, clock trace.Clock, run int) (runner.Target, error) {
			return launch.Start(ctx, spec, sink, clock, run)
		},
		config: runner.Config{
			BeforeLaunch:   func(ctx context.Context) error { return launch.CheckFree(ctx, spec) },
			WeightFiles:    wf.Get,
			PageCache:      runner.PageCacheFuncs{},
			EvictPageCache: o.Evict,
			ColdRuns:       o.ColdRuns,
			SleepCycles:    o.SleepCycles,
			SleepLevel:     o.SleepLevel,
			SleepFor:       o.SleepFor,
			Sleeper:        runner.HTTPSleep{APIKey: APIKey(lo.APIKey)},
		},
	}, nil
}

// resolveTarget turns the engine choice into the launch spec, the
// session's target and the arguments the weight files are found from.
func resolveTarget(ctx context.Context, lo *Options, o RunOptions, args []string, progress io.Writer) (launch.Spec, sessions.Target, []string, error) {
	engine := o.Engine
	if engine == "" {
		engine = "builtin"
		if len(args) > 0 {
			engine = "external"
		}
	}
	switch engine {
	case "builtin":
		if len(args) > 0 {
			return launch.Spec{}, sessions.Target{}, nil, fmt.Errorf("--engine builtin takes no command, got %q; drop --engine to trace that command", strings.Join(args, " "))
		}
		model := o.Model
		if model == "" {
			m, err := demoModel(ctx, progress)
			if err != nil {
				return launch.Spec{}, sessions.Target{}, nil, err
			}
			model = m
		}
		if st, err := os.Stat(model); err != nil || !st.IsDir() {
			return launch.Spec{}, sessions.Target{}, nil, fmt.Errorf("--model %s is not a model directory; make one with 'treni-top model synth' or point at a Hugging Face checkout", model)
		}
		if o.CheckServeArgs != nil {
			if err := o.CheckServeArgs(o.ServeArgs); err != nil {
				return launch.Spec{}, sessions.Target{}, nil, err
			}
		}
		var extra []string
		if o.Load != "" {
			extra = append(extra, "--load", o.Load)
		}
		if o.SleepCycles > 0 {
			extra = append(extra, "--enable-sleep-mode")
		}
		extra = append(extra, o.ServeArgs...)
		s, err := launch.BuiltinSpec(model, o.Device, extra...)
		if err != nil {
			return launch.Spec{}, sessions.Target{}, nil, err
		}
		t := sessions.Target{Kind: sessions.TargetBuiltin, ServerKind: string(serverlog.KindTreni), Command: s.Command, URL: s.URL, Model: model, Device: o.Device}
		return s, t, []string{model}, nil
	case "external":
		if len(args) == 0 {
			return launch.Spec{}, sessions.Target{}, nil, errors.New("--engine external needs the server command after --, e.g. treni-top run -- vllm serve MODEL")
		}
		if len(o.ServeArgs) > 0 {
			return launch.Spec{}, sessions.Target{}, nil, fmt.Errorf("--serve-arg %q is for the built-in engine; put the server's own flags in its command after --", strings.Join(o.ServeArgs, " "))
		}
		t := sessions.Target{Kind: sessions.TargetCommand, Command: args, URL: o.URL, Model: lo.RequestModel}
		return launch.Spec{Command: args, URL: o.URL}, t, append(append([]string(nil), args...), lo.RequestModel), nil
	default:
		return launch.Spec{}, sessions.Target{}, nil, fmt.Errorf("--engine %q: use builtin or external", o.Engine)
	}
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

// AttachOptions are attach's own: the server's process and kind.
type AttachOptions struct {
	// PID is the server's main process, for the process and GPU memory
	// samplers (0: none).
	PID int
	// Kind is the server kind (ollama changes the health path); empty:
	// guessed.
	Kind string
}

// PlanAttach checks attach's options and the server's URL; nothing is
// contacted yet.
func PlanAttach(lo *Options, o AttachOptions, rawURL string) (*Plan, error) {
	if err := lo.Check(); err != nil {
		return nil, err
	}
	if u, err := url.Parse(rawURL); err != nil || u.Host == "" {
		return nil, fmt.Errorf("%q is not a server URL; give its base, e.g. http://127.0.0.1:8000", rawURL)
	}
	spec := launch.AttachSpec{URL: rawURL, PID: o.PID, Kind: serverlog.Kind(o.Kind), APIKey: APIKey(lo.APIKey), HealthWait: lo.Timeout}
	gpus, device := GPUs()
	clock := trace.NewClock()
	h := sessions.NewHeader(lo.Version, clock.Start(), sessions.Target{
		Kind: sessions.TargetAttach, ServerKind: o.Kind, URL: rawURL, Model: lo.RequestModel, Device: device,
	})
	h.GPUs = gpus
	return &Plan{
		Header: h, Clock: clock, Label: "attach",
		launcher: func(ctx context.Context, sink trace.Sink, clock trace.Clock, run int) (runner.Target, error) {
			return launch.Attach(ctx, spec, sink, clock, run)
		},
		config: runner.Config{Attached: true},
	}, nil
}

// GPUs lists the GPUs for the session header, and the device to name in
// its target (the first GPU's name; "cpu" without a driver or a GPU).
func GPUs() ([]sessions.GPU, string) {
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
