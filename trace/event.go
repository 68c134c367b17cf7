package trace

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Kind names the type of an event; exactly one payload field of Event is set
// and it matches Kind.
type Kind string

// Event kinds.
const (
	KindStage   Kind = "stage"   // a cold-stage span (open while it runs, closed when it ends)
	KindSample  Kind = "sample"  // one reading of a sampler (GPU, process tree, page cache)
	KindRequest Kind = "request" // a probed request with per-token timestamps
	KindLog     Kind = "log"     // one line of the target's output
	KindProcess Kind = "process" // process start or exit
	KindMarker  Kind = "marker"  // a named instant (healthy, run start, eviction, …)
)

// Event is one thing that happened, at an offset on the session's monotonic
// clock. Producers fill exactly one payload; consumers switch on Kind.
type Event struct {
	// At is the offset from the session's start (monotonic, nanoseconds).
	At time.Duration `json:"t"`
	// Kind says which payload is set.
	Kind Kind `json:"kind"`
	// Run is the cold run this event belongs to: 0 for the first launch of
	// the target, 1 for the next cold restart appended to the same session…
	Run int `json:"run,omitempty"`

	Stage   *Span    `json:"stage,omitempty"`
	Sample  *Sample  `json:"sample,omitempty"`
	Request *Request `json:"request,omitempty"`
	Log     *Log     `json:"log,omitempty"`
	Process *Process `json:"process,omitempty"`
	Marker  *Marker  `json:"marker,omitempty"`
}

// Validate reports whether the event is well formed: a known kind whose
// payload is present, and no negative offsets.
func (e Event) Validate() error {
	if e.At < 0 {
		return fmt.Errorf("event at negative offset %v", e.At)
	}
	var ok bool
	switch e.Kind {
	case KindStage:
		ok = e.Stage != nil
		if ok && e.Stage.End < e.Stage.Start {
			return fmt.Errorf("stage %s ends (%v) before it starts (%v)", e.Stage.Name, e.Stage.End, e.Stage.Start)
		}
	case KindSample:
		ok = e.Sample != nil
	case KindRequest:
		ok = e.Request != nil
	case KindLog:
		ok = e.Log != nil
	case KindProcess:
		ok = e.Process != nil
	case KindMarker:
		ok = e.Marker != nil
	default:
		return fmt.Errorf("unknown event kind %q", e.Kind)
	}
	if !ok {
		return fmt.Errorf("%s event without its %s payload", e.Kind, e.Kind)
	}
	return nil
}

// Attrs are a span's or marker's attributes: numbers (bytes, tensors, GB/s,
// blocks, seconds as the server printed them) and short strings. After a JSON
// round trip every number is a float64.
type Attrs map[string]any

// Float returns a numeric attribute.
func (a Attrs) Float(key string) (float64, bool) {
	switch v := a[key].(type) {
	case float64:
		return v, true
	case float32:
		return float64(v), true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case uint64:
		return float64(v), true
	case int32:
		return float64(v), true
	}
	return 0, false
}

// String returns a string attribute.
func (a Attrs) String(key string) (string, bool) {
	v, ok := a[key].(string)
	return v, ok
}

// Common attribute keys, so producers and consumers agree.
const (
	AttrBytes    = "bytes"      // bytes moved or allocated
	AttrTensors  = "tensors"    // tensor count
	AttrGBps     = "gb_per_s"   // throughput in GB/s (10^9 bytes)
	AttrBlocks   = "blocks"     // KV blocks
	AttrTokens   = "tokens"     // KV capacity in tokens
	AttrBuckets  = "buckets"    // graph-capture batch buckets
	AttrFiles    = "files"      // files touched
	AttrReported = "reported_s" // the server's own figure for the stage, in seconds
	AttrLine     = "line"       // the log line a parsed span came from
	// AttrRead on a page_cache span says how the weights were read; a value
	// starting with ReadDeferred means the span only checked residency and
	// another stage (decoder_tensor_upload) read the files.
	AttrRead = "read"
	// AttrReadWaitMS and AttrCopyWaitMS on a decoder_tensor_upload span
	// split it: milliseconds the copies waited for file reads (disk or
	// page cache) and for the device's copies — the copy loop's waits, or,
	// where each reader enqueues its own copies, the mean reader's time in
	// reads and in waiting for its slots' copies. The names keep the copy
	// loop's, which recorded sessions carry.
	AttrReadWaitMS = "copy_loop_read_wait_ms"
	AttrCopyWaitMS = "copy_loop_fence_wait_ms"
)

// ReadDeferred starts AttrRead's value when the span did not read the
// weights itself.
const ReadDeferred = "deferred to "

// ReadsDeferred reports whether a page_cache span's attributes say that it
// only checked residency (AttrRead starts with ReadDeferred).
func ReadsDeferred(a Attrs) bool {
	v, ok := a.String(AttrRead)
	return ok && strings.HasPrefix(v, ReadDeferred)
}

// Span is one cold stage's interval on the session clock. A producer may
// first publish it Open (End is then the last time it was seen running) and
// later publish it closed with the same Name and Start; consumers replace the
// open span with the closed one.
type Span struct {
	Name  Stage         `json:"name"`
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	// Open is true while the stage is still running.
	Open bool `json:"open,omitempty"`
	// Source says where the span came from: "engine" (the built-in engine's
	// own stage lines), "log:vllm" (a parsed log line), "probe", "launcher".
	Source string `json:"source,omitempty"`
	// Workers is how many per-worker duplicates (tensor parallel) were
	// collapsed into this span; 0 or 1 means one.
	Workers int   `json:"workers,omitempty"`
	Attrs   Attrs `json:"attrs,omitempty"`
}

// Duration is End − Start.
func (s Span) Duration() time.Duration { return s.End - s.Start }

// Interval is the span's [Start, End).
func (s Span) Interval() Interval { return Interval{s.Start, s.End} }

// Well-known sample sources and metric names. Units are in the names.
const (
	SourceProcess   = "process"   // the target's process tree, summed
	SourcePageCache = "pagecache" // residency of the target's weight files
	SourceSystem    = "system"    // host-wide readings

	MetricGPUMemUsed     = "gpu_mem_used_bytes"
	MetricGPUMemTotal    = "gpu_mem_total_bytes"
	MetricGPUProcMem     = "gpu_proc_mem_bytes" // the target tree's GPU memory on this device
	MetricGPUUtil        = "gpu_util_pct"
	MetricGPUPower       = "gpu_power_w"
	MetricGPUSMClock     = "gpu_sm_clock_mhz"
	MetricPCIeRX         = "pcie_rx_bytes_per_s"
	MetricPCIeTX         = "pcie_tx_bytes_per_s"
	MetricRSS            = "rss_bytes"
	MetricCPU            = "cpu_pct"
	MetricReadBytes      = "read_bytes" // cumulative bytes read by the tree
	MetricProcs          = "procs"      // processes in the tree
	MetricResidentBytes  = "weights_resident_bytes"
	MetricWeightBytes    = "weights_total_bytes"
	MetricSysCachedBytes = "sys_cached_bytes"
)

// The server's own view, scraped from its Prometheus /metrics page (source
// SourceServer). Latencies are over the sampling interval: the mean from the
// histogram's sum and count deltas, quantiles from its bucket deltas; a
// metric the server does not export, or an interval without observations,
// is absent from the sample rather than zero.
const (
	SourceServer = "server" // the target's /metrics page

	MetricServerTTFTMean      = "server_ttft_mean_s"       // arrival → first token, mean over the interval
	MetricServerTTFTP50       = "server_ttft_p50_s"        // from bucket deltas
	MetricServerTTFTP99       = "server_ttft_p99_s"        // from bucket deltas
	MetricServerTTFTCount     = "server_ttft_count"        // first tokens observed in the interval
	MetricServerITLMean       = "server_itl_mean_s"        // inter-token latency (TPOT where that is all the server has)
	MetricServerITLP50        = "server_itl_p50_s"         // from bucket deltas
	MetricServerITLP99        = "server_itl_p99_s"         // from bucket deltas
	MetricServerQueueMean     = "server_queue_mean_s"      // time waiting for admission, mean over the interval
	MetricServerRunning       = "server_running_reqs"      // requests in the running batch
	MetricServerWaiting       = "server_waiting_reqs"      // requests queued
	MetricServerKVUsage       = "server_kv_usage_ratio"    // KV cache in use, 0–1
	MetricServerPrefixHits    = "server_prefix_hit_tokens" // prefix-cache hit tokens in the interval
	MetricServerPrefixQueries = "server_prefix_query_tokens"
	MetricServerPrefixHitRate = "server_prefix_hit_ratio" // hits/queries over the interval, or the server's own rate, 0–1
	MetricServerStartup       = "server_startup_s"        // the server's own startup time (vLLM)
)

// GPUSource is the sample source name for GPU device i.
func GPUSource(i int) string { return fmt.Sprintf("gpu%d", i) }

// Sample is one reading of one source: several metrics taken at the same
// instant (the event's At).
type Sample struct {
	Source string             `json:"source"`
	Values map[string]float64 `json:"values"`
}

// Phase says why a request was sent.
type Phase string

// Request phases.
const (
	PhaseCold   Phase = "cold"   // the first request after healthy (or the first at all, for a lazy server)
	PhaseWarmup Phase = "warmup" // warm-up requests, not counted
	PhaseWarm   Phase = "warm"   // measured warm repeats
	PhaseBench  Phase = "bench"  // load-generator requests
)

// Request is one probed request. Its timing fields are durations since Sent,
// so they read directly as TTFB, TTFT and E2E; zero means "not observed".
type Request struct {
	ID       string        `json:"id"`
	Label    string        `json:"label,omitempty"` // cold_1, warm_3, …
	Phase    Phase         `json:"phase"`
	Endpoint string        `json:"endpoint,omitempty"` // chat, completions, ollama_generate, …
	Sent     time.Duration `json:"sent"`               // session offset at which it was sent
	// FirstByte: first response byte. FirstEvent: first SSE event or JSON
	// line. FirstToken: first chunk carrying a non-empty token (DESIGN §4).
	FirstByte  time.Duration `json:"first_byte,omitempty"`
	FirstEvent time.Duration `json:"first_event,omitempty"`
	FirstToken time.Duration `json:"first_token,omitempty"`
	// Tokens holds the arrival of every token-bearing chunk, since Sent.
	Tokens []time.Duration `json:"tokens,omitempty"`
	// MultiTokenChunks counts chunks that carried more than one token; their
	// gaps are flagged in ITL statistics, not hidden.
	MultiTokenChunks int           `json:"multi_token_chunks,omitempty"`
	End              time.Duration `json:"end,omitempty"` // stream end (E2E)
	PromptTokens     int           `json:"prompt_tokens,omitempty"`
	CompletionTokens int           `json:"completion_tokens,omitempty"`
	Status           int           `json:"status,omitempty"`     // HTTP status
	Error            string        `json:"error,omitempty"`      // what went wrong, if anything
	ErrorKind        string        `json:"error_kind,omitempty"` // timeout, http_4xx, http_5xx, closed_early, …
	Done             bool          `json:"done,omitempty"`       // false while streaming (live updates)
}

// OK reports whether the request finished without error.
func (r Request) OK() bool { return r.Done && r.Error == "" }

// TTFT is the time to the first token-bearing chunk.
func (r Request) TTFT() time.Duration { return r.FirstToken }

// E2E is send → stream end.
func (r Request) E2E() time.Duration { return r.End }

// ITLs are the gaps between consecutive token-bearing chunks.
func (r Request) ITLs() []time.Duration {
	if len(r.Tokens) < 2 {
		return nil
	}
	out := make([]time.Duration, len(r.Tokens)-1)
	for i := 1; i < len(r.Tokens); i++ {
		out[i-1] = r.Tokens[i] - r.Tokens[i-1]
	}
	return out
}

// OutputTokens is the server's usage count when it gave one, else the
// number of token-bearing chunks.
func (r Request) OutputTokens() int {
	if r.CompletionTokens > 0 {
		return r.CompletionTokens
	}
	return len(r.Tokens)
}

// TPOT is (E2E − TTFT) / (N − 1), N the output tokens; zero when N < 2.
func (r Request) TPOT() time.Duration {
	n := r.OutputTokens()
	if n < 2 || r.End <= r.FirstToken || r.FirstToken == 0 {
		return 0
	}
	return (r.End - r.FirstToken) / time.Duration(n-1)
}

// Log is one line of a target's output.
type Log struct {
	Stream string `json:"stream"` // stdout, stderr, or file for imported logs
	PID    int    `json:"pid,omitempty"`
	Text   string `json:"text"`
	// Stage is set when a parser turned this line into (part of) a stage
	// span, so the log view can mark it.
	Stage Stage `json:"stage,omitempty"`
}

// Process actions.
const (
	ProcessStart = "start"
	ProcessExit  = "exit"
)

// Process records a target process starting or exiting.
type Process struct {
	Action  string   `json:"action"` // ProcessStart or ProcessExit
	PID     int      `json:"pid"`
	Command []string `json:"command,omitempty"`
	// ServerKind is the detected server: treni, vllm, sglang, tgi,
	// llama.cpp, ollama, or unknown.
	ServerKind string `json:"server_kind,omitempty"`
	ExitCode   int    `json:"exit_code,omitempty"`
	Signal     string `json:"signal,omitempty"`
	// Expected is true when treni-top itself asked the process to stop.
	Expected bool `json:"expected,omitempty"`
	// Builtin marks the start of the built-in engine that `treni-top run`
	// launched itself (no command after --): engine flags reach it through
	// run's --serve-arg, not on a command line the user typed, so advice
	// that names an engine flag says it that way.
	Builtin bool `json:"builtin,omitempty"`
}

// Well-known marker names.
const (
	// MarkerRunStart: a cold run begins, its launch about to happen
	// (attrs: run, page_cache_evicted, and cold_runs, the length of the
	// series --cold-runs asked for, on the runs of that series).
	MarkerRunStart      = "run_start"
	MarkerHealthy       = "healthy" // first successful health poll
	MarkerEvicted       = "page_cache_evicted"
	MarkerResidency     = "residency" // weight residency check (attrs: resident_bytes, total_bytes, when)
	MarkerSaved         = "saved"
	MarkerBenchStart    = "bench_start"
	MarkerBenchEnd      = "bench_end"
	MarkerTargetCrashed = "target_crashed"
	// MarkerReplayReset tells consumers of a replay to forget everything:
	// the replay seeked backwards and starts again from offset zero.
	MarkerReplayReset = "replay_reset"
	// MarkerLogClock records how many lines of an imported log carried
	// their own timestamp (attrs timed_lines, lines, and wrapper_lines,
	// untimed_lines, rejected_lines, first_rejected).
	MarkerLogClock = "log_clock"
	// MarkerLogOrigin carries what an imported log states about where it
	// was written (attrs device, gpus, tp, version, model), so that the
	// diagnosis never reads the importing machine's facts instead.
	MarkerLogOrigin = "log_origin"
	// MarkerValueRejected: a log line's figure was not a finite number
	// (or overflowed once converted) and was refused where it was parsed;
	// the line stays a plain line (attrs: line, reason).
	MarkerValueRejected = "value_rejected"
	// MarkerEventDropped: the recorder could not encode an event (a value
	// JSON cannot hold) and wrote this instead; later events are kept
	// (attrs: kind, error).
	MarkerEventDropped = "event_dropped"
	// MarkerSessionEnd is the last line the recorder writes when it closes
	// a file (attrs: events, dropped); a file without it was not closed
	// cleanly. Readers consume it.
	MarkerSessionEnd = "session_end"
	// MarkerSessionTruncated ends a replay of a file that was cut short
	// or never closed (attrs: reason).
	MarkerSessionTruncated = "session_truncated"

	// MarkerSequenceDone: the cold sequence of a run finished (attrs: run,
	// requests, errors).
	MarkerSequenceDone = "sequence_done"
	// MarkerRunFailed: a cold run could not complete (attrs: error).
	MarkerRunFailed = "run_failed"
	// MarkerActionRefused: a controller action could not be done (attrs:
	// action, reason), so the UI can say why a key did nothing.
	MarkerActionRefused = "action_refused"
	// MarkerAttached: the runner attached to a running server (instead of
	// run_start, since nothing was started).
	MarkerAttached = "attached"
	// MarkerGPUStatus is emitted once at the start with the GPU sampler's
	// state ("no NVIDIA GPU: …" or "1 NVIDIA GPU(s)"), so the UI can say
	// why there is no GPU panel instead of repeating errors.
	MarkerGPUStatus = "gpu_status"
	// MarkerServerTimings carries a server's own figures for a request
	// (Ollama's load_duration, prompt_eval_duration, eval_duration, in ms),
	// so the cold TTFT can be checked against them (attrs: request, label,
	// load_ms, prompt_eval_ms, eval_ms, total_ms).
	MarkerServerTimings = "server_timings"
	// MarkerSamplerFailing is emitted once when a sampler has failed
	// several times in a row; attrs: sampler, error, failures.
	MarkerSamplerFailing = "sampler_failing"
	// MarkerSamplerRecovered is emitted once when a sampler reported as
	// failing produces a reading again; attrs: sampler, failures.
	MarkerSamplerRecovered = "sampler_recovered"
	// MarkerKindDetected is emitted when the server kind is recognised from
	// its output after the process start event went out as unknown (attrs:
	// server_kind).
	MarkerKindDetected = "server_kind_detected"
	// MarkerHealthWait says why the target is not healthy yet and that
	// treni-top waits for it (attrs: url, reason, timeout_s when known):
	// at once when an attached server does not answer, and when no URL to
	// poll could be inferred, so the wait is never silent.
	MarkerHealthWait = "health_wait"
	// MarkerInterrupted: a signal (ctrl-c, SIGTERM, a closed terminal)
	// ended the live session before it ran to its end; the target was
	// stopped and everything before the marker is in the file, which is
	// complete (attrs: cause).
	MarkerInterrupted = "interrupted"
)

// Marker is a named instant with attributes.
type Marker struct {
	Name  string `json:"name"`
	Attrs Attrs  `json:"attrs,omitempty"`
}

// SortEvents orders events by offset, keeping the original order of equal
// offsets.
func SortEvents(evs []Event) {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
}
