package scrape

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Value is a reading that may be missing: OK is false when the page does
// not carry the metric.
type Value struct {
	V  float64
	OK bool
}

// Hist is a cumulative histogram summed over every series of one metric
// (engines, LoRA adapters, model names). Bounds are the finite upper bounds
// in increasing order and Cum the cumulative counts at them; Count and Sum
// cover every observation (+Inf included). HasSum is false when the page
// lacks the _sum line, HasBuckets when it has no usable buckets (llama.cpp's
// counters, or series whose bucket layouts disagree).
type Hist struct {
	Bounds     []float64
	Cum        []float64
	Count, Sum float64
	HasSum     bool
	HasBuckets bool
}

// Snapshot is one page mapped onto the common set. Latencies are cumulative
// histograms (Interval differences two snapshots); gauges are as read;
// counters are cumulative.
type Snapshot struct {
	Family Family
	// TTFT, ITL and Queue are nil when the server does not export them.
	TTFT, ITL, Queue *Hist
	Running, Waiting Value
	// KVUsage is the KV cache in use, 0–1 (the most loaded engine's, when
	// a page has one series per data-parallel engine: that engine is the
	// one that preempts first).
	KVUsage Value
	// PrefixHits and PrefixQueries are cumulative token counters;
	// PrefixHitRate is a server's own rate gauge (SGLang), 0–1.
	PrefixHits, PrefixQueries Value
	PrefixHitRate             Value
	// Startup is the server's own startup time in seconds.
	Startup Value
}

// names lists, per family, the page names that feed each common metric,
// the preferred (newer) name first.
type names struct {
	ttft, itl, queue           []string
	running, waiting, kv       []string
	prefixHits, prefixQueries  []string
	prefixMisses               []string // queries = hits + misses where a page counts misses instead
	prefixRate, startup        []string
	itlSecondsTotal, itlTokens string // llama.cpp: TPOT from two counters
	kvUsed, kvTotal            string // the built-in engine: usage from blocks
}

var familyNames = map[Family]names{
	FamilyVLLM: {
		ttft: []string{"vllm:time_to_first_token_seconds"},
		// V1 from v0.11 splits per-token gaps (inter_token_latency) from
		// the per-request mean (request_time_per_output_token); older
		// releases had time_per_output_token_seconds for the gaps.
		itl:     []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
		queue:   []string{"vllm:request_queue_time_seconds"},
		running: []string{"vllm:num_requests_running"},
		waiting: []string{"vllm:num_requests_waiting"},
		// kv_cache_usage_perc is V1's name (0–1 despite "perc");
		// gpu_cache_usage_perc is V0's and early V1's.
		kv:            []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		prefixHits:    []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total"},
		prefixQueries: []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total"},
		prefixRate:    []string{"vllm:gpu_prefix_cache_hit_rate"},
		startup:       []string{"vllm:engine_startup_time_seconds", "vllm:engine_startup_time"},
	},
	FamilySGLang: {
		ttft:          []string{"sglang:time_to_first_token_seconds"},
		itl:           []string{"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"},
		queue:         []string{"sglang:queue_time_seconds"},
		running:       []string{"sglang:num_running_reqs"},
		waiting:       []string{"sglang:num_queue_reqs"},
		kv:            []string{"sglang:token_usage"},
		prefixHits:    []string{"sglang:cached_tokens_total"},
		prefixQueries: []string{"sglang:prompt_tokens_total"},
		prefixRate:    []string{"sglang:cache_hit_rate"},
	},
	FamilyTGI: {
		// TGI has no TTFT histogram: prefill forward time and queue time
		// are separate histograms with different buckets, so a TTFT made
		// from them would be invented; it is left absent.
		itl:     []string{"tgi_request_mean_time_per_token_duration"},
		queue:   []string{"tgi_request_queue_duration"},
		running: []string{"tgi_batch_current_size"},
		waiting: []string{"tgi_queue_size"},
	},
	FamilyLlamaCpp: {
		running: []string{"llamacpp:requests_processing"},
		waiting: []string{"llamacpp:requests_deferred"},
		// Removed from llama-server in 2025 (ggml-org/llama.cpp#13660);
		// older builds still export it.
		kv:              []string{"llamacpp:kv_cache_usage_ratio"},
		itlSecondsTotal: "llamacpp:tokens_predicted_seconds_total",
		itlTokens:       "llamacpp:tokens_predicted_total",
	},
	FamilyTreni: {
		ttft:         []string{"treni_time_to_first_token_seconds"},
		itl:          []string{"treni_inter_token_latency_seconds"},
		running:      []string{"treni_num_requests_running"},
		waiting:      []string{"treni_num_requests_waiting"},
		prefixHits:   []string{"treni_prefix_cache_hit_tokens_total"},
		prefixMisses: []string{"treni_prefix_cache_miss_tokens_total"},
		kvUsed:       "treni_kv_blocks_used",
		kvTotal:      "treni_kv_blocks_total",
	},
}

// Read maps a page onto the common set, detecting the family from the
// page itself. A page of an unknown family yields a Snapshot with nothing
// set.
func Read(p Page) Snapshot {
	return ReadAs(p, Detect(p))
}

// ReadAs is Read for a family already known.
func ReadAs(p Page, f Family) Snapshot {
	s := Snapshot{Family: f}
	n, ok := familyNames[f]
	if !ok {
		return s
	}
	s.TTFT = p.hist(n.ttft)
	s.ITL = p.hist(n.itl)
	if s.ITL == nil && n.itlSecondsTotal != "" {
		sec, tok := p.sum(n.itlSecondsTotal), p.sum(n.itlTokens)
		if sec.OK && tok.OK {
			s.ITL = &Hist{Sum: sec.V, Count: tok.V, HasSum: true}
		}
	}
	s.Queue = p.hist(n.queue)
	s.Running = p.first(n.running, sumSeries)
	s.Waiting = p.first(n.waiting, sumSeries)
	s.KVUsage = p.first(n.kv, maxSeries)
	if n.kvUsed != "" {
		used, total := p.sum(n.kvUsed), p.sum(n.kvTotal)
		if used.OK && total.OK && total.V > 0 {
			s.KVUsage = Value{used.V / total.V, true}
		}
	}
	s.PrefixHits = p.first(n.prefixHits, sumSeries)
	s.PrefixQueries = p.first(n.prefixQueries, sumSeries)
	if miss := p.first(n.prefixMisses, sumSeries); !s.PrefixQueries.OK && miss.OK && s.PrefixHits.OK {
		s.PrefixQueries = Value{s.PrefixHits.V + miss.V, true}
	}
	if !s.PrefixHits.OK {
		// A queries counter alone (SGLang's prompt tokens) says nothing
		// about the cache.
		s.PrefixQueries = Value{}
	}
	s.PrefixHitRate = p.first(n.prefixRate, maxSeries)
	if s.PrefixHitRate.OK && s.PrefixHitRate.V > 1 && s.PrefixHitRate.V <= 100 {
		// Early SGLang builds reported a percentage.
		s.PrefixHitRate.V /= 100
	}
	s.Startup = p.first(n.startup, maxSeries)
	return s
}

type combine int

const (
	sumSeries combine = iota
	maxSeries
)

// family finds a metric by name, also under the other spelling of a
// counter (with or without _total: the text format and OpenMetrics differ).
func (p Page) family(name string) *dto.MetricFamily {
	if mf := p[name]; mf != nil {
		return mf
	}
	if alt, ok := strings.CutSuffix(name, "_total"); ok {
		return p[alt]
	}
	return p[name+"_total"]
}

// first reads the first of names the page carries, combining its series.
func (p Page) first(names []string, c combine) Value {
	for _, n := range names {
		if v := p.scalar(n, c); v.OK {
			return v
		}
	}
	return Value{}
}

func (p Page) sum(name string) Value { return p.scalar(name, sumSeries) }

// scalar reads a gauge, counter or untyped metric over all its series.
// NaN and infinite values are skipped: a gauge a server has not set yet
// (NaN) is missing, not a number.
func (p Page) scalar(name string, c combine) Value {
	mf := p.family(name)
	if mf == nil {
		return Value{}
	}
	var out Value
	for _, m := range mf.GetMetric() {
		var v float64
		switch {
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			v = m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		default:
			continue
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		switch {
		case !out.OK:
			out = Value{v, true}
		case c == sumSeries:
			out.V += v
		case v > out.V:
			out.V = v
		}
	}
	return out
}

// hist reads the first of names that is a histogram, summed over series.
func (p Page) hist(names []string) *Hist {
	for _, n := range names {
		mf := p[n]
		if mf == nil || mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		if h := sumHist(mf.GetMetric()); h != nil {
			return h
		}
	}
	return nil
}

func sumHist(ms []*dto.Metric) *Hist {
	var out *Hist
	for _, m := range ms {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		one := convHist(h)
		if out == nil {
			out = one
			continue
		}
		out.Count += one.Count
		out.Sum += one.Sum
		out.HasSum = out.HasSum && one.HasSum
		if out.HasBuckets && one.HasBuckets && slices.Equal(out.Bounds, one.Bounds) {
			for i := range out.Cum {
				out.Cum[i] += one.Cum[i]
			}
		} else {
			out.HasBuckets = false
			out.Bounds, out.Cum = nil, nil
		}
	}
	return out
}

func convHist(h *dto.Histogram) *Hist {
	out := &Hist{Count: countOf(h.GetSampleCountFloat(), h.GetSampleCount()), Sum: h.GetSampleSum(), HasSum: h.SampleSum != nil}
	inf := math.NaN()
	type b struct{ le, c float64 }
	var bs []b
	for _, bk := range h.GetBucket() {
		le := bk.GetUpperBound()
		c := countOf(bk.GetCumulativeCountFloat(), bk.GetCumulativeCount())
		if math.IsNaN(le) || math.IsNaN(c) {
			continue
		}
		if math.IsInf(le, +1) {
			inf = c
			continue
		}
		bs = append(bs, b{le, c})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if out.Count == 0 && !math.IsNaN(inf) {
		// A page cut before its _count line still has the +Inf bucket.
		out.Count = inf
	}
	for _, x := range bs {
		out.Bounds = append(out.Bounds, x.le)
		out.Cum = append(out.Cum, x.c)
	}
	out.HasBuckets = len(bs) > 0
	if math.IsNaN(out.Sum) || math.IsInf(out.Sum, 0) {
		out.Sum, out.HasSum = 0, false
	}
	return out
}

func countOf(f float64, u uint64) float64 {
	if f != 0 {
		return f
	}
	return float64(u)
}

// processStartMetric is the process start time, in Unix seconds, that
// Prometheus client libraries export from their default process collector
// (prometheus_client in Python on Linux: vLLM and SGLang serving from one
// API server process expose it on /metrics; vLLM's multi-process registry,
// used with several API servers, does not).
const processStartMetric = "process_start_time_seconds"

// ProcessStart is when the page's server process started
// (process_start_time_seconds, a gauge or untyped, its first series). ok is
// false when the page lacks it or it is not a plausible time (not a number,
// or before 2001).
func (p Page) ProcessStart() (start time.Time, ok bool) {
	f := p.family(processStartMetric)
	if f == nil || len(f.GetMetric()) == 0 {
		return time.Time{}, false
	}
	m := f.GetMetric()[0]
	var v float64
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	default:
		return time.Time{}, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 1e9 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(v)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true
}
