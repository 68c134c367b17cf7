package tokenizer

import (
	"runtime"
	"testing"
)

// heapUse runs f and returns the heap it leaves live (HeapAlloc after a
// forced collection, before and after; runtime.GC returns once marking and
// sweeping are done, so the figure counts live objects only, whatever the
// host's speed) and the bytes it allocated in all (TotalAlloc, which the
// collector does not change). keep is what f returns, held across the
// second collection.
func heapUse(f func() any) (retained, allocated int64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), int64(after.TotalAlloc - before.TotalAlloc)
}

// tableBytes is what the tokenizer's tables take by design: the pieces and
// their offsets, the presence bytes, the merge table and the piece index
// (once built).
func (t *Tokenizer) tableBytes() int64 {
	return int64(len(t.pieces) + 4*len(t.pieceOff) + len(t.present) + 8*len(t.merges.slots) + 4*len(t.merges.ids) + 4*len(t.pieceIdx.slots))
}

// TestQwen3RetainedHeap: a loaded Qwen3 tokenizer, after its first
// request's lookups (StopTokenIDs builds the piece index), keeps no more
// heap than its tables plus a little (no parsed JSON, no second copy of
// the cache file, no string-keyed map), and the tables stay below 40 bytes
// per vocabulary id (6.1 MB for 151,669 ids; the layout before the compact
// merge table and piece index kept 15 MB). A cache hit allocates little
// beyond what it keeps. Only byte counts are compared, never times.
func TestQwen3RetainedHeap(t *testing.T) {
	cache := t.TempDir()
	if _, _, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: cache}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		cacheDir string
	}{{"parsed", "-"}, {"cache hit", cache}} {
		var tok *Tokenizer
		retained, allocated := heapUse(func() any {
			var st LoadStats
			var err error
			tok, st, err = LoadWith(qwen3Dir, LoadOptions{CacheDir: c.cacheDir})
			if err != nil {
				t.Fatal(err)
			}
			if st.CacheHit != (c.cacheDir != "-") {
				t.Fatalf("%s: cache hit %v", c.name, st.CacheHit)
			}
			tok.StopTokenIDs()
			return tok
		})
		tables := tok.tableBytes()
		n := int64(tok.VocabSize())
		t.Logf("%s: retained %d B (%.1f per id), tables %d B, allocated %d B", c.name, retained, float64(retained)/float64(n), tables, allocated)
		if len(tok.pieceIdx.slots) == 0 {
			t.Fatalf("%s: StopTokenIDs did not build the piece index", c.name)
		}
		if limit := 40 * n; tables > limit {
			t.Errorf("%s: tables take %d B, above 40 B per id (%d B)", c.name, tables, limit)
		}
		if slack := tables/50 + 128<<10; retained > tables+slack {
			t.Errorf("%s: %d B retained, more than the tables' %d B + %d B", c.name, retained, tables, slack)
		}
		if c.cacheDir != "-" {
			if limit := retained + retained/8; allocated > limit {
				t.Errorf("cache hit allocated %d B to keep %d B (limit %d B)", allocated, retained, limit)
			}
		}
	}
}
