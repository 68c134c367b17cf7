package otelexport

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// Stats says what an export did.
type Stats struct {
	// Spans is how many spans were ended (handed to the queue).
	Spans int64
	// Exported is how many the collector accepted; Failed how many were
	// in batches it did not. Spans − Exported − Failed were dropped from
	// a full queue or still queued when the flush timed out.
	Exported, Failed int64
	// Err is the first export failure, nil when there was none.
	Err error
}

// OK reports whether every span reached the collector.
func (s Stats) OK() bool { return s.Err == nil && s.Exported == s.Spans }

// exporter turns runs into spans on one tracer provider.
type exporter struct {
	cfg    Config
	header sessions.Header
	ids    IDs
	tp     *sdktrace.TracerProvider
	tracer oteltrace.Tracer
	guard  *guardedExporter
	spans  atomic.Int64
	// done remembers exported stage and request spans so that a live
	// export and the final pass over the run never send one twice.
	mu   sync.Mutex
	done map[oteltrace.SpanID]bool
}

func newExporter(ctx context.Context, cfg Config, h sessions.Header) (*exporter, error) {
	proto, err := cfg.protocol()
	if err != nil {
		return nil, err
	}
	timeout := cfg.flushTimeout()
	var inner sdktrace.SpanExporter
	switch proto {
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{
			otlptracegrpc.WithTimeout(timeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: true, InitialInterval: 200 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: timeout}),
		}
		if cfg.Endpoint != "" {
			u, err := cfg.endpointURL(proto)
			if err != nil {
				return nil, err
			}
			opts = append(opts, otlptracegrpc.WithEndpointURL(u))
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		inner, err = otlptracegrpc.New(ctx, opts...)
	default:
		opts := []otlptracehttp.Option{
			otlptracehttp.WithTimeout(timeout),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: 200 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: timeout}),
		}
		if cfg.Protocol == ProtocolHTTPJSON {
			opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
		} else if cfg.Protocol == ProtocolHTTPProtobuf {
			opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf))
		}
		if cfg.Endpoint != "" {
			u, err := cfg.endpointURL(proto)
			if err != nil {
				return nil, err
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		inner, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("set up the OTLP %s trace exporter (check the OTEL_EXPORTER_OTLP_* variables): %w", proto, err)
	}
	res, err := newResource(ctx, h)
	if err != nil {
		_ = inner.Shutdown(ctx)
		return nil, err
	}
	guard := &guardedExporter{inner: inner, warn: cfg.Warn, proto: proto}
	limits := sdktrace.NewSpanLimits() // honours OTEL_SPAN_*_LIMIT
	if cfg.TokenEvents && cfg.getenv("OTEL_SPAN_EVENT_COUNT_LIMIT") == "" {
		limits.EventCountLimit = maxTokenEvents
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(guard,
			sdktrace.WithMaxQueueSize(cfg.queueSize()),
			sdktrace.WithExportTimeout(timeout),
			sdktrace.WithBatchTimeout(time.Second),
		),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithRawSpanLimits(limits),
	)
	return &exporter{
		cfg: cfg, header: h, ids: NewIDs(h), tp: tp, guard: guard,
		tracer: tp.Tracer("github.com/treni-top/treni-top/sessions/otelexport"),
		done:   map[oteltrace.SpanID]bool{},
	}, nil
}

// newResource describes the session's host, GPUs, target and model; the
// standard OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it.
func newResource(ctx context.Context, h sessions.Header) (*resource.Resource, error) {
	kv := []attribute.KeyValue{
		attribute.String("service.name", DefaultServiceName),
		attribute.String("treni.target.kind", h.Target.Kind),
		attribute.String("treni.session.created", h.Created.UTC().Format(time.RFC3339Nano)),
	}
	str := func(k, v string) {
		if v != "" {
			kv = append(kv, attribute.String(k, v))
		}
	}
	str("service.version", h.ToolVersion)
	str("host.name", h.Host.Hostname)
	str("host.arch", h.Host.Arch)
	str("os.type", h.Host.OS)
	str("os.version", h.Host.Kernel)
	str("treni.target.server_kind", h.Target.ServerKind)
	str("treni.target.url", h.Target.URL)
	str("treni.target.device", h.Target.Device)
	str("treni.target", h.Target.Describe())
	str("treni.model", h.Target.Model)
	if len(h.GPUs) > 0 {
		names := make([]string, len(h.GPUs))
		for i, g := range h.GPUs {
			names[i] = g.Name
		}
		kv = append(kv, attribute.StringSlice("treni.gpu.names", names), attribute.Int("treni.gpu.count", len(h.GPUs)))
		str("treni.gpu.driver", h.GPUs[0].Driver)
	}
	res, err := resource.New(ctx, resource.WithAttributes(kv...), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("build the OTel resource (check OTEL_RESOURCE_ATTRIBUTES is key=value,…): %w", err)
	}
	return res, nil
}

// guardedExporter counts what the collector took and turns the first
// failure into one warning line. It returns nil to the batch processor so
// that the SDK's global error handler (a log line per failed batch) stays
// quiet; Stats carries the failures instead.
type guardedExporter struct {
	inner    sdktrace.SpanExporter
	warn     io.Writer
	proto    string
	exported atomic.Int64
	failed   atomic.Int64
	once     sync.Once
	mu       sync.Mutex
	first    error
}

func (g *guardedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := g.inner.ExportSpans(ctx, spans); err != nil {
		g.failed.Add(int64(len(spans)))
		g.fail(err)
		return nil
	}
	g.exported.Add(int64(len(spans)))
	return nil
}

// fail records the first failure and prints the one warning.
func (g *guardedExporter) fail(err error) {
	g.once.Do(func() {
		g.mu.Lock()
		g.first = err
		g.mu.Unlock()
		if g.warn != nil {
			fmt.Fprintf(g.warn, "treni-top: warning: OTLP trace export (%s) failed, spans are dropped; the session file is unaffected: %v\n", g.proto, err)
		}
	})
}

func (g *guardedExporter) Shutdown(ctx context.Context) error { return g.inner.Shutdown(ctx) }

func (g *guardedExporter) firstErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.first
}

// close flushes within the flush timeout and reports.
func (x *exporter) close(ctx context.Context) Stats {
	ctx, cancel := context.WithTimeout(ctx, x.cfg.flushTimeout())
	defer cancel()
	err := x.tp.Shutdown(ctx)
	st := Stats{Spans: x.spans.Load(), Exported: x.guard.exported.Load(), Failed: x.guard.failed.Load(), Err: x.guard.firstErr()}
	if st.Err == nil && err != nil {
		st.Err = fmt.Errorf("flush OTLP spans: %w", err)
	}
	if st.Err == nil && st.Exported < st.Spans {
		st.Err = fmt.Errorf("%d of %d spans were dropped (queue full or flush timed out after %v)", st.Spans-st.Exported, st.Spans, x.cfg.flushTimeout())
	}
	if st.Err != nil {
		// A collector that never answers times the flush out before the
		// batch's own export fails: warn here (still only once).
		x.guard.fail(st.Err)
		st.Err = x.guard.firstErr()
	}
	return st
}

// wall converts a session offset to wall-clock time.
func (x *exporter) wall(at time.Duration) time.Time { return x.header.Created.Add(at) }

// claim marks a span ID as exported and reports whether it was new.
func (x *exporter) claim(id oteltrace.SpanID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done[id] {
		return false
	}
	x.done[id] = true
	return true
}

// emit creates and ends one span with exactly the given IDs and times.
func (x *exporter) emit(parent oteltrace.SpanContext, tid oteltrace.TraceID, sid oteltrace.SpanID, name string, start, end time.Time,
	kind oteltrace.SpanKind, attrs []attribute.KeyValue, decorate func(oteltrace.Span)) {
	ctx := withIDs(context.Background(), tid, sid)
	if parent.IsValid() {
		ctx = oteltrace.ContextWithSpanContext(ctx, parent)
	}
	_, sp := x.tracer.Start(ctx, name, oteltrace.WithTimestamp(start), oteltrace.WithSpanKind(kind), oteltrace.WithAttributes(attrs...))
	if decorate != nil {
		decorate(sp)
	}
	sp.End(oteltrace.WithTimestamp(end))
	x.spans.Add(1)
}

// stage exports one stage span as a child of the run's root.
func (x *exporter) stage(run int, sp trace.Span) {
	id := x.ids.StageSpanID(run, sp.Name, sp.Start)
	if !x.claim(id) {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("treni.stage", string(sp.Name)), attribute.Int("treni.run", run)}
	if sp.Source != "" {
		attrs = append(attrs, attribute.String("treni.stage.source", sp.Source))
	}
	if sp.Workers > 1 {
		attrs = append(attrs, attribute.Int("treni.stage.workers", sp.Workers))
	}
	if sp.Open {
		attrs = append(attrs, attribute.Bool("treni.stage.open", true))
	}
	attrs = append(attrs, recorded(sp.Attrs)...)
	x.emit(x.ids.rootContext(run), x.ids.TraceID(run), id, string(sp.Name), x.wall(sp.Start), x.wall(sp.End), oteltrace.SpanKindInternal, attrs, nil)
}

// recorded converts a span's recorded attributes, keys as recorded, in
// key order so that exports are reproducible.
func recorded(a trace.Attrs) []attribute.KeyValue {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]attribute.KeyValue, 0, len(keys))
	for _, k := range keys {
		switch v := a[k].(type) {
		case string:
			out = append(out, attribute.String(k, v))
		case bool:
			out = append(out, attribute.Bool(k, v))
		case int:
			out = append(out, attribute.Int(k, v))
		case int64:
			out = append(out, attribute.Int64(k, v))
		default:
			if f, ok := a.Float(k); ok {
				out = append(out, attribute.Float64(k, f))
			} else {
				out = append(out, attribute.String(k, fmt.Sprint(v)))
			}
		}
	}
	return out
}

// operation maps a probe endpoint to gen_ai.operation.name.
func operation(endpoint string) string {
	switch endpoint {
	case "completions", "ollama_generate":
		return "text_completion"
	case "":
		return ""
	}
	return "chat"
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// request exports one finished probe request as a client span.
func (x *exporter) request(run int, q trace.Request) {
	id := x.ids.RequestSpanID(run, q.ID)
	if !x.claim(id) {
		return
	}
	label := q.Label
	if label == "" {
		label = q.ID
	}
	row := sessions.Row(q)
	attrs := []attribute.KeyValue{
		attribute.Int("treni.run", run),
		attribute.String("treni.request.id", q.ID),
		attribute.String("treni.request.label", label),
		attribute.String("treni.request.phase", string(q.Phase)),
		attribute.Float64("gen_ai.server.request.duration", seconds(q.E2E())),
	}
	if op := operation(q.Endpoint); op != "" {
		attrs = append(attrs, attribute.String("gen_ai.operation.name", op), attribute.String("treni.request.endpoint", q.Endpoint))
	}
	if m := x.header.Target.Model; m != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.model", m))
	}
	if q.FirstToken > 0 {
		attrs = append(attrs, attribute.Float64("gen_ai.server.time_to_first_token", seconds(q.TTFT())))
	}
	if tpot := q.TPOT(); tpot > 0 {
		attrs = append(attrs, attribute.Float64("gen_ai.server.time_per_output_token", seconds(tpot)))
	}
	if q.FirstByte > 0 {
		attrs = append(attrs, attribute.Float64("treni.request.ttfb", seconds(q.FirstByte)))
	}
	if q.FirstEvent > 0 {
		attrs = append(attrs, attribute.Float64("treni.request.first_event", seconds(q.FirstEvent)))
	}
	if len(q.Tokens) > 1 {
		attrs = append(attrs, attribute.Float64("treni.request.itl_p50", row.ITLP50/1e3), attribute.Float64("treni.request.itl_p99", row.ITLP99/1e3))
	}
	if q.MultiTokenChunks > 0 {
		attrs = append(attrs, attribute.Int("treni.request.multi_token_chunks", q.MultiTokenChunks))
	}
	if q.PromptTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.usage.input_tokens", q.PromptTokens))
	}
	if n := q.OutputTokens(); n > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.usage.output_tokens", n))
	}
	if q.Status != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", q.Status))
	}
	if q.ErrorKind != "" {
		attrs = append(attrs, attribute.String("error.type", q.ErrorKind))
	}
	end := q.Sent + q.End
	tokens := x.cfg.TokenEvents
	x.emit(x.ids.rootContext(run), x.ids.TraceID(run), id, "probe "+label, x.wall(q.Sent), x.wall(end), oteltrace.SpanKindClient, attrs,
		func(sp oteltrace.Span) {
			if tokens {
				for i, t := range q.Tokens {
					sp.AddEvent("gen_ai.token", oteltrace.WithTimestamp(x.wall(q.Sent+t)), oteltrace.WithAttributes(attribute.Int("treni.token.index", i)))
				}
			}
			if q.Error != "" {
				sp.SetStatus(codes.Error, q.Error)
			}
		})
}

// root exports a run's root span: the cold window (or, for a run with no
// launch, the span of its requests) with the run's summary and diagnosis.
func (x *exporter) root(run sessions.Run, diag *sessions.Diagnosis) {
	if !x.claim(x.ids.RootSpanID(run.Index)) {
		return
	}
	name, start, end := "cold_start", run.Start, run.ColdEnd
	attrs := []attribute.KeyValue{attribute.Int("treni.run", run.Index), attribute.String("treni.cold_end", run.ColdEndKind)}
	if run.ColdEndKind == sessions.ColdEndNone {
		name = "probe_session"
		for _, q := range run.Requests {
			end = max(end, q.Sent+q.End)
		}
	} else {
		a := run.Attribution
		attrs = append(attrs,
			attribute.Float64("treni.cold_start.total", seconds(run.ColdTotal())),
			attribute.Float64("treni.cold_start.unattributed", seconds(a.Unattributed)),
		)
		if a.Dominant != "" {
			attrs = append(attrs, attribute.String("treni.cold_start.dominant_stage", string(a.Dominant)))
		}
		if run.Healthy > 0 {
			attrs = append(attrs, attribute.Float64("treni.cold_start.healthy", seconds(run.Healthy-run.Start)))
		}
	}
	if run.Crashed {
		attrs = append(attrs, attribute.Bool("treni.crashed", true))
	}
	if w := run.Wake; w != nil && run.ColdEndKind != sessions.ColdEndNone {
		// A wake of a sleeping target: the same process, its own window.
		name = "wake"
		attrs = append(attrs, attribute.Int("treni.wake", w.Cycle), attribute.Int("treni.wakes", w.Of), attribute.Int("treni.sleep_level", w.Level))
	}
	if diag != nil {
		attrs = append(attrs, diagnosisAttrs(*diag)...)
	}
	x.emit(oteltrace.SpanContext{}, x.ids.TraceID(run.Index), x.ids.RootSpanID(run.Index), name, x.wall(start), x.wall(end), oteltrace.SpanKindInternal, attrs,
		func(sp oteltrace.Span) {
			if run.Crashed {
				sp.SetStatus(codes.Error, "the target crashed")
			}
		})
}

// diagnosisAttrs puts the decision table's outcome on the root span.
func diagnosisAttrs(d sessions.Diagnosis) []attribute.KeyValue {
	var out []attribute.KeyValue
	if d.Summary != "" {
		out = append(out, attribute.String("treni.diagnosis.summary", d.Summary))
	}
	if d.ColdPenalty > 0 {
		out = append(out, attribute.Float64("treni.diagnosis.cold_penalty", d.ColdPenalty))
	}
	if d.WarmBand != "" {
		out = append(out, attribute.String("treni.diagnosis.warm_band", d.WarmBand))
	}
	if d.Dominant != "" {
		out = append(out, attribute.String("treni.diagnosis.dominant", d.Dominant))
		if h, ok := d.Hypothesis(d.Dominant); ok {
			out = append(out, attribute.String("treni.diagnosis.dominant_title", h.Title), attribute.Float64("treni.diagnosis.score", h.Score))
		}
	}
	var verdicts []string
	for _, h := range d.Hypotheses {
		verdicts = append(verdicts, h.Code+"="+string(h.Verdict))
	}
	if len(verdicts) > 0 {
		out = append(out, attribute.String("treni.diagnosis.verdicts", strings.Join(verdicts, ",")))
	}
	return out
}

// exportRun sends whatever of a finished run has not gone yet: its stage
// spans (including ones the analysis adds, such as the probe's
// first_request), its requests, then the root.
func (x *exporter) exportRun(events []trace.Event, run sessions.Run) {
	for _, sp := range run.Spans {
		x.stage(run.Index, sp)
	}
	for _, q := range run.Requests {
		x.request(run.Index, q)
	}
	var diag *sessions.Diagnosis
	if run.ColdEndKind != sessions.ColdEndNone {
		d := sessions.DiagnoseRun(events, run)
		diag = &d
	}
	x.root(run, diag)
}

// Export sends a recorded session: one trace per run. It returns within
// about Config.FlushTimeout after the spans are queued, whatever the
// collector does; Stats says what arrived. An error means nothing could be
// sent (bad configuration).
func Export(ctx context.Context, s *sessions.Session, cfg Config) (Stats, error) {
	x, err := newExporter(ctx, cfg, s.Header)
	if err != nil {
		return Stats{}, err
	}
	for _, run := range s.Runs() {
		x.exportRun(s.Events, run)
	}
	return x.close(ctx), nil
}
