package load

import (
	"strings"
	"testing"
)

// TestPlanOptions: each way of choosing workloads gives its workloads, and
// two ways at once are refused.
func TestPlanOptions(t *testing.T) {
	base := PlanOptions{Workload: "baseline", RepeatRuns: 1, SweepSeconds: SweepSeconds, Seed: DefaultSeed}
	cases := []struct {
		name  string
		edit  func(*PlanOptions)
		names []string
		err   string
	}{
		{name: "default", edit: func(*PlanOptions) {}, names: []string{"baseline"}},
		{name: "all", edit: func(o *PlanOptions) { o.Workload, o.WorkloadSet = "all", true }, names: BuiltinNames()},
		{name: "custom", edit: func(o *PlanOptions) { o.NumRequests, o.PromptTokens, o.MaxTokens = 8, 16, 4 }, names: []string{"custom_n8_p16_t4"}},
		{name: "sweep", edit: func(o *PlanOptions) { o.QPS = []float64{1, 2} }, names: []string{"qps_1", "qps_2"}},
		{name: "sweep with a length", edit: func(o *PlanOptions) { o.QPS, o.PromptTokens = []float64{1}, 64 }, names: []string{"qps_1"}},
		{name: "two modes", edit: func(o *PlanOptions) { o.WorkloadSet, o.QPS = true, []float64{1} }, err: "give one of"},
		{name: "partial custom", edit: func(o *PlanOptions) { o.NumRequests = 8 }, err: "needs all of"},
		{name: "unknown", edit: func(o *PlanOptions) { o.Workload, o.WorkloadSet = "nope", true }, err: "nope"},
		{name: "invalid plan", edit: func(o *PlanOptions) { o.RepeatRuns = 0 }, err: "--repeat-runs 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := base
			c.edit(&o)
			p, err := o.Plan()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Plan() error = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range p.Workloads {
				names = append(names, s.Name)
			}
			if strings.Join(names, ",") != strings.Join(c.names, ",") {
				t.Errorf("workloads %v, want %v", names, c.names)
			}
			if p.Seed != DefaultSeed || p.RepeatRuns != 1 {
				t.Errorf("shared settings not carried: %+v", p)
			}
		})
	}
}

// TestPlanMaxConns: the concurrency cap when set, else the largest
// workload's requests, at least 1024.
func TestPlanMaxConns(t *testing.T) {
	small := Plan{Workloads: []Spec{{Requests: 10}}}
	big := Plan{Workloads: []Spec{{Requests: 10}, {Requests: 5000}}}
	capped := Plan{Workloads: []Spec{{Requests: 5000}}, Concurrency: 8}
	for _, c := range []struct {
		p    Plan
		want int
	}{{small, 1024}, {big, 5000}, {capped, 8}} {
		if got := c.p.MaxConns(); got != c.want {
			t.Errorf("MaxConns(%+v) = %d, want %d", c.p, got, c.want)
		}
	}
}

// TestReadRoofline: neither file is no bound; one without the other is
// refused before anything is read.
func TestReadRoofline(t *testing.T) {
	if rf, err := ReadRoofline("", ""); rf != nil || err != nil {
		t.Errorf("ReadRoofline(none) = %v, %v; want no bound", rf, err)
	}
	for _, c := range [][2]string{{"floors.json", ""}, {"", "config.json"}} {
		if _, err := ReadRoofline(c[0], c[1]); err == nil || !strings.Contains(err.Error(), "needs both") {
			t.Errorf("ReadRoofline(%q, %q) error = %v, want 'needs both'", c[0], c[1], err)
		}
	}
	if _, err := ReadRoofline("/nonexistent/floors.json", "/nonexistent/config.json"); err == nil || !strings.HasPrefix(err.Error(), "--floors: ") {
		t.Errorf("a missing floors file: %v, want an error naming --floors", err)
	}
}
