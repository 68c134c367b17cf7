package sessions

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// Verdict is the outcome for one hypothesis of the diagnosis table.
type Verdict string

// Verdicts, from strongest to weakest.
const (
	VerdictDominant     Verdict = "dominant"              // this term explains the largest share of the cold start
	VerdictContributes  Verdict = "contributes"           // a real but smaller term
	VerdictRuledOut     Verdict = "ruled out"             // the evidence says no
	VerdictInsufficient Verdict = "insufficient evidence" // a probe is missing; Missing says which
)

// Thresholds of the decision table. Each comes from the runbook's signals
// (../shared/seeds/vllm-runtime-probes-ttft-runbook.md §4.1) turned into a
// number; the comment says why the number is where it is.
const (
	// ColdResidency: below this fraction of the weight bytes resident in the
	// page cache before launch, the weights must come from storage (signal
	// A: "weight files not resident before start"). Half, because a
	// partially warm cache still makes storage reads a large term.
	ColdResidency = 0.5
	// WarmResidency: at or above this fraction before launch the page
	// cache is warm (signal B: "page cache warm"); 90% rather than 100%
	// because readahead and small files (config, tokenizer) leave a few
	// pages out even right after a full read.
	WarmResidency = 0.9
	// IOReadMatchesWeights: bytes the target read during the cold window
	// at or above this fraction of the weight bytes count as "IO read ≈
	// weight bytes" (signal A), when residency was not sampled.
	IOReadMatchesWeights = 0.5
	// DominantShare: a term must cover at least this share of the cold
	// total to be called dominant; below it the cold start has no single
	// dominant term and the verdict is at most "contributes".
	DominantShare = 0.25
	// ContributesShare: terms below this share of the cold total are ruled
	// out — a 10% term is inside the run-to-run spread of most servers.
	ContributesShare = 0.10
	// FirstRequestMemJump: a memory jump during the cold request of at
	// least this many bytes (GPU memory or RSS) is "first-time allocation"
	// (signal D); 64 MiB is above allocator noise and below any KV pool.
	FirstRequestMemJump = 64 << 20
	// WarmStableSpread: warm requests whose TTFT spread is at most this
	// fraction are "stable after 1–2 runs" (signal C); the runbook's warm
	// band for a healthy server is within ±10–20%.
	WarmStableSpread = 0.25
	// QueueingGrowth: TTFT at the highest observed concurrency at least
	// this many times TTFT at the lowest is queueing (signal F), when the
	// server's own prefill time did not grow the same way.
	QueueingGrowth = 2.0
)

// Evidence is one number behind a verdict, formatted for people.
type Evidence struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Hypothesis is one row of the decision table of DESIGN.md §5.
type Hypothesis struct {
	Code  string `json:"code"` // A–F
	Title string `json:"title"`
	// Score is the term's share of the cold total (for F, of the warm
	// TTFT), used for ranking.
	Score float64 `json:"score"`
	// TermMS is the time this hypothesis accounts for, in milliseconds.
	TermMS   float64    `json:"term_ms"`
	Verdict  Verdict    `json:"verdict"`
	Evidence []Evidence `json:"evidence,omitempty"`
	// Missing names the probes whose absence keeps this undecided.
	Missing  []string `json:"missing,omitempty"`
	NextKnob string   `json:"next_knob,omitempty"`
}

// Diagnosis is the ranked decision table for one cold run, with the
// runbook's decomposition.
type Diagnosis struct {
	Run        int          `json:"run"`
	Hypotheses []Hypothesis `json:"hypotheses"` // ranked, strongest first
	// Dominant is the code of the dominant hypothesis, "" when undecided.
	Dominant string `json:"dominant,omitempty"`
	// ColdTotalMS is the cold window; ColdPenalty is cold_1 ÷ warm median
	// TTFT; WarmBand is the warm median ± spread.
	ColdTotalMS float64 `json:"cold_total_ms"`
	ColdPenalty float64 `json:"cold_penalty,omitempty"`
	WarmBand    string  `json:"warm_band,omitempty"`
	// Summary is one line for headers, reports and diffs.
	Summary string `json:"summary"`
	// Facts are the measured inputs, reused by diff to explain changes.
	Facts RunFacts `json:"facts"`
}

// Hypothesis returns the row with the given code.
func (d Diagnosis) Hypothesis(code string) (Hypothesis, bool) {
	for _, h := range d.Hypotheses {
		if h.Code == code {
			return h, true
		}
	}
	return Hypothesis{}, false
}

// RunFacts are the probe readings the decision table uses. Fractions and
// byte counts are −1 when the probe was missing.
type RunFacts struct {
	WeightBytes float64 `json:"weight_bytes"`
	// ResidentBefore / ResidentAfter: fraction of the weight bytes in the
	// page cache at launch and at the end of the cold window.
	ResidentBefore float64 `json:"resident_before"`
	ResidentAfter  float64 `json:"resident_after"`
	// Evicted is true when treni-top evicted the weights before launch.
	Evicted bool `json:"evicted,omitempty"`
	// IOReadBytes the target's tree read during the cold window.
	IOReadBytes float64 `json:"io_read_bytes"`
	// CachedRise is the growth of the system's page cache in the window.
	CachedRise float64 `json:"cached_rise_bytes"`
	// GPUMemRise is GPU memory growth over the cold window, GPUMemFirstReq
	// during the cold request, RSSFirstReq the RSS growth during it.
	GPUMemRise     float64 `json:"gpu_mem_rise_bytes"`
	GPUMemFirstReq float64 `json:"gpu_mem_first_request_bytes"`
	RSSFirstReq    float64 `json:"rss_first_request_bytes"`
	PCIeRXMax      float64 `json:"pcie_rx_max_bytes_per_s"`
	HaveGPU        bool    `json:"have_gpu"`
	// UntimedLog is true for an imported log none of whose lines carried a
	// timestamp.
	UntimedLog bool `json:"untimed_log,omitempty"`
}

type hypothesisDef struct{ code, title, knob string }

// hypotheses lists the table's rows with the runbook's tuning direction for
// each (§6 "Next tuning direction" and Appendix E).
func hypotheses() []hypothesisDef {
	return []hypothesisDef{
		{"A", "page cache fill dominated", "pre-warm the page cache before scale-up (read the weight files once), keep weights on local NVMe or RAM-backed storage, or stream weights while loading"},
		{"B", "HBM transfer / allocation dominated", "upload from pinned or cuMemHostRegister'd host memory in large chunks on two streams, overlapped with reads; fewer, larger copies"},
		{"C", "runtime warm-up dominated", "capture fewer graph buckets (or lazily), reuse compile caches, or pre-warm with a dummy request before reporting healthy"},
		{"D", "first-time KV / buffer allocation dominated", "size the KV pool smaller (--max-model-len, --gpu-memory-utilization) or allocate it at start-up instead of on the first request"},
		{"E", "process / runtime init dominated", "trim interpreter start and imports (lazy imports), keep a warm process pool, or use a compiled runtime"},
		{"F", "queueing / scheduling dominated (warm)", "tune batching: --max-num-seqs, --max-num-batched-tokens, chunked prefill; or lower client concurrency"},
	}
}

// Diagnose evaluates the decision table on the last cold run of events.
func Diagnose(events []trace.Event) Diagnosis {
	runs := Analyze(events)
	if len(runs) == 0 {
		d := Diagnosis{Summary: "insufficient evidence: no cold run recorded yet"}
		for _, h := range hypotheses() {
			d.Hypotheses = append(d.Hypotheses, Hypothesis{Code: h.code, Title: h.title, Verdict: VerdictInsufficient, Missing: []string{"a cold run"}})
		}
		return d
	}
	return DiagnoseRun(events, runs[len(runs)-1])
}

// DiagnoseRun evaluates the decision table for one run.
func DiagnoseRun(events []trace.Event, run Run) Diagnosis {
	f := collectFacts(events, run)
	a := run.Attribution
	total := float64(run.ColdTotal())
	d := Diagnosis{Run: run.Index, ColdTotalMS: stat.MS(run.ColdTotal()), Facts: f}
	rs := SummarizeRequests(run.Requests)
	d.ColdPenalty = rs.ColdPenalty
	if rs.WarmTTFT.N > 0 {
		d.WarmBand = fmt.Sprintf("%s ms ± %.0f%%", stat.FormatMS(rs.WarmTTFT.Median), 100*rs.WarmTTFT.Spread)
	}
	dur := func(names ...trace.Stage) time.Duration {
		var sum time.Duration
		for _, n := range names {
			if s, ok := a.Stage(n); ok {
				sum += s.Duration
			}
		}
		return sum
	}
	pct := func(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }
	gb := func(b float64) string { return fmt.Sprintf("%.2f GB", b/1e9) }
	defs := hypotheses()
	rows := make(map[string]*Hypothesis, len(defs))
	for _, h := range defs {
		rows[h.code] = &Hypothesis{Code: h.code, Title: h.title, NextKnob: h.knob}
	}

	// A and B share the loading term: where the weights came from decides.
	loadTerm := dur(trace.StagePageCache)
	uploadTerm := dur(trace.StageDecoderTensorUpload)
	// model_load is a server's own total; stages it contains (KV sizing,
	// CUDA init inside "llama runner started in …") are counted by their
	// own rows, so only the time it alone covers is loading.
	if s, ok := a.Stage(trace.StageModelLoad); ok {
		uploadTerm += s.Exclusive
	}
	// A download inside the load (a server fetching weights from a hub) is
	// the strongest evidence that the bytes were not in RAM: they were not
	// even on disk.
	var downloadS float64
	for _, sp := range run.Spans {
		if v, ok := sp.Attrs.Float("download_s"); ok {
			downloadS += v
		}
	}
	residencyKnown := f.ResidentBefore >= 0
	ioKnown := f.IOReadBytes >= 0 && f.WeightBytes > 0
	coldCache := downloadS > 0 && stat.MS(loadTerm+uploadTerm) > 0 && downloadS*1000 >= 0.5*stat.MS(loadTerm+uploadTerm) ||
		residencyKnown && f.ResidentBefore < ColdResidency ||
		!residencyKnown && ioKnown && f.IOReadBytes >= IOReadMatchesWeights*f.WeightBytes
	warmCache := residencyKnown && f.ResidentBefore >= WarmResidency ||
		!residencyKnown && ioKnown && f.IOReadBytes < 0.1*f.WeightBytes
	A, B := rows["A"], rows["B"]
	if residencyKnown {
		A.Evidence = append(A.Evidence, Evidence{"resident before launch", pct(f.ResidentBefore)})
		B.Evidence = append(B.Evidence, Evidence{"resident before launch", pct(f.ResidentBefore)})
	}
	if f.Evicted {
		A.Evidence = append(A.Evidence, Evidence{"evicted by treni-top", "yes"})
	}
	if ioKnown {
		A.Evidence = append(A.Evidence, Evidence{"IO read in cold window", fmt.Sprintf("%s of %s weights", gb(f.IOReadBytes), gb(f.WeightBytes))})
	}
	if downloadS > 0 {
		A.Evidence = append(A.Evidence, Evidence{"weights downloaded during load", fmt.Sprintf("%.1f s", downloadS)})
	}
	if f.CachedRise > 0 {
		A.Evidence = append(A.Evidence, Evidence{"page cache grew", gb(f.CachedRise)})
	}
	if loadTerm > 0 {
		A.Evidence = append(A.Evidence, Evidence{"page_cache stage", stat.FormatDuration(loadTerm)})
	}
	if uploadTerm > 0 {
		B.Evidence = append(B.Evidence, Evidence{"upload/load stage", stat.FormatDuration(uploadTerm)})
	}
	if f.HaveGPU {
		B.Evidence = append(B.Evidence, Evidence{"GPU memory rise", gb(f.GPUMemRise)}, Evidence{"PCIe RX peak", fmt.Sprintf("%.1f GB/s", f.PCIeRXMax/1e9)})
	}
	switch {
	case coldCache:
		// Storage reads sit inside every loading stage.
		A.TermMS = stat.MS(loadTerm + uploadTerm)
	case warmCache:
		// With the bytes in RAM, loading is moving them into the engine's
		// resident memory: device memory on a GPU, the process's own
		// mapping on CPU.
		B.TermMS = stat.MS(loadTerm + uploadTerm)
	default:
		switch {
		case loadTerm+uploadTerm == 0:
		case residencyKnown:
			// Partly resident: neither storage nor memory traffic can be
			// said to dominate loading without timing them apart.
			why := fmt.Sprintf("a page cache neither cold nor warm (%.0f%% resident before launch; cold is < %.0f%%, warm ≥ %.0f%%): evict (--evict-page-cache) or pre-read the weights to decide",
				100*f.ResidentBefore, 100*ColdResidency, 100*WarmResidency)
			A.Missing = append(A.Missing, why)
			B.Missing = append(B.Missing, why)
		default:
			A.Missing = append(A.Missing, "page-cache residency of the weight files (page-cache sampler, or run with --evict-page-cache)")
			B.Missing = append(B.Missing, "page-cache residency of the weight files (page-cache sampler)")
		}
	}

	// C: the device runtime's one-time setup — driver and context init,
	// module load and JIT, compile, graph capture, warm-up passes — with
	// stability of the warm requests as evidence. cuda_init belongs here,
	// not to E: E is the process's own start "before any device work".
	C := rows["C"]
	warmStages := []trace.Stage{trace.StageCUDAInit, trace.StageKernelLoad, trace.StageCompile, trace.StageGraphCapture, trace.StageWarmup}
	C.TermMS = stat.MS(dur(warmStages...))
	for _, n := range warmStages {
		if t := dur(n); t > 0 {
			C.Evidence = append(C.Evidence, Evidence{string(n), stat.FormatDuration(t)})
		}
	}
	if rs.WarmTTFT.N >= 2 {
		C.Evidence = append(C.Evidence, Evidence{"warm TTFT spread", pct(rs.WarmTTFT.Spread)})
	}

	// D: KV sizing at start plus first-request excess with a memory jump.
	D := rows["D"]
	kv := dur(trace.StageKVAlloc)
	D.TermMS = stat.MS(kv)
	if kv > 0 {
		D.Evidence = append(D.Evidence, Evidence{"kv_alloc", stat.FormatDuration(kv)})
		if s, ok := a.Stage(trace.StageKVAlloc); ok {
			if b, ok := s.Attrs.Float(trace.AttrBytes); ok && b > 0 {
				D.Evidence = append(D.Evidence, Evidence{"KV pool", gb(b)})
			}
			if b, ok := s.Attrs.Float("touched_bytes"); ok && b > 0 {
				D.Evidence = append(D.Evidence, Evidence{"memory allocated and touched", gb(b)})
			}
		}
	}
	if rs.Cold != nil && rs.WarmTTFT.N > 0 {
		excess := rs.Cold.TTFT - rs.WarmTTFT.Median
		jump := f.GPUMemFirstReq
		if f.RSSFirstReq > jump {
			jump = f.RSSFirstReq
		}
		if excess > 0 {
			if jump >= FirstRequestMemJump {
				D.TermMS += excess
				D.Evidence = append(D.Evidence, Evidence{"cold_1 − warm median TTFT", stat.FormatMS(excess) + " ms"}, Evidence{"memory jump on first request", gb(jump)})
			} else {
				C.TermMS += excess
				C.Evidence = append(C.Evidence, Evidence{"first-run overhead (cold_1 − warm median)", stat.FormatMS(excess) + " ms"})
			}
		}
	}

	// E: process start and runtime init (imports, interpreter, config).
	// A silent start is not guessed into E: live runs get process_start
	// (spawn → first output) from the launcher, and time no stage covers
	// stays unattributed.
	E := rows["E"]
	E.TermMS = stat.MS(dur(trace.StageProcessStart, trace.StageRuntimeInit))
	for _, n := range []trace.Stage{trace.StageProcessStart, trace.StageRuntimeInit} {
		if t := dur(n); t > 0 {
			E.Evidence = append(E.Evidence, Evidence{string(n), stat.FormatDuration(t)})
		}
	}

	if !f.HaveGPU && uploadTerm == 0 {
		// On the CPU backend "resident memory" is the process's own
		// mapping of the weights: faulting the pages in, not a PCIe copy.
		B.NextKnob = "pre-fault the mapping in parallel (madvise WILLNEED, MAP_POPULATE), use huge pages, or keep a warm process so the weights stay mapped"
		B.Evidence = append(B.Evidence, Evidence{"device", "CPU: loading is mapping the cached weights into the process"})
	}

	// Shares and verdicts for A–E.
	for _, code := range []string{"A", "B", "C", "D", "E"} {
		h := rows[code]
		if total > 0 {
			h.Score = h.TermMS / stat.MS(time.Duration(total))
		}
		if h.TermMS > 0 {
			h.Evidence = append([]Evidence{{"term", fmt.Sprintf("%s ms = %s of cold", stat.FormatMS(h.TermMS), pct(h.Score))}}, h.Evidence...)
		}
	}

	// F: queueing, from load at several concurrencies.
	diagnoseQueueing(rows["F"], run.Requests)

	var best *Hypothesis
	for _, code := range []string{"A", "B", "C", "D", "E"} {
		h := rows[code]
		if best == nil || h.Score > best.Score {
			best = h
		}
	}
	// An undecided loading term (A or B, residency unknown) larger than
	// every decided term forbids calling any of them dominant.
	undecided := 0.0
	if !coldCache && !warmCache && total > 0 {
		undecided = float64(loadTerm+uploadTerm) / total
	}
	if un := a.UnattributedShare(); un > best.Score && (undecided == 0 || un > undecided) {
		// More of the cold start is unexplained than any term explains.
		note := fmt.Sprintf("%.0f%% of the cold start is covered by no stage", 100*un)
		for _, code := range []string{"A", "B", "C", "D", "E"} {
			rows[code].Evidence = append(rows[code].Evidence, Evidence{"unattributed", note})
		}
		best = nil
	} else if undecided > best.Score {
		note := fmt.Sprintf("loading is the largest term (%.0f%% of cold) but where the weights came from is unknown", 100*undecided)
		A.Evidence = append(A.Evidence, Evidence{"undecided", note})
		B.Evidence = append(B.Evidence, Evidence{"undecided", note})
		best = nil
	}
	for _, code := range []string{"A", "B", "C", "D", "E"} {
		h := rows[code]
		switch {
		case len(h.Missing) > 0 && h.TermMS == 0:
			h.Verdict = VerdictInsufficient
		case best != nil && h == best && h.Score >= DominantShare:
			h.Verdict = VerdictDominant
			d.Dominant = h.Code
		case h.Score >= ContributesShare:
			h.Verdict = VerdictContributes
		default:
			h.Verdict = VerdictRuledOut
		}
	}
	if f.UntimedLog {
		// Durations placed by line count are not evidence of time spent.
		for _, code := range []string{"A", "B", "C", "D", "E"} {
			rows[code].Verdict = VerdictInsufficient
			rows[code].Missing = append(rows[code].Missing, "timestamps in the log (its durations count lines, not time)")
		}
		d.Dominant = ""
	}
	if total <= 0 {
		for _, code := range []string{"A", "B", "C", "D", "E"} {
			rows[code].Verdict = VerdictInsufficient
			rows[code].Missing = append(rows[code].Missing, "a cold window (stages or a cold request)")
		}
		d.Dominant = ""
	}
	for _, h := range defs {
		d.Hypotheses = append(d.Hypotheses, *rows[h.code])
	}
	rank := map[Verdict]int{VerdictDominant: 0, VerdictContributes: 1, VerdictInsufficient: 2, VerdictRuledOut: 3}
	sort.SliceStable(d.Hypotheses, func(i, j int) bool {
		hi, hj := d.Hypotheses[i], d.Hypotheses[j]
		if rank[hi.Verdict] != rank[hj.Verdict] {
			return rank[hi.Verdict] < rank[hj.Verdict]
		}
		return hi.Score > hj.Score
	})
	d.Summary = summarize(d, run)
	return d
}

// diagnoseQueueing fills F from load-generator requests: TTFT against the
// number of requests in flight when each was sent.
func diagnoseQueueing(F *Hypothesis, reqs []trace.Request) {
	type point struct {
		inflight int
		ttft     float64
	}
	var pts []point
	for i, q := range reqs {
		if q.Phase != trace.PhaseBench || !q.OK() || q.FirstToken == 0 {
			continue
		}
		n := 0
		for j, o := range reqs {
			if j != i && o.Sent <= q.Sent && o.Sent+o.End > q.Sent {
				n++
			}
		}
		pts = append(pts, point{n, stat.MS(q.FirstToken)})
	}
	if len(pts) < 8 {
		F.Verdict = VerdictInsufficient
		F.Missing = []string{"load at several concurrencies (treni-top bench)"}
		return
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].inflight < pts[j].inflight })
	q := len(pts) / 4
	if q == 0 {
		q = 1
	}
	var lo, hi []float64
	for _, p := range pts[:q] {
		lo = append(lo, p.ttft)
	}
	for _, p := range pts[len(pts)-q:] {
		hi = append(hi, p.ttft)
	}
	l, h := stat.Summarize(lo).Median, stat.Summarize(hi).Median
	growth := 0.0
	if l > 0 {
		growth = h / l
	}
	F.Evidence = []Evidence{
		{"TTFT at low concurrency", fmt.Sprintf("%s ms (≤%d in flight)", stat.FormatMS(l), pts[q-1].inflight)},
		{"TTFT at high concurrency", fmt.Sprintf("%s ms (≥%d in flight)", stat.FormatMS(h), pts[len(pts)-q].inflight)},
		{"growth", fmt.Sprintf("%.1f×", growth)},
	}
	F.Score = growth / (growth + QueueingGrowth)
	switch {
	case pts[len(pts)-1].inflight <= pts[0].inflight:
		F.Verdict = VerdictInsufficient
		F.Missing = []string{"requests at more than one concurrency"}
	case growth >= QueueingGrowth:
		F.Verdict = VerdictDominant
	case growth >= 1+ContributesShare:
		F.Verdict = VerdictContributes
	default:
		F.Verdict = VerdictRuledOut
	}
}

// summarize writes the runbook's one-line conclusion.
func summarize(d Diagnosis, run Run) string {
	var parts []string
	if d.Dominant != "" {
		h, _ := d.Hypothesis(d.Dominant)
		parts = append(parts, fmt.Sprintf("%s: %s (%s of %s cold)", h.Code, h.Title, fmt.Sprintf("%.0f%%", 100*h.Score), stat.FormatDuration(run.ColdTotal())))
	} else {
		parts = append(parts, "no single dominant cold term")
		var missing []string
		for _, h := range d.Hypotheses {
			missing = append(missing, h.Missing...)
		}
		if len(missing) > 0 {
			parts[0] = "insufficient evidence: missing " + strings.Join(dedupe(missing), "; ")
		}
	}
	if d.ColdPenalty > 0 {
		parts = append(parts, fmt.Sprintf("cold penalty %.1f×", d.ColdPenalty))
	}
	if d.WarmBand != "" {
		parts = append(parts, "warm "+d.WarmBand)
	}
	if d.Dominant != "" {
		h, _ := d.Hypothesis(d.Dominant)
		parts = append(parts, "next: "+h.NextKnob)
	}
	return strings.Join(parts, "; ")
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// collectFacts reads the probes' samples and markers for a run.
func collectFacts(events []trace.Event, run Run) RunFacts {
	f := RunFacts{ResidentBefore: -1, ResidentAfter: -1, IOReadBytes: -1, CachedRise: -1}
	var firstRes, lastRes *trace.Sample
	var readStart, readEnd = -1.0, -1.0
	var cachedStart, cachedEnd = -1.0, -1.0
	var gpuStart, gpuEnd = -1.0, -1.0
	var gpuReqStart, gpuReqEnd, rssReqStart, rssReqEnd = -1.0, -1.0, -1.0, -1.0
	cold, hasCold := run.ColdRequest()
	inWindow := func(at time.Duration) bool { return at >= run.Start && at <= run.ColdEnd }
	for i := range events {
		e := &events[i]
		if e.Run != run.Index {
			continue
		}
		switch e.Kind {
		case trace.KindMarker:
			m := e.Marker
			switch m.Name {
			case trace.MarkerEvicted:
				f.Evicted = true
			case trace.MarkerLogClock:
				if n, ok := m.Attrs.Float("timed_lines"); ok && n == 0 {
					f.UntimedLog = true
				}
			case trace.MarkerResidency:
				res, ok1 := m.Attrs.Float("resident_bytes")
				tot, ok2 := m.Attrs.Float("total_bytes")
				if ok1 && ok2 && tot > 0 && e.At <= run.Start+time.Millisecond*50 {
					// The last check before launch wins (after eviction).
					f.ResidentBefore = res / tot
					f.WeightBytes = tot
				}
			}
		case trace.KindSample:
			s := e.Sample
			v := s.Values
			switch {
			case s.Source == trace.SourcePageCache:
				if tot := v[trace.MetricWeightBytes]; tot > 0 {
					if f.WeightBytes == 0 {
						f.WeightBytes = tot
					}
					if inWindow(e.At) {
						if firstRes == nil {
							firstRes = s
						}
						lastRes = s
					}
				}
				if c, ok := v[trace.MetricSysCachedBytes]; ok && inWindow(e.At) {
					if cachedStart < 0 {
						cachedStart = c
					}
					cachedEnd = c
				}
			case s.Source == trace.SourceProcess:
				if r, ok := v[trace.MetricReadBytes]; ok && inWindow(e.At) {
					if readStart < 0 {
						readStart = r
					}
					readEnd = r
				}
				if r, ok := v[trace.MetricRSS]; ok && hasCold && e.At >= cold.Sent && e.At <= cold.Sent+cold.End {
					if rssReqStart < 0 {
						rssReqStart = r
					}
					rssReqEnd = r
				}
			case strings.HasPrefix(s.Source, "gpu"):
				f.HaveGPU = true
				if m, ok := v[trace.MetricGPUMemUsed]; ok {
					if inWindow(e.At) {
						if gpuStart < 0 {
							gpuStart = m
						}
						gpuEnd = m
					}
					if hasCold && e.At >= cold.Sent && e.At <= cold.Sent+cold.End {
						if gpuReqStart < 0 {
							gpuReqStart = m
						}
						gpuReqEnd = m
					}
				}
				if rx := v[trace.MetricPCIeRX]; rx > f.PCIeRXMax && inWindow(e.At) {
					f.PCIeRXMax = rx
				}
			}
		}
	}
	if f.ResidentBefore < 0 && firstRes != nil {
		f.ResidentBefore = firstRes.Values[trace.MetricResidentBytes] / firstRes.Values[trace.MetricWeightBytes]
	}
	if lastRes != nil {
		f.ResidentAfter = lastRes.Values[trace.MetricResidentBytes] / lastRes.Values[trace.MetricWeightBytes]
	}
	if readStart >= 0 {
		f.IOReadBytes = readEnd - readStart
	}
	if cachedStart >= 0 {
		f.CachedRise = cachedEnd - cachedStart
	}
	if gpuStart >= 0 {
		f.GPUMemRise = gpuEnd - gpuStart
	}
	if gpuReqStart >= 0 {
		f.GPUMemFirstReq = gpuReqEnd - gpuReqStart
	}
	if rssReqStart >= 0 {
		f.RSSFirstReq = rssReqEnd - rssReqStart
	}
	return f
}
