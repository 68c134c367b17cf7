// Package otlptest is an OTLP/HTTP trace collector for tests: it decodes
// what an exporter sends with the official protobuf types and counts the
// spans, so a test checks the wire format as a real collector reads it.
package otlptest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// SpanCounter starts a collector that counts the spans it decodes (its URL
// is the endpoint to export to); it stops when the test ends. A body that
// does not decode is answered 400.
func SpanCounter(t testing.TB) (*httptest.Server, *atomic.Int64) {
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
		_, _ = w.Write(out)
	}))
	t.Cleanup(col.Close)
	return col, &spans
}
