// Command treni-top is a terminal profiler and cold-start tracer for LLM
// inference servers. This package holds main and the subcommands' flag
// wiring only; the work is done in tui, sessions, engine and probe.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions/live"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

// exitError carries a process exit code through cobra's error return.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExit makes err end the process with code.
func withExit(code int, err error) error { return &exitError{code: code, err: err} }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "treni-top",
		Short: "Profiler and cold-start tracer for LLM inference servers",
		Long: `treni-top launches an LLM inference server (its own built-in engine, or any
external server such as vLLM, SGLang, TGI, llama.cpp or Ollama), traces every
cold stage on one time axis, probes cold and warm requests (TTFT, ITL, TPOT,
E2E), shows it live with GPU memory, RSS and page-cache residency, diagnoses
the dominant cold term, and records every run as a session that can be
replayed, reported, diffed and exported to Perfetto.

Plain 'treni-top' is 'treni-top run' on the built-in engine's demo model.`,
		Example: `  treni-top                                   # the built-in engine on its demo model
  treni-top run -- vllm serve Qwen/Qwen3-4B    # trace an external server
  treni-top replay ~/.local/share/treni-top/sessions/latest.jsonl
  treni-top diff base.jsonl --against new.jsonl`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	// --cpuprofile FILE writes a Go CPU profile of this process (go tool
	// pprof FILE): the profiler profiles itself when its own cost is in
	// question.
	var cpuprofile string
	var profFile *os.File
	root.PersistentFlags().StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of treni-top itself to this file")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if cpuprofile == "" {
			return nil
		}
		f, err := os.Create(cpuprofile)
		if err != nil {
			return withExit(2, fmt.Errorf("create --cpuprofile file: %w", err))
		}
		profFile = f
		return pprof.StartCPUProfile(f)
	}
	root.PersistentPostRun = func(*cobra.Command, []string) {
		if profFile != nil {
			pprof.StopCPUProfile()
			profFile.Close()
		}
	}
	root.AddCommand(
		newRunCmd(), newAttachCmd(), newReplayCmd(), newReportCmd(), newDiffCmd(),
		newImportCmd(), newServeCmd(), newBenchCmd(), newModelCmd(), newDoctorCmd(),
		newVersionCmd(), newExportCmd(),
	)
	// Plain treni-top behaves as 'treni-top run'.
	run := newRunCmd()
	root.Flags().AddFlagSet(run.Flags())
	root.RunE = run.RunE
	root.Args = cobra.NoArgs
	return root
}

func main() {
	os.Exit(execute(os.Args[1:]))
}

// execute runs the CLI and maps errors to exit codes: 0 success, 1 for a
// command's own "failure found" result (diff's regression), 2 for unusable
// input or a failure, and 128 + the signal's number when a signal cut a
// session short (130 for ctrl-c; see live.Interrupted).
func execute(args []string) int {
	// SIGHUP too: a closed terminal window must stop the target cleanly,
	// like ctrl-c, rather than kill treni-top and leave the server behind.
	ctx, stop := live.NotifySignals(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ie live.Interrupted
	if errors.As(err, &ie) {
		fmt.Fprintln(os.Stderr, "treni-top:", err)
		return ie.ExitCode()
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(os.Stderr, "treni-top:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "treni-top:", err)
	return 2
}
