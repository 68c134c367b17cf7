package sessions

import (
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// reading is the first and last value of one metric seen in a window,
// and the indexes of the events they were read from.
type reading struct {
	first, last   float64
	seen          bool
	iFirst, iLast int
}

func (r *reading) add(v float64, i int) {
	if !r.seen {
		r.first, r.seen, r.iFirst = v, true, i
	}
	r.last, r.iLast = v, i
}

// rise is last − first, or −1 when the metric was not read (RunFacts'
// "probe missing").
func (r reading) rise() float64 {
	if !r.seen {
		return -1
	}
	return r.last - r.first
}

// factCollector accumulates a run's probe readings, event by event.
type factCollector struct {
	run            Run
	cold           trace.Request
	hasCold        bool
	f              RunFacts
	firstRes, last *trace.Sample // page-cache residency samples in the cold window
	read, cached   reading       // IO read bytes, system page cache, over the cold window
	gpu            reading       // GPU memory over the cold window
	gpuReq, rssReq reading       // GPU memory and RSS during the cold request
	// The server's own view (probe/scrape): TTFT sum and count, queue-time
	// readings, over the whole run.
	srvTTFTSum, srvTTFTN, srvQueueSum, srvQueueN float64

	// The indexes of the events the facts were read from (usedSamples):
	// the residency samples above, the first page-cache sample with the
	// weights' size, the first GPU sample, the largest PCIe reading.
	iRes, iLastRes, iWeights, iGPU, iPCIe int
	i                                     int // the event being read
}

// inWindow: at lies in the run's cold window.
func (c *factCollector) inWindow(at time.Duration) bool {
	return at >= c.run.Start && at <= c.run.ColdEnd
}

// inColdRequest: at lies within the cold request.
func (c *factCollector) inColdRequest(at time.Duration) bool {
	return c.hasCold && at >= c.cold.Sent && at <= c.cold.Sent+c.cold.End
}

func newFactCollector(run Run) *factCollector {
	c := &factCollector{run: run, f: RunFacts{ResidentBefore: -1, ResidentAfter: -1}, iRes: -1, iLastRes: -1, iWeights: -1, iGPU: -1, iPCIe: -1}
	c.cold, c.hasCold = run.ColdRequest()
	return c
}

// take reads the run's markers and samples of events, in order.
func (c *factCollector) take(events []trace.Event) {
	for i := range events {
		e := &events[i]
		if e.Run != c.run.Index {
			continue
		}
		c.i = i
		switch e.Kind {
		case trace.KindMarker:
			c.marker(e)
		case trace.KindSample:
			c.sample(e)
		}
	}
}

// usedSamples marks the samples of events that collectFacts reads for
// run: the first and last reading of each metric it weighs in the cold
// window and in the cold request, the largest PCIe reading, the first
// page-cache sample that states the weights' size, the first GPU sample
// and every sample of the server's own metrics (summed over the run).
// collectFacts on any sub-sequence of events that holds these (and the
// run's markers) gives the same facts: DiagnosisInput keeps no more.
func usedSamples(events []trace.Event, run Run) []bool {
	c := newFactCollector(run)
	c.take(events)
	used := make([]bool, len(events))
	for _, i := range []int{c.iRes, c.iLastRes, c.iWeights, c.iGPU, c.iPCIe} {
		if i >= 0 {
			used[i] = true
		}
	}
	for _, r := range []reading{c.read, c.cached, c.gpu, c.gpuReq, c.rssReq} {
		if r.seen {
			used[r.iFirst], used[r.iLast] = true, true
		}
	}
	for i := range events {
		if e := &events[i]; e.Run == run.Index && e.Kind == trace.KindSample && e.Sample.Source == trace.SourceServer {
			used[i] = true
		}
	}
	return used
}

// collectFacts reads the probes' samples and markers for a run.
func collectFacts(events []trace.Event, run Run) RunFacts {
	c := newFactCollector(run)
	c.take(events)
	f := c.f
	if c.srvTTFTN > 0 {
		f.ServerTTFTCount = c.srvTTFTN
		f.ServerTTFTMeanMS = 1000 * c.srvTTFTSum / c.srvTTFTN
	}
	if c.srvQueueN > 0 {
		f.ServerQueueMeanMS = 1000 * c.srvQueueSum / c.srvQueueN
	}
	if f.ResidentBefore < 0 && c.firstRes != nil {
		f.ResidentBefore = c.firstRes.Values[trace.MetricResidentBytes] / c.firstRes.Values[trace.MetricWeightBytes]
	}
	if c.last != nil {
		f.ResidentAfter = c.last.Values[trace.MetricResidentBytes] / c.last.Values[trace.MetricWeightBytes]
	}
	f.IOReadBytes, f.CachedRise = c.read.rise(), c.cached.rise()
	// Memory growth defaults to zero when not read (it may be negative when
	// read: memory freed).
	for _, g := range []struct {
		r   reading
		dst *float64
	}{{c.gpu, &f.GPUMemRise}, {c.gpuReq, &f.GPUMemFirstReq}, {c.rssReq, &f.RSSFirstReq}} {
		if g.r.seen {
			*g.dst = g.r.rise()
		}
	}
	return f
}

// marker reads eviction, the log's clock and the residency check before
// launch.
func (c *factCollector) marker(e *trace.Event) {
	m := e.Marker
	switch m.Name {
	case trace.MarkerEvicted:
		c.f.Evicted = true
	case trace.MarkerLogClock:
		if n, ok := m.Attrs.Float("timed_lines"); ok && n == 0 {
			c.f.UntimedLog = true
		}
	case trace.MarkerLogOrigin:
		// An imported log: its device is what it states, never the
		// importing machine's (which sampled nothing of it).
		c.f.Imported = true
		c.f.LogDevice, _ = m.Attrs.String("device")
		if g, _ := m.Attrs.String("gpus"); g != "" {
			c.f.LogGPU = true
		}
	case trace.MarkerResidency:
		res, ok1 := m.Attrs.Float("resident_bytes")
		tot, ok2 := m.Attrs.Float("total_bytes")
		if ok1 && ok2 && tot > 0 && e.At <= c.run.Start+time.Millisecond*50 {
			// The last check before launch wins (after eviction).
			c.f.ResidentBefore = res / tot
			c.f.WeightBytes = tot
		}
	}
}

// sample reads the page-cache, process and GPU samplers.
func (c *factCollector) sample(e *trace.Event) {
	s := e.Sample
	v := s.Values
	switch {
	case s.Source == trace.SourcePageCache:
		if tot := v[trace.MetricWeightBytes]; tot > 0 {
			if c.f.WeightBytes == 0 {
				c.f.WeightBytes, c.iWeights = tot, c.i
			}
			if c.inWindow(e.At) {
				if c.firstRes == nil {
					c.firstRes, c.iRes = s, c.i
				}
				c.last, c.iLastRes = s, c.i
			}
		}
		if x, ok := v[trace.MetricSysCachedBytes]; ok && c.inWindow(e.At) {
			c.cached.add(x, c.i)
		}
	case s.Source == trace.SourceProcess:
		if x, ok := v[trace.MetricReadBytes]; ok && c.inWindow(e.At) {
			c.read.add(x, c.i)
		}
		if x, ok := v[trace.MetricRSS]; ok && c.inColdRequest(e.At) {
			c.rssReq.add(x, c.i)
		}
	case s.Source == trace.SourceServer:
		// Interval means weighted by the interval's first tokens give the
		// run's mean; queue time has no count, so its readings are averaged.
		if n := v[trace.MetricServerTTFTCount]; n > 0 {
			if m, ok := v[trace.MetricServerTTFTMean]; ok {
				c.srvTTFTSum += m * n
				c.srvTTFTN += n
			}
		}
		if q, ok := v[trace.MetricServerQueueMean]; ok {
			c.srvQueueSum += q
			c.srvQueueN++
		}
	case strings.HasPrefix(s.Source, "gpu"):
		if !c.f.HaveGPU {
			c.f.HaveGPU, c.iGPU = true, c.i
		}
		if x, ok := v[trace.MetricGPUMemUsed]; ok {
			if c.inWindow(e.At) {
				c.gpu.add(x, c.i)
			}
			if c.inColdRequest(e.At) {
				c.gpuReq.add(x, c.i)
			}
		}
		if rx := v[trace.MetricPCIeRX]; rx > c.f.PCIeRXMax && c.inWindow(e.At) {
			c.f.PCIeRXMax, c.iPCIe = rx, c.i
		}
	}
}
