package prober

import "testing"

// TestUsageCounter: per-chunk usage is recognised on the first
// token-bearing chunk and then counts the growth of completion tokens
// when it is larger than the choices' count; without it each choice
// counts as one.
func TestUsageCounter(t *testing.T) {
	var cont UsageCounter
	for i, c := range []struct{ n, completion, want int }{
		{1, 1, 1}, // first token, usage on it: per-chunk usage from here
		{1, 4, 3}, // three tokens packed in one delta
		{0, 4, 0}, // a usage-only chunk counts nothing
		{1, 5, 1},
	} {
		if got := cont.Count(c.n, i == 0, c.completion); got != c.want {
			t.Errorf("continuous chunk %d: %d tokens, want %d", i, got, c.want)
		}
	}
	// Usage only at the end (the final usage chunk): the choices count.
	var final UsageCounter
	if got := final.Count(1, false, 40); got != 1 {
		t.Errorf("a token chunk after others with final usage: %d, want 1", got)
	}
}
