package sched

import (
	"sync"
	"time"
)

// LatencyBuckets are the histogram upper bounds in seconds shared by TTFT
// and ITL: fine below 100 ms (GPU decode), wide up to a minute (a CPU
// prefill of a long prompt).
var latencyBuckets = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40, 80}

// LatencyBuckets returns the upper bounds (seconds) of the TTFT and ITL
// histograms.
func LatencyBuckets() []float64 { return append([]float64(nil), latencyBuckets[:]...) }

// Histogram is a snapshot of a latency histogram in Prometheus' shape.
type Histogram struct {
	// Bounds are upper bounds in seconds; Counts[i] is the number of
	// observations ≤ Bounds[i] (cumulative, like Prometheus buckets).
	Bounds []float64
	Counts []uint64
	// Count and Sum (seconds) cover every observation, +Inf included.
	Count uint64
	Sum   float64
}

// hist is the live, lock-protected histogram.
type hist struct {
	counts [len(latencyBuckets)]uint64
	count  uint64
	sum    float64
}

func (h *hist) observe(d time.Duration) {
	v := d.Seconds()
	for i, b := range latencyBuckets {
		if v <= b {
			h.counts[i]++
			break
		}
	}
	h.count++
	h.sum += v
}

func (h *hist) snapshot() Histogram {
	out := Histogram{Bounds: LatencyBuckets(), Counts: make([]uint64, len(latencyBuckets)), Count: h.count, Sum: h.sum}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		out.Counts[i] = cum
	}
	return out
}

// Metrics is a snapshot of the scheduler's counters for /metrics.
type Metrics struct {
	// Running and Waiting are requests in the batch and in the queue.
	Running, Waiting int
	// KVUsed and KVTotal are KV blocks; KVBlockSize is positions per block.
	// KVUsed counts blocks held by running sequences (a shared block once).
	KVUsed, KVTotal, KVBlockSize int
	// KVCached is the blocks in the prefix cache (held or evictable);
	// KVEvictions counts cached blocks evicted to make room.
	KVCached    int
	KVEvictions uint64
	// PrefixCaching says whether the prefix cache is on.
	PrefixCaching bool
	// PrefixHitTokens and PrefixMissTokens split the positions of every
	// admission (a preempted request's readmission too) into those found
	// in the prefix cache and those computed; PrefixHitBlocks and
	// PrefixMissBlocks do the same for full blocks.
	PrefixHitTokens, PrefixMissTokens uint64
	PrefixHitBlocks, PrefixMissBlocks uint64
	// PromptTokens and GeneratedTokens are totals since start.
	PromptTokens, GeneratedTokens uint64
	// Requests counts finished requests by finish reason.
	Requests map[FinishReason]uint64
	// Preemptions counts sequences that lost their KV blocks.
	Preemptions uint64
	// Steps counts forward steps.
	Steps uint64
	// TTFT (submit → first token) and ITL (between tokens of a request).
	TTFT, ITL Histogram
}

// counters is the live state behind Metrics.
type counters struct {
	mu                 sync.Mutex
	running, waiting   int
	prompt, generated  uint64
	finished           map[FinishReason]uint64
	preemptions, steps uint64
	ttft, itl          hist

	prefixHitTokens, prefixMissTokens uint64
	prefixHitBlocks, prefixMissBlocks uint64
}
