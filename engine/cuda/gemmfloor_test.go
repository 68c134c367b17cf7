package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The GEMM floor's operands must be real data: bf16 values spread over
// [-1, 1), not zeros (which run faster) and not one repeated value.
func TestRandomBF16Operands(t *testing.T) {
	xs := randomBF16(1<<16, rand.New(rand.NewPCG(1, 2)))
	seen := map[uint16]bool{}
	neg := 0
	for i, v := range xs {
		f := math.Float32frombits(uint32(v) << 16)
		if math.IsNaN(float64(f)) || f < -1 || f >= 1 {
			t.Fatalf("value %d is %g, outside [-1, 1)", i, f)
		}
		if f < 0 {
			neg++
		}
		seen[v] = true
	}
	if len(seen) < 1000 {
		t.Errorf("only %d distinct values in %d", len(seen), len(xs))
	}
	if frac := float64(neg) / float64(len(xs)); frac < 0.45 || frac > 0.55 {
		t.Errorf("%.2f of the values are negative, want about half", frac)
	}
}
