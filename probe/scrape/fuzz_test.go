package scrape

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// FuzzPageToSamples feeds two pages (a previous and a current one) through
// the whole page-to-samples step: parsing never panics, and whatever parses
// gives only finite, non-negative values.
func FuzzPageToSamples(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	var pages [][]byte
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err != nil {
			f.Fatal(err)
		}
		pages = append(pages, b)
	}
	for i, p := range pages {
		f.Add(pages[(i+1)%len(pages)], p)
	}
	a := v1Page{ttftCum: []float64{1, 2, 3, 4}, ttftCount: 4, ttftSum: 1, hits: 3, queries: 9}
	b := v1Page{ttftCum: []float64{0, 1, 1, 1}, ttftCount: 1, ttftSum: 0.2, hits: 1, queries: 1, kv: 0.5}
	f.Add([]byte(a.text()), []byte(b.text()))
	f.Add([]byte("vllm:kv_cache_usage_perc NaN\nvllm:num_requests_running -3\n"), []byte("vllm:kv_cache_usage_perc +Inf\n"))
	neg := "# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"-1\"} %d\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} %d\nvllm:time_to_first_token_seconds_sum %d\nvllm:time_to_first_token_seconds_count %d\n"
	f.Add([]byte(fmt.Sprintf(neg, 1, 1, -1, 1)), []byte(fmt.Sprintf(neg, 3, 3, -9, 3)))
	f.Fuzz(func(t *testing.T, prevText, curText []byte) {
		cur, err := ParseBytes(curText)
		if err != nil {
			return
		}
		cs := Read(cur)
		var prev *Snapshot
		if pp, err := ParseBytes(prevText); err == nil {
			ps := ReadAs(pp, cs.Family)
			prev = &ps
		}
		for k, v := range Interval(prev, cs) {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("%s = %v", k, v)
			}
		}
	})
}
