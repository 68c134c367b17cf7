package server

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"

	"github.com/treni-top/treni-top/engine/sched"
)

// metrics writes the Prometheus text exposition format (version 0.0.4) by
// hand: a handful of gauges, counters and two histograms do not justify a
// client library.
func (srv *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET")
		return
	}
	m := srv.s.Metrics()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	b := bufio.NewWriter(w)
	defer b.Flush()
	model := strconv.Quote(srv.opt.ModelID)
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s gauge\n%s{model_name=%s} %s\n", name, help, name, name, model, num(v))
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s{model_name=%s} %s\n", name, help, name, name, model, num(v))
	}
	if ps := srv.opt.ProcessStart; !ps.IsZero() {
		fmt.Fprintf(b, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %s\n",
			num(float64(ps.UnixNano())/1e9))
	}
	gauge("treni_num_requests_running", "Requests in the running batch.", float64(m.Running))
	gauge("treni_num_requests_waiting", "Requests queued for admission.", float64(m.Waiting))
	gauge("treni_kv_blocks_used", "KV cache blocks held by sequences (a shared prefix block counts once).", float64(m.KVUsed))
	gauge("treni_kv_blocks_total", "KV cache blocks in the pool.", float64(m.KVTotal))
	gauge("treni_kv_block_size", "Token positions per KV block.", float64(m.KVBlockSize))
	counter("treni_generation_tokens_total", "Tokens generated.", float64(m.GeneratedTokens))
	counter("treni_prompt_tokens_total", "Prompt tokens received.", float64(m.PromptTokens))
	counter("treni_preemptions_total", "Sequences preempted for lack of KV blocks.", float64(m.Preemptions))
	counter("treni_steps_total", "Forward steps run.", float64(m.Steps))
	gauge("treni_http_connections_open", "HTTP connections open (each holds one of --max-connections).", float64(srv.conns.open()))
	counter("treni_http_connections_refused_total", "HTTP connections answered 503 because --max-connections were open.", float64(srv.conns.refused.Load()))
	if m.PrefixCaching {
		// Hits and misses split every admission's positions (a preempted
		// request's readmission too), like vLLM's prefix_cache_hits and
		// prefix_cache_queries: hit rate = hits / (hits + misses).
		gauge("treni_kv_blocks_cached", "KV blocks in the prefix cache, held by a sequence or evictable.", float64(m.KVCached))
		counter("treni_prefix_cache_hit_tokens_total", "Prompt positions found in the prefix cache at admission (their prefill skipped).", float64(m.PrefixHitTokens))
		counter("treni_prefix_cache_miss_tokens_total", "Prompt positions not in the prefix cache at admission (computed).", float64(m.PrefixMissTokens))
		counter("treni_prefix_cache_hit_blocks_total", "Full KV blocks found in the prefix cache at admission.", float64(m.PrefixHitBlocks))
		counter("treni_prefix_cache_miss_blocks_total", "Full KV blocks of admitted prompts not in the prefix cache.", float64(m.PrefixMissBlocks))
		counter("treni_prefix_cache_evictions_total", "Cached KV blocks evicted to make room.", float64(m.KVEvictions))
	}
	fmt.Fprintf(b, "# HELP treni_request_finished_total Finished requests by finish reason.\n# TYPE treni_request_finished_total counter\n")
	reasons := []string{string(sched.FinishStop), string(sched.FinishLength), string(sched.FinishCancelled), string(sched.FinishError)}
	for k := range m.Requests {
		if !slices.Contains(reasons, string(k)) {
			reasons = append(reasons, string(k))
		}
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		fmt.Fprintf(b, "treni_request_finished_total{model_name=%s,finished_reason=%s} %d\n", model, strconv.Quote(k), m.Requests[sched.FinishReason(k)])
	}
	hist := func(name, help string, h sched.Histogram) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
		for i, le := range h.Bounds {
			fmt.Fprintf(b, "%s_bucket{model_name=%s,le=\"%s\"} %d\n", name, model, num(le), h.Counts[i])
		}
		fmt.Fprintf(b, "%s_bucket{model_name=%s,le=\"+Inf\"} %d\n", name, model, h.Count)
		fmt.Fprintf(b, "%s_sum{model_name=%s} %s\n%s_count{model_name=%s} %d\n", name, model, num(h.Sum), name, model, h.Count)
	}
	srv.sleepMetrics(b, model)
	hist("treni_time_to_first_token_seconds", "Time from request arrival to its first generated token.", m.TTFT)
	hist("treni_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.", m.ITL)
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
