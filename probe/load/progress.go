package load

import (
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Progress is the live state of a bench, updated by the request goroutines
// and polled by a progress line or the TUI's live view through Snapshot.
// The hot path (every token) is a few atomic adds, no locks. The zero value
// is ready; a nil *Progress ignores updates.
type Progress struct {
	mu       sync.Mutex
	workload string
	repeat   int // 1-based; 0 during warm-up
	repeats  int
	warmup   bool
	started  time.Time

	total    atomic.Int64
	sent     atomic.Int64
	done     atomic.Int64
	failed   atomic.Int64
	outToks  atomic.Int64
	ttftHist histogram
	itlHist  histogram
}

// ProgressSnapshot is a consistent-enough copy of the live state (counters
// are read one by one while requests run).
type ProgressSnapshot struct {
	Workload string `json:"workload"`
	// Repeat is the measured repeat (1-based) or, during warm-up, 0.
	Repeat  int  `json:"repeat"`
	Repeats int  `json:"repeats"`
	Warmup  bool `json:"warmup"`
	// Total requests in this run; Sent so far, Done (ended, ok or not),
	// Failed among them; InFlight = Sent − Done.
	Total, Sent, Done, Failed, InFlight int
	// Elapsed since the run started.
	Elapsed time.Duration
	// OutputTokens streamed so far in this run (token-bearing chunks, or
	// the usage deltas of servers that send them per chunk).
	OutputTokens int64
	// OutputTokPerSec and ReqPerSec are averages since the run started;
	// Rates gives the current rate between two snapshots.
	OutputTokPerSec float64
	ReqPerSec       float64
	// TTFT and ITL so far in this run, from a log histogram (±6%).
	TTFT, ITL Quantiles
}

// Quantiles of a live distribution.
type Quantiles struct {
	N             int64
	P50, P90, P99 time.Duration
}

// Rates returns output tokens per second and requests per second between
// two snapshots of the same run (now after prev), for a "current rate".
func Rates(prev, now ProgressSnapshot) (tokPerSec, reqPerSec float64) {
	dt := (now.Elapsed - prev.Elapsed).Seconds()
	if dt <= 0 || now.Workload != prev.Workload || now.Repeat != prev.Repeat || now.Warmup != prev.Warmup {
		return now.OutputTokPerSec, now.ReqPerSec
	}
	return float64(now.OutputTokens-prev.OutputTokens) / dt, float64(now.Done-prev.Done) / dt
}

// begin resets the state for a new run.
func (p *Progress) begin(workload string, repeat, repeats int, warmup bool, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.workload, p.repeat, p.repeats, p.warmup, p.started = workload, repeat, repeats, warmup, time.Now()
	p.mu.Unlock()
	p.total.Store(int64(total))
	p.sent.Store(0)
	p.done.Store(0)
	p.failed.Store(0)
	p.outToks.Store(0)
	p.ttftHist.reset()
	p.itlHist.reset()
}

func (p *Progress) send() {
	if p != nil {
		p.sent.Add(1)
	}
}

func (p *Progress) end(r *trace.Request) {
	if p == nil {
		return
	}
	if r.Error != "" {
		p.failed.Add(1)
	}
	p.done.Add(1)
}

func (p *Progress) firstToken(d time.Duration) {
	if p != nil {
		p.ttftHist.add(d)
	}
}

func (p *Progress) gap(d time.Duration) {
	if p != nil {
		p.itlHist.add(d)
	}
}

func (p *Progress) tokens(n int) {
	if p != nil {
		p.outToks.Add(int64(n))
	}
}

// Snapshot returns the live state. It is safe to call from any goroutine,
// at any rate (it costs a few microseconds).
func (p *Progress) Snapshot() ProgressSnapshot {
	if p == nil {
		return ProgressSnapshot{}
	}
	p.mu.Lock()
	s := ProgressSnapshot{Workload: p.workload, Repeat: p.repeat, Repeats: p.repeats, Warmup: p.warmup}
	started := p.started
	p.mu.Unlock()
	if !started.IsZero() {
		s.Elapsed = time.Since(started)
	}
	s.Total, s.Sent, s.Done, s.Failed = int(p.total.Load()), int(p.sent.Load()), int(p.done.Load()), int(p.failed.Load())
	s.InFlight = max(s.Sent-s.Done, 0)
	s.OutputTokens = p.outToks.Load()
	if sec := s.Elapsed.Seconds(); sec > 0 {
		s.OutputTokPerSec = float64(s.OutputTokens) / sec
		s.ReqPerSec = float64(s.Done) / sec
	}
	s.TTFT, s.ITL = p.ttftHist.quantiles(), p.itlHist.quantiles()
	return s
}

// Line renders the snapshot as one progress line; cur is the current
// output rate (from Rates) or negative to show the average.
func (s ProgressSnapshot) Line(curTokPerSec float64) string {
	var b strings.Builder
	run := fmt.Sprintf("run %d/%d", s.Repeat, s.Repeats)
	if s.Warmup {
		run = "warm-up"
	}
	fmt.Fprintf(&b, "%s %s  %d/%d done  %d in flight", s.Workload, run, s.Done, s.Total, s.InFlight)
	if s.Failed > 0 {
		fmt.Fprintf(&b, "  %d failed", s.Failed)
	}
	rate := s.OutputTokPerSec
	if curTokPerSec >= 0 {
		rate = curTokPerSec
	}
	fmt.Fprintf(&b, "  %.1f tok/s  %.2f req/s", rate, s.ReqPerSec)
	if s.TTFT.N > 0 {
		fmt.Fprintf(&b, "  TTFT p50 %s p99 %s", fmtDur(s.TTFT.P50), fmtDur(s.TTFT.P99))
	}
	if s.ITL.N > 0 {
		fmt.Fprintf(&b, "  ITL p50 %s p99 %s", fmtDur(s.ITL.P50), fmtDur(s.ITL.P99))
	}
	fmt.Fprintf(&b, "  %s", s.Elapsed.Round(100*time.Millisecond))
	return b.String()
}

func fmtDur(d time.Duration) string {
	ms := float64(d) / 1e6
	switch {
	case ms < 10:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.2fs", ms/1000)
}

// histogram is a lock-free log-linear histogram of durations in
// microseconds: 8 sub-buckets per power of two (≤ 12.5% bucket width,
// reported at the bucket's middle), from 1 µs to over an hour.
type histogram struct {
	n       atomic.Int64
	buckets [8 + 40*8]atomic.Int64
}

func bucketOf(us uint64) int {
	if us < 8 {
		return int(us)
	}
	e := bits.Len64(us) - 1 // ≥ 3
	sub := int(us>>(e-3)) & 7
	i := 8 + (e-3)*8 + sub
	return min(i, 8+40*8-1)
}

// bucketMid is the middle of bucket i, in microseconds.
func bucketMid(i int) float64 {
	if i < 8 {
		return float64(i)
	}
	e := (i-8)/8 + 3
	sub := (i - 8) % 8
	lo := float64(uint64(8+sub) << (e - 3))
	return lo + float64(uint64(1)<<(e-3))/2
}

func (h *histogram) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.buckets[bucketOf(uint64(d/time.Microsecond))].Add(1)
	h.n.Add(1)
}

func (h *histogram) reset() {
	for i := range h.buckets {
		h.buckets[i].Store(0)
	}
	h.n.Store(0)
}

func (h *histogram) quantiles() Quantiles {
	var counts [len(histogram{}.buckets)]int64
	var n int64
	for i := range h.buckets {
		counts[i] = h.buckets[i].Load()
		n += counts[i]
	}
	q := Quantiles{N: n}
	if n == 0 {
		return q
	}
	at := func(p float64) time.Duration {
		rank := int64(p*float64(n-1)) + 1
		var c int64
		for i, k := range counts {
			c += k
			if c >= rank {
				return time.Duration(bucketMid(i) * float64(time.Microsecond))
			}
		}
		return 0
	}
	q.P50, q.P90, q.P99 = at(0.50), at(0.90), at(0.99)
	return q
}
