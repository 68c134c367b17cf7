package cuda

import (
	"sort"
)

// maxReadGap is the largest stretch of a file between two wanted
// tensors that a chunk reads through rather than starting a new chunk
// (norm weights and biases sit between the matrices; reading them is
// cheaper than another read call).
const maxReadGap = 1 << 20

// piece is one tensor's bytes inside a read chunk, headed for dst.
type piece struct {
	at  int // offset in the chunk
	n   int
	dst DevicePtr
}

// readChunk is one contiguous read of a weight file, at most a slot long.
type readChunk struct {
	file   string
	off    int64
	n      int
	pieces []piece
}

// planChunks cuts the copy jobs into reads of at most slot bytes: jobs of
// one file in file order, neighbours merged into one read when the gap
// between them is small, a tensor larger than a slot split across reads.
// Every byte of every job lands in exactly one piece. Every chunk starts
// at a multiple of align (the page size; it must divide slot), so that
// the pages of two chunks never overlap and the in-place copiers
// (inplace.go) can register each chunk's pages on its own: a chunk starts
// anew only in another file, after a gap longer than maxReadGap (at least
// a page) or where the last one filled its slot, which is aligned.
func planChunks(jobs []copyJob, slot, align int) []readChunk {
	js := append([]copyJob(nil), jobs...)
	sort.SliceStable(js, func(a, b int) bool {
		if js[a].file != js[b].file {
			return js[a].file < js[b].file
		}
		return js[a].off < js[b].off
	})
	var out []readChunk
	for _, j := range js {
		pos, rem, dst := j.off, j.n, j.dst
		for rem > 0 {
			var cur *readChunk
			if len(out) > 0 {
				cur = &out[len(out)-1]
			}
			end := int64(0)
			if cur != nil {
				end = cur.off + int64(cur.n)
			}
			if cur == nil || cur.file != j.file || pos < end || pos-end > maxReadGap || pos >= cur.off+int64(slot) {
				out = append(out, readChunk{file: j.file, off: pos &^ int64(align-1)})
				cur = &out[len(out)-1]
			}
			take := min(rem, int(cur.off+int64(slot)-pos))
			cur.pieces = append(cur.pieces, piece{at: int(pos - cur.off), n: take, dst: dst})
			cur.n = int(pos-cur.off) + take
			pos += int64(take)
			rem -= take
			dst += DevicePtr(take)
		}
	}
	return out
}
