package fleetmetrics

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

const fixture = "../otelexport/testdata/h200-builtin.jsonl"

// scrape fetches and parses /metrics the way Prometheus does.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, b)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestServeMatchesSession(t *testing.T) {
	s, err := sessions.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	// Add a failed probe so the error counter has something to count.
	events := append([]trace.Event(nil), s.Events...)
	events = append(events, trace.Event{At: 6 * time.Second, Kind: trace.KindRequest, Request: &trace.Request{
		ID: "rX", Label: "warm_6", Phase: trace.PhaseWarm, Sent: 6 * time.Second, End: time.Millisecond, Done: true,
		Error: "HTTP 503", ErrorKind: "http_5xx"}})
	m := New(s.Header)
	for _, e := range events {
		m.Emit(e)
		m.Emit(e) // a request seen twice counts once
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := Serve(ctx, "127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	fams := scrape(t, srv.URL())

	run := s.Runs()[0]
	total := fams["treni_cold_start_seconds"].GetMetric()[0]
	if got := total.GetGauge().GetValue(); got != run.ColdTotal().Seconds() {
		t.Errorf("cold_start_seconds %v, want %v", got, run.ColdTotal().Seconds())
	}
	if label(total, "model") != s.Header.Target.Model || label(total, "server") != "treni" {
		t.Errorf("constant labels %v", total.GetLabel())
	}
	want := Phases(run)
	var sum float64
	phases := fams["treni_cold_start_phase_seconds"].GetMetric()
	if len(phases) != len(want) {
		t.Errorf("%d phases, want %d", len(phases), len(want))
	}
	for _, p := range phases {
		st := trace.Stage(label(p, "stage"))
		if got := p.GetGauge().GetValue(); got != want[st].Seconds() {
			t.Errorf("phase %s = %v, want %v", st, got, want[st].Seconds())
		}
		sum += p.GetGauge().GetValue()
	}
	// Disjoint: the phases add up to the total (float rounding aside),
	// never more.
	if math.Abs(sum-run.ColdTotal().Seconds()) > 1e-9 {
		t.Errorf("phases sum to %v, cold total %v", sum, run.ColdTotal().Seconds())
	}
	diag := sessions.DiagnoseRun(s.Events, run)
	dom := fams["treni_diagnosis_dominant"].GetMetric()
	if len(dom) != 1 || label(dom[0], "hypothesis") != diag.Dominant {
		t.Errorf("dominant %v, want %s", dom, diag.Dominant)
	}
	if got := fams["treni_cold_penalty_ratio"].GetMetric()[0].GetGauge().GetValue(); got != diag.ColdPenalty {
		t.Errorf("cold penalty %v, want %v", got, diag.ColdPenalty)
	}
	counts := map[string]uint64{}
	for _, h := range fams["treni_ttft_seconds"].GetMetric() {
		counts[label(h, "phase")] = h.GetHistogram().GetSampleCount()
	}
	if counts["cold"] != 1 || counts["warm"] != 5 {
		t.Errorf("TTFT histogram counts %v, want cold 1 warm 5", counts)
	}
	cold, _ := run.ColdRequest()
	for _, h := range fams["treni_ttft_seconds"].GetMetric() {
		if label(h, "phase") == "cold" && h.GetHistogram().GetSampleSum() != cold.TTFT().Seconds() {
			t.Errorf("cold TTFT sum %v, want %v", h.GetHistogram().GetSampleSum(), cold.TTFT().Seconds())
		}
	}
	errs := fams["treni_probe_errors_total"].GetMetric()
	if len(errs) != 1 || label(errs[0], "kind") != "http_5xx" || errs[0].GetCounter().GetValue() != 1 {
		t.Errorf("probe errors %v", errs)
	}
}

// TestKeepsNewestRuns: a long-running agent keeps two runs of events and
// shows the newest finished cold start.
func TestKeepsNewestRuns(t *testing.T) {
	s, err := sessions.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	m := New(s.Header)
	bus := trace.NewBus()
	done := m.Follow(context.Background(), bus)
	for run := 0; run < 4; run++ {
		shift := time.Duration(run) * time.Minute
		for _, e := range s.Events {
			e.Run, e.At = run, e.At+shift
			if e.Stage != nil {
				sp := *e.Stage
				sp.Start, sp.End = sp.Start+shift, sp.End+shift
				e.Stage = &sp
			}
			if e.Request != nil {
				q := *e.Request
				q.Sent += shift
				e.Request = &q
			}
			bus.Emit(e)
		}
	}
	bus.Close()
	<-done
	m.mu.Lock()
	runs := map[int]bool{}
	for _, e := range m.input.Events() {
		runs[e.Run] = true
	}
	m.mu.Unlock()
	if len(runs) != 2 || !runs[2] || !runs[3] {
		t.Errorf("kept runs %v, want 2 and 3", runs)
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		switch f.GetName() {
		case "treni_cold_start_run":
			if v := f.GetMetric()[0].GetGauge().GetValue(); v != 3 {
				t.Errorf("cold_start_run %v, want 3", v)
			}
		case "treni_ttft_seconds":
			for _, h := range f.GetMetric() {
				if label(h, "phase") == "cold" && h.GetHistogram().GetSampleCount() != 4 {
					t.Errorf("cold TTFT count %d, want 4 (one per run, pruning must not forget observations)", h.GetHistogram().GetSampleCount())
				}
			}
		}
	}
}

// TestSamplesBounded: an agent that samples for hours after a cold start
// keeps a bounded number of samples (those the gauges' diagnosis reads),
// and its gauges are those of the cold start it showed before them.
func TestSamplesBounded(t *testing.T) {
	s, err := sessions.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	m := New(s.Header)
	var last time.Duration
	for _, e := range s.Events {
		m.Emit(e)
		last = max(last, e.At)
	}
	before := gatherText(t, m)
	const n = 200_000 // 100 ms sampling for 5.5 hours
	for i := range n {
		for _, src := range []string{trace.SourceProcess, trace.SourceSystem} {
			m.Emit(trace.Event{At: last + time.Duration(i+1)*100*time.Millisecond, Kind: trace.KindSample,
				Sample: &trace.Sample{Source: src, Values: map[string]float64{trace.MetricRSS: float64(i)}}})
		}
	}
	m.mu.Lock()
	samples := 0
	for _, e := range m.input.Events() {
		if e.Kind == trace.KindSample {
			samples++
		}
	}
	m.mu.Unlock()
	if samples > 10_000 {
		t.Errorf("%d samples kept after %d emitted: the agent's memory grows with its samples", samples, 2*n)
	}
	if after := gatherText(t, m); after != before {
		t.Errorf("samples after the cold window changed the gauges:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestEmptyAndServeErrors(t *testing.T) {
	m := New(sessions.Header{})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "treni_cold_start") {
			t.Errorf("%s before any cold start", f.GetName())
		}
	}
	srv, err := Serve(context.Background(), "127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := Serve(context.Background(), srv.Addr(), m); err == nil {
		t.Error("second listener on the same address accepted")
	}
}

// TestFromFile: the metrics read from a file one event at a time are those
// of its events emitted from memory; a file that is not a session is an
// error.
func TestFromFile(t *testing.T) {
	for _, path := range []string{fixture, "../testdata/ollama-gpu-1.7b-evicted.jsonl.gz"} {
		s, err := sessions.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		want := New(s.Header)
		for _, e := range s.Events {
			want.Emit(e)
		}
		got, err := FromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		w, g := gatherText(t, want), gatherText(t, got)
		if !strings.Contains(w, "treni_cold_start_seconds") || g != w {
			t.Errorf("%s:\nfrom the file:\n%s\nfrom memory:\n%s", path, g, w)
		}
	}
	if _, err := FromFile("fleetmetrics.go"); err == nil {
		t.Error("a Go file read as a session")
	}
}

// gatherText is m's series in the Prometheus text format.
func gatherText(t *testing.T, m *Metrics) string {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
