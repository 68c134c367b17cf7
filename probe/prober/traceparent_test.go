package prober

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/treni-top/treni-top/trace"
)

// TestTraceparent checks that SetTraceContext puts the W3C traceparent of
// the span it names on the request, per request ID and run, and that
// without it no header is sent.
func TestTraceparent(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		mu.Lock()
		got = append(got, req.Header.Get("traceparent"))
		mu.Unlock()
		rw.Header().Set("Content-Type", "text/event-stream")
		_, _ = rw.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	tid := oteltrace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	var asked []string
	c := New(trace.NewClock(), nil, 3)
	defer c.Close()
	c.SetTraceContext(func(run int, id string) oteltrace.SpanContext {
		asked = append(asked, id)
		if run != 3 || id == "skip" {
			return oteltrace.SpanContext{}
		}
		return oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: tid, SpanID: oteltrace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: oteltrace.FlagsSampled})
	})
	tmpl := Template{BaseURL: srv.URL, Endpoint: Chat}
	if r := c.Do(context.Background(), tmpl, "cold_1", "cold_1", trace.PhaseCold); !r.Request.OK() {
		t.Fatalf("request failed: %s", r.Request.Error)
	}
	c.Do(context.Background(), tmpl, "skip", "warm_1", trace.PhaseWarm)
	plain := New(trace.NewClock(), nil, 3)
	defer plain.Close()
	plain.Do(context.Background(), tmpl, "x", "warm_2", trace.PhaseWarm)

	mu.Lock()
	defer mu.Unlock()
	want := []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", ""}
	if len(got) != len(want) {
		t.Fatalf("server saw %d requests", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: traceparent %q, want %q", i, got[i], want[i])
		}
	}
	if len(asked) != 2 || asked[0] != "cold_1" || asked[1] != "skip" {
		t.Errorf("trace context asked for %v", asked)
	}
}
