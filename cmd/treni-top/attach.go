package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions/live"
)

// attachOptions are attach's flags.
type attachOptions struct {
	live.Options
	live.AttachOptions
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
	cmd.Flags().IntVar(&o.PID, "pid", 0, "the server's main process id, for the process and GPU memory samplers")
	cmd.Flags().StringVar(&o.Kind, "kind", "", "server kind (ollama changes the health path); default: guessed")
	addLiveFlags(cmd, &o.Options)
	return cmd
}

func (o *attachOptions) run(ctx context.Context, rawURL string, stdout, stderr io.Writer) error {
	o.Version = version
	p, err := live.PlanAttach(&o.Options, o.AttachOptions, rawURL)
	if err != nil {
		return withExit(2, err)
	}
	return runLive(ctx, &o.Options, p, stdout, stderr)
}
