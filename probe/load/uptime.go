package load

import (
	"context"
	"net/http"
	"time"

	"github.com/treni-top/treni-top/probe/scrape"
)

// serverStartTimeout bounds the one /metrics request made before a bench.
const serverStartTimeout = 5 * time.Second

// ServerStart asks the server's Prometheus page (baseURL + "/metrics") when
// its process started (scrape.Page.ProcessStart). ok is false when there is
// no such page, it is not Prometheus text, or it lacks a plausible
// process_start_time_seconds: the start time is then unknown, which is not
// an error.
func ServerStart(ctx context.Context, baseURL string, header http.Header) (start time.Time, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	p, err := scrape.Fetch(ctx, http.DefaultClient, scrape.MetricsURL(baseURL), header)
	if err != nil {
		return time.Time{}, false
	}
	return p.ProcessStart()
}
