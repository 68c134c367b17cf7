package main

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/engine/launch"
	"github.com/treni-top/treni-top/probe/runner"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// attachOptions are attach's flags.
type attachOptions struct {
	liveOptions
	pid  int
	kind string
}

func newAttachCmd() *cobra.Command {
	o := &attachOptions{}
	cmd := &cobra.Command{
		Use:   "attach URL",
		Short: "Profile a running server: samplers and warm probes, no cold stages",
		Long: `attach profiles a server that is already running: it waits for its health
endpoint, sends the warm-up and warm requests, samples the process tree given
by --pid (RSS, CPU, GPU memory) and the GPUs, and records a session. There are
no cold stages: the server started before treni-top looked. Quitting stops
watching; the server keeps running.

Where nothing answers yet, attach says so at once (connection refused, or
the HTTP status it got) and waits for the server to come up, until --timeout.`,
		Example: `  treni-top attach http://127.0.0.1:8000 --pid 4242
  treni-top attach http://127.0.0.1:11434 --headless --request-model qwen2:0.5b`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().IntVar(&o.pid, "pid", 0, "the server's main process id, for the process and GPU memory samplers")
	cmd.Flags().StringVar(&o.kind, "kind", "", "server kind (ollama changes the health path); default: guessed")
	addLiveFlags(cmd, &o.liveOptions)
	return cmd
}

func (o *attachOptions) run(ctx context.Context, rawURL string, stdout, stderr io.Writer) error {
	if err := o.check(); err != nil {
		return withExit(2, err)
	}
	if u, err := url.Parse(rawURL); err != nil || u.Host == "" {
		return withExit(2, fmt.Errorf("%q is not a server URL; give its base, e.g. http://127.0.0.1:8000", rawURL))
	}
	spec := launch.AttachSpec{URL: rawURL, PID: o.pid, Kind: serverlog.Kind(o.kind), APIKey: apiKey(o.apiKey), HealthWait: o.timeout}
	gpus, device := gpuHeader()
	clock := trace.NewClock()
	h := sessions.NewHeader(version, clock.Start(), sessions.Target{
		Kind: sessions.TargetAttach, ServerKind: o.kind, URL: rawURL, Model: o.reqModel, Device: device,
	})
	h.GPUs = gpus
	l, err := startLive(ctx, &o.liveOptions, h, "attach", clock, stderr)
	if err != nil {
		return withExit(2, err)
	}
	defer l.close(ctx)
	samplers := runner.NewSamplers(nil)
	defer samplers.Close()
	r, err := runner.New(runner.Config{
		Sink:  l.Bus,
		Clock: clock,
		Launcher: runner.LaunchFunc(func(ctx context.Context, run int) (runner.Target, error) {
			return launch.Attach(ctx, spec, l.Bus, clock, run)
		}),
		Prober:            l.prober,
		Samplers:          samplers.Build,
		ServerMetrics:     true,
		Header:            l.prober.Header,
		Attached:          true,
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
