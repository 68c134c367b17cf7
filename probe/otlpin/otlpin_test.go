package otlpin

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/treni-top/treni-top/trace"
)

type sink struct {
	mu  sync.Mutex
	evs []trace.Event
}

func (s *sink) Emit(e trace.Event) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
}

func (s *sink) events() []trace.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]trace.Event(nil), s.evs...)
}

// session zero: the session started at this wall time.
var zero = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func ns(offset time.Duration) uint64 { return uint64(zero.Add(offset).UnixNano()) }

var tid = []byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}

func sid(b byte) []byte { return []byte{0, 0, 0, 0, 0, 0, 0, b} }

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}
func dbl(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}
func i64(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func span(id byte, parent byte, name string, kind tracepb.Span_SpanKind, start, end time.Duration, attrs ...*commonpb.KeyValue) *tracepb.Span {
	sp := &tracepb.Span{TraceId: tid, SpanId: sid(id), Name: name, Kind: kind, StartTimeUnixNano: ns(start), EndTimeUnixNano: ns(end), Attributes: attrs}
	if parent != 0 {
		sp.ParentSpanId = sid(parent)
	}
	return sp
}

const ms = time.Millisecond

// vllmLike is a vLLM-like startup sequence (offsets with sub-millisecond
// parts, so that a rounding slip would show) plus one request span and an
// unknown startup span.
func vllmLike() *coltracepb.ExportTraceServiceRequest {
	internal := tracepb.Span_SPAN_KIND_INTERNAL
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "vllm")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
			span(1, 0, "Worker init", internal, 1200*ms+3, 41_000*ms+7),
			span(2, 1, "Init device", internal, 1300*ms+11, 2900*ms+13),
			span(3, 1, "Load model", internal, 3000*ms+17, 19_500*ms+19, dbl("model.size_gb", 15.2), i64("model.tensors", 291)),
			span(4, 1, "Compile graph", internal, 19_600*ms+23, 37_000*ms+29),
			span(5, 1, "Prepare model", internal, 37_100*ms+31, 40_900*ms+37),
			span(6, 1, "Load LoRA adapters", internal, 40_901*ms, 40_950*ms),
			span(7, 9, "llm_request", tracepb.Span_SPAN_KIND_SERVER, 45_000*ms+41, 45_800*ms+43,
				dbl("gen_ai.latency.time_to_first_token", 0.312), str("gen_ai.response.model", "qwen")),
		}}},
	}}}
}

func post(t *testing.T, url, ctype, enc string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	if enc != "" {
		req.Header.Set("Content-Encoding", enc)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// checkVLLM asserts the events of vllmLike on a clock started at zero.
func checkVLLM(t *testing.T, evs []trace.Event, run int) {
	t.Helper()
	stages := map[trace.Stage]trace.Span{}
	var markers []trace.Marker
	for _, e := range evs {
		if e.Run != run {
			t.Errorf("event run %d, want %d", e.Run, run)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("invalid event: %v", err)
		}
		switch e.Kind {
		case trace.KindStage:
			if e.Stage.Open || e.Stage.Source != "otlp:vllm" || e.At != e.Stage.End {
				t.Errorf("stage %+v at %v", *e.Stage, e.At)
			}
			stages[e.Stage.Name] = *e.Stage
		case trace.KindMarker:
			markers = append(markers, *e.Marker)
		}
	}
	want := []struct {
		stage      trace.Stage
		start, end time.Duration
	}{
		{trace.StageRuntimeInit, 1200*ms + 3, 41_000*ms + 7},
		{trace.StageCUDAInit, 1300*ms + 11, 2900*ms + 13},
		{trace.StageModelLoad, 3000*ms + 17, 19_500*ms + 19},
		{trace.StageCompile, 19_600*ms + 23, 37_000*ms + 29},
		{trace.StageWarmup, 37_100*ms + 31, 40_900*ms + 37},
		{"load_lora_adapters", 40_901 * ms, 40_950 * ms},
	}
	if len(stages) != len(want) {
		t.Errorf("%d stages, want %d: %v", len(stages), len(want), stages)
	}
	for _, w := range want {
		got, ok := stages[w.stage]
		if !ok {
			t.Errorf("no %s stage", w.stage)
			continue
		}
		if got.Start != w.start || got.End != w.end {
			t.Errorf("%s [%v, %v], want [%v, %v] (nanosecond exact)", w.stage, got.Start, got.End, w.start, w.end)
		}
	}
	if ml := stages[trace.StageModelLoad]; ml.Attrs["model.size_gb"] != 15.2 || ml.Attrs["model.tensors"] != 291.0 || ml.Attrs["span"] != "Load model" {
		t.Errorf("model_load attrs %v", ml.Attrs)
	}
	if len(markers) != 1 {
		t.Fatalf("%d markers, want the one request span", len(markers))
	}
	m := markers[0]
	if m.Name != MarkerServerSpan || m.Attrs["span"] != "llm_request" || m.Attrs["service"] != "vllm" || m.Attrs["kind"] != "server" ||
		m.Attrs["trace_id"] != hex.EncodeToString(tid) || m.Attrs["parent_span_id"] != "0000000000000009" ||
		m.Attrs["gen_ai.latency.time_to_first_token"] != 0.312 || m.Attrs["duration_ms"] != 800.000002 {
		t.Errorf("request marker %v", m.Attrs)
	}
}

func TestReceiveProtobufAndJSON(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &sink{}
	r, err := Listen(ctx, "127.0.0.1:0", trace.ClockAt(zero), s, Options{Run: func() int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pb, err := proto.Marshal(vllmLike())
	if err != nil {
		t.Fatal(err)
	}
	resp, body := post(t, r.Endpoint(), "application/x-protobuf", "", pb)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("protobuf: HTTP %d %s", resp.StatusCode, body)
	}
	out := &coltracepb.ExportTraceServiceResponse{}
	if err := proto.Unmarshal(body, out); err != nil || out.PartialSuccess != nil {
		t.Errorf("response %v %v", out, err)
	}
	checkVLLM(t, s.events(), 2)

	// OTLP/JSON (hex IDs), gzipped.
	js := otlpJSON(t, vllmLike())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(js)
	zw.Close()
	s2 := &sink{}
	r2, err := Listen(ctx, "127.0.0.1:0", trace.ClockAt(zero), s2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	resp, body = post(t, r2.Endpoint(), "application/json", "gzip", gz.Bytes())
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("json: HTTP %d %s", resp.StatusCode, body)
	}
	checkVLLM(t, s2.events(), 0)
}

// otlpJSON renders a request as OTLP/JSON does: protobuf JSON with hex IDs.
func otlpJSON(t *testing.T, req *coltracepb.ExportTraceServiceRequest) []byte {
	b, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// protojson writes IDs in base64; OTLP/JSON wants hex.
	for _, sp := range req.ResourceSpans[0].ScopeSpans[0].Spans {
		for _, id := range [][]byte{sp.TraceId, sp.SpanId, sp.ParentSpanId} {
			if len(id) == 0 {
				continue
			}
			pj, _ := protojson.Marshal(&tracepb.Span{TraceId: id})
			b64 := strings.TrimSuffix(strings.TrimPrefix(string(pj), `{"traceId":"`), `"}`)
			b = bytes.ReplaceAll(b, []byte(`"`+b64+`"`), []byte(`"`+hex.EncodeToString(id)+`"`))
		}
	}
	return b
}

func TestRejectsAndErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Listen(ctx, "127.0.0.1:0", trace.ClockAt(zero), &sink{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ctype, enc string
		body             []byte
		status           int
	}{
		{"garbage protobuf", "application/x-protobuf", "", []byte{0xff, 0xff, 0xff}, http.StatusBadRequest},
		{"garbage json", "application/json", "", []byte("{"), http.StatusBadRequest},
		{"non-hex id", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`), http.StatusBadRequest},
		{"bad gzip", "application/x-protobuf", "gzip", []byte("nope"), http.StatusBadRequest},
		{"unknown encoding", "application/x-protobuf", "br", []byte{}, http.StatusBadRequest},
		{"text", "text/plain", "", []byte("hi"), http.StatusUnsupportedMediaType},
	} {
		resp, body := post(t, r.Endpoint(), tc.ctype, tc.enc, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: HTTP %d (%s), want %d", tc.name, resp.StatusCode, body, tc.status)
		}
	}
	resp, err := http.Get(r.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: HTTP %d", resp.StatusCode)
	}
	// Spans that end before they start or before the session are rejected
	// and counted; one that straddles the start is clipped.
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
		span(1, 0, "backwards", tracepb.Span_SPAN_KIND_INTERNAL, 5*ms, 4*ms),
		span(2, 0, "before", tracepb.Span_SPAN_KIND_INTERNAL, -5*ms, -4*ms),
		span(3, 0, "Load model", tracepb.Span_SPAN_KIND_INTERNAL, -5*ms, 4*ms),
	}}}}}}
	evs, rejected := Events(req, trace.ClockAt(zero), 0)
	if rejected != 2 || len(evs) != 1 || evs[0].Stage.Start != 0 || evs[0].Stage.End != 4*ms || evs[0].Stage.Attrs["clipped"] != true || evs[0].Stage.Source != "otlp:unknown" {
		t.Errorf("rejected %d, events %+v", rejected, evs)
	}
	pb, _ := proto.Marshal(req)
	resp2, body := post(t, r.Endpoint(), "application/x-protobuf", "", pb)
	out := &coltracepb.ExportTraceServiceResponse{}
	if resp2.StatusCode != http.StatusOK || proto.Unmarshal(body, out) != nil || out.GetPartialSuccess().GetRejectedSpans() != 2 {
		t.Errorf("partial success: HTTP %d %v", resp2.StatusCode, out)
	}
	cancel()
	if err := r.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := http.Get(r.Endpoint()); err == nil {
		t.Error("still serving after ctx was cancelled")
	}
}

func TestStageFor(t *testing.T) {
	for in, want := range map[string]trace.Stage{
		"Worker init": trace.StageRuntimeInit, "LOAD MODEL": trace.StageModelLoad, "kv_alloc": trace.StageKVAlloc,
		"Load LoRA adapters": "load_lora_adapters", "  ": "unnamed_span", "profile-run (GPU)": "profile_run_gpu",
	} {
		if got := StageFor(in); got != want {
			t.Errorf("StageFor(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzDecode: any body, either content type, decodes or errors, and the
// mapping of whatever decodes gives only valid events.
func FuzzDecode(f *testing.F) {
	pb, _ := proto.Marshal(vllmLike())
	f.Add(pb, false)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7","name":"Load model","startTimeUnixNano":"1764072000000000000","endTimeUnixNano":"1764072001000000000"}]}]}]}`), true)
	f.Add([]byte(`[]`), true)
	f.Fuzz(func(t *testing.T, body []byte, isJSON bool) {
		req, err := Decode(body, isJSON)
		if err != nil {
			return
		}
		evs, _ := Events(req, trace.ClockAt(zero), 0)
		for _, e := range evs {
			if err := e.Validate(); err != nil {
				t.Fatalf("invalid event from %q: %v", body, err)
			}
		}
	})
}
