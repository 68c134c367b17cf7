package load

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// DefaultSeed is the seed of every workload unless told otherwise (the
// benchmark log's and the openinfer comparison's).
const DefaultSeed = 42

// Plan is what a bench runs.
type Plan struct {
	Workloads []Spec
	// Seed draws prompts, lengths and arrivals; the same seed sends the
	// same requests at the same offsets.
	Seed uint64
	// WarmupRuns are run first for each workload and not counted; then
	// RepeatRuns measured runs (at least 1).
	WarmupRuns int
	RepeatRuns int
	// Concurrency caps requests in flight (0: no cap). Sequential
	// workloads always have one in flight.
	Concurrency int
	SLO         SLO
}

// Validate checks the plan.
func (p Plan) Validate() error {
	if len(p.Workloads) == 0 {
		return errors.New("no workload to run; give --workload NAME|all, --num-requests, --qps or --workload-file")
	}
	if p.WarmupRuns < 0 || p.WarmupRuns > 100 {
		return fmt.Errorf("--warmup-runs %d out of range; give 0 to 100", p.WarmupRuns)
	}
	if p.RepeatRuns < 1 || p.RepeatRuns > 1000 {
		return fmt.Errorf("--repeat-runs %d out of range; give 1 to 1000", p.RepeatRuns)
	}
	if p.Concurrency < 0 {
		return fmt.Errorf("--concurrency %d is negative; give 0 (no cap) or more", p.Concurrency)
	}
	if p.SLO.TTFTms < 0 || p.SLO.TPOTms < 0 || p.SLO.E2Ems < 0 {
		return errors.New("SLO thresholds must be positive milliseconds")
	}
	seen := map[string]bool{}
	for _, s := range p.Workloads {
		if err := s.Validate(); err != nil {
			return err
		}
		if seen[s.Name] {
			return fmt.Errorf("workload %q is listed twice", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// Bench runs plans. Sink (optional) receives every request as a
// trace.Request event when it ends, and the bench_start/bench_end markers
// of every run; Progress (optional) is updated live.
type Bench struct {
	Client   *Client
	Clock    trace.Clock
	Sink     trace.Sink
	Progress *Progress
	// Run is stamped as trace.Event.Run.
	Run int
	// Corpus prompts are cut from (nil: the embedded one).
	Corpus *Corpus
	// Tokenizer, when set, sizes prompts in the served model's tokens
	// (Spec.GenerateTokens); nil sizes them at CharsPerToken.
	Tokenizer Tokenizer
	// Roofline, when set, gives each run of one batch its bound.
	Roofline *Roofline
}

// RunResult is one run's requests (in item order) and its span on the
// session clock.
type RunResult struct {
	Requests   []trace.Request
	Start, End time.Duration
	// Planned holds each item's planned send on the session clock, for
	// planned arrivals (Poisson, uniform); nil otherwise.
	Planned []time.Duration
}

// Execute runs every workload of the plan: warm-up runs, then the measured
// repeats, and returns the report. When ctx is cancelled it stops sending,
// lets nothing leak (in-flight requests are cancelled and awaited) and
// returns what was measured with ctx's error.
func (b *Bench) Execute(ctx context.Context, p Plan) (Report, error) {
	rep := Report{Schema: Schema, Seed: p.Seed, WarmupRuns: p.WarmupRuns, RepeatRuns: p.RepeatRuns,
		Concurrency: p.Concurrency, Started: b.Clock.Start().Add(b.Clock.Now()).UTC()}
	if b.Client != nil {
		cfg := b.Client.Config()
		rep.URL, rep.Model, rep.Endpoint = cfg.BaseURL, cfg.Model, string(cfg.Endpoint)
		rep.Timestamps = b.Client.TimestampSource()
	}
	if p.SLO.Set() {
		slo := p.SLO
		rep.SLO = &slo
	}
	if err := p.Validate(); err != nil {
		return rep, err
	}
	if b.Client == nil {
		return rep, errors.New("bench has no client")
	}
	// The server's uptime, when its /metrics page tells, is evidence for
	// the cold-contamination verdict. Both clocks are assumed to agree; a
	// start after ours (skew) is dropped.
	cfg := b.Client.Config()
	if st, ok := ServerStart(ctx, cfg.BaseURL, cfg.Header); ok {
		if up := rep.Started.Sub(st).Seconds(); up >= 0 {
			rep.ServerUptimeS = &up
		}
	}
	corpus := b.Corpus
	if corpus == nil {
		var err error
		if corpus, err = DefaultCorpus(); err != nil {
			return rep, err
		}
	}
	for _, spec := range p.Workloads {
		items, err := spec.GenerateTokens(p.Seed, corpus, b.Tokenizer)
		if err != nil {
			return rep, err
		}
		est := make([]int, len(items))
		for i, it := range items {
			est[i] = it.PromptTokens
		}
		wr := WorkloadReport{Spec: spec}
		for w := 1; w <= p.WarmupRuns; w++ {
			b.RunOnce(ctx, spec, items, p, w, true)
			if ctx.Err() != nil {
				rep.Workloads = append(rep.Workloads, wr.finish())
				return rep, ctx.Err()
			}
		}
		for k := 1; k <= p.RepeatRuns; k++ {
			res := b.RunOnce(ctx, spec, items, p, k, false)
			m := Measure(k, res.Requests, res.End-res.Start, p.SLO, est)
			if res.Planned != nil {
				m.Queue = queueTrend(res.Requests, res.Planned)
			}
			if b.Roofline != nil {
				m.Bound, m.BoundNote = b.Roofline.bound(spec, p.Concurrency, m)
			}
			wr.Runs = append(wr.Runs, m)
			if cold := coldRequests(spec.Name, k, res.Requests); len(cold) > 0 {
				rep.ColdContaminated = true
				rep.ColdRequests = append(rep.ColdRequests, cold...)
			}
			if ctx.Err() != nil {
				rep.Workloads = append(rep.Workloads, wr.finish())
				return rep, ctx.Err()
			}
		}
		rep.Workloads = append(rep.Workloads, wr.finish())
	}
	limit := p.SLO.TPOTms
	if limit == 0 {
		limit = DefaultSaturationTPOTms
	}
	rep.Saturation = saturationOf(rep.Workloads, limit)
	return rep, nil
}

// RunOnce sends one run of a workload: each item at its planned offset
// from the run's start (absolute deadlines, so a late send does not delay
// the next), or one after another for sequential workloads, under the
// plan's concurrency cap. run numbers warm-up runs and repeats from 1.
func (b *Bench) RunOnce(ctx context.Context, spec Spec, items []Item, p Plan, run int, warmup bool) RunResult {
	phase, tag := trace.PhaseBench, fmt.Sprintf("r%d", run)
	if warmup {
		phase, tag = trace.PhaseWarmup, fmt.Sprintf("w%d", run)
	}
	b.begin(spec, len(items), p, run, warmup)

	res := RunResult{Requests: make([]trace.Request, len(items))}
	do := func(i int) {
		it := items[i]
		id := fmt.Sprintf("%s-%s-%04d", spec.Name, tag, it.Index)
		label := fmt.Sprintf("%s/%s/%d", spec.Name, tag, it.Index)
		b.Progress.send()
		r := b.Client.Do(ctx, it, id, label, phase, b.Progress)
		b.Progress.end(&r)
		res.Requests[i] = r
		cp := r
		b.emit(trace.Event{Kind: trace.KindRequest, Request: &cp})
	}
	res.Start = b.Clock.Now()
	if openLoop(spec.Arrival) {
		res.Planned = make([]time.Duration, len(items))
		for i, it := range items {
			res.Planned[i] = res.Start + it.At
		}
	}
	sent := b.send(ctx, spec.Arrival, items, res.Start, p.Concurrency, do)
	res.End = b.Clock.Now()
	res.settle(spec.Name, tag, phase, items)
	b.end(spec.Name, run, warmup, sent, res)
	return res
}

// begin starts a run: the progress, and the bench_start marker with the
// run's settings.
func (b *Bench) begin(spec Spec, n int, p Plan, run int, warmup bool) {
	repeat := run
	if warmup {
		repeat = 0
	}
	b.Progress.begin(spec.Name, repeat, p.RepeatRuns, warmup, n)
	b.emit(trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerBenchStart, Attrs: trace.Attrs{
		"workload": spec.Name, "run": run, "warmup": warmup, "repeats": p.RepeatRuns, "seed": float64(p.Seed),
		"requests": n, "concurrency": p.Concurrency, "arrival": spec.Arrival.String(),
		"prompt_tokens": spec.PromptDescription(), "max_tokens": spec.MaxTokens.String(),
	}}})
}

// send sends every item with do at its arrival instant after start (one
// after the other for a sequential workload), at most concurrency in
// flight (0: no cap), until ctx ends; it returns how many were sent once
// all of them are done. The goroutines it starts are owned by this call:
// it waits for all of them, and cancelling ctx ends their requests.
func (b *Bench) send(ctx context.Context, arrival Arrival, items []Item, start time.Duration, concurrency int, do func(i int)) (sent int) {
	var sem chan struct{}
	if concurrency > 0 {
		sem = make(chan struct{}, concurrency)
	}
	var wg sync.WaitGroup
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
send:
	for i := range items {
		if arrival.Pattern == Sequential {
			if ctx.Err() != nil {
				break
			}
			do(i)
			sent++
			continue
		}
		if wait := start + items[i].At - b.Clock.Now(); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break send
			case <-timer.C:
			}
		}
		if sem != nil {
			select {
			case <-ctx.Done():
				break send
			case sem <- struct{}{}:
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sent++
		go func(i int) {
			defer wg.Done()
			if sem != nil {
				defer func() { <-sem }()
			}
			do(i)
		}(i)
	}
	wg.Wait()
	return sent
}

// settle completes a run's result once its requests are done: requests
// never sent (cancelled) are reported as such, not as zeros, and the
// run's duration ends at the last response, not at our wake-up.
func (res *RunResult) settle(workload, tag string, phase trace.Phase, items []Item) {
	for i := range res.Requests {
		if res.Requests[i].ID == "" {
			res.Requests[i] = trace.Request{ID: fmt.Sprintf("%s-%s-%04d", workload, tag, items[i].Index),
				Phase: phase, Done: true, ErrorKind: "canceled", Error: "not sent: the bench was stopped"}
		}
	}
	var last time.Duration
	for _, r := range res.Requests {
		if r.Sent > 0 && r.Sent+r.End > last {
			last = r.Sent + r.End
		}
	}
	if last > res.Start {
		res.End = last
	}
}

// end ends a run with the bench_end marker: what was sent, failed and
// generated, and the output rate.
func (b *Bench) end(workload string, run int, warmup bool, sent int, res RunResult) {
	failed := 0
	var out int
	for _, r := range res.Requests {
		if !r.OK() {
			failed++
		} else {
			out += r.OutputTokens()
		}
	}
	attrs := trace.Attrs{"workload": workload, "run": run, "warmup": warmup, "sent": sent,
		"failed": failed, "output_tokens": out, "duration_s": (res.End - res.Start).Seconds()}
	if d := (res.End - res.Start).Seconds(); d > 0 {
		attrs["output_tok_per_s"] = float64(out) / d
	}
	b.emit(trace.Event{Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerBenchEnd, Attrs: attrs}})
}

func (b *Bench) emit(e trace.Event) {
	if b.Sink == nil {
		return
	}
	e.At = b.Clock.Now()
	e.Run = b.Run
	b.Sink.Emit(e)
}
