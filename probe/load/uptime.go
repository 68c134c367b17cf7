package load

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// processStartMetric is the process start time, in Unix seconds, that
// Prometheus client libraries export from their default process collector
// (prometheus_client in Python on Linux: vLLM and SGLang serving from one
// API server process expose it on /metrics; vLLM's multi-process registry,
// used with several API servers, does not).
const processStartMetric = "process_start_time_seconds"

// serverStartTimeout bounds the one /metrics request made before a bench.
const serverStartTimeout = 5 * time.Second

// ServerStart asks the server's Prometheus page (baseURL + "/metrics") when
// its process started. ok is false when there is no such page, it is not
// Prometheus text, or it lacks a plausible process_start_time_seconds: the
// start time is then unknown, which is not an error.
func ServerStart(ctx context.Context, baseURL string, header http.Header) (start time.Time, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/metrics", nil)
	if err != nil {
		return time.Time{}, false
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, false
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return time.Time{}, false
	}
	f, found := fams[processStartMetric]
	if !found || len(f.GetMetric()) == 0 {
		return time.Time{}, false
	}
	m := f.GetMetric()[0]
	var v float64
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	default:
		return time.Time{}, false
	}
	// A start before 2001 or not a number is not a start time.
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 1e9 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(v)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true
}
