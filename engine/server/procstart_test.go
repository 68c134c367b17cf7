package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/treni-top/treni-top/engine/sched"
)

// TestMetricsProcessStart: with Options.ProcessStart set, /metrics carries
// the standard process_start_time_seconds gauge (what a client reads to
// tell a fresh server from a warm one), in a page the Prometheus text
// parser accepts; without it, the gauge is absent rather than 0.
func TestMetricsProcessStart(t *testing.T) {
	started := time.Date(2026, 11, 25, 17, 0, 0, 250e6, time.UTC)
	for _, c := range []struct {
		start time.Time
		want  bool
	}{{started, true}, {time.Time{}, false}} {
		tok := testTokenizer(t)
		s, err := sched.New(&fakeBackend{vocab: tok.VocabSize(), blocks: 64}, sched.Config{MaxSeqLen: ctxLen, MaxBatch: 4, MaxBatchedTokens: 64})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		srv, err := New(s, tok, Options{ModelID: modelID, ProcessStart: c.start})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		resp, err := http.Get(hs.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		hs.Close()
		cancel()
		<-done
		if err != nil {
			t.Fatalf("the page does not parse: %v", err)
		}
		f, ok := fams["process_start_time_seconds"]
		if ok != c.want {
			t.Fatalf("process_start_time_seconds present = %v, want %v", ok, c.want)
		}
		if ok {
			got := f.GetMetric()[0].GetGauge().GetValue()
			if want := float64(started.UnixNano()) / 1e9; got != want {
				t.Errorf("process_start_time_seconds = %v, want %v", got, want)
			}
		}
	}
}
