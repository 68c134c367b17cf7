package sessions

import (
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

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
