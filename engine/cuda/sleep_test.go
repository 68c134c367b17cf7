package cuda

import (
	"slices"
	"testing"
)

// TestHostCopyPieces: the level-1 copies are cut at the host copy's chunk
// bounds, so that none spans two page-locked registrations, and together
// cover the range once.
func TestHostCopyPieces(t *testing.T) {
	const c = hostCopyChunk
	for _, tc := range []struct {
		lo, n int
		want  [][2]int
	}{
		{0, 3*c + 5, [][2]int{{0, c}, {c, c}, {2 * c, c}, {3 * c, 5}}},
		{c - 7, 10, [][2]int{{c - 7, 7}, {c, 3}}},
		{2 * c, c, [][2]int{{2 * c, c}}},
		{5, 0, nil},
	} {
		var got [][2]int
		h := &hostCopy{}
		if err := h.each(tc.lo, tc.n, func(lo, n int) error { got = append(got, [2]int{lo, n}); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("each(%d, %d) = %v, want %v", tc.lo, tc.n, got, tc.want)
		}
	}
}
