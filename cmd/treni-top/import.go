package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace/serverlog"
)

func newImportCmd() *cobra.Command {
	var kind, out string
	cmd := &cobra.Command{
		Use:   "import [--kind KIND] FILE -o SESSION",
		Short: "Turn an existing server log into a session",
		Long: `Turn a log a server already wrote (from production, a CI job, a bug report)
into a session that report, diff, replay and the TUI can use. The stages come
from the server's own lines (vLLM V0 and V1, SGLang, TGI, llama.cpp's
llama-server, Ollama, and treni-top serve's JSON stage lines); times come from
the lines' timestamps, and lines without one are placed between their
neighbours. --kind auto (the default) tells the server from the lines.
Real logs arrive wrapped: docker compose ("svc-1  | "), docker logs -t
(RFC 3339 timestamps), kubectl logs --prefix ("[pod/x/c] ") and journald or
syslog ("May  1 10:00:00 host unit[pid]: ") prefixes are stripped before the
kind is detected, and the collector's timestamp is used for lines that carry
none. A line without any timestamp keeps the previous timed line's time: a
log without timestamps gives the stages' order, not their durations. The
session records what the log states about where it ran (device, GPU, tensor
parallel size, version), never this machine's facts. A log in which the
server starts several times gives one run per start. The import streams: its
memory does not grow with the log, and nothing is written to -o unless it
succeeds. A --kind whose lines the log does not contain is an error (exit 2)
that names the kind the lines look like.
Without -o the session goes to the default session directory.`,
		Example: `  treni-top import vllm.log -o vllm.jsonl
  treni-top import --kind sglang server.log.gz -o sglang.jsonl.gz
  treni-top report vllm.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := serverlog.ParseKind(kind); err != nil {
				return withExit(2, err)
			}
			if out == "" {
				p, err := sessions.DefaultPath(time.Now(), "import-"+strings.TrimSuffix(filepath.Base(args[0]), filepath.Ext(args[0])))
				if err != nil {
					return withExit(2, err)
				}
				out = p
			}
			s, err := sessions.ImportFile(args[0], out, sessions.ImportOptions{Kind: kind, ToolVersion: version})
			if err != nil {
				return withExit(2, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), out)
			fmt.Fprintln(cmd.OutOrStdout(), sessions.ImportSummary(s))
			return nil
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "auto", "server that wrote the log: auto, vllm, sglang, tgi, llama.cpp, ollama or treni")
	cmd.Flags().StringVarP(&out, "output", "o", "", "session file to write (.jsonl or .jsonl.gz)")
	return cmd
}
