package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/treni-top/treni-top/probe/roofline"
)

// PlanOptions are bench's choices of what to run, as the CLI takes them:
// one of a named workload, a workload file, a QPS sweep or a custom
// workload, and the settings every workload shares.
type PlanOptions struct {
	// Workload is a builtin workload's name or "all"; WorkloadSet says it
	// was given explicitly (it has a default, and only an explicit one
	// competes with the other modes).
	Workload    string
	WorkloadSet bool
	// WorkloadFile holds custom workloads (docs/BENCH_SCHEMA.md).
	WorkloadFile string
	// QPS is a Poisson sweep's rates; SweepSeconds the arrivals per level
	// when NumRequests is not given.
	QPS          []float64
	SweepSeconds float64
	// NumRequests, PromptTokens and MaxTokens define a custom workload (all
	// three), or override a sweep's defaults.
	NumRequests, PromptTokens, MaxTokens int
	Seed                                 uint64
	WarmupRuns, RepeatRuns               int
	Concurrency                          int
	SLO                                  SLO
}

// Plan turns the options into the workloads to run, refusing more than
// one way of choosing them.
func (o PlanOptions) Plan() (Plan, error) {
	p := Plan{Seed: o.Seed, WarmupRuns: o.WarmupRuns, RepeatRuns: o.RepeatRuns, Concurrency: o.Concurrency, SLO: o.SLO}
	custom := o.NumRequests != 0 || o.PromptTokens != 0 || o.MaxTokens != 0
	modes := 0
	for _, on := range []bool{o.WorkloadSet, o.WorkloadFile != "", len(o.QPS) > 0, custom && len(o.QPS) == 0} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return p, errors.New("give one of --workload, --workload-file, --qps or --num-requests/--prompt-tokens/--max-tokens")
	}
	switch {
	case len(o.QPS) > 0:
		specs, err := Sweep(o.QPS, o.NumRequests, o.PromptTokens, o.MaxTokens, o.SweepSeconds)
		if err != nil {
			return p, err
		}
		p.Workloads = specs
	case o.WorkloadFile != "":
		specs, err := LoadSpecs(o.WorkloadFile)
		if err != nil {
			return p, err
		}
		p.Workloads = specs
	case custom:
		if o.NumRequests <= 0 || o.PromptTokens <= 0 || o.MaxTokens <= 0 {
			return p, errors.New("a custom workload needs all of --num-requests, --prompt-tokens and --max-tokens, each ≥ 1")
		}
		// Without a cap the custom requests go out as one burst; with
		// --concurrency C that is a closed loop of C clients.
		p.Workloads = []Spec{Custom(o.NumRequests, o.PromptTokens, o.MaxTokens, Arrival{Pattern: Burst})}
	case o.Workload == "all":
		p.Workloads = Builtin()
	default:
		s, err := Lookup(o.Workload)
		if err != nil {
			return p, err
		}
		p.Workloads = []Spec{s}
	}
	return p, p.Validate()
}

// MaxConns is how many connections the client may keep open for p: the
// concurrency cap when there is one, else enough for the largest
// workload's requests to be in flight at once (at least 1024).
func (p Plan) MaxConns() int {
	if p.Concurrency > 0 {
		return p.Concurrency
	}
	n := 1024
	for _, s := range p.Workloads {
		n = max(n, s.Requests)
	}
	return n
}

// ReadRoofline reads the measured rates (doctor --floors --json) and the
// model's shape (its config.json or folder) for a burst's bound: both or
// neither (nil, no bound).
func ReadRoofline(floors, modelConfig string) (*Roofline, error) {
	if floors == "" && modelConfig == "" {
		return nil, nil
	}
	if floors == "" || modelConfig == "" {
		return nil, errors.New("the bound needs both --floors (treni-top doctor --floors --json) and --model-config (the checkpoint's config.json)")
	}
	rates, err := roofline.ReadFloors(floors)
	if err != nil {
		return nil, fmt.Errorf("--floors: %w", err)
	}
	m, err := roofline.ReadModel(modelConfig)
	if err != nil {
		return nil, fmt.Errorf("--model-config: %w", err)
	}
	return &Roofline{Model: m, Rates: rates}, nil
}

// PrintProgress writes p's progress line to w every second (nothing until
// the first workload begins) until the returned stop function is called;
// stop waits for the printer goroutine.
func PrintProgress(ctx context.Context, p *Progress, w io.Writer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		prev := p.Snapshot()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s := p.Snapshot()
				if s.Total == 0 {
					continue
				}
				cur, _ := Rates(prev, s)
				fmt.Fprintln(w, s.Line(cur))
				prev = s
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
