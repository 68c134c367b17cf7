package tui

import (
	"math"
	"strings"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// sampleKey names one sampled quantity: a sample source and one of its
// metrics (trace.Sample.Source, a key of trace.Sample.Values).
type sampleKey struct{ source, metric string }

// sourceAllGPUs is the pseudo-source a series spec names to plot a GPU
// metric summed over every device (gpu0, gpu1, …).
const sourceAllGPUs = "gpu*"

// maxSampleKeys bounds how many (source, metric) histories are kept, so a
// session with a flood of distinct metric names cannot grow the UI without
// limit; the charts only ever plot the few their specs name.
const maxSampleKeys = 512

// sampleStore keeps the history of every sampled metric, so the Charts
// pane is driven by its series specs alone: a new series is a new spec row,
// not a new field here.
type sampleStore struct {
	series map[sampleKey]*series
	// latest is each GPU's latest reading per metric; a GPU metric's
	// sourceAllGPUs series gets one point per GPU sample, the sum of
	// every device's latest reading.
	latest map[sampleKey]float64
}

// isGPUSource reports whether src is a per-device GPU source ("gpu0").
func isGPUSource(src string) bool {
	rest, ok := strings.CutPrefix(src, "gpu")
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// add records every value of a sample at offset at.
func (s *sampleStore) add(at time.Duration, sm *trace.Sample) {
	if s.series == nil {
		s.series, s.latest = map[sampleKey]*series{}, map[sampleKey]float64{}
	}
	gpu := isGPUSource(sm.Source)
	for m, v := range sm.Values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue // a broken reading must reach neither the plot nor a sum
		}
		sr := s.get(sampleKey{sm.Source, m}, true)
		if sr == nil {
			continue
		}
		sr.add(at, v)
		if !gpu {
			continue
		}
		s.latest[sampleKey{sm.Source, m}] = v
		if all := s.get(sampleKey{sourceAllGPUs, m}, true); all != nil {
			var tot float64
			for k, x := range s.latest {
				if k.metric == m {
					tot += x
				}
			}
			all.add(at, tot)
		}
	}
}

// get returns the series of k, creating it when create is set and the
// store is not full; nil when there is none.
func (s *sampleStore) get(k sampleKey, create bool) *series {
	if sr, ok := s.series[k]; ok || !create {
		return sr
	}
	if len(s.series) >= maxSampleKeys {
		return nil
	}
	sr := &series{}
	s.series[k] = sr
	return sr
}

// lookup is get without creating, safe on an empty store.
func (s *sampleStore) lookup(source, metric string) *series {
	if s.series == nil {
		return nil
	}
	return s.series[sampleKey{source, metric}]
}

// ratio is scale·a/b for the points of a and b taken at the same offset
// (two metrics of the same samples), skipping points where b is not
// positive.
func ratio(a, b *series, scale float64) []float64 {
	if a == nil || b == nil {
		return nil
	}
	var out []float64
	i, j := 0, 0
	for i < len(a.t) && j < len(b.t) {
		switch {
		case a.t[i] < b.t[j]:
			i++
		case a.t[i] > b.t[j]:
			j++
		default:
			if b.v[j] > 0 {
				out = append(out, scale*a.v[i]/b.v[j])
			}
			i++
			j++
		}
	}
	return out
}
