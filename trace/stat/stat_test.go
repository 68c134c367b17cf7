package stat

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	cases := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{1, 2, 3, 4}, 99, 3.97},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9.1},
		{[]float64{7}, 99, 7},
		{nil, 50, 0},
	}
	for _, c := range cases {
		if got := Percentile(c.xs, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Percentile(%v, %g) = %g, want %g", c.xs, c.p, got, c.want)
		}
	}
}

// TestSummarize keeps the assertions of the removed probe/stats package:
// the median of an even count is the mean of the middle two, the spread
// is (max − min) ÷ median, a zero median has no spread, and the input is
// not modified.
func TestSummarize(t *testing.T) {
	cases := []struct {
		in   []float64
		want Summary
	}{
		{nil, Summary{}},
		{[]float64{10}, Summary{N: 1, Min: 10, Median: 10, Max: 10, Mean: 10, P90: 10, P95: 10, P99: 10}},
		{[]float64{12, 10, 11}, Summary{N: 3, Min: 10, Median: 11, Max: 12, Mean: 11, P90: 11.8, P95: 11.9, P99: 11.98, Spread: 2.0 / 11}},
		{[]float64{40, 10, 20, 30}, Summary{N: 4, Min: 10, Median: 25, Max: 40, Mean: 25, P90: 37, P95: 38.5, P99: 39.7, Spread: 1.2}},
		{[]float64{0, 0}, Summary{N: 2}},
	}
	for _, c := range cases {
		in := append([]float64(nil), c.in...)
		got := Summarize(c.in)
		if !near(got, c.want) {
			t.Errorf("Summarize(%v) = %+v, want %+v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Fatal("Summarize modified its input")
			}
		}
	}
}

func near(a, b Summary) bool {
	eq := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	return a.N == b.N && eq(a.Min, b.Min) && eq(a.Median, b.Median) && eq(a.Max, b.Max) && eq(a.Mean, b.Mean) &&
		eq(a.P90, b.P90) && eq(a.P95, b.P95) && eq(a.P99, b.P99) && eq(a.Spread, b.Spread)
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{FormatMS(0), "—"}, {FormatMeasuredMS(0), "0"}, {FormatMeasuredMS(1.234), "1.23"}, {FormatMS(1.234), "1.23"}, {FormatMS(12.34), "12.3"}, {FormatMS(1234.5), "1234"},
		{FormatDuration(0), "0"}, {FormatDuration(850 * time.Microsecond), "850 µs"},
		{FormatDuration(412 * time.Millisecond), "412.0 ms"}, {FormatDuration(2310 * time.Millisecond), "2.31 s"},
		{FormatDuration(95 * time.Second), "1m35s"},
		{FormatBytes(512), "512 B"}, {FormatBytes(2048), "2 KiB"}, {FormatBytes(3 << 20), "3.0 MiB"}, {FormatBytes(1.5 * (1 << 30)), "1.50 GiB"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
