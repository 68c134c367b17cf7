package scrape

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/trace"
)

func readPage(t *testing.T, name string) Page {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseBytes(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func wantValue(t *testing.T, what string, got Value, want float64) {
	t.Helper()
	if !got.OK || !near(got.V, want) {
		t.Errorf("%s = %+v, want %v", what, got, want)
	}
}

func wantMissing(t *testing.T, what string, got Value) {
	t.Helper()
	if got.OK {
		t.Errorf("%s = %v, want missing", what, got.V)
	}
}

// TestCapturedPages reads every captured page: the family comes from the
// page itself, and each metric the page carries lands in the common set
// while the ones it lacks stay missing.
func TestCapturedPages(t *testing.T) {
	t.Run("sglang docs page", func(t *testing.T) {
		s := Read(readPage(t, "sglang_docs_llama31_8b.txt"))
		if s.Family != FamilySGLang {
			t.Fatalf("family %q", s.Family)
		}
		wantValue(t, "running", s.Running, 162)
		wantValue(t, "waiting", s.Waiting, 2826)
		wantValue(t, "kv", s.KVUsage, 0.28)
		wantValue(t, "prefix hit rate", s.PrefixHitRate, 0.007507552643049313)
		wantMissing(t, "prefix hits", s.PrefixHits)
		wantMissing(t, "prefix queries", s.PrefixQueries)
		if s.TTFT == nil || s.TTFT.Count != 11008 || !near(s.TTFT.Sum, 2.3518979474117756e+06) || !s.TTFT.HasBuckets || len(s.TTFT.Bounds) != 20 {
			t.Errorf("ttft %+v", s.TTFT)
		}
		if s.ITL == nil || s.ITL.Count != 7.400757e+06 || s.ITL.Cum[len(s.ITL.Cum)-1] != 7.389414e+06 {
			t.Errorf("itl (time_per_output_token) %+v", s.ITL)
		}
		if s.Queue != nil {
			t.Errorf("queue %+v, the page has none", s.Queue)
		}
		// First page: gauges only, no latency.
		v := Interval(nil, s)
		for _, k := range []string{trace.MetricServerTTFTMean, trace.MetricServerITLMean, trace.MetricServerTTFTP99} {
			if _, ok := v[k]; ok {
				t.Errorf("first page reports %s", k)
			}
		}
		if v[trace.MetricServerRunning] != 162 || v[trace.MetricServerKVUsage] != 0.28 {
			t.Errorf("first page values %v", v)
		}
	})
	t.Run("vllm 0.10 V1 prefix counters", func(t *testing.T) {
		s := Read(readPage(t, "vllm_v0100_glm45_excerpt.txt"))
		if s.Family != FamilyVLLM {
			t.Fatalf("family %q", s.Family)
		}
		wantValue(t, "kv", s.KVUsage, 9.75010481363281e-06)
		wantValue(t, "prefix queries", s.PrefixQueries, 32)
		wantValue(t, "prefix hits (deprecated gpu_ name)", s.PrefixHits, 0)
		wantMissing(t, "running", s.Running)
	})
	t.Run("vllm 2025 behind a router, V0 gauges", func(t *testing.T) {
		s := Read(readPage(t, "vllm_2025_router_qwen25_excerpt.txt"))
		if s.Family != FamilyVLLM {
			t.Fatalf("family %q", s.Family)
		}
		wantValue(t, "running", s.Running, 0)
		wantValue(t, "waiting", s.Waiting, 0)
		wantValue(t, "kv (gpu_cache_usage_perc)", s.KVUsage, 0)
	})
	t.Run("vllm data parallel, ITL of two engines", func(t *testing.T) {
		s := Read(readPage(t, "vllm_v010_qwen3_dp_itl_excerpt.txt"))
		// The excerpt cut engine 1's buckets: the two series no longer
		// share a layout, so quantiles are off and the sums still add.
		if s.ITL == nil || s.ITL.HasBuckets || !near(s.ITL.Sum, 13.223765562288463+3.8492672259453684) {
			t.Fatalf("itl %+v", s.ITL)
		}
	})
	t.Run("pages without TYPE lines or counts", func(t *testing.T) {
		// Bucket lines before their TYPE line are untyped metrics to the
		// parser: no histogram, nothing reported.
		for _, f := range []string{"vllm_v010_qwen3_dp_ttft_excerpt.txt", "vllm_v06_lora_ttft_excerpt.txt"} {
			s := Read(readPage(t, f))
			if s.Family != FamilyVLLM || s.TTFT != nil {
				t.Errorf("%s: family %q ttft %+v", f, s.Family, s.TTFT)
			}
			if v := Interval(&s, s); len(v) != 0 {
				t.Errorf("%s: values %v from a page with no usable metric", f, v)
			}
		}
		// Histograms cut before +Inf and _count: no observation count, so
		// no mean and no quantile, however often the page is read.
		for _, f := range []string{"vllm_v05_hermes70b_tp8_excerpt.txt", "vllm_tgis_ibm_bloom_excerpt.txt"} {
			s := Read(readPage(t, f))
			if s.TTFT == nil || s.TTFT.Count != 0 || s.TTFT.HasSum {
				t.Errorf("%s: ttft %+v", f, s.TTFT)
			}
			if v := Interval(&s, s); len(v) != 0 {
				t.Errorf("%s: values %v", f, v)
			}
		}
	})
	t.Run("tgi names", func(t *testing.T) {
		s := Read(readPage(t, "tgis_ibm_vllm_excerpt.txt"))
		if s.Family != FamilyTGI {
			t.Fatalf("family %q", s.Family)
		}
		wantValue(t, "running (batch size)", s.Running, 0)
		wantValue(t, "waiting (queue size)", s.Waiting, 0)
		if s.TTFT != nil || s.ITL != nil {
			t.Errorf("ttft %+v itl %+v: TGI has neither on this page", s.TTFT, s.ITL)
		}
	})
	t.Run("llama.cpp counters", func(t *testing.T) {
		for _, f := range []string{"llamacpp_2025_vulkan_excerpt.txt", "ik_llamacpp_2025_excerpt.txt"} {
			s := Read(readPage(t, f))
			if s.Family != FamilyLlamaCpp {
				t.Fatalf("%s: family %q", f, s.Family)
			}
			if s.ITL == nil || !s.ITL.HasSum || s.ITL.HasBuckets {
				t.Fatalf("%s: itl %+v", f, s.ITL)
			}
			wantMissing(t, "kv (removed from llama-server in 2025)", s.KVUsage)
		}
		s := Read(readPage(t, "llamacpp_2025_vulkan_excerpt.txt"))
		if s.ITL.Count != 673 || s.ITL.Sum != 29.567 {
			t.Errorf("itl %+v", s.ITL)
		}
	})
}

// v1Page writes a page in the shape of vLLM V1's (engine and model_name
// labels, TYPE lines, +Inf bucket, _sum and _count), for two-page tests.
type v1Page struct {
	ttftCum          []float64 // at 0.1, 0.25, 0.5, 1.0; +Inf is count
	ttftCount        float64
	ttftSum          float64
	queueSum         float64
	queueCount       float64
	running, waiting float64
	kv               float64
	hits, queries    float64
	startup          float64
}

func (v v1Page) text() string {
	var b strings.Builder
	l := `engine="0",model_name="Qwen/Qwen3-0.6B"`
	w := func(s string, a ...any) { b.WriteString(sprintf(s, a...)) }
	w("# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{%s} %g\n", l, v.running)
	w("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{%s} %g\n", l, v.waiting)
	w("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{%s} %g\n", l, v.kv)
	w("# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{%s} %g\n", l, v.queries)
	w("# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{%s} %g\n", l, v.hits)
	if v.startup > 0 {
		w("# TYPE vllm:engine_startup_time_seconds gauge\nvllm:engine_startup_time_seconds{%s} %g\n", l, v.startup)
	}
	w("# TYPE vllm:time_to_first_token_seconds histogram\n")
	for i, le := range []string{"0.1", "0.25", "0.5", "1.0"} {
		w("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"%s\",model_name=\"Qwen/Qwen3-0.6B\"} %g\n", le, v.ttftCum[i])
	}
	w("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"Qwen/Qwen3-0.6B\"} %g\n", v.ttftCount)
	w("vllm:time_to_first_token_seconds_sum{%s} %g\nvllm:time_to_first_token_seconds_count{%s} %g\n", l, v.ttftSum, l, v.ttftCount)
	w("# TYPE vllm:request_queue_time_seconds histogram\n")
	w("vllm:request_queue_time_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"Qwen/Qwen3-0.6B\"} %g\n", v.queueCount)
	w("vllm:request_queue_time_seconds_sum{%s} %g\nvllm:request_queue_time_seconds_count{%s} %g\n", l, v.queueSum, l, v.queueCount)
	return b.String()
}

func snap(t *testing.T, v v1Page) Snapshot {
	t.Helper()
	p, err := ParseBytes([]byte(v.text()))
	if err != nil {
		t.Fatal(err)
	}
	return Read(p)
}

func TestIntervalFromTwoPages(t *testing.T) {
	prev := snap(t, v1Page{ttftCum: []float64{10, 20, 30, 40}, ttftCount: 40, ttftSum: 8, queueCount: 40, queueSum: 2, hits: 100, queries: 400, running: 1})
	cur := snap(t, v1Page{ttftCum: []float64{12, 26, 39, 50}, ttftCount: 50, ttftSum: 11, queueCount: 50, queueSum: 2.5, hits: 160, queries: 500, running: 3, waiting: 2, kv: 0.4, startup: 41.5})
	v := Interval(&prev, cur)
	want := map[string]float64{
		trace.MetricServerTTFTMean:      0.3,                      // (11−8)/(50−40)
		trace.MetricServerTTFTCount:     10,                       //
		trace.MetricServerTTFTP50:       0.1 + 0.15*(5-2)/(6-2),   // rank 5 in (0.1, 0.25], deltas 2,6,9,10
		trace.MetricServerTTFTP99:       0.5 + 0.5*(9.9-9)/(10-9), // rank 9.9 in (0.5, 1.0]
		trace.MetricServerQueueMean:     0.05,                     // 0.5/10
		trace.MetricServerRunning:       3,                        //
		trace.MetricServerWaiting:       2,                        //
		trace.MetricServerKVUsage:       0.4,                      //
		trace.MetricServerStartup:       41.5,                     //
		trace.MetricServerPrefixHits:    60,                       //
		trace.MetricServerPrefixQueries: 100,                      //
		trace.MetricServerPrefixHitRate: 0.6,                      //
	}
	for k, w := range want {
		if g, ok := v[k]; !ok || !near(g, w) {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	for k := range v {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s = %v", k, v[k])
		}
	}
}

// TestIntervalAfterRestart: a server restarted between two scrapes starts
// its counters again; the interval reports what happened since the
// restart, never a negative count or a mean of differences.
func TestIntervalAfterRestart(t *testing.T) {
	prev := snap(t, v1Page{ttftCum: []float64{100, 200, 300, 400}, ttftCount: 400, ttftSum: 80, queueCount: 400, queueSum: 20, hits: 5000, queries: 9000})
	cur := snap(t, v1Page{ttftCum: []float64{0, 1, 2, 2}, ttftCount: 2, ttftSum: 0.9, queueCount: 2, queueSum: 0.1, hits: 10, queries: 40})
	v := Interval(&prev, cur)
	if g := v[trace.MetricServerTTFTMean]; !near(g, 0.45) {
		t.Errorf("ttft mean after restart %v, want 0.45 (the new server's own)", g)
	}
	if g := v[trace.MetricServerTTFTCount]; g != 2 {
		t.Errorf("ttft count %v, want 2", g)
	}
	if g := v[trace.MetricServerPrefixHits]; g != 10 {
		t.Errorf("prefix hits %v, want 10", g)
	}
	for k, x := range v {
		if x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
			t.Errorf("%s = %v", k, x)
		}
	}
	// A restart where only one bucket went down is a restart too.
	prev2 := snap(t, v1Page{ttftCum: []float64{5, 5, 5, 5}, ttftCount: 5, ttftSum: 0.2})
	cur2 := snap(t, v1Page{ttftCum: []float64{0, 0, 6, 6}, ttftCount: 6, ttftSum: 2.4})
	v = Interval(&prev2, cur2)
	if g := v[trace.MetricServerTTFTMean]; !near(g, 0.4) {
		t.Errorf("mean %v, want 0.4 = 2.4/6", g)
	}
}

// TestIntervalQuiet: an interval with no new request reports gauges but no
// latency (a zero would read as "instant first token").
func TestIntervalQuiet(t *testing.T) {
	p := v1Page{ttftCum: []float64{1, 2, 3, 4}, ttftCount: 4, ttftSum: 1, hits: 5, queries: 10, running: 0}
	a, b := snap(t, p), snap(t, p)
	v := Interval(&a, b)
	for _, k := range []string{trace.MetricServerTTFTMean, trace.MetricServerTTFTP50, trace.MetricServerQueueMean, trace.MetricServerPrefixHitRate} {
		if _, ok := v[k]; ok {
			t.Errorf("quiet interval reports %s = %v", k, v[k])
		}
	}
	if _, ok := v[trace.MetricServerRunning]; !ok {
		t.Error("running gauge missing")
	}
}

func TestIntervalFamilyChange(t *testing.T) {
	vllm := snap(t, v1Page{ttftCum: []float64{1, 2, 3, 4}, ttftCount: 4, ttftSum: 1})
	sg := Read(readPage(t, "sglang_docs_llama31_8b.txt"))
	v := Interval(&vllm, sg)
	if _, ok := v[trace.MetricServerTTFTMean]; ok {
		t.Errorf("a page of another server was differenced: %v", v)
	}
}

func TestQuantile(t *testing.T) {
	h := &Hist{Bounds: []float64{1, 2}, Cum: []float64{0, 0}, Count: 4, HasBuckets: true}
	if q, ok := Quantile(h, 0.5); !ok || q != 2 {
		t.Errorf("all in +Inf: %v %v, want the last finite bound 2", q, ok)
	}
	if _, ok := Quantile(&Hist{Bounds: []float64{1}, Cum: []float64{0}, HasBuckets: true}, 0.5); ok {
		t.Error("empty histogram has a quantile")
	}
	if _, ok := Quantile(&Hist{Count: 3}, 0.5); ok {
		t.Error("histogram without buckets has a quantile")
	}
	h = &Hist{Bounds: []float64{0.5, 1}, Cum: []float64{4, 4}, Count: 4, HasBuckets: true}
	if q, _ := Quantile(h, 0.5); q != 0.25 {
		t.Errorf("p50 %v, want 0.25 (interpolated from 0)", q)
	}
}

func TestDetect(t *testing.T) {
	for text, want := range map[string]Family{
		"":                                       FamilyUnknown,
		"go_goroutines 8\n":                      FamilyUnknown,
		"treni_num_requests_running 0\n":         FamilyTreni,
		"llamacpp:requests_processing 1\n":       FamilyLlamaCpp,
		"vllm:a 1\nvllm:b 2\ntgi_queue_size 0\n": FamilyVLLM,
	} {
		p, err := ParseBytes([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if got := Detect(p); got != want {
			t.Errorf("%q: %q, want %q", text, got, want)
		}
	}
}

func TestParseError(t *testing.T) {
	if _, err := ParseBytes([]byte("<html><body>hi</body></html>\n")); err == nil {
		t.Error("HTML parsed as metrics")
	}
}

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }
