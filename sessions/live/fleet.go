package live

import (
	"context"
	"fmt"
	"io"

	"github.com/treni-top/treni-top/probe/otlpin"
	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/sessions/fleetmetrics"
	"github.com/treni-top/treni-top/sessions/otelexport"
	"github.com/treni-top/treni-top/trace"
)

// FleetOptions are the OpenTelemetry and Prometheus outputs of a live
// session (run, attach and bench; issue 18).
type FleetOptions struct {
	// OTLP is the endpoint of the live export (else the OTEL_ variables);
	// TokenEvents adds token arrivals as span events.
	OTLP        string
	TokenEvents bool
	// OTLPListen is the address to receive a server's OTLP/HTTP traces on.
	OTLPListen string
	// Metrics is the address to serve /metrics on.
	Metrics string
}

// Fleet is the OpenTelemetry and Prometheus plumbing of one live session.
type Fleet struct {
	live   *otelexport.Live
	recv   *otlpin.Receiver
	srv    *fleetmetrics.Server
	follow <-chan struct{}
	ids    otelexport.IDs
	stderr io.Writer
	// cancel stops the goroutines StartFleet started (they also stop when
	// the bus closes, which is the normal end).
	cancel context.CancelFunc
}

// StartFleet starts what o asks for on a live session's bus; call it after
// the bus exists and before the first event is emitted. run returns the
// session's current cold run (received spans are stamped with it; nil
// means 0). A collector that cannot be set up is a warning, never fatal;
// an address that cannot be listened on is an error.
func StartFleet(ctx context.Context, o FleetOptions, h sessions.Header, clock trace.Clock, bus *trace.Bus, run func() int, stderr io.Writer) (*Fleet, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := &Fleet{ids: otelexport.NewIDs(h), stderr: stderr, cancel: cancel}
	abort := func(err error) (*Fleet, error) {
		cancel()
		f.Finish(context.Background())
		return nil, err
	}
	if o.OTLP != "" || otelexport.Enabled(nil) {
		live, err := otelexport.NewLive(ctx, otelexport.Config{Endpoint: o.OTLP, TokenEvents: o.TokenEvents, Warn: stderr}, h, bus)
		if err != nil {
			fmt.Fprintf(stderr, "treni-top: warning: no OTLP export: %v\n", err)
		} else {
			f.live = live
		}
	}
	if o.Metrics != "" {
		m := fleetmetrics.New(h)
		f.follow = m.Follow(ctx, bus)
		srv, err := fleetmetrics.Serve(ctx, o.Metrics, m)
		if err != nil {
			return abort(err)
		}
		f.srv = srv
		fmt.Fprintf(stderr, "treni-top: fleet metrics at %s\n", srv.URL())
	}
	if o.OTLPListen != "" {
		recv, err := otlpin.Listen(ctx, o.OTLPListen, clock, bus, otlpin.Options{Run: run})
		if err != nil {
			return abort(err)
		}
		f.recv = recv
		fmt.Fprintf(stderr, "treni-top: receiving OTLP traces at %s (point the server's OTLP traces endpoint there)\n", recv.Endpoint())
	}
	return f, nil
}

// TraceContext is the prober's traceparent source: set it on the probe
// clients (prober.Client.SetTraceContext) so that a traced server's
// request spans join the session's traces. Nil when neither export nor
// receive is on.
func (f *Fleet) TraceContext() prober.TraceContextFunc {
	if f.live == nil && f.recv == nil {
		return nil
	}
	return f.ids.RequestSpanContext
}

// StopInputs stops receiving server spans; call it before closing the bus
// (sessions.Live.OnClose).
func (f *Fleet) StopInputs() {
	if f.recv != nil {
		if err := f.recv.Close(); err != nil {
			fmt.Fprintf(f.stderr, "treni-top: warning: OTLP receiver: %v\n", err)
		}
		f.recv = nil
	}
}

// Finish flushes the export (bounded by its flush timeout) and stops the
// metrics server; call it after closing the bus.
func (f *Fleet) Finish(ctx context.Context) {
	defer f.cancel()
	f.StopInputs()
	if f.live != nil {
		st := f.live.Close(ctx)
		if st.OK() {
			fmt.Fprintf(f.stderr, "treni-top: exported %d spans over OTLP\n", st.Exported)
		}
		f.live = nil
	}
	if f.follow != nil {
		<-f.follow
		f.follow = nil
	}
	if f.srv != nil {
		if err := f.srv.Close(); err != nil {
			fmt.Fprintf(f.stderr, "treni-top: warning: metrics server: %v\n", err)
		}
		f.srv = nil
	}
}
