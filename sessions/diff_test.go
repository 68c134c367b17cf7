package sessions

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// inRun moves one run's events to run index run, starting at offset base
// of the session clock, so that several runs share one session file (as
// run --cold-runs records them).
func inRun(evs []trace.Event, run int, base time.Duration) []trace.Event {
	out := make([]trace.Event, 0, len(evs))
	for _, e := range evs {
		e.Run = run
		e.At += base
		if e.Stage != nil {
			sp := *e.Stage
			sp.Start += base
			sp.End += base
			e.Stage = &sp
		}
		if e.Request != nil {
			q := *e.Request
			q.Sent += base
			e.Request = &q
		}
		out = append(out, e)
	}
	return out
}

// runsSession writes one session file holding a cold run per scenario.
func runsSession(t *testing.T, dir, name string, runs []scenario) *Session {
	t.Helper()
	var evs []trace.Event
	for i, sc := range runs {
		evs = append(evs, inRun(sc.events(), i, time.Duration(i)*20*time.Second)...)
	}
	s, err := Open(writeSession(t, dir, name, evs))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// noisy returns n copies of sc with every stage, the cold TTFT and the warm
// TTFT multiplied by lognormal noise of the given spread (σ of the log),
// drawn from rng.
func noisy(rng *rand.Rand, sc scenario, n int, sigma float64) []scenario {
	f := func() float64 { return math.Exp(sigma * rng.NormFloat64()) }
	out := make([]scenario, n)
	for i := range out {
		c := sc
		c.stages = nil
		for _, s := range sc.stages {
			c.stages = append(c.stages, stageDur{s.name, s.ms * f()})
		}
		c.coldTTFT *= f()
		c.warmTTFT *= f()
		out[i] = c
	}
	return out
}

// demoLike is the shape of the built-in engine's cold start on the demo
// checkpoint: page_cache 200 ms of a ~330 ms cold first token, the page
// cache warm.
func demoLike() scenario {
	return scenario{stages: base(stageDur{trace.StagePageCache, 200}, stageDur{trace.StageKVAlloc, 5}),
		residency: 1, weights: 4e8, coldTTFT: 100, warmTTFT: 40, gap: 7}
}

// Two sides recorded the same way (several runs per file, several files
// per side) differ only by noise: no regression, exit 0, whatever the
// seed.
func TestDiffAANoise(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 40))
		dir := t.TempDir()
		var bs, ns []*Session
		for f := 0; f < 2; f++ {
			bs = append(bs, runsSession(t, dir, "b"+string(rune('0'+f))+".jsonl", noisy(rng, demoLike(), 3, 0.15)))
			ns = append(ns, runsSession(t, dir, "n"+string(rune('0'+f))+".jsonl", noisy(rng, demoLike(), 3, 0.15)))
		}
		res, err := Diff(bs, ns, DiffOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.BaseRuns != 6 || res.NewRuns != 6 || res.HeadlineTests != 6 {
			t.Fatalf("seed %d: runs %d/%d, headline tests %d", seed, res.BaseRuns, res.NewRuns, res.HeadlineTests)
		}
		if res.Regressions != 0 || res.Verdict != VerdictOK {
			t.Fatalf("seed %d: A/A called %s:\n%s", seed, res.Verdict, res.Text())
		}
	}
}

// A cold page cache in NEW (+300 ms of page_cache, five runs a side):
// exit 1, the cold first token named first and explained by page_cache,
// with the residency evidence.
func TestDiffPageCacheShift(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	dir := t.TempDir()
	cold := demoLike()
	cold.residency = 0
	cold.stages = base(stageDur{trace.StagePageCache, 500}, stageDur{trace.StageKVAlloc, 5})
	bs := runsSession(t, dir, "base.jsonl", noisy(rng, demoLike(), 5, 0.1))
	ns := runsSession(t, dir, "new.jsonl", noisy(rng, cold, 5, 0.1))
	res, err := Diff([]*Session{bs}, []*Session{ns}, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head := findRow(t, res, "cold_total/first_token")
	if res.Verdict != VerdictRegression || head.Verdict != DiffRegression || res.Regressions == 0 {
		t.Fatalf("no regression:\n%s", res.Text())
	}
	// +300 ms of page_cache under 10% noise on every stage.
	if head.ShiftMS < 250 || head.ShiftMS > 450 || head.CILevel < 0.95 || head.CILowMS < 200 || head.CILowMS > head.ShiftMS || head.CIHighMS < head.ShiftMS {
		t.Fatalf("cold first token shift %+v", head)
	}
	pc := findRow(t, res, "stage/page_cache")
	if pc.Verdict != DiffSlower || !strings.Contains(pc.Why, "cold in NEW, 0% of the weights resident against 100% in BASE") {
		t.Fatalf("page_cache row %+v", pc)
	}
	first := strings.SplitN(res.Text(), "\n", 2)[0]
	if !strings.HasPrefix(first, "REGRESSION: cold first token +") || !strings.Contains(first, "page_cache +") || !strings.Contains(first, "explains") {
		t.Fatalf("headline %q", first)
	}
	// Nothing else regressed: the warm requests did not change.
	for _, r := range res.Rows {
		if r.Verdict == DiffRegression && r.Metric != "cold_total/first_token" {
			t.Fatalf("%s called a regression:\n%s", r.Metric, res.Text())
		}
	}
	md := res.Markdown()
	if !strings.Contains(md, "### ❌ treni-top diff: REGRESSION") || !strings.Contains(md, "| cold first token | 5/5 |") || !strings.Contains(md, "<details><summary>stages</summary>") {
		t.Fatalf("markdown:\n%s", md)
	}
}

// Unattributed time is never a regression on its own: +8 ms of it (+100%,
// significant) in a 320 ms start leaves the cold first token within the
// threshold, and the row at most says slower.
func TestDiffUnattributedOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	dir := t.TempDir()
	more := demoLike()
	more.gap = 15
	bs := runsSession(t, dir, "base.jsonl", noisy(rng, demoLike(), 6, 0.005))
	ns := runsSession(t, dir, "new.jsonl", noisy(rng, more, 6, 0.005))
	res, err := Diff([]*Session{bs}, []*Session{ns}, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	un := findRow(t, res, "stage/unattributed")
	if un.Verdict != DiffSlower || un.ShiftMS < 7 || un.ShiftMS > 9 {
		t.Fatalf("unattributed row %+v", un)
	}
	if res.Regressions != 0 || res.Verdict != VerdictOK {
		t.Fatalf("an unattributed change failed the diff:\n%s", res.Text())
	}
	if !strings.Contains(res.Text(), "stages that moved without a cold-start regression: unattributed +") {
		t.Fatalf("the moved stage is not reported:\n%s", res.Text())
	}
}

// One run per side cannot be judged, however large the change looks (the
// issue's 380 → 232 ms between two identical runs), and diff says what to
// record; a change beyond the noise bound is still called.
func TestDiffTooFewRuns(t *testing.T) {
	dir := t.TempDir()
	slow := demoLike()
	slow.coldTTFT = 250 // +150 ms, +45%
	for _, n := range []int{1, 2, 4} {
		res, err := Diff([]*Session{runsSession(t, dir, "b.jsonl", repeat(demoLike(), n))},
			[]*Session{runsSession(t, dir, "n.jsonl", repeat(slow, n))}, DiffOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict != VerdictTooFew || res.Regressions != 0 || res.RunsNeeded != 5 {
			t.Fatalf("n=%d: %s\n%s", n, res.Verdict, res.Text())
		}
		want := "record ≥5 with --cold-runs 5"
		if !strings.Contains(res.Summary[0], want) || !strings.HasPrefix(res.Text(), "~: ") {
			t.Fatalf("n=%d: summary %q lacks %q", n, res.Summary, want)
		}
		if n == 1 && !strings.HasPrefix(res.Summary[0], "1 cold run per side cannot separate a change from noise") {
			t.Fatalf("summary %q", res.Summary[0])
		}
	}
	// A stall of seconds: ≥20× and ≥5 s on one run per side.
	stalled := demoLike()
	stalled.coldTTFT = 8000
	res, err := Diff([]*Session{runsSession(t, dir, "b.jsonl", repeat(demoLike(), 1))},
		[]*Session{runsSession(t, dir, "n.jsonl", repeat(stalled, 1))}, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head := findRow(t, res, "cold_ttft")
	if res.Verdict != VerdictRegression || head.Verdict != DiffRegression || !head.BeyondNoise || !head.TooFew {
		t.Fatalf("stall not called:\n%s", res.Text())
	}
}

func repeat(sc scenario, n int) []scenario {
	out := make([]scenario, n)
	for i := range out {
		out[i] = sc
	}
	return out
}

// Outliers do not make a regression: one NEW run 6× slower among
// otherwise identical noisy runs is a rank, not a mean.
func TestDiffOutlierRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	dir := t.TempDir()
	b := noisy(rng, demoLike(), 6, 0.1)
	n := noisy(rng, demoLike(), 6, 0.1)
	n[2].coldTTFT *= 6
	res, err := Diff([]*Session{runsSession(t, dir, "b.jsonl", b)}, []*Session{runsSession(t, dir, "n.jsonl", n)}, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Regressions != 0 {
		t.Fatalf("one outlier run made a regression:\n%s", res.Text())
	}
}

// The rules on samples set by hand: significance, --threshold, --min-delta
// (not for per-token times), roles, ties and identical samples, and the
// Holm family that makes four runs a side enough for one headline metric
// and not for six.
func TestDiffRules(t *testing.T) {
	sep := func(lo, step float64, n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = lo + step*float64(i)
		}
		return v
	}
	cases := []struct {
		name       string
		role       string
		perToken   bool
		base, new  []float64
		verdict    string
		noteSubstr string
	}{
		{"slower past every rule", RoleHeadline, false, sep(300, 1, 5), sep(400, 1, 5), DiffRegression, ""},
		{"faster past every rule", RoleHeadline, false, sep(400, 1, 5), sep(300, 1, 5), DiffImprovement, ""},
		{"a stage slower", RoleStage, false, sep(300, 1, 5), sep(400, 1, 5), DiffSlower, ""},
		{"significant but within the threshold", RoleHeadline, false, sep(300, 1, 5), sep(315, 1, 5), DiffNoChange, "within --threshold 10%"},
		{"significant, +50% but 2 ms", RoleHeadline, false, sep(4, 0.01, 5), sep(6, 0.01, 5), DiffNoChange, "within --min-delta 5ms"},
		{"per-token time: +25% of 4 ms counts", RoleHeadline, true, sep(4, 0.01, 5), sep(5, 0.01, 5), DiffRegression, ""},
		{"overlapping", RoleHeadline, false, []float64{300, 340, 380, 420, 460}, []float64{320, 360, 400, 440, 480}, DiffNoChange, "not significant"},
		{"identical", RoleHeadline, false, []float64{300, 300, 300, 300, 300}, []float64{300, 300, 300, 300, 300}, DiffNoChange, "not significant (p=1.00)"},
		// Midranks 2, 2, 2, 5.5×2 | 5.5×2, 9×3: p = 12/252 (checked by
		// enumeration in trace/stat/compare), significant.
		{"ties across the sides", RoleHeadline, false, []float64{300, 300, 300, 310, 310}, []float64{310, 310, 400, 400, 400}, DiffRegression, ""},
		{"two runs per side", RoleHeadline, false, sep(300, 1, 2), sep(400, 1, 2), DiffNoChange, "2 runs per side cannot be significant: needs ≥4"},
		{"one base run", RoleHeadline, false, []float64{300}, sep(400, 1, 5), DiffNoChange, "1 and 5 runs cannot be significant"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := DiffRow{Metric: "m", Role: c.role, perToken: c.perToken, baseRun: c.base, newRun: c.new, BaseRuns: len(c.base), NewRuns: len(c.new)}
			res := DiffResult{Rows: []DiffRow{r}}
			judgeRows(&res, DiffOptions{}.withDefaults())
			got := res.Rows[0]
			if got.Verdict != c.verdict || !strings.Contains(got.Note, c.noteSubstr) {
				t.Fatalf("verdict %q note %q, want %q with %q (p %v, shift %v)", got.Verdict, got.Note, c.verdict, c.noteSubstr, got.P, got.ShiftMS)
			}
		})
	}
	// Four runs a side, complete separation: p = 2/70 ≈ 0.029 — enough
	// for one headline metric, not when Holm spreads α over six.
	one := DiffResult{Rows: []DiffRow{{Metric: "a", Role: RoleHeadline, baseRun: sep(300, 1, 4), newRun: sep(400, 1, 4), BaseRuns: 4, NewRuns: 4}}}
	judgeRows(&one, DiffOptions{}.withDefaults())
	if one.Rows[0].Verdict != DiffRegression {
		t.Fatalf("one metric, 4 runs: %+v", one.Rows[0])
	}
	var six DiffResult
	for i := 0; i < 6; i++ {
		six.Rows = append(six.Rows, DiffRow{Metric: string(rune('a' + i)), Role: RoleHeadline, baseRun: sep(300, 1, 4), newRun: sep(400, 1, 4), BaseRuns: 4, NewRuns: 4})
	}
	judgeRows(&six, DiffOptions{}.withDefaults())
	for _, r := range six.Rows {
		if r.Verdict != DiffNoChange || !r.TooFew || !strings.Contains(r.Note, "needs ≥5 runs per side") {
			t.Fatalf("six metrics, 4 runs: %+v", r)
		}
	}
	// With five, the Holm-adjusted p of complete separation is 6 × 2/252.
	six = DiffResult{}
	for i := 0; i < 6; i++ {
		six.Rows = append(six.Rows, DiffRow{Metric: string(rune('a' + i)), Role: RoleHeadline, baseRun: sep(300, 1, 5), newRun: sep(400, 1, 5), BaseRuns: 5, NewRuns: 5})
	}
	judgeRows(&six, DiffOptions{}.withDefaults())
	if r := six.Rows[0]; r.Verdict != DiffRegression || math.Abs(r.PAdjusted-6*2.0/252) > 1e-12 {
		t.Fatalf("six metrics, 5 runs: %+v", r)
	}
}

func TestDiffUnusable(t *testing.T) {
	dir := t.TempDir()
	s := runsSession(t, dir, "s.jsonl", repeat(demoLike(), 1))
	empty := &Session{Header: s.Header}
	if _, err := Diff([]*Session{empty}, []*Session{s}, DiffOptions{}); !errors.Is(err, ErrUnusable) {
		t.Fatalf("empty base: %v", err)
	}
	if _, err := Diff([]*Session{s}, []*Session{empty}, DiffOptions{}); !errors.Is(err, ErrUnusable) {
		t.Fatalf("empty new: %v", err)
	}
}

// Sessions as a shell names them: files, comma lists, quoted globs,
// directories; the latest link and repeated names count once.
func TestExpandPaths(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.jsonl", "b.jsonl", "c.jsonl.gz", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("b.jsonl", filepath.Join(dir, "latest.jsonl")); err != nil {
		t.Fatal(err)
	}
	a, b, c := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), filepath.Join(dir, "c.jsonl.gz")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{a}, []string{a}},
		{[]string{a + "," + b}, []string{a, b}},
		{[]string{a, b, a}, []string{a, b}},
		{[]string{filepath.Join(dir, "*.jsonl")}, []string{a, b}},
		{[]string{dir}, []string{a, b, c}},
		{[]string{b, filepath.Join(dir, "latest.jsonl")}, []string{b}},
	} {
		got, err := ExpandPaths(tc.args)
		if err != nil || strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%v: %v %v, want %v", tc.args, got, err, tc.want)
		}
	}
	for _, bad := range [][]string{{filepath.Join(dir, "missing.jsonl")}, {filepath.Join(dir, "*.none")}, {a + ","}, {t.TempDir()}} {
		if _, err := ExpandPaths(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// A run that failed before completing its cold sequence (run_failed) is
// not a sample: its numbers stop where it failed. It is left out and
// counted; a side with nothing else is unusable.
func TestDiffLeavesOutFailedRuns(t *testing.T) {
	dir := t.TempDir()
	failed := func(run int) trace.Event {
		return trace.Event{At: time.Duration(run)*20*time.Second + time.Millisecond, Run: run, Kind: trace.KindMarker,
			Marker: &trace.Marker{Name: trace.MarkerRunFailed, Attrs: trace.Attrs{"error": "never healthy"}}}
	}
	var evs []trace.Event
	for i, sc := range repeat(demoLike(), 6) {
		evs = append(evs, inRun(sc.events(), i, time.Duration(i)*20*time.Second)...)
	}
	evs = append(evs, failed(5))
	trace.SortEvents(evs)
	ns, err := Open(writeSession(t, dir, "n.jsonl", evs))
	if err != nil {
		t.Fatal(err)
	}
	bs := runsSession(t, dir, "b.jsonl", repeat(demoLike(), 5))
	res, err := Diff([]*Session{bs}, []*Session{ns}, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.NewRuns != 5 || res.NewFailed != 1 || !strings.Contains(res.Text(), "new:  5 cold runs (1 failed run left out) in 1 file") {
		t.Fatalf("runs %d failed %d:\n%s", res.NewRuns, res.NewFailed, res.Text())
	}
	only, err := Open(writeSession(t, dir, "f.jsonl", append(inRun(demoLike().events(), 0, 0), failed(0))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Diff([]*Session{bs}, []*Session{only}, DiffOptions{}); !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), "1 failed run left out") {
		t.Fatalf("a side of failed runs: %v", err)
	}
}

// A file of more than 100 runs is read as a digest (its first 99 runs and
// its last): the runs it did not read are not samples, and the side's line
// says how many and what to do.
func TestDiffSaysWhatADigestLeftOut(t *testing.T) {
	dir := t.TempDir()
	var evs []trace.Event
	for i, sc := range repeat(demoLike(), maxDigestRuns+3) {
		evs = append(evs, inRun(sc.events(), i, time.Duration(i)*20*time.Second)...)
	}
	big, err := OpenAll([]string{writeSession(t, dir, "big.jsonl", evs)})
	if err != nil {
		t.Fatal(err)
	}
	bs := runsSession(t, dir, "b.jsonl", repeat(demoLike(), 5))
	res, err := Diff([]*Session{bs}, big, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("new:  %d cold runs (3 runs not read: a file of more than 100 runs is read as its first 99 and its last; record at most 100 a file) in 1 file", maxDigestRuns)
	if res.NewRuns != maxDigestRuns || res.NewOmitted != 3 || res.BaseOmitted != 0 || !strings.Contains(res.Text(), want) {
		t.Fatalf("runs %d omitted %d:\n%s", res.NewRuns, res.NewOmitted, res.Text())
	}
}
