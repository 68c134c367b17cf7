package stats

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		in   []time.Duration
		want Summary
	}{
		{nil, Summary{}},
		{[]time.Duration{10 * ms}, Summary{N: 1, Min: 10 * ms, Median: 10 * ms, Max: 10 * ms}},
		{[]time.Duration{12 * ms, 10 * ms, 11 * ms}, Summary{N: 3, Min: 10 * ms, Median: 11 * ms, Max: 12 * ms, SpreadPct: 100 * 2.0 / 11}},
		{[]time.Duration{40 * ms, 10 * ms, 20 * ms, 30 * ms}, Summary{N: 4, Min: 10 * ms, Median: 25 * ms, Max: 40 * ms, SpreadPct: 120}},
		{[]time.Duration{0, 0}, Summary{N: 2}},
	}
	for _, c := range cases {
		in := append([]time.Duration(nil), c.in...)
		got := Summarize(c.in)
		if got != c.want {
			t.Errorf("Summarize(%v) = %+v, want %+v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Fatal("Summarize modified its input")
			}
		}
	}
}

func TestRatio(t *testing.T) {
	if r := Ratio(3*time.Second, 100*time.Millisecond); r != 30 {
		t.Fatalf("Ratio = %v", r)
	}
	if Ratio(0, time.Second) != 0 || Ratio(time.Second, 0) != 0 {
		t.Fatal("Ratio with a missing side must be 0")
	}
	if s := (Summary{}).String(); s != "no measurements" {
		t.Fatal(s)
	}
}
