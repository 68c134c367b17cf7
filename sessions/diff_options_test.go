package sessions

import (
	"strings"
	"testing"
	"time"
)

// TestDiffOptionsCheck: the defaults pass; a level, a threshold or a
// minimum out of range is refused, naming its flag.
func TestDiffOptionsCheck(t *testing.T) {
	ok := DiffOptions{Alpha: DefaultAlpha, Threshold: DefaultThreshold, MinDelta: DefaultMinDelta}
	if err := ok.Check(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		edit func(*DiffOptions)
		want string
	}{
		{func(o *DiffOptions) { o.Alpha = 0.5 }, "--alpha 0.5"},
		{func(o *DiffOptions) { o.Alpha = 0 }, "--alpha 0"},
		{func(o *DiffOptions) { o.Threshold = 0 }, "--threshold 0"},
		{func(o *DiffOptions) { o.Threshold = 11 }, "--threshold 11"},
		{func(o *DiffOptions) { o.MinDelta = -time.Millisecond }, "--min-delta -1ms"},
	} {
		o := ok
		c.edit(&o)
		if err := o.Check(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error starting %q", o, err, c.want)
		}
	}
}
