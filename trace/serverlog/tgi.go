package serverlog

import (
	"regexp"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// TGI stage lines (PATTERNS.md §3).
var (
	reTRank       = regexp.MustCompile(`\brank=(\d+)`)
	reTShards     = regexp.MustCompile(`Sharding model on (\d+) processes`)
	reTShardReady = regexp.MustCompile(`Shard (?:(\d+) )?ready in ((?:[0-9.]+(?:ns|µs|us|ms|s|m|h))+)`)
	reTJSONRank   = regexp.MustCompile(`"rank":\s*(\d+)`)
	reTKVBlocks   = regexp.MustCompile(`KV-cache blocks: (\d+), size: (\d+)`)
	reTGraphSizes = regexp.MustCompile(`Cuda Graphs are enabled for sizes \[([^\]]*)\]`)
	reTMaxTokens  = regexp.MustCompile(`Setting max batch total tokens to (\d+)`)
)

// tgi turns one TGI launcher or router line into hits.
//
// Mapping: runtime_init is first line → "Starting download process" (the
// launcher itself; the download step that follows checks or fetches the
// weights and has no canonical stage, so it stays unattributed); model_load
// is each shard's "Starting shard" → "Shard ready in …" (the server's total
// for loading; shards collapse with Workers = N); the router's warm-up is
// split at the shard's "KV-cache blocks" (kv_alloc) and "Cuda Graphs are
// enabled" (graph_capture) lines, all ending at "Setting max batch total
// tokens" (its figure is the KV capacity in tokens); http_ready runs from
// there to "Connected".
func (p *Parser) tgi(at time.Duration, line string) string {
	msg := line
	if _, end, ok := findRFC3339(line, 80); ok {
		msg = strings.TrimLeft(line[end:], " ")
		if sp := strings.IndexByte(msg, ' '); sp > 0 && sp < 6 {
			msg = strings.TrimLeft(msg[sp:], " ") // the level
		}
	}
	worker := ""
	if strings.Contains(msg, "rank") {
		m := reTRank.FindStringSubmatch(msg)
		if m == nil {
			m = reTJSONRank.FindStringSubmatch(msg) // --json-output
		}
		if m != nil {
			worker = "rank=" + m[1]
			p.sawWorkers = true
		}
	}
	switch {
	case strings.Contains(msg, "Sharding model on"):
		if m := reTShards.FindStringSubmatch(msg); m != nil {
			p.setWorkers(atoi(m[1]))
		}
	case strings.Contains(msg, "Starting download process") || strings.Contains(msg, "Starting check and download process"):
		p.add(hit{stage: trace.StageRuntimeInit, op: opEngineStart})
	case strings.Contains(msg, "Starting shard"):
		p.add(hit{stage: trace.StageRuntimeInit, op: opEngineStart})
		if worker == "" {
			if f := strings.Fields(msg[strings.Index(msg, "Starting shard")+len("Starting shard"):]); len(f) > 0 && isDigits(f[0]) {
				worker = "rank=" + f[0]
			}
		}
		p.add(hit{stage: trace.StageModelLoad, op: opOpen})
	case strings.Contains(msg, "ready in "):
		m := reTShardReady.FindStringSubmatch(msg)
		if m == nil {
			break
		}
		if worker == "" && m[1] != "" {
			worker = "rank=" + m[1]
		}
		h := hit{stage: trace.StageModelLoad, op: opClose}
		if d, err := time.ParseDuration(m[2]); err == nil && d >= 0 {
			h.reported, h.hasReported, h.stated = d.Seconds(), true, true
			h.start, h.hasStart = at-d, true
		}
		p.add(h)
	case strings.Contains(msg, "Warming up model"):
		p.add(hit{stage: trace.StageWarmup, op: opOpen, main: true})
	case strings.Contains(msg, "KV-cache blocks:"):
		if m := reTKVBlocks.FindStringSubmatch(msg); m != nil {
			p.closeOpen(trace.StageWarmup)
			p.add(hit{stage: trace.StageKVAlloc, op: opOpen, main: true, set: trace.Attrs{trace.AttrBlocks: atof(m[1]), "block_size": atof(m[2])}})
		}
	case strings.Contains(msg, "Cuda Graphs are enabled for sizes"):
		p.closeOpen(trace.StageWarmup)
		p.closeOpen(trace.StageKVAlloc)
		h := hit{stage: trace.StageGraphCapture, op: opOpen, main: true}
		if m := reTGraphSizes.FindStringSubmatch(msg); m != nil {
			h.set = trace.Attrs{trace.AttrBuckets: float64(len(strings.Split(m[1], ",")))}
		}
		p.add(h)
	case strings.Contains(msg, "Setting max batch total tokens to"):
		m := reTMaxTokens.FindStringSubmatch(msg)
		if m == nil {
			break
		}
		p.closeOpen(trace.StageWarmup)
		p.closeOpen(trace.StageGraphCapture)
		tokens := trace.Attrs{trace.AttrTokens: atof(m[1])}
		if g := p.latest(trace.StageKVAlloc); g != nil && at-g.lastActivity <= time.Minute {
			p.closeOpen(trace.StageKVAlloc)
			p.add(hit{stage: trace.StageKVAlloc, op: opAnnotate, set: tokens})
		} else {
			p.add(hit{stage: trace.StageKVAlloc, op: opClose, main: true, set: tokens})
		}
		p.add(hit{stage: trace.StageHTTPReady, op: opOpen, main: true})
	case strings.HasSuffix(msg, ": Connected") || msg == "Connected" || strings.Contains(msg, `"message":"Connected"`):
		p.add(hit{stage: trace.StageHTTPReady, op: opClose, main: true})
		p.add(hit{op: opReady})
	}
	return worker
}

// findRFC3339 finds "YYYY-MM-DDTHH:MM:SS[.fff](Z|±hh:mm)" starting within
// the first n bytes, without allocating (TGI prefixes every line).
func findRFC3339(s string, n int) (start, end int, ok bool) {
	for i := 0; i <= n && i+20 <= len(s); i++ {
		if s[i+4] != '-' || s[i+7] != '-' || s[i+10] != 'T' || s[i+13] != ':' || s[i+16] != ':' ||
			!isDigits(s[i:i+4]) || !isDigits(s[i+11:i+13]) || !isDigits(s[i+17:i+19]) {
			continue
		}
		j := i + 19
		if j < len(s) && s[j] == '.' {
			j++
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
		}
		switch {
		case j < len(s) && s[j] == 'Z':
			return i, j + 1, true
		case j+6 <= len(s) && (s[j] == '+' || s[j] == '-') && s[j+3] == ':':
			return i, j + 6, true
		}
	}
	return 0, 0, false
}

// closeOpen ends the latest span of stage at this line if it is running.
func (p *Parser) closeOpen(stage trace.Stage) {
	if g := p.latest(stage); g != nil && g.hasOpen() {
		p.add(hit{stage: stage, op: opClose, main: true})
	}
}
