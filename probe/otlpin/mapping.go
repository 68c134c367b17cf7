package otlpin

import (
	"encoding/hex"
	"strings"
	"time"
	"unicode"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/treni-top/treni-top/trace"
)

// MarkerServerSpan is the marker a server's request span becomes. Its
// attributes: span (name), service, trace_id, span_id, parent_span_id,
// kind, duration_ms, end_ms (session offset of the end, milliseconds), and
// the span's own attributes under their own keys.
const MarkerServerSpan = "server_span"

// startupStages maps the startup span names servers send today onto the
// stage taxonomy (docs/ARCHITECTURE.md, "Stages"). Keys are lower case.
// vLLM's "Worker init" encloses the others; as runtime_init it keeps only
// the time its children leave uncovered (exclusive time).
var startupStages = map[string]trace.Stage{
	"worker init":   trace.StageRuntimeInit,
	"init device":   trace.StageCUDAInit,
	"load model":    trace.StageModelLoad,
	"compile graph": trace.StageCompile,
	"prepare model": trace.StageWarmup,
}

// requestSpanNames are spans that stand for one request even when their
// kind is not SERVER (vLLM's API and engine-core spans).
var requestSpanNames = map[string]bool{"llm_request": true, "llm_core": true}

// StageFor names the stage a startup span becomes: a known server name,
// a canonical stage name, or the span's own name in snake case.
func StageFor(name string) trace.Stage {
	key := strings.ToLower(strings.TrimSpace(name))
	if s, ok := startupStages[key]; ok {
		return s
	}
	if s := trace.Stage(key); s.Valid() {
		return s
	}
	return trace.Stage(snake(name))
}

// snake turns "Load LoRA adapters" into "load_lora_adapters".
func snake(s string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.TrimSpace(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if under && b.Len() > 0 {
				b.WriteByte('_')
			}
			under = false
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		under = true
	}
	if b.Len() == 0 {
		return "unnamed_span"
	}
	return b.String()
}

// isRequestSpan tells a request span from a startup span: SERVER or
// CONSUMER kind, a known request span name, or GenAI or HTTP request
// attributes.
func isRequestSpan(sp *tracepb.Span) bool {
	switch sp.GetKind() {
	case tracepb.Span_SPAN_KIND_SERVER, tracepb.Span_SPAN_KIND_CONSUMER:
		return true
	}
	if requestSpanNames[sp.GetName()] {
		return true
	}
	for _, kv := range sp.GetAttributes() {
		k := kv.GetKey()
		if strings.HasPrefix(k, "gen_ai.") || k == "http.request.method" || k == "http.method" {
			return true
		}
	}
	return false
}

// Events maps an export request onto the session whose clock is given:
// startup spans become closed stage spans (Source "otlp:SERVICE"), request
// spans server_span markers, all stamped with run. Times convert from the
// span's Unix nanoseconds through clock, so they sit on the session's
// axis. rejected counts spans that end before they start or before the
// session began; a span that started before the session is clipped to
// offset zero (attribute clipped=true).
func Events(req *coltracepb.ExportTraceServiceRequest, clock trace.Clock, run int) (evs []trace.Event, rejected int) {
	for _, rs := range req.GetResourceSpans() {
		service := "unknown"
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" && kv.GetValue().GetStringValue() != "" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				e, ok := event(sp, service, clock, run)
				if !ok {
					rejected++
					continue
				}
				evs = append(evs, e)
			}
		}
	}
	trace.SortEvents(evs)
	return evs, rejected
}

func event(sp *tracepb.Span, service string, clock trace.Clock, run int) (trace.Event, bool) {
	startNS, endNS := sp.GetStartTimeUnixNano(), sp.GetEndTimeUnixNano()
	const maxNS = 1<<63 - 1
	if endNS < startNS || endNS > maxNS || startNS == 0 {
		return trace.Event{}, false
	}
	start := clock.At(time.Unix(0, int64(startNS)))
	end := clock.At(time.Unix(0, int64(endNS)))
	if end < 0 {
		return trace.Event{}, false
	}
	attrs := attrs(sp.GetAttributes())
	if start < 0 {
		start = 0
		attrs["clipped"] = true
	}
	if isRequestSpan(sp) {
		attrs["span"] = sp.GetName()
		attrs["service"] = service
		attrs["trace_id"] = hex.EncodeToString(sp.GetTraceId())
		attrs["span_id"] = hex.EncodeToString(sp.GetSpanId())
		if p := sp.GetParentSpanId(); len(p) > 0 {
			attrs["parent_span_id"] = hex.EncodeToString(p)
		}
		attrs["kind"] = strings.ToLower(strings.TrimPrefix(sp.GetKind().String(), "SPAN_KIND_"))
		attrs["duration_ms"] = float64(end-start) / float64(time.Millisecond)
		attrs["end_ms"] = float64(end) / float64(time.Millisecond)
		if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			attrs["error"] = sp.GetStatus().GetMessage()
		}
		return trace.Event{At: start, Kind: trace.KindMarker, Run: run, Marker: &trace.Marker{Name: MarkerServerSpan, Attrs: attrs}}, true
	}
	name := StageFor(sp.GetName())
	if string(name) != sp.GetName() {
		attrs["span"] = sp.GetName()
	}
	if len(attrs) == 0 {
		attrs = nil
	}
	return trace.Event{At: end, Kind: trace.KindStage, Run: run, Stage: &trace.Span{
		Name: name, Start: start, End: end, Source: "otlp:" + service, Attrs: attrs,
	}}, true
}

// attrs keeps a span's scalar attributes (strings, numbers, booleans) as
// the session stores attributes; arrays and maps are left out.
func attrs(kvs []*commonpb.KeyValue) trace.Attrs {
	a := trace.Attrs{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			a[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			a[kv.GetKey()] = float64(v.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			a[kv.GetKey()] = v.DoubleValue
		case *commonpb.AnyValue_BoolValue:
			a[kv.GetKey()] = v.BoolValue
		}
	}
	return a
}
