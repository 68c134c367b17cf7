package main

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/treni-top/treni-top/probe/runner"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/sessions/live"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/tui"
)

// runOptions are run's own flags.
type runOptions struct {
	live.Options
	live.RunOptions
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
	f.StringVar(&o.Engine, "engine", "", "target: builtin (the built-in engine) or external (the command after --); default builtin without a command")
	f.StringVar(&o.Model, "model", "", "model directory for the built-in engine (default: the demo checkpoint)")
	f.StringVar(&o.Device, "device", "", "device for the built-in engine (cpu, cuda, cuda:1; default: the engine's choice)")
	f.StringVar(&o.Load, "load", "", "how the built-in engine takes the weights: mmap or copy (see treni-top serve --help; default: the engine's choice)")
	f.StringVar(&o.URL, "url", "", "the target's base URL for health and requests (default: inferred from the command, the server kind or its log)")
	f.BoolVar(&o.Evict, "evict-page-cache", false, "evict the weight files from the page cache before each launch and record residency before and after")
	f.IntVar(&o.ColdRuns, "cold-runs", 1, "independent cold starts to record in this session, each a fresh process with its cold and warm requests (the samples diff compares)")
	f.IntVar(&o.SleepCycles, "sleep-cycles", 0, "after the cold runs, put the target to sleep and wake it this many times (sleep mode), each wake a run of its own")
	f.IntVar(&o.SleepLevel, "sleep-level", 1, "sleep level of --sleep-cycles: 1 (weights kept in host memory) or 2 (dropped, read from their files on wake)")
	f.DurationVar(&o.SleepFor, "sleep-for", runner.DefaultSleepFor, "how long the target stays asleep before each wake of --sleep-cycles")
	f.StringArrayVar(&o.ServeArgs, "serve-arg", nil, "one more argument for the built-in engine's serve command, e.g. --serve-arg=--warmup-passes=0 (repeatable; see treni-top serve --help)")
	addLiveFlags(cmd, &o.Options)
	return cmd
}

// addLiveFlags declares the flags run and attach share.
func addLiveFlags(cmd *cobra.Command, o *live.Options) {
	f := cmd.Flags()
	f.IntVar(&o.Warmup, "warmup", 1, "warm-up requests after the cold one (not measured)")
	f.IntVar(&o.Repeat, "repeat", 5, "measured warm requests")
	f.IntVar(&o.MaxTokens, "max-tokens", 64, "tokens to generate per request")
	f.StringVar(&o.Prompt, "prompt", live.DefaultPrompt, "the prompt of every probe request")
	f.StringVar(&o.RequestModel, "request-model", "", "model name sent in requests (default: the first of the server's /v1/models)")
	f.StringVar(&o.Record, "record", "", "session file to write (default: a new file under the user's data directory)")
	f.BoolVar(&o.NoRecord, "no-record", false, "do not record a session file")
	f.BoolVar(&o.Headless, "headless", false, "plain progress lines instead of the TUI, ending with the report")
	f.BoolVar(&o.JSON, "json", false, "with --headless: print the final report as JSON")
	f.BoolVar(&o.KeepRunning, "keep-running", false, "with --headless: keep sampling after the warm requests until interrupted")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "how long to wait for the target to become healthy")
	f.DurationVar(&o.Grace, "grace", 10*time.Second, "time between SIGINT and SIGKILL when stopping the target")
	f.StringVar(&o.APIKey, "api-key", "", apiKeyUsage)
	addFleetFlags(f, &o.Fleet)
}

// addFleetFlags declares the OpenTelemetry and Prometheus flags that run,
// attach and bench share (issue 18).
func addFleetFlags(f *pflag.FlagSet, o *live.FleetOptions) {
	f.StringVar(&o.OTLP, "otlp", "", "export the session live as OTLP traces to this endpoint (OTEL_EXPORTER_OTLP_ENDPOINT alone does the same)")
	f.BoolVar(&o.TokenEvents, "otlp-token-events", false, "with OTLP export: one span event per token")
	f.StringVar(&o.OTLPListen, "otlp-listen", "", "receive the server's own OTLP/HTTP traces on this address (e.g. 127.0.0.1:4318) and merge them into the session")
	f.StringVar(&o.Metrics, "metrics-listen", "", "serve fleet metrics for Prometheus at http://ADDR/metrics (e.g. 127.0.0.1:9464)")
}

// apiKeyUsage is the --api-key help of run, attach and bench.
const apiKeyUsage = `API key sent as "Authorization: Bearer KEY" with every request to the server (health polls, probes, /metrics; default $OPENAI_API_KEY)`

func (o *runOptions) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o.Version = version
	o.CheckServeArgs = checkServeArgs
	p, err := live.PlanRun(ctx, &o.Options, o.RunOptions, args, stderr)
	if err != nil {
		return withExit(2, err)
	}
	return runLive(ctx, &o.Options, p, stdout, stderr)
}

// checkServeArgs checks --serve-arg values against serve's own flags.
func checkServeArgs(args []string) error {
	return live.CheckServeArgs(newServeCmd().Flags(), args)
}

// The live runner is the TUI's controller.
var _ tui.Controller = (*runner.Runner)(nil)

// runLive starts the live session of p and drives its runner, under the
// TUI unless headless.
func runLive(ctx context.Context, o *live.Options, p *live.Plan, stdout, stderr io.Writer) error {
	l, err := live.Start(ctx, o, p, stderr)
	if err != nil {
		return withExit(2, err)
	}
	defer l.Close(ctx)
	r, err := l.StartRunner()
	if err != nil {
		return withExit(2, err)
	}
	var ui sessions.UI
	if !o.Headless {
		ui = func(ctx context.Context, sub *trace.Subscription) error {
			return tui.Run(ctx, tui.Options{Header: l.Header(), Sub: sub, Controller: r, Clock: p.Clock.Now, File: l.Path()})
		}
	}
	return l.Run(ctx, ui, stdout, stderr)
}
