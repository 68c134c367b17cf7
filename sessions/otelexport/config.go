// Package otelexport sends a treni-top session to an OpenTelemetry
// collector as OTLP traces, through the official Go SDK: one trace per cold
// run, a root span for the cold start carrying the diagnosis, a child span
// per stage with its recorded start, end and attributes, and a child span
// per probe request with the GenAI latency attributes (and, when asked, one
// span event per token). It works after the fact on a session file (Export)
// and live on the event bus (NewLive). The span and attribute mapping is in
// docs/OTEL.md.
//
// A collector that is down or slow never holds a run up: spans go through
// the SDK's batch processor (a bounded queue that drops when full), every
// export and the final flush are bounded by Config.FlushTimeout, and the
// first failure prints one warning; the session file is written by the
// recorder, which this package never touches.
package otelexport

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace/httpserve"
)

// Protocols accepted in Config.Protocol and OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ProtocolHTTPProtobuf = "http/protobuf"
	ProtocolHTTPJSON     = "http/json"
	ProtocolGRPC         = "grpc"
)

// Defaults of Config.
const (
	DefaultFlushTimeout = 5 * time.Second
	DefaultQueueSize    = 8192
	// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise.
	DefaultServiceName = "treni-top"
	// maxTokenEvents bounds the span events of one request span when
	// token events are on and OTEL_SPAN_EVENT_COUNT_LIMIT is unset (the
	// SDK's default of 128 would cut long answers short).
	maxTokenEvents = 16384
)

// Config says where and how to export. The zero value plus a Header
// exports where the standard OTEL_EXPORTER_OTLP_* variables say.
type Config struct {
	// Endpoint, when set, overrides OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT:
	// a URL such as http://127.0.0.1:4318 (OTLP/HTTP; /v1/traces is added
	// when the path is empty) or http://127.0.0.1:4317 with gRPC.
	Endpoint string
	// Protocol, when set, overrides OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL:
	// http/protobuf (the default), http/json or grpc.
	Protocol string
	// Headers are added to every export request, after the ones from
	// OTEL_EXPORTER_OTLP_(TRACES_)HEADERS.
	Headers map[string]string
	// TokenEvents adds one span event per token-bearing chunk to request
	// spans.
	TokenEvents bool
	// FlushTimeout bounds each export and the final flush; zero means
	// DefaultFlushTimeout.
	FlushTimeout time.Duration
	// QueueSize bounds the spans waiting for export; more are dropped.
	// Zero means DefaultQueueSize.
	QueueSize int
	// Warn receives one line the first time an export fails; nil discards.
	Warn io.Writer
	// Getenv reads the environment (nil: os.Getenv); tests inject it. The
	// SDK's own exporters read the process environment directly.
	Getenv func(string) string
}

func (c Config) getenv(k string) string {
	if c.Getenv != nil {
		return c.Getenv(k)
	}
	return os.Getenv(k)
}

func (c Config) flushTimeout() time.Duration {
	if c.FlushTimeout > 0 {
		return c.FlushTimeout
	}
	return DefaultFlushTimeout
}

func (c Config) queueSize() int {
	if c.QueueSize > 0 {
		return c.QueueSize
	}
	return DefaultQueueSize
}

// ParseHeaders reads export headers given as key=value (the CLI's
// --otlp-header, repeated) into Config.Headers.
func ParseHeaders(kvs []string) (map[string]string, error) {
	hdrs := map[string]string{}
	for _, h := range kvs {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bad --otlp-header %q: use key=value", h)
		}
		hdrs[k] = v
	}
	return hdrs, nil
}

// Enabled reports whether the environment asks for export: an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and neither OTEL_SDK_DISABLED=true nor
// OTEL_TRACES_EXPORTER=none turns it off. getenv nil means os.Getenv.
func Enabled(getenv func(string) string) bool {
	c := Config{Getenv: getenv}
	if strings.EqualFold(c.getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(c.getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return c.getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || c.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// protocol resolves the protocol: the config, then the traces-specific
// variable, then the general one, then http/protobuf.
func (c Config) protocol() (string, error) {
	p := c.Protocol
	if p == "" {
		p = c.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	}
	if p == "" {
		p = c.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", ProtocolHTTPProtobuf:
		return ProtocolHTTPProtobuf, nil
	case ProtocolHTTPJSON, ProtocolGRPC:
		return p, nil
	}
	return "", fmt.Errorf("unknown OTLP protocol %q: use http/protobuf, http/json or grpc", p)
}

// endpointURL checks Config.Endpoint and, for OTLP/HTTP, adds the traces
// path to a bare URL the way OTEL_EXPORTER_OTLP_ENDPOINT is read.
func (c Config) endpointURL(protocol string) (string, error) {
	u, ok := httpserve.ParseHTTPURL(c.Endpoint)
	if !ok {
		return "", fmt.Errorf("bad OTLP endpoint %q: give a URL such as http://127.0.0.1:4318", c.Endpoint)
	}
	if protocol != ProtocolGRPC && (u.Path == "" || u.Path == "/") {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}
