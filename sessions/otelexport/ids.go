package otelexport

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// IDs derives a session's trace and span IDs from its header, so that the
// same session always exports the same IDs: the traceparent a probe request
// carried while the session was recorded names the span that a later
// `treni-top export` of the file creates, and exporting a file twice
// overwrites rather than duplicates in backends that key on IDs.
type IDs struct {
	seed [sha256.Size]byte
}

// NewIDs seeds the IDs from the session's host name and start time, which
// together identify a session.
func NewIDs(h sessions.Header) IDs {
	return IDs{seed: sha256.Sum256(fmt.Appendf(nil, "treni-top|%s|%d", h.Host.Hostname, h.Created.UnixNano()))}
}

func (i IDs) sum(parts ...any) [sha256.Size]byte {
	b := append([]byte(nil), i.seed[:]...)
	for _, p := range parts {
		b = fmt.Appendf(b, "|%v", p)
	}
	return sha256.Sum256(b)
}

// TraceID is the trace of cold run run: one trace per run.
func (i IDs) TraceID(run int) oteltrace.TraceID {
	var t oteltrace.TraceID
	s := i.sum("trace", run)
	copy(t[:], s[:])
	return t
}

func spanID(s [sha256.Size]byte) oteltrace.SpanID {
	var id oteltrace.SpanID
	copy(id[:], s[:])
	if !id.IsValid() { // all zero is invalid; astronomically unlikely
		id[7] = 1
	}
	return id
}

// RootSpanID is the span ID of run's root (cold start) span.
func (i IDs) RootSpanID(run int) oteltrace.SpanID { return spanID(i.sum("root", run)) }

// StageSpanID is the span ID of one stage span, keyed like the session
// keys spans: by name and start.
func (i IDs) StageSpanID(run int, name trace.Stage, start time.Duration) oteltrace.SpanID {
	return spanID(i.sum("stage", run, name, int64(start)))
}

// RequestSpanID is the span ID of the probe request with the given ID.
func (i IDs) RequestSpanID(run int, requestID string) oteltrace.SpanID {
	return spanID(i.sum("request", run, requestID))
}

// RequestSpanContext is what a probe request propagates in its W3C
// traceparent header: the request's own span in the run's trace, sampled.
// Its signature fits prober.Client.SetTraceContext.
func (i IDs) RequestSpanContext(run int, requestID string) oteltrace.SpanContext {
	return oteltrace.NewSpanContext(oteltrace.SpanContextConfig{
		TraceID:    i.TraceID(run),
		SpanID:     i.RequestSpanID(run, requestID),
		TraceFlags: oteltrace.FlagsSampled,
	})
}

// rootContext is the root span's context, the parent of every stage and
// request span of the run; children may be exported before the root.
func (i IDs) rootContext(run int) oteltrace.SpanContext {
	return oteltrace.NewSpanContext(oteltrace.SpanContextConfig{
		TraceID:    i.TraceID(run),
		SpanID:     i.RootSpanID(run),
		TraceFlags: oteltrace.FlagsSampled,
	})
}

// wantIDs carries the IDs the next span must get through the context to
// idGenerator; the SDK offers no other way to choose a span's ID.
type wantIDs struct {
	trace oteltrace.TraceID
	span  oteltrace.SpanID
}

type wantKey struct{}

func withIDs(ctx context.Context, t oteltrace.TraceID, s oteltrace.SpanID) context.Context {
	return context.WithValue(ctx, wantKey{}, wantIDs{t, s})
}

// idGenerator is an sdktrace.IDGenerator that hands out the IDs placed in
// the context by withIDs, and random ones otherwise.
type idGenerator struct{}

var _ sdktrace.IDGenerator = idGenerator{}

func (idGenerator) NewIDs(ctx context.Context) (oteltrace.TraceID, oteltrace.SpanID) {
	if w, ok := ctx.Value(wantKey{}).(wantIDs); ok {
		return w.trace, w.span
	}
	var t oteltrace.TraceID
	var s oteltrace.SpanID
	_, _ = rand.Read(t[:])
	_, _ = rand.Read(s[:])
	return t, s
}

func (idGenerator) NewSpanID(ctx context.Context, _ oteltrace.TraceID) oteltrace.SpanID {
	if w, ok := ctx.Value(wantKey{}).(wantIDs); ok {
		return w.span
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return oteltrace.SpanID(b)
}
