package serverlog

import (
	"math"
	"testing"

	"github.com/treni-top/treni-top/trace"
)

// statedTolerance is how far a span may be from the duration its server
// stated: 3 %, the slack of a figure printed with two or three digits.
const statedTolerance = 0.03

// checkStated asserts, for one parsed log, that every span whose server
// stated its duration is that long, and returns how many it checked.
//
// One worker: the span's length is the stated figure. Several workers:
// each is as long as its own figure and the span is their union, so it
// is at least the longest figure and at most that plus the spread of the
// workers' figures' lines (reported_s − reported_min_s bounds nothing;
// the union is checked against the largest figure only from below).
// vLLM's "Model loading took" covers the weight upload, which is its own
// span: model_load + decoder_tensor_upload is at most the figure.
func checkStated(t *testing.T, spans []trace.Span) int {
	t.Helper()
	n := 0
	var upload float64
	for _, s := range spans {
		if s.Name == trace.StageDecoderTensorUpload && s.Workers <= 1 {
			upload = s.Duration().Seconds()
		}
	}
	for _, s := range spans {
		rep, ok := s.Attrs.Float(trace.AttrReported)
		if !ok || rep <= 0 {
			continue
		}
		d := s.Duration().Seconds()
		if stated, _ := s.Attrs[AttrStated].(bool); stated {
			n++
			if s.Workers > 1 {
				if d < rep*(1-statedTolerance) {
					t.Errorf("%s ×%d: %.3fs, shorter than its longest worker's stated %.3fs", s.Name, s.Workers, d, rep)
				}
				continue
			}
			if math.Abs(d-rep) > statedTolerance*rep {
				t.Errorf("%s: %.3fs, stated %.3fs (more than 3%% apart)", s.Name, d, rep)
			}
			continue
		}
		if s.Name == trace.StageModelLoad && s.Source == "log:vllm" && s.Workers <= 1 {
			// The figure covers both, and whatever vLLM did between the
			// upload's end and its line (no stage: unattributed).
			n++
			if d+upload > rep*(1+statedTolerance) {
				t.Errorf("model_load %.3fs + upload %.3fs exceed the stated %.3fs", d, upload, rep)
			}
		}
	}
	return n
}

// TestStatedDurations: in every fixture, a duration the server printed
// wins over the line timestamps (often one-second resolution), within 3 %.
func TestStatedDurations(t *testing.T) {
	total := 0
	for _, rel := range fixtureLogs(t) {
		t.Run(rel, func(t *testing.T) {
			_, spans, _, _ := parseFixture(t, rel, true)
			total += checkStated(t, spans)
		})
	}
	if total < 20 {
		t.Errorf("only %d stated durations checked across the fixtures", total)
	}
	t.Logf("%d stated durations checked", total)
}
