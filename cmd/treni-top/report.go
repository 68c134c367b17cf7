package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions"
)

func newReportCmd() *cobra.Command {
	var format, out string
	cmd := &cobra.Command{
		Use:   "report FILE",
		Short: "Print a session's stage table and cold/warm request summary (md, json, chrome)",
		Long: `report reads a session file (.jsonl or .jsonl.gz) and prints, for every cold
run in it, the stage table (start, duration, share of the cold total, overlaps,
unattributed time, critical path), the cold and warm requests (TTFT, TTFB,
ITL, TPOT, E2E) with min/median/max/spread and the cold penalty factor
(cold_1 TTFT ÷ warm median), then the diagnosis.

--format chrome writes a Chrome trace (traceEvents JSON) that Perfetto
(ui.perfetto.dev) and chrome://tracing open: stages as slices, samples as
counters, requests as async slices with a mark per token.`,
		Example: `  treni-top report session.jsonl
  treni-top report session.jsonl --format json | jq .runs[0].cold_total_ms
  treni-top report session.jsonl --format chrome -o trace.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			switch format {
			case "md", "markdown", "json":
				// The report reads the file in two bounded passes: no
				// log lines, and only the samples the diagnosis weighs.
				s, err := sessions.OpenDigest(args[0])
				if err != nil {
					return withExit(2, err)
				}
				rep := sessions.BuildReport(s)
				if format == "json" {
					if data, err = rep.JSON(); err != nil {
						return withExit(2, err)
					}
				} else {
					data = []byte(rep.Markdown())
				}
			case "chrome", "perfetto":
				// Written as the file is read: memory does not grow
				// with it.
				return streamOutput(cmd, out, func(w io.Writer) error { return sessions.WriteChrome(w, args[0]) })
			default:
				return withExit(2, fmt.Errorf("unknown --format %q: use md, json or chrome", format))
			}
			return writeOutput(cmd, out, data)
		},
	}
	cmd.Flags().StringVarP(&format, "format", "f", "md", "output format: md, json or chrome")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of standard output")
	return cmd
}
