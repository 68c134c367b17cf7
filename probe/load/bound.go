package load

import (
	"fmt"
	"math"
	"strings"

	"github.com/treni-top/treni-top/probe/roofline"
)

// Roofline is what a bench needs to set a run against its bound
// (probe/roofline): the served model's shape and the card's measured
// rates.
type Roofline struct {
	Model roofline.Model
	Rates roofline.Rates
}

// RunBound is the bound of a run's batch and the run against it.
type RunBound struct {
	roofline.Bound
	// Ratio is the run's output tok/s over the bound's.
	Ratio float64 `json:"ratio"`
}

// bound is the run's bound, or why it has none. The bound is defined for
// one batch of equal requests arriving together, all served at once:
// a burst of fixed prompt and output lengths, every request in flight
// together (no cap, or a cap of at least the request count), none
// failed. The batch's prompt and output lengths are the server's counts
// (their means over the run) where it gave them: a chat template adds
// prompt tokens, an early end of sequence removes output ones.
func (rf *Roofline) bound(s Spec, concurrency int, m RunMetrics) (*RunBound, string) {
	switch {
	case s.Arrival.Pattern != Burst:
		return nil, fmt.Sprintf("no bound: it is defined for a burst of equal requests, and this workload's arrivals are %s", s.Arrival)
	case concurrency > 0 && concurrency < s.Requests:
		return nil, fmt.Sprintf("no bound: --concurrency %d < %d requests makes a closed loop, not one batch", concurrency, s.Requests)
	case len(s.PromptMix) > 0 || s.SharedPrefixTokens > 0 || s.PromptTokens.Min != s.PromptTokens.Max || s.MaxTokens.Min != s.MaxTokens.Max:
		return nil, "no bound: it is defined for requests of one prompt length and one output length, without a shared prefix"
	case m.Failed > 0 || m.Completed == 0:
		return nil, fmt.Sprintf("no bound: %d of %d requests failed", m.Failed, m.Requests)
	}
	b := roofline.Batch{Streams: m.Completed, PromptTokens: s.PromptTokens.Min,
		OutputTokens: int(math.Round(float64(m.OutputTokens) / float64(m.Completed)))}
	if m.InputTokensFromServer {
		b.PromptTokens = int(math.Round(float64(m.InputTokens) / float64(m.Completed)))
	}
	bd, err := roofline.Burst(rf.Model, rf.Rates, b)
	if err != nil {
		return nil, "no bound: " + err.Error()
	}
	return &RunBound{Bound: bd, Ratio: m.OutputTokPerSec / bd.OutputTokPerS}, ""
}

// writeBounds renders each run's bound, or why it has none, when the
// bench was given the model and the floors.
func writeBounds(b *strings.Builder, r Report) {
	for _, w := range r.Workloads {
		for _, m := range w.Runs {
			run := w.Spec.Name
			if len(w.Runs) > 1 {
				run = fmt.Sprintf("%s, run %d", w.Spec.Name, m.Repeat)
			}
			switch {
			case m.Bound != nil:
				bd := m.Bound
				dev := bd.Device
				if dev == "" {
					dev = "the card"
				}
				fmt.Fprintf(b, "\n**Bound** (%s): %d streams of %d prompt + %d output tokens, every prompt token prefilled, on %s (bf16 matrix %.0f TFLOP/s, memory %.0f GB/s): prefill %.1f TFLOP in %.1f ms, then %d decode steps (%.2f GB of weights each, %.1f GB of KV in all) in %.1f ms: **%.0f output tok/s**. This run: %.0f output tok/s, **%.2f of the bound**.\n",
					run, bd.Streams, bd.PromptTokens, bd.OutputTokens, dev, bd.MatmulTFLOPS, bd.MemoryGBps,
					bd.PrefillTFLOP, bd.PrefillMS, bd.DecodeSteps, bd.StepWeightGB, bd.DecodeKVGB, bd.DecodeMS,
					bd.OutputTokPerS, m.OutputTokPerSec, bd.Ratio)
			case m.BoundNote != "":
				fmt.Fprintf(b, "\n%s: %s.\n", run, m.BoundNote)
			}
		}
	}
}
