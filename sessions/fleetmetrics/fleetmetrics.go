// Package fleetmetrics serves a treni-top agent's own Prometheus /metrics:
// the latest cold start split into disjoint phases by stage, cold and warm
// TTFT histograms, the dominant diagnosis hypothesis, and probe errors, so
// that one scrape config and one alert rule watch every node of a fleet
// (docs/OTEL.md lists every series). It reads the same event stream as the
// recorder and the UI.
package fleetmetrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/httpserve"
)

// Namespace prefixes every series.
const Namespace = "treni"

// TTFTBuckets are the TTFT histogram's upper bounds in seconds: 5 ms to
// about 10 minutes, doubling, so one set fits a warm GPU server and a cold
// start that loads 100 GB.
var TTFTBuckets = prometheus.ExponentialBuckets(0.005, 2, 18)

// Metrics turns events into Prometheus series. It is a trace.Sink; use
// Follow to feed it from a bus. The zero value is not usable: use New.
type Metrics struct {
	reg  *prometheus.Registry
	ttft *prometheus.HistogramVec
	reqs *prometheus.CounterVec
	errs *prometheus.CounterVec
	// created is the session's wall-clock zero (read-only after New).
	created time.Time

	mu sync.Mutex
	// input keeps what the gauges read of the newest two runs (see
	// prune): their stages, requests and markers, and of their samples
	// those the diagnosis reads, so that an agent that runs for days
	// holds memory that does not grow with its samples.
	input  *sessions.DiagnosisInput
	seen   map[reqKey]bool
	maxRun int
}

type reqKey struct {
	run int
	id  string
}

// New returns the metrics of one target: the model and server kind from
// its session header become constant labels (model, server).
func New(h sessions.Header) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), created: h.Created, seen: map[reqKey]bool{}, input: sessions.NewDiagnosisInput()}
	labels := prometheus.Labels{"model": h.Target.Model, "server": h.Target.ServerKind}
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "ttft_seconds", ConstLabels: labels, Buckets: TTFTBuckets,
		Help: "Time to first token of probe requests, by phase (cold: the first request after a cold start; warm: measured repeats; bench: load generator).",
	}, []string{"phase"})
	m.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "probe_requests_total", ConstLabels: labels,
		Help: "Finished probe requests, by phase.",
	}, []string{"phase"})
	m.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "probe_errors_total", ConstLabels: labels,
		Help: "Probe requests that failed, by error kind (timeout, connect, http_4xx, http_5xx, closed_early, malformed, server_error, canceled).",
	}, []string{"kind"})
	m.reg.MustRegister(m.ttft, m.reqs, m.errs, &coldCollector{m: m, labels: labels})
	return m
}

// Emit takes one event.
func (m *Metrics) Emit(e trace.Event) {
	if e.Kind == trace.KindLog {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerReplayReset {
		m.input, m.seen, m.maxRun = sessions.NewDiagnosisInput(), map[reqKey]bool{}, 0
		return
	}
	if e.Kind == trace.KindRequest && e.Request.Done {
		k := reqKey{e.Run, e.Request.ID}
		if !m.seen[k] {
			m.seen[k] = true
			m.observe(*e.Request)
		}
	}
	m.input.Add(e)
	if e.Run > m.maxRun {
		m.maxRun = e.Run
		m.prune()
	}
}

func (m *Metrics) observe(q trace.Request) {
	m.reqs.WithLabelValues(string(q.Phase)).Inc()
	if q.Error != "" {
		kind := q.ErrorKind
		if kind == "" {
			kind = "unknown"
		}
		m.errs.WithLabelValues(kind).Inc()
		return
	}
	switch q.Phase {
	case trace.PhaseCold, trace.PhaseWarm, trace.PhaseBench:
		if q.FirstToken > 0 {
			m.ttft.WithLabelValues(string(q.Phase)).Observe(q.TTFT().Seconds())
		}
	}
}

// prune keeps the events of the newest two runs: the one in progress and
// the last finished one, which the gauges show until the new one is done.
// A long-running agent thus holds a bounded history.
func (m *Metrics) prune() {
	m.input.DropRunsBefore(m.maxRun - 1)
	for k := range m.seen {
		if k.run < m.maxRun-1 {
			delete(m.seen, k)
		}
	}
}

// Follow feeds the metrics from bus until the bus closes or ctx is done;
// it returns a channel closed when its goroutine has exited.
func (m *Metrics) Follow(ctx context.Context, bus *trace.Bus) <-chan struct{} {
	sub := bus.Subscribe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				sub.Cancel()
				return
			case e, ok := <-sub.Events():
				if !ok {
					return
				}
				m.Emit(e)
			}
		}
	}()
	return done
}

// FromFile reads a recorded session file one event at a time, log lines
// left undecoded (the metrics never read them): what it holds is what a
// live Metrics holds, the events of the newest two runs, not the file.
func FromFile(path string) (*Metrics, error) {
	st, err := sessions.OpenStream(path, trace.KindStage, trace.KindSample, trace.KindRequest, trace.KindProcess)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	m := New(st.Header)
	var e trace.Event
	for st.Next(&e) {
		m.Emit(e)
	}
	if err := st.Err(); err != nil {
		return nil, fmt.Errorf("read session %s: %w", path, err)
	}
	return m, nil
}

// Registry is the registry holding the series, for tests and embedding.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the series in the Prometheus text (or OpenMetrics)
// format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// latest picks the run the cold-start gauges show: the newest launched run
// whose cold window has closed (first token or healthy), else the newest
// launched run.
func latest(runs []sessions.Run) (sessions.Run, bool) {
	var fallback *sessions.Run
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		switch r.ColdEndKind {
		case sessions.ColdEndFirstToken, sessions.ColdEndHealthy:
			return r, true
		case sessions.ColdEndLastStage:
			if fallback == nil {
				fallback = &runs[i]
			}
		}
	}
	if fallback != nil {
		return *fallback, true
	}
	return sessions.Run{}, false
}

// Phases splits a run's cold window into disjoint phases by stage: the
// critical path (each instant goes to the stage that held the start up
// then), summed per stage, with "unattributed" for time no stage covers.
// The phases sum to the cold total exactly.
func Phases(r sessions.Run) map[trace.Stage]time.Duration {
	out := map[trace.Stage]time.Duration{}
	for _, st := range r.Attribution.CriticalPath {
		out[st.Name] += st.End - st.Start
	}
	return out
}

// coldCollector computes the cold-start and diagnosis gauges at scrape
// time from the kept events.
type coldCollector struct {
	m      *Metrics
	labels prometheus.Labels
}

func (c *coldCollector) desc(name, help string, vars ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, vars, c.labels)
}

func (c *coldCollector) descs() (phase, total, run, started, dominant, score, penalty *prometheus.Desc) {
	return c.desc("cold_start_phase_seconds", "The latest cold start split into disjoint phases by stage (critical path; stage=\"unattributed\" for time no stage covers); the phases sum to treni_cold_start_seconds.", "stage"),
		c.desc("cold_start_seconds", "The latest cold start: launch to first token (or to healthy when no cold request was sent)."),
		c.desc("cold_start_run", "Index of the cold run the cold-start series describe (0 for the first launch)."),
		c.desc("cold_start_timestamp_seconds", "Wall-clock time the latest cold start began, Unix seconds."),
		c.desc("diagnosis_dominant", "The dominant hypothesis of the latest cold start's diagnosis (value: its score, the share of the cold total it explains); absent when undecided.", "hypothesis", "title"),
		c.desc("diagnosis_score", "Every hypothesis's score (share of the cold total its term explains) with its verdict.", "hypothesis", "verdict"),
		c.desc("cold_penalty_ratio", "Cold request TTFT ÷ warm median TTFT of the latest cold start.")
}

func (c *coldCollector) Describe(ch chan<- *prometheus.Desc) {
	a, b, d, e, f, g, h := c.descs()
	for _, x := range []*prometheus.Desc{a, b, d, e, f, g, h} {
		ch <- x
	}
}

func (c *coldCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	events := append([]trace.Event(nil), c.m.input.Events()...)
	c.m.mu.Unlock()
	run, ok := latest(sessions.Analyze(events))
	if !ok {
		return
	}
	phase, total, runD, started, dominant, score, penalty := c.descs()
	for stage, d := range Phases(run) {
		ch <- prometheus.MustNewConstMetric(phase, prometheus.GaugeValue, d.Seconds(), string(stage))
	}
	ch <- prometheus.MustNewConstMetric(total, prometheus.GaugeValue, run.ColdTotal().Seconds())
	ch <- prometheus.MustNewConstMetric(runD, prometheus.GaugeValue, float64(run.Index))
	if !c.m.created.IsZero() {
		t := c.m.created.Add(run.Start)
		ch <- prometheus.MustNewConstMetric(started, prometheus.GaugeValue, float64(t.UnixNano())/1e9)
	}
	diag := sessions.DiagnoseRun(events, run)
	for _, h := range diag.Hypotheses {
		ch <- prometheus.MustNewConstMetric(score, prometheus.GaugeValue, h.Score, h.Code, string(h.Verdict))
		if h.Code == diag.Dominant {
			ch <- prometheus.MustNewConstMetric(dominant, prometheus.GaugeValue, h.Score, h.Code, h.Title)
		}
	}
	if diag.ColdPenalty > 0 {
		ch <- prometheus.MustNewConstMetric(penalty, prometheus.GaugeValue, diag.ColdPenalty)
	}
}

// Server is a running /metrics endpoint.
type Server struct {
	s *httpserve.Server
}

// Serve serves m's Handler at /metrics on addr (loopback by default in
// the CLI; a node agent may choose its host address for Prometheus) until
// ctx is done or Close is called.
func Serve(ctx context.Context, addr string, m *Metrics) (*Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	s, err := httpserve.Start(ctx, addr, mux)
	if err != nil {
		return nil, fmt.Errorf("listen for /metrics on %s (port in use? pick another address): %w", addr, err)
	}
	return &Server{s: s}, nil
}

// Addr is the listening address.
func (s *Server) Addr() string { return s.s.Addr() }

// URL is the scrape URL.
func (s *Server) URL() string { return "http://" + s.Addr() + "/metrics" }

// Close stops serving and waits for the serving goroutine.
func (s *Server) Close() error { return s.s.Close() }

// ServeFor serves m at addr for d (0: until ctx ends, as it also ends
// sooner), saying where on announce, then stops serving.
func ServeFor(ctx context.Context, addr string, m *Metrics, d time.Duration, announce io.Writer) error {
	srv, err := Serve(ctx, addr, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(announce, "treni-top: serving %s\n", srv.URL())
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	} else {
		<-ctx.Done()
	}
	return srv.Close()
}
