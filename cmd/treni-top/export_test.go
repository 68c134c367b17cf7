package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/sessions/otelexport"
	"github.com/treni-top/treni-top/trace"
)

const exportFixture = "../../sessions/otelexport/testdata/h200-builtin.jsonl"

// TestExportCommand sends the fixture with only OTEL_EXPORTER_OTLP_ENDPOINT
// set and checks the span count the collector decoded and the trace ID
// printed for scripts.
func TestExportCommand(t *testing.T) {
	col, spans := spanCounter(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.URL)
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"export", exportFixture})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("export: %v\n%s", err, errOut.String())
	}
	s, err := sessions.Open(exportFixture)
	if err != nil {
		t.Fatal(err)
	}
	run := s.Runs()[0]
	want := int64(1 + len(run.Spans) + len(run.Requests)) // root, stages, requests
	if n := spans.Load(); n != want {
		t.Errorf("collector got %d spans, want %d", n, want)
	}
	if !strings.HasPrefix(out.String(), "run 0: trace ") || len(strings.TrimSpace(strings.TrimPrefix(out.String(), "run 0: trace "))) != 32 {
		t.Errorf("stdout %q", out.String())
	}
	if !strings.Contains(errOut.String(), fmt.Sprintf("exported %d of %d spans", want, want)) {
		t.Errorf("stderr %q", errOut.String())
	}
	// --trace-ids prints the same IDs without sending anything.
	before := spans.Load()
	ids := newRootCmd()
	var idsOut bytes.Buffer
	ids.SetOut(&idsOut)
	ids.SetArgs([]string{"export", exportFixture, "--trace-ids"})
	if err := ids.Execute(); err != nil || idsOut.String() != out.String() || spans.Load() != before {
		t.Errorf("--trace-ids: %v, %q (export printed %q), spans sent %d", err, idsOut.String(), out.String(), spans.Load()-before)
	}
}

func TestExportCommandErrors(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	for _, args := range [][]string{
		{"export", exportFixture},
		{"export", exportFixture, "--otlp", "127.0.0.1:4318"},
		{"export", exportFixture, "--otlp", "http://127.0.0.1:1", "--otlp-header", "novalue"},
		{"export", "/nonexistent.jsonl", "--otlp", "http://127.0.0.1:1"},
	} {
		if code := execute(args); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// spanCounter is an OTLP/HTTP collector from the official types that
// counts the spans it decodes.
func spanCounter(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var spans atomic.Int64
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans.Add(int64(len(ss.Spans)))
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(col.Close)
	return col, &spans
}

// TestFleetPlumbing drives startFleet the way run/attach will: live export,
// /metrics and the OTLP receiver on one bus.
func TestFleetPlumbing(t *testing.T) {
	s, err := sessions.Open(exportFixture)
	if err != nil {
		t.Fatal(err)
	}
	col, spans := spanCounter(t)
	ctx := context.Background()
	bus := trace.NewBus()
	all := bus.Subscribe()
	var got []trace.Event
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for e := range all.Events() {
			got = append(got, e)
		}
	}()
	var stderr bytes.Buffer
	f, err := startFleet(ctx, fleetOptions{otlp: col.URL, metrics: "127.0.0.1:0", otlpListen: "127.0.0.1:0"},
		s.Header, trace.ClockAt(s.Header.Created), bus, nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if tc := f.TraceContext(); tc == nil || !tc(0, "r1").Equal(otelexport.NewIDs(s.Header).RequestSpanContext(0, "r1")) {
		t.Error("TraceContext does not give the export's request span")
	}
	for _, e := range s.Events {
		bus.Emit(e)
	}
	// The server reports its model load over OTLP.
	created := uint64(s.Header.Created.UnixNano())
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: make([]byte, 16), SpanId: []byte{0, 0, 0, 0, 0, 0, 0, 1}, Name: "Load model",
		StartTimeUnixNano: created + 100e6, EndTimeUnixNano: created + 300e6,
	}}}}}}}
	req.ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId[15] = 1
	body, _ := proto.Marshal(req)
	resp, err := http.Post(f.recv.Endpoint(), "application/x-protobuf", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("post to the receiver: %v %v", err, resp)
	}
	resp.Body.Close()
	// The metrics follow the bus on their own goroutine: poll until they
	// have caught up (the deadline only bounds a broken build).
	var metrics []byte
	for deadline := time.Now().Add(30 * time.Second); ; {
		mresp, err := http.Get(f.srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ = io.ReadAll(mresp.Body)
		mresp.Body.Close()
		if strings.Contains(string(metrics), "treni_cold_start_seconds{") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks the cold start:\n%s", metrics)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.stopInputs()
	bus.Close()
	f.finish(ctx)
	<-collected
	runs := sessions.Analyze(got)
	var merged bool
	for _, sp := range runs[0].Spans {
		merged = merged || (sp.Name == trace.StageModelLoad && sp.Source == "otlp:unknown" && sp.Start == 100e6 && sp.End == 300e6)
	}
	if !merged {
		t.Errorf("the server's Load model span is not a model_load stage of run 0: %v", runs[0].Spans)
	}
	if want := int64(1 + len(runs[0].Spans) + len(runs[0].Requests)); spans.Load() != want {
		t.Errorf("collector got %d spans, want %d (the received stage included)", spans.Load(), want)
	}
	if !strings.Contains(stderr.String(), "exported") {
		t.Errorf("stderr %q", stderr.String())
	}

	// An address in use is an error, and nothing is left running.
	busy := trace.NewBus()
	defer busy.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := startFleet(ctx, fleetOptions{otlp: col.URL, metrics: ln.Addr().String()}, s.Header, trace.ClockAt(s.Header.Created), busy, nil, io.Discard); err == nil {
		t.Error("startFleet accepted a metrics address in use")
	}
}
