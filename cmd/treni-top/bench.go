package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/engine/tokenizer"
	"github.com/treni-top/treni-top/probe/load"
	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/sessions/live"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/httpserve"
	"github.com/treni-top/treni-top/tui"
)

// benchOptions are bench's flags.
type benchOptions struct {
	fleet                live.FleetOptions
	plan                 load.PlanOptions
	url, model, endpoint string
	floors, modelConfig  string
	json                 bool
	record               string
	noRecord             bool
	timeout              time.Duration
	ignoreEOS            bool
	noUsage              bool
	readStamps           bool
	apiKey               string
	quiet                bool
	tui                  bool
	tokenizer            string
}

func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench --url URL",
		Short: "Run serving workloads against an OpenAI-compatible server",
		Long: `bench sends load to an OpenAI-compatible server and measures output tok/s,
req/s, TTFT, TTFB, ITL, TPOT and E2E (p50/p90/p95/p99), errors by kind and
goodput against optional SLOs.

Workloads (--workload, default baseline; "all" runs the five in order) are the
serving benchmark log's: baseline (10 requests, 256-token prompts, 256 out,
sequential), continuous_batching (32, [64,512], [64,256], uniform 4 RPS),
paged_attention (48, [128,384], [128,256], one burst), chunked_prefill (48,
75% [1024,2048] + 25% [64,128], [64,256], Poisson 6 RPS), prefix_caching (48,
1024 shared + [32,128], 256, uniform 8 RPS). Prompts are English prose from an
embedded corpus at ~4 characters per token; token counts come from the
server's usage. --num-requests/--prompt-tokens/--max-tokens define a custom
workload, --qps a Poisson sweep (input 1024 / output 128 by default),
--workload-file custom workloads (docs/BENCH_SCHEMA.md). A sweep ends with its
saturation: the highest QPS whose TPOT p99 stays within --slo-tpot-ms (50 ms
by default) with no queue growth and no errors, and the output tok/s there.

With --floors (treni-top doctor --floors --json, run on the server's machine)
and --model-config (the served checkpoint's config.json or folder), a burst of
equal requests (--num-requests N --concurrency N) is set against its bound:
every prompt's FLOPs over the measured bf16 GEMM rate, then every decode
step's weight and KV bytes over the measured device-copy rate.

Every request is recorded in a session (report, replay and diff work on it);
the report is printed as Markdown, or as JSON (schema treni-top-bench/1)
with --json.`,
		Example: `  treni-top bench --url http://127.0.0.1:8000 --workload baseline
  treni-top bench --url http://127.0.0.1:8000 --workload all --warmup-runs 1 --repeat-runs 3
  treni-top bench --url http://127.0.0.1:8000 --qps 1,2,4,8 --slo-ttft-ms 500 --slo-tpot-ms 50 --json
  treni-top bench --url http://127.0.0.1:8000 --num-requests 64 --prompt-tokens 512 --max-tokens 128 --concurrency 8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, cmd.Flags().Changed("workload"))
		},
	}
	f := cmd.Flags()
	addFleetFlags(f, &o.fleet)
	f.StringVar(&o.url, "url", "", "the server's base URL, e.g. http://127.0.0.1:8000 (required)")
	f.StringVar(&o.model, "model", "", "model name to request (default: the first one /v1/models lists)")
	f.StringVar(&o.endpoint, "endpoint", "chat", "API: chat (/v1/chat/completions) or completions (/v1/completions)")
	f.StringVar(&o.plan.Workload, "workload", "baseline", "workload: "+strings.Join(load.BuiltinNames(), ", ")+", or all")
	f.StringVar(&o.plan.WorkloadFile, "workload-file", "", "JSON file of custom workloads (docs/BENCH_SCHEMA.md)")
	f.IntVar(&o.plan.NumRequests, "num-requests", 0, "custom workload: number of requests (with --qps: per QPS level)")
	f.IntVar(&o.plan.PromptTokens, "prompt-tokens", 0, "custom workload: prompt length in tokens (see --tokenizer; --qps default 1024)")
	f.StringVar(&o.tokenizer, "tokenizer", "", "the served model's tokenizer directory (tokenizer.json): prompts of exactly their token lengths in its tokens; without it, ~4 characters a token, which a real tokenizer counts differently (Qwen3: 848 of 1,024)")
	f.IntVar(&o.plan.MaxTokens, "max-tokens", 0, "custom workload: max_tokens (--qps default 128)")
	f.IntVar(&o.plan.Concurrency, "concurrency", 0, "cap on requests in flight (0: no cap)")
	f.Float64SliceVar(&o.plan.QPS, "qps", nil, "QPS sweep: Poisson arrival rates, e.g. 1,2,4,8")
	f.Float64Var(&o.plan.SweepSeconds, "sweep-seconds", load.SweepSeconds, "QPS sweep: seconds of arrivals per level when --num-requests is not given (at least 16 requests)")
	f.StringVar(&o.floors, "floors", "", "treni-top doctor --floors --json output of the server's machine: with --model-config, the bound of a burst of equal requests")
	f.StringVar(&o.modelConfig, "model-config", "", "the served checkpoint's config.json (or its folder): with --floors, the bound of a burst of equal requests")
	f.Uint64Var(&o.plan.Seed, "seed", load.DefaultSeed, "seed for prompts, lengths and arrivals")
	f.IntVar(&o.plan.WarmupRuns, "warmup-runs", 0, "runs of each workload before measuring, not counted")
	f.IntVar(&o.plan.RepeatRuns, "repeat-runs", 1, "measured runs of each workload (min/median/max across them)")
	f.Float64Var(&o.plan.SLO.TTFTms, "slo-ttft-ms", 0, "goodput SLO: TTFT at most this many ms")
	f.Float64Var(&o.plan.SLO.TPOTms, "slo-tpot-ms", 0, "goodput SLO: TPOT at most this many ms")
	f.Float64Var(&o.plan.SLO.E2Ems, "slo-e2e-ms", 0, "goodput SLO: E2E latency at most this many ms")
	f.BoolVar(&o.json, "json", false, "print the report as JSON (schema treni-top-bench/1) instead of Markdown")
	f.StringVar(&o.record, "record", "", "session file to write (default: a new file under the user's data directory)")
	f.BoolVar(&o.noRecord, "no-record", false, "do not record a session file")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "limit for one request, stream included")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", false, "send ignore_eos (vLLM, SGLang) so every request generates max_tokens")
	f.BoolVar(&o.noUsage, "no-usage", false, "do not ask for stream usage (for servers that reject stream_options)")
	f.BoolVar(&o.readStamps, "read-timestamps", false, "time tokens when treni-top reads them, not when the kernel received them (what most benchmarks do; for comparison)")
	f.StringVar(&o.apiKey, "api-key", "", `API key sent as "Authorization: Bearer KEY" with every request (default $OPENAI_API_KEY)`)
	f.BoolVar(&o.quiet, "quiet", false, "no progress line on stderr")
	f.BoolVar(&o.tui, "tui", false, "show the bench live in the TUI (progress, rates, TTFT/ITL); the report is printed when you quit it")
	return cmd
}

func (o *benchOptions) run(cmd *cobra.Command, workloadSet bool) error {
	ctx := cmd.Context()
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	plan, ep, err := o.check(workloadSet)
	if err != nil {
		return withExit(2, err)
	}
	var tok load.Tokenizer
	if o.tokenizer != "" {
		t, err := tokenizer.Load(o.tokenizer)
		if err != nil {
			return withExit(2, fmt.Errorf("--tokenizer: %w", err))
		}
		tok = t
	}
	rf, err := load.ReadRoofline(o.floors, o.modelConfig)
	if err != nil {
		return withExit(2, err)
	}
	clock := trace.NewClock()
	client, err := o.newClient(ctx, plan, ep, clock)
	if err != nil {
		return withExit(2, err)
	}
	defer client.Close()

	h := live.BenchHeader(version, o.url, o.model, clock)
	lo := live.BenchOptions{Record: o.record, NoRecord: o.noRecord, TUI: o.tui, Fleet: o.fleet}
	l, err := live.StartBench(ctx, &lo, h, clock, stderr)
	if err != nil {
		return withExit(2, err)
	}
	defer l.Close(ctx)

	b := &load.Bench{Client: client, Clock: clock, Sink: l.Bus, Progress: &load.Progress{}, Tokenizer: tok, Roofline: rf}
	var ui sessions.UI
	if lo.TUI {
		ui = func(ctx context.Context, sub *trace.Subscription) error {
			return tui.Run(ctx, tui.Options{Header: h, Sub: sub, Bench: benchProgress{b.Progress}, Clock: clock.Now, File: l.Path()})
		}
	}
	var progress io.Writer
	if !o.quiet {
		progress = stderr
	}
	res := live.DriveBench(ctx, l.Live, b, plan, ui, progress, stderr)
	rep, runErr, fileErr := res.Report, res.Err, res.FileErr
	rep.Tool = "treni-top " + version
	if fileErr != nil {
		fmt.Fprintf(stderr, "treni-top: %v\n", fileErr)
	}
	rep.Session = l.Path()
	if res.Cut {
		rep.Interrupted = true
	} else if runErr != nil {
		return withExit(2, runErr)
	}
	if o.json {
		data, err := rep.JSON()
		if err != nil {
			return withExit(2, err)
		}
		if _, err := stdout.Write(data); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, rep.Markdown())
	}
	if p := l.Path(); p != "" {
		fmt.Fprintf(stderr, "session recorded: %s\n", p)
	}
	if err := live.InterruptedBy(ctx); err != nil {
		return err
	}
	if rep.Interrupted {
		return withExit(2, fmt.Errorf("bench interrupted: %w", runErr))
	}
	return nil
}

// check validates the flags and turns them into the plan and the API.
func (o *benchOptions) check(workloadSet bool) (load.Plan, prober.Endpoint, error) {
	ep := prober.Endpoint(o.endpoint)
	switch _, ok := httpserve.ParseHTTPURL(o.url); {
	case o.url == "":
		return load.Plan{}, ep, errors.New("--url is required: the server's base URL, e.g. --url http://127.0.0.1:8000")
	case !ok:
		return load.Plan{}, ep, fmt.Errorf("--url %q is not a server URL; give its base, e.g. http://127.0.0.1:8000", o.url)
	case o.record != "" && o.noRecord:
		return load.Plan{}, ep, sessions.LiveOptions{Record: o.record, NoRecord: o.noRecord}.Check()
	case ep != prober.Chat && ep != prober.Completions:
		return load.Plan{}, ep, fmt.Errorf("--endpoint %q unknown; use chat or completions", o.endpoint)
	}
	o.plan.WorkloadSet = workloadSet
	plan, err := o.plan.Plan()
	return plan, ep, err
}

// newClient builds the load client from the flags, asking the server for
// its model when --model is not given.
func (o *benchOptions) newClient(ctx context.Context, plan load.Plan, ep prober.Endpoint, clock trace.Clock) (*load.Client, error) {
	header := prober.BearerHeader(live.APIKey(o.apiKey))
	if o.model == "" {
		m, err := load.DetectModel(ctx, o.url, header)
		if err != nil {
			return nil, err
		}
		o.model = m
	}
	var extra map[string]any
	if o.ignoreEOS {
		extra = map[string]any{"ignore_eos": true}
	}
	return load.NewClient(load.ClientConfig{BaseURL: o.url, Endpoint: ep, Model: o.model, MaxConns: plan.MaxConns(),
		Timeout: o.timeout, Header: header, Extra: extra, NoUsage: o.noUsage, ReadTimestamps: o.readStamps}, clock)
}

// benchProgress adapts the load generator's progress to the TUI's
// BenchProgress (tui does not import probe/load).
type benchProgress struct{ p *load.Progress }

func (b benchProgress) BenchSnapshot() tui.BenchStatus {
	s := b.p.Snapshot()
	q := func(x load.Quantiles) tui.BenchQuantiles {
		return tui.BenchQuantiles{N: x.N, P50: x.P50, P90: x.P90, P99: x.P99}
	}
	return tui.BenchStatus{
		Workload: s.Workload, Repeat: s.Repeat, Repeats: s.Repeats, Warmup: s.Warmup,
		Total: s.Total, Sent: s.Sent, Done: s.Done, Failed: s.Failed, InFlight: s.InFlight,
		Elapsed: s.Elapsed, OutputTokens: s.OutputTokens,
		OutputTokPerSec: s.OutputTokPerSec, ReqPerSec: s.ReqPerSec,
		TTFT: q(s.TTFT), ITL: q(s.ITL),
	}
}
