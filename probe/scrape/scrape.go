// Package scrape reads an inference server's own Prometheus /metrics page
// and turns it into trace samples (source trace.SourceServer) beside the
// client's view: server-side TTFT and inter-token latency over each sampling
// interval, queue time, running and waiting requests, KV-cache usage,
// prefix-cache hits and the server's startup time.
//
// The page is parsed by the Prometheus project's own text-format parser
// (github.com/prometheus/common/expfmt); this package only maps each server
// family's names (vLLM, SGLang, TGI, llama.cpp, the built-in engine) onto one
// small common set (Read) and differences consecutive pages (Interval), so a
// server restart or a metric the server lacks never yields a made-up value.
// docs/ARCHITECTURE.md ("Measurements") says how these readings sit next to
// the client-side ones.
package scrape

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Family is the server that wrote a metrics page.
type Family string

// Known families. FamilyUnknown is a Prometheus page with none of the
// servers' prefixes (a plain exporter, a proxy).
const (
	FamilyUnknown  Family = ""
	FamilyVLLM     Family = "vllm"
	FamilySGLang   Family = "sglang"
	FamilyTGI      Family = "tgi"
	FamilyLlamaCpp Family = "llama.cpp"
	FamilyTreni    Family = "treni"
)

// prefixes maps a metric-name prefix to its family, in detection order.
var prefixes = []struct {
	prefix string
	family Family
}{
	{"vllm:", FamilyVLLM},
	{"sglang:", FamilySGLang},
	{"llamacpp:", FamilyLlamaCpp},
	{"treni_", FamilyTreni},
	{"tgi_", FamilyTGI},
}

// Page is one parsed metrics page: metric families by name.
type Page map[string]*dto.MetricFamily

// Parse parses a page in the Prometheus text exposition format (0.0.4).
// Metric names may hold colons (vLLM's "vllm:…"), which the legacy scheme
// allows. An empty page parses to an empty Page.
func Parse(r io.Reader) (Page, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics page: %w", err)
	}
	return Page(fams), nil
}

// ParseBytes is Parse on a byte slice.
func ParseBytes(b []byte) (Page, error) { return Parse(bytes.NewReader(b)) }

// Detect names the family whose prefix most metric names of the page carry;
// a page with none of them is FamilyUnknown. Counting, rather than taking
// the first hit, keeps a vLLM page that also re-exports a few tgi_ names
// (IBM's TGIS adapter does) a vLLM page.
func Detect(p Page) Family {
	counts := map[Family]int{}
	for name := range p {
		for _, pf := range prefixes {
			if strings.HasPrefix(name, pf.prefix) {
				counts[pf.family]++
				break
			}
		}
	}
	best, n := FamilyUnknown, 0
	for _, pf := range prefixes { // fixed order: ties resolve the same way every time
		if c := counts[pf.family]; c > n {
			best, n = pf.family, c
		}
	}
	return best
}
