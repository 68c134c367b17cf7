package sessions

import (
	"fmt"
	"sort"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/stat"
)

// rule is one row of the decision table: a hypothesis about where the cold
// start (or, for F, the warm TTFT) goes, and how the facts decide it.
// Adding a hypothesis is adding a rule here, a knob in each row of
// nextKnob, and a row in the tests.
type rule struct {
	code, title string
	// titles replace title on the devices where the hypothesis means
	// something else (B is an upload to HBM only on a GPU).
	titles map[Device]string
	// cold rules (A–E) explain a share of the cold window; ranking weighs
	// them against each other and gives their verdicts. A rule that is
	// not cold (F) sets its own score and verdict.
	cold bool
	// eval fills the row from the facts: TermMS, Evidence and Missing for
	// a cold rule; Score and Verdict too for the others.
	eval func(x *facts, h *Hypothesis)
}

// rules lists the table's rows in their fixed order.
func rules() []rule {
	return []rule{
		{"A", "page cache fill dominated", nil, true, ruleA},
		{"B", "HBM transfer / allocation dominated", map[Device]string{
			// On the CPU the weights only move into the process's own
			// memory: its mapping faulted in, or a host copy.
			DeviceCPU: "host memory load (mapping / copy) dominated",
			// Until the run says its device, nothing GPU-specific is
			// claimed: it may be a CPU run.
			DeviceUnknown: "weight load into memory dominated (device not known)",
		}, true, ruleB},
		{"C", "runtime warm-up dominated", nil, true, ruleC},
		{"D", "first-time KV / buffer allocation dominated", nil, true, ruleD},
		{"E", "process / runtime init dominated", nil, true, ruleE},
		{"F", "queueing / scheduling dominated (warm)", nil, false, ruleF},
	}
}

// titleFor is the rule's title on a target computing on dev.
func (r rule) titleFor(dev Device) string {
	if t, ok := r.titles[dev]; ok {
		return t
	}
	return r.title
}

// facts are the inputs every rule reads: the run, the probe readings and
// what is derived from them once.
type facts struct {
	RunFacts
	run  Run
	reqs RequestSummary
	// engine is the target's kind, for the next knobs.
	engine target
	// loadTerm is page_cache; uploadTerm is decoder_tensor_upload plus the
	// time a server's own model_load alone covers (the stages it contains,
	// KV sizing or CUDA init, are counted by their own rows).
	loadTerm, uploadTerm time.Duration
	// downloadS is the weight download inside the load, in seconds.
	downloadS float64
	// residencyKnown: the page-cache residency before launch was read;
	// ioKnown: the target's IO and the weight size were.
	residencyKnown, ioKnown bool
	// coldCache / warmCache: the weights came from storage / from RAM.
	// Neither: loading is undecided.
	coldCache, warmCache bool
	// firstReqExcess is cold_1's TTFT above the slowest warm request (ms,
	// 0 when not above or not probed), less what stages inside
	// first_request already account for: the warm requests' own range is
	// noise (docs/ARCHITECTURE.md, Measurements), so only what no warm
	// request reached is a first-run cost; firstReqJump the larger memory growth (GPU or
	// RSS) during cold_1.
	firstReqExcess, firstReqJump float64
	// lazyLoad: the model was loaded inside the first request (Ollama):
	// loading stages start inside first_request. lazyStart is the time
	// from the request to the load's first stage (the runner process
	// starting), lazyConfig the metadata and tokenizer read inside it,
	// before any device work.
	lazyLoad              bool
	lazyStart, lazyConfig time.Duration
}

// lazyLoadStages are the stages whose start inside first_request means the
// server loads the model on its first request.
var lazyLoadStages = map[trace.Stage]bool{
	trace.StagePageCache: true, trace.StageTensorIndexBuild: true, trace.StageModelLoad: true,
	trace.StageDecoderTensorUpload: true, trace.StageKVAlloc: true,
}

// lazyFacts finds a load inside the first request and returns the time
// the stages inside first_request cover (already counted by their rules).
func (x *facts) lazyFacts() (covered time.Duration) {
	fr, ok := x.run.Attribution.Stage(trace.StageFirstRequest)
	if !ok {
		return 0
	}
	first := time.Duration(-1)
	for _, s := range x.run.Attribution.Stages {
		if s.Name == trace.StageFirstRequest || s.Start < fr.Start || s.Start >= fr.End {
			continue
		}
		if lazyLoadStages[s.Name] && (first < 0 || s.Start < first) {
			first = s.Start
		}
		if s.Name == trace.StageTensorIndexBuild || s.Name == trace.StageTokenizerLoad {
			x.lazyConfig += s.Duration
		}
	}
	if first < 0 {
		x.lazyConfig = 0
		return 0
	}
	x.lazyLoad = true
	x.lazyStart = first - fr.Start
	return fr.Duration - fr.Exclusive
}

// dur is the summed duration of the named stages in the run's attribution.
func (x *facts) dur(names ...trace.Stage) time.Duration {
	var sum time.Duration
	for _, n := range names {
		if s, ok := x.run.Attribution.Stage(n); ok {
			sum += s.Duration
		}
	}
	return sum
}

// gatherFacts reads the run once for every rule.
func gatherFacts(events []trace.Event, run Run) *facts {
	x := &facts{RunFacts: collectFacts(events, run), run: run, reqs: SummarizeRequests(run.Requests)}
	x.engine = targetOf(events, run, x.RunFacts)
	x.loadTerm = x.dur(trace.StagePageCache)
	// A wake's weights_restore moves the weights back as the upload did.
	x.uploadTerm = x.dur(trace.StageDecoderTensorUpload, trace.StageWeightsRestore)
	if s, ok := run.Attribution.Stage(trace.StageModelLoad); ok {
		x.uploadTerm += s.Exclusive
	}
	if x.engine.Engine == EngineOther && x.uploadTerm > 0 {
		// A server that reports an upload stage moves the weights to a
		// device even when no GPU was sampled.
		x.engine.Device = DeviceGPU
	}
	// A download inside the load (a server fetching weights from a hub) is
	// the strongest evidence that the bytes were not in RAM: they were not
	// even on disk.
	for _, sp := range run.Spans {
		if v, ok := sp.Attrs.Float("download_s"); ok {
			x.downloadS += v
		}
	}
	x.residencyKnown = x.ResidentBefore >= 0
	x.ioKnown = x.IOReadBytes >= 0 && x.WeightBytes > 0
	loadMS := stat.MS(x.loadTerm + x.uploadTerm)
	x.coldCache = x.downloadS > 0 && loadMS > 0 && x.downloadS*1000 >= 0.5*loadMS ||
		x.residencyKnown && x.ResidentBefore < ColdResidency ||
		!x.residencyKnown && x.ioKnown && x.IOReadBytes >= IOReadMatchesWeights*x.WeightBytes
	x.warmCache = x.residencyKnown && x.ResidentBefore >= WarmResidency ||
		!x.residencyKnown && x.ioKnown && x.IOReadBytes < 0.1*x.WeightBytes
	covered := x.lazyFacts()
	if x.reqs.Cold != nil && x.reqs.WarmTTFT.N > 0 {
		x.firstReqExcess = max(x.reqs.Cold.TTFT-x.reqs.WarmTTFT.Max-stat.MS(covered), 0)
		x.firstReqJump = max(x.GPUMemFirstReq, x.RSSFirstReq)
	}
	if x.lazyLoad {
		// The runner's start is E's (below); what is left of the excess
		// is the first request's own warm-up.
		x.firstReqExcess = max(x.firstReqExcess-stat.MS(x.lazyStart), 0)
	}
	return x
}

// ruleA: page cache fill. When the weights came from storage, storage
// reads sit inside every loading stage, so the whole loading term is A's.
func ruleA(x *facts, h *Hypothesis) {
	if x.residencyKnown {
		h.Evidence = append(h.Evidence, Evidence{"resident before launch", pct(x.ResidentBefore)})
	}
	if x.Evicted {
		h.Evidence = append(h.Evidence, Evidence{"evicted by treni-top", "yes"})
	}
	if x.ioKnown {
		h.Evidence = append(h.Evidence, Evidence{"IO read in cold window", fmt.Sprintf("%s of %s weights", gb(x.IOReadBytes), gb(x.WeightBytes))})
	}
	if x.downloadS > 0 {
		h.Evidence = append(h.Evidence, Evidence{"weights downloaded during load", fmt.Sprintf("%.1f s", x.downloadS)})
	}
	if x.CachedRise > 0 {
		h.Evidence = append(h.Evidence, Evidence{"page cache grew", gb(x.CachedRise)})
	}
	ls := splitLoad(x.run.Spans)
	if x.loadTerm > 0 {
		label := "page_cache stage"
		if ls.deferred {
			label = "page_cache stage (residency check only)"
		}
		h.Evidence = append(h.Evidence, Evidence{label, stat.FormatDuration(x.loadTerm)})
	}
	if ls.readWaitMS >= 0 {
		// The engine read the files inside its upload: the time its copies
		// waited for those reads is the page-cache (or disk) part of it.
		h.Evidence = append(h.Evidence, Evidence{"upload waited on file reads", fmt.Sprintf("%.0f ms", ls.readWaitMS)})
	}
	if x.coldCache {
		h.TermMS = stat.MS(x.loadTerm + x.uploadTerm)
	}
	h.Missing = append(h.Missing, loadingMissing(x, missingResidencyA)...)
}

// loadSplit is what a run's loading spans say about reading the weights:
// the milliseconds the decoder_tensor_upload spans waited on file reads
// and on the device's copies (trace.AttrReadWaitMS, trace.AttrCopyWaitMS;
// −1 when no span says), and whether a page_cache span only checked
// residency (trace.ReadsDeferred).
type loadSplit struct {
	readWaitMS, copyWaitMS float64
	deferred               bool
}

func splitLoad(spans []trace.Span) loadSplit {
	ls := loadSplit{readWaitMS: -1, copyWaitMS: -1}
	for _, sp := range spans {
		switch sp.Name {
		case trace.StagePageCache:
			ls.deferred = ls.deferred || trace.ReadsDeferred(sp.Attrs)
		case trace.StageDecoderTensorUpload:
			if v, ok := sp.Attrs.Float(trace.AttrReadWaitMS); ok {
				ls.readWaitMS = max(ls.readWaitMS, 0) + v
			}
			if v, ok := sp.Attrs.Float(trace.AttrCopyWaitMS); ok {
				ls.copyWaitMS = max(ls.copyWaitMS, 0) + v
			}
		}
	}
	return ls
}

// ruleB: moving the weights into the engine's resident memory. With the
// bytes in RAM, loading is that move: device memory on a GPU, the
// process's own mapping or copy on CPU.
func ruleB(x *facts, h *Hypothesis) {
	if x.residencyKnown {
		h.Evidence = append(h.Evidence, Evidence{"resident before launch", pct(x.ResidentBefore)})
	}
	if x.uploadTerm > 0 {
		h.Evidence = append(h.Evidence, Evidence{"upload/load stage", stat.FormatDuration(x.uploadTerm)})
	}
	if x.HaveGPU && x.engine.gpu() {
		h.Evidence = append(h.Evidence, Evidence{"GPU memory rise", gb(x.GPUMemRise)}, Evidence{"PCIe RX peak", fmt.Sprintf("%.1f GB/s", x.PCIeRXMax/1e9)})
	}
	if x.warmCache && !x.coldCache {
		h.TermMS = stat.MS(x.loadTerm + x.uploadTerm)
	}
	h.Missing = append(h.Missing, loadingMissing(x, missingResidencyB)...)
	switch {
	case x.engine.Device != DeviceCPU:
		// A GPU says so in its own evidence; an unknown device says
		// nothing rather than guess.
	case x.engine.Engine == EngineBuiltinCPU && x.engine.Load == loadCopy:
		h.Evidence = append(h.Evidence, Evidence{"device", "CPU, load mode copy: loading is a host copy into the engine's memory, not an upload"})
	case x.uploadTerm == 0 && x.loadTerm > 0:
		// On the CPU backend "resident memory" is the process's own
		// mapping of the weights: faulting the pages in, not a PCIe copy.
		h.Evidence = append(h.Evidence, Evidence{"device", "CPU: loading is mapping the cached weights into the process"})
	}
}

// The probes A and B ask for, named as the command that takes them.
const (
	missingResidencyA = "page-cache residency of the weight files (the page-cache sampler of `treni-top run`, or `treni-top run … --evict-page-cache`)"
	missingResidencyB = "page-cache residency of the weight files (the page-cache sampler of `treni-top run`)"
	missingBetween    = "a page cache neither cold nor warm (%.0f%% resident before launch; cold is < %.0f%%, warm ≥ %.0f%%): evict (`treni-top run … --evict-page-cache`) or pre-read the weights to decide"
)

// probeAdvice lists the missing-probe texts that name commands, for
// AllAdvice.
func probeAdvice() []string {
	return []string{missingResidencyA, missingResidencyB, fmt.Sprintf(missingBetween, 70.0, 100*ColdResidency, 100*WarmResidency)}
}

// loadingMissing says what keeps A and B undecided when the cache was
// neither cold nor warm: the residency probe, or a residency in between.
func loadingMissing(x *facts, probe string) []string {
	if x.coldCache || x.warmCache || x.loadTerm+x.uploadTerm == 0 {
		return nil
	}
	if x.residencyKnown {
		// Partly resident: neither storage nor memory traffic can be
		// said to dominate loading without timing them apart.
		return []string{fmt.Sprintf(missingBetween, 100*x.ResidentBefore, 100*ColdResidency, 100*WarmResidency)}
	}
	return []string{probe}
}

// ruleC: runtime warm-up — the device runtime's one-time setup: driver and
// context init, module load and JIT, compile, graph capture, warm-up
// passes — with the warm requests' stability as evidence and cold_1's
// excess when no memory jump makes it D's. cuda_init belongs to C, not to
// E: E is the process's own start "before any device work".
func ruleC(x *facts, h *Hypothesis) {
	warmStages := []trace.Stage{trace.StageCUDAInit, trace.StageKernelLoad, trace.StageCompile, trace.StageGraphCapture, trace.StageWarmup}
	h.TermMS = stat.MS(x.dur(warmStages...))
	for _, n := range warmStages {
		if t := x.dur(n); t > 0 {
			h.Evidence = append(h.Evidence, Evidence{string(n), stat.FormatDuration(t)})
		}
	}
	if x.reqs.WarmTTFT.N >= 2 {
		h.Evidence = append(h.Evidence, Evidence{"warm TTFT spread", pct(x.reqs.WarmTTFT.Spread)})
	}
	if x.firstReqExcess > 0 && (x.firstReqJump < FirstRequestMemJump || x.lazyLoad) {
		h.TermMS += x.firstReqExcess
		h.Evidence = append(h.Evidence, Evidence{"first-run overhead (cold_1 − slowest warm)", stat.FormatMS(x.firstReqExcess) + " ms"})
	}
}

// ruleD: KV sizing at start, plus cold_1's excess when a memory jump
// during it says the first request allocated.
func ruleD(x *facts, h *Hypothesis) {
	kv := x.dur(trace.StageKVAlloc)
	h.TermMS = stat.MS(kv)
	if kv > 0 {
		h.Evidence = append(h.Evidence, Evidence{"kv_alloc", stat.FormatDuration(kv)})
		if s, ok := x.run.Attribution.Stage(trace.StageKVAlloc); ok {
			if b, ok := s.Attrs.Float(trace.AttrBytes); ok && b > 0 {
				h.Evidence = append(h.Evidence, Evidence{"KV pool", gb(b)})
			}
			if b, ok := s.Attrs.Float("touched_bytes"); ok && b > 0 {
				h.Evidence = append(h.Evidence, Evidence{"memory allocated and touched", gb(b)})
			}
		}
	}
	switch {
	case x.lazyLoad && x.firstReqJump >= FirstRequestMemJump:
		// The jump is the model the first request loaded (weights, KV,
		// the runner's context), each counted by its own stage.
		h.Evidence = append(h.Evidence, Evidence{"memory jump on first request", gb(x.firstReqJump) + ": the model loaded inside it (lazy load), not a first-time allocation"})
	case x.firstReqExcess > 0 && x.firstReqJump >= FirstRequestMemJump:
		h.TermMS += x.firstReqExcess
		h.Evidence = append(h.Evidence, Evidence{"cold_1 − slowest warm TTFT", stat.FormatMS(x.firstReqExcess) + " ms"}, Evidence{"memory jump on first request", gb(x.firstReqJump)})
	}
}

// ruleE: process start and runtime init (imports, interpreter, config).
// A silent start is not guessed into E: live runs get process_start
// (spawn → first output) from the launcher, and time no stage covers
// stays unattributed.
//
// A lazy server starts a runner process inside its first request and
// reads the model's metadata and vocabulary there before any device work:
// both are process and runtime init, so E counts them too.
func ruleE(x *facts, h *Hypothesis) {
	h.TermMS = stat.MS(x.dur(trace.StageProcessStart, trace.StageRuntimeInit))
	for _, n := range []trace.Stage{trace.StageProcessStart, trace.StageRuntimeInit} {
		if t := x.dur(n); t > 0 {
			h.Evidence = append(h.Evidence, Evidence{string(n), stat.FormatDuration(t)})
		}
	}
	if x.lazyLoad {
		h.TermMS += stat.MS(x.lazyStart + x.lazyConfig)
		h.Evidence = append(h.Evidence, Evidence{"first request before its load began (lazy load: scheduling, runner start)", stat.FormatDuration(x.lazyStart)})
		if x.lazyConfig > 0 {
			h.Evidence = append(h.Evidence, Evidence{"model metadata and vocabulary read before device work", stat.FormatDuration(x.lazyConfig)})
		}
	}
}

// ruleF: queueing, from load-generator requests: TTFT against the number
// of requests in flight when each was sent. Its score is its own (growth
// ÷ (growth + QueueingGrowth)), not a share of the cold start.
func ruleF(x *facts, h *Hypothesis) {
	type point struct {
		inflight int
		ttft     float64
	}
	reqs := x.run.Requests
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
	defer func() { h.Evidence = append(h.Evidence, serverView(x)...) }()
	if len(pts) < 8 {
		h.Verdict = VerdictInsufficient
		h.Missing = []string{"load at several concurrencies (treni-top bench)"}
		if len(pts) > 0 {
			// A bench ran, too short to compare concurrencies.
			h.Missing = []string{fmt.Sprintf("at least 8 completed bench requests at several concurrencies (%d here)", len(pts))}
		}
		return
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].inflight < pts[j].inflight })
	if pts[len(pts)-1].inflight == pts[0].inflight {
		// One concurrency (a sequential workload: every request alone):
		// no growth to measure.
		var all []float64
		for _, p := range pts {
			all = append(all, p.ttft)
		}
		h.Evidence = []Evidence{{"bench TTFT", fmt.Sprintf("%s ms median over %d requests, every one sent %s",
			stat.FormatMS(stat.Summarize(all).Median), len(pts), inflightText(pts[0].inflight, ""))}}
		h.Verdict = VerdictInsufficient
		h.Missing = []string{"requests at more than one concurrency (a workload with concurrent arrivals: continuous_batching, paged_attention, --qps, --concurrency)"}
		return
	}
	q := max(len(pts)/4, 1)
	var lo, hi []float64
	for _, p := range pts[:q] {
		lo = append(lo, p.ttft)
	}
	for _, p := range pts[len(pts)-q:] {
		hi = append(hi, p.ttft)
	}
	l, hm := stat.Summarize(lo).Median, stat.Summarize(hi).Median
	growth := 0.0
	if l > 0 {
		growth = hm / l
	}
	h.Evidence = []Evidence{
		{"TTFT at low concurrency", fmt.Sprintf("%s ms (sent %s)", stat.FormatMS(l), inflightText(pts[q-1].inflight, "at most "))},
		{"TTFT at high concurrency", fmt.Sprintf("%s ms (sent with at least %d others in flight)", stat.FormatMS(hm), pts[len(pts)-q].inflight)},
		{"growth", fmt.Sprintf("%.1f×", growth)},
	}
	h.Score = growth / (growth + QueueingGrowth)
	switch {
	case growth >= QueueingGrowth:
		h.Verdict = VerdictDominant
	case growth >= 1+ContributesShare:
		h.Verdict = VerdictContributes
	default:
		h.Verdict = VerdictRuledOut
	}
}

// inflightText says how many other requests were in flight when a bench
// request was sent: "alone" for none, else "with <bound>n others in flight".
func inflightText(n int, bound string) string {
	if n == 0 {
		return "alone (no other request in flight)"
	}
	return fmt.Sprintf("with %s%d others in flight", bound, n)
}

// serverView is F's evidence from the server's own metrics: its TTFT
// beside the client's over the same run — what the server's timer does not
// see (network, HTTP, tokenization before admission) is the difference —
// and its queue time, the queueing F is about.
func serverView(x *facts) []Evidence {
	var ev []Evidence
	if x.ServerTTFTCount > 0 {
		var sum float64
		n := 0
		for _, q := range x.run.Requests {
			if q.OK() && q.FirstToken > 0 {
				sum += stat.MS(q.FirstToken)
				n++
			}
		}
		ev = append(ev, Evidence{"server TTFT (its /metrics)", fmt.Sprintf("%s ms mean over %.0f first tokens", stat.FormatMS(x.ServerTTFTMeanMS), x.ServerTTFTCount)})
		if n > 0 {
			client := sum / float64(n)
			ev = append(ev, Evidence{"client TTFT − server TTFT", fmt.Sprintf("%s ms (client %s ms mean over %d requests): outside the server's timer", stat.FormatMS(client-x.ServerTTFTMeanMS), stat.FormatMS(client), n)})
		}
	}
	if x.ServerQueueMeanMS > 0 {
		ev = append(ev, Evidence{"server queue time", stat.FormatMS(x.ServerQueueMeanMS) + " ms mean"})
	}
	return ev
}
