package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/treni-top/treni-top/probe"
	"github.com/treni-top/treni-top/probe/prober"
	"github.com/treni-top/treni-top/trace"
)

// DefaultInterval is how often a server's page is scraped. A server
// refreshes its histograms per request and its gauges per engine step;
// reading every second shows queueing build up without making the server
// render a page of thousands of lines ten times a second.
const DefaultInterval = time.Second

// maxPage bounds the bytes read of one page: vLLM's page with several
// engines and LoRA adapters is a few hundred KB.
const maxPage = 16 << 20

// MarkerServerMetrics is emitted once per target when the runner has
// looked for its metrics page: attrs enabled (bool), family and url when
// found, reason when not.
const MarkerServerMetrics = "server_metrics"

// ErrNoMetrics says the target has no Prometheus page of a known server:
// a 404, an HTML page, a page that does not parse, or one with none of the
// servers' metric prefixes. Probe's error wraps it with the reason.
var ErrNoMetrics = errors.New("no server metrics page")

// Sampler scrapes one target's page. It is a probe.Sampler (and a
// probe.Waiter: its reading waits on the network), keeping the previous
// snapshot so each reading covers one interval.
type Sampler struct {
	url    string
	client *http.Client
	header http.Header
	family Family
	prev   *Snapshot
}

// MetricsURL is the page of a server at baseURL (http://host:port).
func MetricsURL(baseURL string) string {
	return strings.TrimRight(baseURL, "/") + "/metrics"
}

// Probe fetches the page of the server at baseURL once. When it is a
// Prometheus page of a known family, it returns a Sampler whose baseline is
// this page (its first reading covers the time since Probe); otherwise the
// error wraps ErrNoMetrics with a reason a user can act on. client nil
// means a client with a 5 s timeout; header's fields (an API key) go with
// every request.
func Probe(ctx context.Context, client *http.Client, baseURL string, header http.Header) (*Sampler, error) {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	s := &Sampler{url: MetricsURL(baseURL), client: client, header: header}
	p, err := s.fetch(ctx)
	if err != nil {
		return nil, err
	}
	f := Detect(p)
	if f == FamilyUnknown {
		return nil, fmt.Errorf("%w: %s has no vllm:, sglang:, tgi_, llamacpp: or treni_ metrics", ErrNoMetrics, s.url)
	}
	s.family = f
	snap := ReadAs(p, f)
	s.prev = &snap
	return s, nil
}

// Family is the detected server family.
func (s *Sampler) Family() Family { return s.family }

// URL is the page scraped.
func (s *Sampler) URL() string { return s.url }

// Name identifies the sampler in probe markers.
func (s *Sampler) Name() string { return "server_metrics" }

// MostlyWaits is true: a scrape waits on the server, it does not compute.
func (s *Sampler) MostlyWaits() bool { return true }

// Sample scrapes the page and returns one sample of source
// trace.SourceServer with the interval's values (see Interval). A page
// that cannot be fetched or parsed is an error and leaves the baseline
// alone, so the next good page covers the whole gap.
func (s *Sampler) Sample(ctx context.Context) ([]trace.Sample, error) {
	p, err := s.fetch(ctx)
	if err != nil {
		return nil, err
	}
	cur := ReadAs(p, s.family)
	vals := Interval(s.prev, cur)
	s.prev = &cur
	if len(vals) == 0 {
		return nil, nil
	}
	return []trace.Sample{{Source: trace.SourceServer, Values: vals}}, nil
}

// fetch GETs and parses the page.
func (s *Sampler) fetch(ctx context.Context) (Page, error) {
	return Fetch(ctx, s.client, s.url, s.header)
}

// Fetch GETs the Prometheus page at url with client, header's fields added
// (an API key), and parses it. A page that is missing (not 200), HTML or
// JSON, or does not parse is an error wrapping ErrNoMetrics, with a hint a
// user can act on where there is one.
func Fetch(ctx context.Context, client *http.Client, url string, header http.Header) (Page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	// Ask for the text format: servers that speak OpenMetrics or
	// protobuf fall back to it.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		hint := ""
		switch resp.StatusCode {
		case http.StatusNotFound:
			hint = " (llama-server needs --metrics, SGLang --enable-metrics)"
		case http.StatusUnauthorized, http.StatusForbidden:
			hint = prober.AuthHint(resp.StatusCode, req.Header.Get("Authorization") != "")
		}
		return nil, fmt.Errorf("%w: GET %s: %s%s", ErrNoMetrics, url, resp.Status, hint)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err == nil && (mt == "text/html" || mt == "application/json") {
			return nil, fmt.Errorf("%w: GET %s answered %s, not a Prometheus page", ErrNoMetrics, url, mt)
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPage+1))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: read: %w", url, err)
	}
	if len(body) > maxPage {
		return nil, fmt.Errorf("scrape %s: page larger than %d MiB", url, maxPage>>20)
	}
	p, err := ParseBytes(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoMetrics, url, err)
	}
	return p, nil
}

// Run scrapes every interval (0: DefaultInterval) until ctx ends, emitting
// each reading on sink with offsets from clock and Event.Run set to run.
// Repeated failures are reported the way every sampler's are
// (probe.MarkerSamplerFailing, then a slower retry).
func (s *Sampler) Run(ctx context.Context, sink trace.Sink, clock trace.Clock, run int, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultInterval
	}
	r := probe.NewRunner(sink, clock, interval, s)
	r.SetRun(run)
	return r.Run(ctx)
}
