// Package otlpin receives OpenTelemetry traces that an inference server
// sends about itself (vLLM --otlp-traces-endpoint, TGI --otlp-endpoint,
// SGLang) over OTLP/HTTP and merges them into the session on its time
// axis: the server's startup spans become cold stages, its request spans
// become server_span markers beside treni-top's own probe requests.
// Payloads are decoded with the project's official protobuf types
// (go.opentelemetry.io/proto/otlp); OTLP/JSON is accepted too. The mapping
// is in docs/OTEL.md.
package otlpin

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/httpserve"
)

// Path is where OTLP/HTTP exporters send traces.
const Path = "/v1/traces"

// MaxBody bounds one export request (after decompression), so that a
// broken client cannot exhaust memory.
const MaxBody = 32 << 20

// Options tune a receiver.
type Options struct {
	// Run returns the cold run the received spans belong to (the session's
	// current run); nil means run 0.
	Run func() int
}

// Handler serves POST /v1/traces: it decodes each export request, turns
// its spans into events on clock's axis and emits them to sink.
func Handler(clock trace.Clock, sink trace.Sink, opts Options) http.Handler {
	return &handler{clock: clock, sink: sink, opts: opts}
}

type handler struct {
	clock trace.Clock
	sink  trace.Sink
	opts  Options
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.Error(w, "treni-top receives OTLP traces at "+Path, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST OTLP trace exports here", http.StatusMethodNotAllowed)
		return
	}
	jsonBody, err := isJSON(r.Header.Get("Content-Type"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnsupportedMediaType)
		return
	}
	body, err := readBody(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := Decode(body, jsonBody)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	run := 0
	if h.opts.Run != nil {
		run = h.opts.Run()
	}
	evs, rejected := Events(req, h.clock, run)
	for _, e := range evs {
		h.sink.Emit(e)
	}
	resp := &coltracepb.ExportTraceServiceResponse{}
	if rejected > 0 {
		resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{
			RejectedSpans: int64(rejected),
			ErrorMessage:  "spans that end before they start, or end before the session began, were not merged",
		}
	}
	var out []byte
	if jsonBody {
		out, err = protojson.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
	} else {
		out, err = proto.Marshal(resp)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(out)
}

// isJSON reads the content type: protobuf (the OTLP/HTTP default) or JSON.
func isJSON(ct string) (bool, error) {
	ct, _, _ = strings.Cut(ct, ";")
	switch strings.TrimSpace(strings.ToLower(ct)) {
	case "application/x-protobuf", "application/protobuf", "":
		return false, nil
	case "application/json":
		return true, nil
	}
	return false, fmt.Errorf("content type %q: send OTLP as application/x-protobuf or application/json", ct)
}

func readBody(r *http.Request) ([]byte, error) {
	var rd io.Reader = http.MaxBytesReader(nil, r.Body, MaxBody)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(rd)
		if err != nil {
			return nil, fmt.Errorf("bad gzip body: %w", err)
		}
		defer gz.Close()
		rd = io.LimitReader(gz, MaxBody+1)
	default:
		return nil, fmt.Errorf("content encoding %q: send gzip or none", enc)
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("read the export request: %w", err)
	}
	if len(b) > MaxBody {
		return nil, fmt.Errorf("export request larger than %d MiB", MaxBody>>20)
	}
	return b, nil
}

// Decode parses an ExportTraceServiceRequest from protobuf or OTLP/JSON.
// OTLP/JSON writes trace and span IDs in hex where protobuf's JSON mapping
// expects base64, so they are converted before the official decoder runs.
func Decode(body []byte, jsonBody bool) (*coltracepb.ExportTraceServiceRequest, error) {
	req := &coltracepb.ExportTraceServiceRequest{}
	if !jsonBody {
		if err := proto.Unmarshal(body, req); err != nil {
			return nil, fmt.Errorf("not an OTLP ExportTraceServiceRequest (protobuf): %w", err)
		}
		return req, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not OTLP/JSON: %w", err)
	}
	if err := hexIDsToBase64(v); err != nil {
		return nil, err
	}
	fixed, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("re-encode OTLP/JSON: %w", err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(fixed, req); err != nil {
		return nil, fmt.Errorf("not an OTLP ExportTraceServiceRequest (JSON): %w", err)
	}
	return req, nil
}

// hexIDsToBase64 rewrites traceId, spanId and parentSpanId values in place.
func hexIDsToBase64(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			switch k {
			case "traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id":
				s, ok := val.(string)
				if !ok {
					return fmt.Errorf("OTLP/JSON %s is not a string", k)
				}
				b, err := hex.DecodeString(s)
				if err != nil {
					return fmt.Errorf("OTLP/JSON %s %q is not hex: %w", k, s, err)
				}
				x[k] = base64.StdEncoding.EncodeToString(b)
			default:
				if err := hexIDsToBase64(val); err != nil {
					return err
				}
			}
		}
	case []any:
		for _, e := range x {
			if err := hexIDsToBase64(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// Receiver is a running OTLP/HTTP listener.
type Receiver struct {
	s *httpserve.Server
}

// Listen serves Handler on addr (use loopback, e.g. 127.0.0.1:4318, and
// point the server's OTLP traces endpoint at http://ADDR) until ctx is done
// or Close is called.
func Listen(ctx context.Context, addr string, clock trace.Clock, sink trace.Sink, opts Options) (*Receiver, error) {
	s, err := httpserve.Start(ctx, addr, Handler(clock, sink, opts))
	if err != nil {
		return nil, fmt.Errorf("listen for OTLP traces on %s (is another collector using the port? pick another with --otlp-listen): %w", addr, err)
	}
	return &Receiver{s: s}, nil
}

// Addr is the address the receiver listens on (useful with port 0).
func (r *Receiver) Addr() string { return r.s.Addr() }

// Endpoint is the URL to give a server as its OTLP traces endpoint.
func (r *Receiver) Endpoint() string { return "http://" + r.Addr() + Path }

// Close stops the listener, lets requests in flight finish (up to two
// seconds) and waits for the serving goroutine.
func (r *Receiver) Close() error { return r.s.Close() }
