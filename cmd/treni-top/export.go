package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/sessions/fleetmetrics"
	"github.com/treni-top/treni-top/sessions/otelexport"
)

func newExportCmd() *cobra.Command {
	var (
		endpoint, protocol string
		headers            []string
		tokenEvents        bool
		timeout            time.Duration
		metricsAddr        string
		serveFor           time.Duration
		idsOnly            bool
	)
	cmd := &cobra.Command{
		Use:   "export FILE",
		Short: "Send a recorded session to an OpenTelemetry collector (OTLP traces), or serve its /metrics",
		Long: `export sends a session file as OTLP traces through the OpenTelemetry Go SDK:
one trace per cold run, a cold_start root span carrying the diagnosis, a child
span per stage with the recorded start, end and attributes, and a client span
per probe request with gen_ai.server.time_to_first_token,
time_per_output_token and request.duration (docs/OTEL.md has the mapping).

The destination is --otlp or the standard variables
(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES). Trace IDs derive from the session, so exporting a
file twice sends the same IDs, and they match the traceparent its probe
requests carried. Each run's trace ID is printed on stdout.

--serve-metrics ADDR serves the session's fleet metrics (the same series a
node agent serves) at http://ADDR/metrics for --serve-for, or until
interrupted when --serve-for is 0.`,
		Example: `  treni-top export session.jsonl --otlp http://127.0.0.1:4318
  OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317 OTEL_EXPORTER_OTLP_PROTOCOL=grpc treni-top export session.jsonl
  treni-top export session.jsonl --serve-metrics 127.0.0.1:9464 --serve-for 30s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// What the spans and the diagnosis read, not the file's
			// samples and log lines: memory does not grow with them.
			s, dropped, err := sessions.OpenForDiagnosis(args[0])
			if err != nil {
				return withExit(2, err)
			}
			if dropped > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "treni-top: warning: a run's cold window stayed open for more samples than are kept; its diagnosis did not read the last %d\n", dropped)
			}
			ids := otelexport.NewIDs(s.Header)
			printIDs := func() {
				for _, run := range s.Runs() {
					fmt.Fprintf(cmd.OutOrStdout(), "run %d: trace %s\n", run.Index, ids.TraceID(run.Index))
				}
			}
			if idsOnly {
				printIDs()
				return nil
			}
			traces := endpoint != "" || otelexport.Enabled(nil)
			if !traces && metricsAddr == "" {
				return withExit(2, errors.New("nowhere to export: pass --otlp URL (or set OTEL_EXPORTER_OTLP_ENDPOINT), or --serve-metrics ADDR"))
			}
			hdrs, err := otelexport.ParseHeaders(headers)
			if err != nil {
				return withExit(2, err)
			}
			ctx := cmd.Context()
			if traces {
				cfg := otelexport.Config{Endpoint: endpoint, Protocol: protocol, Headers: hdrs, TokenEvents: tokenEvents,
					FlushTimeout: timeout, Warn: cmd.ErrOrStderr()}
				st, err := otelexport.Export(ctx, s, cfg)
				if err != nil {
					return withExit(2, err)
				}
				printIDs()
				fmt.Fprintf(cmd.ErrOrStderr(), "treni-top: exported %d of %d spans\n", st.Exported, st.Spans)
				if !st.OK() {
					return withExit(2, fmt.Errorf("OTLP export incomplete (is the collector up at the configured endpoint?): %w", st.Err))
				}
			}
			if metricsAddr != "" {
				m, err := fleetmetrics.FromFile(args[0])
				if err == nil {
					err = fleetmetrics.ServeFor(ctx, metricsAddr, m, serveFor, cmd.ErrOrStderr())
				}
				if err != nil {
					return withExit(2, err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&endpoint, "otlp", "", "OTLP endpoint URL (default: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT), e.g. http://127.0.0.1:4318")
	f.StringVar(&protocol, "protocol", "", "http/protobuf, http/json or grpc (default: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else http/protobuf)")
	f.StringArrayVar(&headers, "otlp-header", nil, "extra export header key=value (repeatable; OTEL_EXPORTER_OTLP_HEADERS also works)")
	f.BoolVar(&tokenEvents, "token-events", false, "add one span event per token to request spans")
	f.DurationVar(&timeout, "timeout", otelexport.DefaultFlushTimeout, "bound on each export and on the final flush")
	f.StringVar(&metricsAddr, "serve-metrics", "", "serve the session's fleet metrics at http://ADDR/metrics")
	f.BoolVar(&idsOnly, "trace-ids", false, "only print each run's trace ID (what an export sends, and what its probe requests' traceparent carried)")
	f.DurationVar(&serveFor, "serve-for", 0, "with --serve-metrics: stop after this long (0: until interrupted)")
	return cmd
}
