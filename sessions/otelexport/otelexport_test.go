package otelexport

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// Fixtures: a synthetic H200 session (open then closed stage spans,
// overlapping stages) and a real one, recorded with
// `treni-top run --headless` on the built-in engine's demo model on a
// 2-core CPU VM.
const fixture = "testdata/h200-builtin.jsonl"

var fixtures = []string{fixture, "testdata/cpu-builtin.jsonl"}

func openFixture(t *testing.T) *sessions.Session { return openPath(t, fixture) }

func openPath(t *testing.T, path string) *sessions.Session {
	t.Helper()
	s, err := sessions.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unix is a session offset as the Unix nanoseconds a span must carry.
func unix(s *sessions.Session, at time.Duration) uint64 {
	return uint64(s.Header.Created.Add(at).UnixNano())
}

func num(v *commonpb.AnyValue) (float64, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue, true
	case *commonpb.AnyValue_IntValue:
		return float64(x.IntValue), true
	}
	return 0, false
}

func wantFloat(t *testing.T, where string, attrs map[string]*commonpb.AnyValue, key string, want float64) {
	t.Helper()
	v, ok := attrs[key]
	if !ok {
		t.Errorf("%s: attribute %s missing", where, key)
		return
	}
	got, ok := num(v)
	if !ok || got != want {
		t.Errorf("%s: %s = %v, want %v", where, key, v, want)
	}
}

func wantString(t *testing.T, where string, attrs map[string]*commonpb.AnyValue, key, want string) {
	t.Helper()
	if got := attrs[key].GetStringValue(); got != want {
		t.Errorf("%s: %s = %q, want %q", where, key, got, want)
	}
}

// TestExportMatchesSession sends the fixture session with only
// OTEL_EXPORTER_OTLP_ENDPOINT set and checks every received span field by
// field against the session and its JSON report.
func TestExportMatchesSession(t *testing.T) {
	for _, path := range fixtures {
		t.Run(filepath.Base(path), func(t *testing.T) { exportMatchesSession(t, openPath(t, path)) })
	}
}

func exportMatchesSession(t *testing.T, s *sessions.Session) {
	col := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=ci")
	if !Enabled(nil) {
		t.Fatal("Enabled() is false with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	st, err := Export(context.Background(), s, Config{TokenEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	if !st.OK() {
		t.Fatalf("export not complete: %+v", st)
	}
	got := col.spans()
	if int64(len(got)) != st.Spans {
		t.Fatalf("collector got %d spans, exporter ended %d", len(got), st.Spans)
	}
	runs := s.Runs()
	if len(runs) != 1 {
		t.Fatalf("fixture has %d runs, want 1", len(runs))
	}
	run := runs[0]
	ids := NewIDs(s.Header)
	byID := map[string]*tracepb.Span{}
	traces := map[string]bool{}
	for _, r := range got {
		byID[hexID(r.span.SpanId)] = r.span
		traces[hexID(r.span.TraceId)] = true
		res := r.resource
		wantString(t, "resource", res, "service.name", DefaultServiceName)
		wantString(t, "resource", res, "host.name", s.Header.Host.Hostname)
		wantString(t, "resource", res, "treni.model", s.Header.Target.Model)
		wantString(t, "resource", res, "treni.target.kind", sessions.TargetBuiltin)
		wantString(t, "resource", res, "treni.target.url", s.Header.Target.URL)
		wantString(t, "resource", res, "deployment.environment.name", "ci")
		g := res["treni.gpu.names"].GetArrayValue().GetValues()
		if len(g) != len(s.Header.GPUs) || (len(g) > 0 && g[0].GetStringValue() != s.Header.GPUs[0].Name) {
			t.Errorf("resource treni.gpu.names = %v, header GPUs %v", g, s.Header.GPUs)
		}
	}
	if len(traces) != 1 || !traces[ids.TraceID(0).String()] {
		t.Fatalf("traces %v, want exactly run 0's %s", traces, ids.TraceID(0))
	}

	// The root: the cold window and the diagnosis.
	root := byID[ids.RootSpanID(0).String()]
	if root == nil {
		t.Fatal("no root span")
	}
	if len(root.ParentSpanId) != 0 || root.Name != "cold_start" {
		t.Errorf("root %q has parent %x", root.Name, root.ParentSpanId)
	}
	if root.StartTimeUnixNano != unix(s, run.Start) || root.EndTimeUnixNano != unix(s, run.ColdEnd) {
		t.Errorf("root [%d, %d], want [%d, %d]", root.StartTimeUnixNano, root.EndTimeUnixNano, unix(s, run.Start), unix(s, run.ColdEnd))
	}
	diag := sessions.DiagnoseRun(s.Events, run)
	ra := attrMap(root.Attributes)
	wantString(t, "root", ra, "treni.diagnosis.dominant", diag.Dominant)
	if diag.Dominant == "" {
		t.Fatal("fixture has no dominant hypothesis; the test needs one")
	}
	h, _ := diag.Hypothesis(diag.Dominant)
	wantFloat(t, "root", ra, "treni.diagnosis.score", h.Score)
	wantFloat(t, "root", ra, "treni.diagnosis.cold_penalty", diag.ColdPenalty)
	wantString(t, "root", ra, "treni.diagnosis.summary", diag.Summary)
	wantString(t, "root", ra, "treni.cold_start.dominant_stage", string(run.Attribution.Dominant))
	wantFloat(t, "root", ra, "treni.cold_start.total", run.ColdTotal().Seconds())

	// Stages: one child per recorded span, times and attributes as recorded.
	for _, sp := range run.Spans {
		where := "stage " + string(sp.Name)
		g := byID[ids.StageSpanID(0, sp.Name, sp.Start).String()]
		if g == nil {
			t.Errorf("%s: not exported", where)
			continue
		}
		if g.Name != string(sp.Name) || !bytes.Equal(g.ParentSpanId, root.SpanId) || !bytes.Equal(g.TraceId, root.TraceId) {
			t.Errorf("%s: name %q parent %x trace %x", where, g.Name, g.ParentSpanId, g.TraceId)
		}
		if g.StartTimeUnixNano != unix(s, sp.Start) || g.EndTimeUnixNano != unix(s, sp.End) {
			t.Errorf("%s: [%d, %d], want [%d, %d]", where, g.StartTimeUnixNano, g.EndTimeUnixNano, unix(s, sp.Start), unix(s, sp.End))
		}
		a := attrMap(g.Attributes)
		wantString(t, where, a, "treni.stage", string(sp.Name))
		wantString(t, where, a, "treni.stage.source", sp.Source)
		for k, v := range sp.Attrs {
			switch v := v.(type) {
			case string:
				wantString(t, where, a, k, v)
			case bool:
				if got := a[k].GetBoolValue(); got != v || a[k] == nil {
					t.Errorf("%s: %s = %v, want %v", where, k, a[k], v)
				}
			default:
				want, ok := sp.Attrs.Float(k)
				if !ok {
					t.Fatalf("%s: fixture attribute %s of type %T", where, k, v)
				}
				wantFloat(t, where, a, k, want)
			}
		}
	}

	// Against `treni-top report --format json`, to the microsecond.
	rep, err := sessions.BuildReport(s).JSON()
	if err != nil {
		t.Fatal(err)
	}
	var jr struct {
		Runs []struct {
			Stages []struct {
				Name       trace.Stage `json:"name"`
				StartMS    float64     `json:"start_ms"`
				DurationMS float64     `json:"duration_ms"`
			} `json:"stages"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(rep, &jr); err != nil {
		t.Fatal(err)
	}
	if len(jr.Runs[0].Stages) != len(run.Spans) {
		t.Fatalf("report has %d stages, run %d spans", len(jr.Runs[0].Stages), len(run.Spans))
	}
	for _, row := range jr.Runs[0].Stages {
		var g *tracepb.Span
		for _, r := range got {
			if r.span.Name == string(row.Name) {
				g = r.span
			}
		}
		if g == nil {
			t.Errorf("report stage %s has no span", row.Name)
			continue
		}
		startUS := float64(g.StartTimeUnixNano-root.StartTimeUnixNano) / 1e3
		durUS := float64(g.EndTimeUnixNano-g.StartTimeUnixNano) / 1e3
		if math.Round(startUS) != math.Round(row.StartMS*1e3) || math.Round(durUS) != math.Round(row.DurationMS*1e3) {
			t.Errorf("stage %s: span start %.3f µs dur %.3f µs, report %.3f µs %.3f µs", row.Name, startUS, durUS, row.StartMS*1e3, row.DurationMS*1e3)
		}
	}

	// Requests: one client span each, GenAI latencies in seconds, one
	// event per token.
	for _, q := range run.Requests {
		where := "request " + q.Label
		g := byID[ids.RequestSpanID(0, q.ID).String()]
		if g == nil {
			t.Errorf("%s: not exported", where)
			continue
		}
		if g.Kind != tracepb.Span_SPAN_KIND_CLIENT || !bytes.Equal(g.ParentSpanId, root.SpanId) {
			t.Errorf("%s: kind %v parent %x", where, g.Kind, g.ParentSpanId)
		}
		if g.StartTimeUnixNano != unix(s, q.Sent) || g.EndTimeUnixNano != unix(s, q.Sent+q.End) {
			t.Errorf("%s: [%d, %d], want [%d, %d]", where, g.StartTimeUnixNano, g.EndTimeUnixNano, unix(s, q.Sent), unix(s, q.Sent+q.End))
		}
		a := attrMap(g.Attributes)
		wantFloat(t, where, a, "gen_ai.server.time_to_first_token", q.TTFT().Seconds())
		wantFloat(t, where, a, "gen_ai.server.time_per_output_token", q.TPOT().Seconds())
		wantFloat(t, where, a, "gen_ai.server.request.duration", q.E2E().Seconds())
		wantFloat(t, where, a, "treni.request.ttfb", q.FirstByte.Seconds())
		row := sessions.Row(q)
		wantFloat(t, where, a, "treni.request.itl_p50", row.ITLP50/1e3)
		wantFloat(t, where, a, "treni.request.itl_p99", row.ITLP99/1e3)
		wantFloat(t, where, a, "gen_ai.usage.output_tokens", float64(q.OutputTokens()))
		wantFloat(t, where, a, "gen_ai.usage.input_tokens", float64(q.PromptTokens))
		wantString(t, where, a, "treni.request.phase", string(q.Phase))
		wantString(t, where, a, "gen_ai.request.model", s.Header.Target.Model)
		if len(g.Events) != len(q.Tokens) {
			t.Errorf("%s: %d token events, want %d", where, len(g.Events), len(q.Tokens))
			continue
		}
		for i, ev := range g.Events {
			if ev.TimeUnixNano != unix(s, q.Sent+q.Tokens[i]) {
				t.Errorf("%s: token %d at %d, want %d", where, i, ev.TimeUnixNano, unix(s, q.Sent+q.Tokens[i]))
				break
			}
		}
	}
	if want := 1 + len(run.Spans) + len(run.Requests); len(got) != want {
		t.Errorf("%d spans, want root + %d stages + %d requests = %d", len(got), len(run.Spans), len(run.Requests), want)
	}
}

// TestLiveMatchesExport replays the fixture onto a bus that a live export
// reads and checks that it sends exactly the spans the file export sends.
func TestLiveMatchesExport(t *testing.T) {
	for _, path := range fixtures {
		t.Run(filepath.Base(path), func(t *testing.T) { liveMatchesExport(t, openPath(t, path)) })
	}
}

func liveMatchesExport(t *testing.T, s *sessions.Session) {
	fileCol, liveCol := newCollector(t), newCollector(t)
	if _, err := Export(context.Background(), s, Config{Endpoint: fileCol.srv.URL}); err != nil {
		t.Fatal(err)
	}
	bus := trace.NewBus()
	live, err := NewLive(context.Background(), Config{Endpoint: liveCol.srv.URL}, s.Header, bus)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Events {
		bus.Emit(e)
	}
	bus.Close()
	if st := live.Close(context.Background()); !st.OK() {
		t.Fatalf("live export: %+v", st)
	}
	// Samples after the cold window are not kept (the root, checked
	// below, must not need them).
	cold, _ := s.Runs()[0].ColdRequest()
	for _, e := range live.events {
		if e.Kind == trace.KindSample && e.At > cold.Sent+cold.End {
			t.Fatalf("live export kept a sample at %v, after the cold request ended at %v", e.At, cold.Sent+cold.End)
		}
	}
	key := func(sp *tracepb.Span) string {
		b, _ := json.Marshal(struct {
			T, S, P    string
			Name       string
			Start, End uint64
			Attrs      []*commonpb.KeyValue
		}{hexID(sp.TraceId), hexID(sp.SpanId), hexID(sp.ParentSpanId), sp.Name, sp.StartTimeUnixNano, sp.EndTimeUnixNano, sp.Attributes})
		return string(b)
	}
	want := map[string]bool{}
	for _, r := range fileCol.spans() {
		want[key(r.span)] = true
	}
	gotSpans := liveCol.spans()
	if len(gotSpans) != len(want) {
		t.Errorf("live sent %d spans, file export %d", len(gotSpans), len(want))
	}
	for _, r := range gotSpans {
		if !want[key(r.span)] {
			t.Errorf("live span %q differs from the file export's", r.span.Name)
		}
	}
}

// blackHole accepts connections and never answers.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// closedPort returns an address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// watchdog is how long an export to a dead collector may take before the
// test calls it unbounded: 20× the flush timeout we set, far under the
// SDK's own defaults (10 s per export, a minute of retries) that would
// apply if our bound were not in force.
const (
	deadFlush = 300 * time.Millisecond
	watchdog  = 20 * deadFlush
)

// TestUnreachableCollector: a closed port and a listener that never answers
// each give one warning, a bounded return and an error in Stats.
func TestUnreachableCollector(t *testing.T) {
	s := openFixture(t)
	for _, tc := range []struct{ name, endpoint, proto string }{
		{"closed port", closedPort(t), ProtocolHTTPProtobuf},
		{"black hole", blackHole(t), ProtocolHTTPProtobuf},
		{"black hole grpc", blackHole(t), ProtocolGRPC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warn bytes.Buffer
			start := time.Now()
			st, err := Export(context.Background(), s, Config{Endpoint: tc.endpoint, Protocol: tc.proto, FlushTimeout: deadFlush, Warn: &lockedWriter{w: &warn}})
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if took > watchdog {
				t.Errorf("export took %v with a %v flush timeout", took, deadFlush)
			}
			if st.OK() || st.Err == nil || st.Exported != 0 {
				t.Errorf("stats %+v: want a failure and nothing exported", st)
			}
			if n := strings.Count(warn.String(), "\n"); n != 1 {
				t.Errorf("%d warning lines, want exactly one:\n%s", n, warn.String())
			}
		})
	}
}

// TestLiveDeadCollectorKeepsSession records a session through a recorder
// and a live export to a black hole on the same bus: the file must be
// complete and Close bounded.
func TestLiveDeadCollectorKeepsSession(t *testing.T) {
	s := openFixture(t)
	path := filepath.Join(t.TempDir(), "s.jsonl")
	rec, err := sessions.Create(path, s.Header)
	if err != nil {
		t.Fatal(err)
	}
	bus := trace.NewBus()
	sub := bus.Subscribe()
	recDone := make(chan struct{})
	go func() {
		defer close(recDone)
		for e := range sub.Events() {
			rec.Emit(e)
		}
	}()
	var warn bytes.Buffer
	live, err := NewLive(context.Background(), Config{Endpoint: blackHole(t), FlushTimeout: deadFlush, Warn: &lockedWriter{w: &warn}}, s.Header, bus)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Events {
		bus.Emit(e)
	}
	bus.Close()
	<-recDone
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st := live.Close(context.Background())
	if took := time.Since(start); took > watchdog {
		t.Errorf("Close took %v with a %v flush timeout", took, deadFlush)
	}
	if st.Err == nil {
		t.Errorf("no error reported for a dead collector: %+v", st)
	}
	back, err := sessions.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Events) != len(s.Events) || back.Truncated {
		t.Errorf("session file has %d events (truncated %v), want %d", len(back.Events), back.Truncated, len(s.Events))
	}
}

// lockedWriter makes a bytes.Buffer safe for the exporter's goroutine.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestEnabledAndProtocol(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		if got := Enabled(env(tc.env)); got != tc.want {
			t.Errorf("Enabled(%v) = %v", tc.env, got)
		}
	}
	if p, _ := (Config{Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})}).protocol(); p != ProtocolGRPC {
		t.Errorf("protocol from env = %q", p)
	}
	if _, err := (Config{Protocol: "thrift"}).protocol(); err == nil {
		t.Error("unknown protocol accepted")
	}
	if _, err := (Config{Endpoint: "127.0.0.1:4318"}).endpointURL(ProtocolHTTPProtobuf); err == nil {
		t.Error("endpoint without scheme accepted")
	}
	if u, _ := (Config{Endpoint: "http://c:4318"}).endpointURL(ProtocolHTTPProtobuf); u != "http://c:4318/v1/traces" {
		t.Errorf("endpoint = %q", u)
	}
}

func TestIDsStable(t *testing.T) {
	s := openFixture(t)
	a, b := NewIDs(s.Header), NewIDs(s.Header)
	if a.TraceID(0) != b.TraceID(0) || a.TraceID(0) == a.TraceID(1) || !a.TraceID(0).IsValid() {
		t.Error("trace IDs not stable per run or not distinct between runs")
	}
	sc := a.RequestSpanContext(0, "r1")
	if sc.TraceID() != a.TraceID(0) || sc.SpanID() != a.RequestSpanID(0, "r1") || !sc.IsSampled() {
		t.Errorf("request span context %v", sc)
	}
	h := s.Header
	h.Created = h.Created.Add(time.Nanosecond)
	if NewIDs(h).TraceID(0) == a.TraceID(0) {
		t.Error("another session start gives the same trace")
	}
}

// TestExportOfDiagnosisInput: the spans sent from a session read by
// sessions.OpenForDiagnosis (what export reads, in bounded memory) are
// the spans sent from every event of it.
func TestExportOfDiagnosisInput(t *testing.T) {
	paths, _ := filepath.Glob("../testdata/*.jsonl.gz")
	for _, path := range append(paths, fixtures...) {
		kept, _, err := sessions.OpenForDiagnosis(path)
		if err != nil {
			t.Fatal(err)
		}
		want, got := sentSpans(t, openPath(t, path)), sentSpans(t, kept)
		if len(want) == 0 || len(got) != len(want) {
			t.Fatalf("%s: %d spans, %d from every event", path, len(got), len(want))
		}
		for id, w := range want {
			if !proto.Equal(got[id], w) {
				t.Errorf("%s: span %s %q differs:\nkept: %v\nall:  %v", path, id, w.Name, got[id], w)
			}
		}
	}
}

// sentSpans exports s to a collector and returns the spans it received,
// by span id.
func sentSpans(t *testing.T, s *sessions.Session) map[string]*tracepb.Span {
	t.Helper()
	col := newCollector(t)
	st, err := Export(context.Background(), s, Config{Endpoint: col.srv.URL, TokenEvents: true})
	if err != nil || !st.OK() {
		t.Fatalf("export: %v %+v", err, st)
	}
	out := map[string]*tracepb.Span{}
	for _, r := range col.spans() {
		out[hexID(r.span.SpanId)] = r.span
	}
	return out
}
