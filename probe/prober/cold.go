package prober

import (
	"context"
	"fmt"
	"time"

	"github.com/treni-top/treni-top/probe/stats"
	"github.com/treni-top/treni-top/trace"
)

// DefaultColdTimeout bounds the cold request when ColdConfig sets none: a
// lazy server loads its whole model inside it (minutes for a large model
// from a cold disk).
const DefaultColdTimeout = 10 * time.Minute

// ColdConfig describes a cold sequence.
type ColdConfig struct {
	// Template is the request sent every time. Its Timeout bounds the warm
	// requests.
	Template Template
	// Warmup requests follow the cold one and are not counted; Repeat
	// measured warm requests follow them.
	Warmup, Repeat int
	// Lazy says the server loads its model on the first request (Ollama):
	// the cold request then contains the load stages. It changes no timing,
	// only how the result is described.
	Lazy bool
	// ColdTimeout bounds the cold request; zero means DefaultColdTimeout.
	ColdTimeout time.Duration
	// IDPrefix is put before each request's label to form its ID (for
	// several runs in one session: "run2-"); Run is stamped on the events.
	IDPrefix string
	Run      int
}

// ColdResult is a cold sequence's requests and statistics.
type ColdResult struct {
	Cold   Result
	Warmup []Result
	Warm   []Result
	// WarmTTFT and WarmE2E summarise the successful warm requests.
	WarmTTFT stats.Summary
	WarmE2E  stats.Summary
	// ColdPenalty is cold TTFT ÷ warm median TTFT; zero when either is
	// missing (the cold request failed, or no warm request succeeded).
	ColdPenalty float64
	Lazy        bool
}

// ColdSequence sends the cold request (call it right after the server is
// healthy, or, for a lazy server, as the first request at all: it is
// labelled cold_1, PhaseCold), then cfg.Warmup warm-up requests (warmup_i,
// PhaseWarmup, not counted) and cfg.Repeat measured ones (warm_i,
// PhaseWarm), one at a time. A failed request is kept in the result with
// its error and left out of the statistics. It returns early with ctx's
// error when ctx is cancelled, with the requests done so far.
func ColdSequence(ctx context.Context, cfg ColdConfig, sink trace.Sink, clock trace.Clock) (ColdResult, error) {
	c := New(clock, sink, cfg.Run)
	defer c.Close()
	out := ColdResult{Lazy: cfg.Lazy}

	cold := cfg.Template
	cold.Timeout = cfg.ColdTimeout
	if cold.Timeout <= 0 {
		cold.Timeout = DefaultColdTimeout
	}
	out.Cold = c.Do(ctx, cold, cfg.IDPrefix+"cold_1", "cold_1", trace.PhaseCold)
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	for i := 1; i <= cfg.Warmup; i++ {
		label := fmt.Sprintf("warmup_%d", i)
		out.Warmup = append(out.Warmup, c.Do(ctx, cfg.Template, cfg.IDPrefix+label, label, trace.PhaseWarmup))
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	var ttft, e2e []time.Duration
	for i := 1; i <= cfg.Repeat; i++ {
		label := fmt.Sprintf("warm_%d", i)
		r := c.Do(ctx, cfg.Template, cfg.IDPrefix+label, label, trace.PhaseWarm)
		out.Warm = append(out.Warm, r)
		if ctx.Err() != nil {
			break
		}
		if r.Request.OK() && r.Request.FirstToken > 0 {
			ttft = append(ttft, r.Request.TTFT())
			e2e = append(e2e, r.Request.E2E())
		}
	}
	out.WarmTTFT = stats.Summarize(ttft)
	out.WarmE2E = stats.Summarize(e2e)
	if out.Cold.Request.OK() {
		out.ColdPenalty = stats.Ratio(out.Cold.Request.TTFT(), out.WarmTTFT.Median)
	}
	return out, ctx.Err()
}
