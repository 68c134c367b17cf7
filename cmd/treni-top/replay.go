package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/tui"
)

func newReplayCmd() *cobra.Command {
	var (
		speed                  float64
		fast, headless, asJSON bool
		noColor, light, mouse  bool
	)
	cmd := &cobra.Command{
		Use:   "replay FILE",
		Short: "Replay a recorded session in the TUI at its recorded pace",
		Long: `Replay a recorded session (.jsonl or .jsonl.gz) in the same TUI as a live run.
Keys: space pauses, + and - change the speed, left/right seek 5 s (shift: 30 s),
? shows every key. --headless prints plain progress lines on stderr and then
the report on stdout (as fast as possible unless --speed is given); --json
prints the report as JSON.`,
		Example: "  treni-top replay session.jsonl --speed 4\n  treni-top replay session.jsonl --headless",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if headless && !cmd.Flags().Changed("speed") {
				fast = true // CI wants the report, not the original pace
			}
			tuiMode := !headless && !asJSON
			// In the TUI a finished replay waits for a seek back.
			opts := sessions.ReplayOptions{Speed: speed, Fast: fast, WaitAtEnd: tuiMode}
			if !tuiMode {
				// The transcript reads no log lines or samples.
				opts.Kinds = []trace.Kind{trace.KindProcess, trace.KindStage, trace.KindRequest}
			}
			// The file is read as it plays, and the report from a digest:
			// memory does not grow with the file.
			rp, err := sessions.OpenReplayer(args[0], opts)
			if err != nil {
				return withExit(2, err)
			}
			ctx := cmd.Context()
			if tuiMode {
				h, err := sessions.ReadHeader(args[0])
				if err != nil {
					return withExit(2, err)
				}
				sub, stop := rp.Play(ctx)
				defer stop()
				return tui.Run(ctx, tui.Options{Header: h, Sub: sub, Replay: rp, File: args[0], NoColor: noColor, Light: light, Mouse: mouse})
			}
			if headless {
				// Progress on stderr, as run --headless: stdout carries
				// only the report.
				sub, stop := rp.Play(ctx)
				err := sessions.PrintProgress(ctx, cmd.ErrOrStderr(), sub)
				stop()
				if err != nil {
					return withExit(2, err)
				}
			}
			s, err := sessions.OpenDigest(args[0])
			if err != nil {
				return withExit(2, err)
			}
			rep := sessions.BuildReport(s)
			if asJSON {
				b, err := rep.JSON()
				if err != nil {
					return withExit(2, err)
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), rep.Markdown())
			return err
		},
	}
	f := cmd.Flags()
	f.Float64Var(&speed, "speed", 1, "playback rate (2 = twice as fast)")
	f.BoolVar(&fast, "fast", false, "replay as fast as possible")
	f.BoolVar(&headless, "headless", false, "no TUI: plain progress lines, then the report")
	f.BoolVar(&asJSON, "json", false, "print the final report as JSON (implies no TUI)")
	f.BoolVar(&noColor, "no-color", os.Getenv("NO_COLOR") != "", "no colors (also NO_COLOR=1)")
	f.BoolVar(&light, "light", false, "light-background theme (default: ask the terminal)")
	f.BoolVar(&mouse, "mouse", false, "enable the mouse (off so that text can be selected)")
	return cmd
}
