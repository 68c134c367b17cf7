package serverlog

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/treni-top/treni-top/trace"
)

// TestSpansShareNoMemoryWithLines feeds every fixture (and stage lines
// with string attributes) to a deferred parser as pieces of one buffer,
// as import's block reader hands them out, then overwrites the buffer:
// the spans, the stages' names and the origin read the same, so none of
// them keeps the buffer alive. (Go strings cannot change; unsafe.String
// over a buffer the test owns is the only way to see what shares it.)
func TestSpansShareNoMemoryWithLines(t *testing.T) {
	stage := `{"treni_stage":"v1","stage":"kv_alloc","start_ns":1000000000,"end_ns":1500000000,"pid":7,"attrs":{"backend":"cuda","blocks":512,"mode":"paged"}}`
	logs := map[string][]string{"treni stage lines": {stage, strings.Replace(stage, "kv_alloc", "warmup", 1)}}
	for _, rel := range fixtureLogs(t) {
		logs[rel] = readFixture(t, rel)
	}
	for name, lines := range logs {
		buf := []byte(strings.Join(lines, "\n"))
		views := make([]string, 0, len(lines))
		off := 0
		for _, l := range lines {
			if len(l) > 0 {
				views = append(views, unsafe.String(&buf[off], len(l)))
			} else {
				views = append(views, "")
			}
			off += len(l) + 1
		}
		kind := DetectKind(nil, lines)
		p := NewParser(kind, trace.ClockAt(time.Unix(0, 0)))
		p.SetDeferred(true)
		var spans []trace.Span
		for i, l := range views {
			sp, _ := p.Feed(time.Duration(i)*time.Second, l)
			spans = append(spans, sp...)
		}
		spans = append(spans, p.Flush(time.Duration(len(views))*time.Second)...)
		before := fmt.Sprintf("%+v %+v", spans, p.Origin())
		for i := range buf {
			buf[i] = '#'
		}
		if after := fmt.Sprintf("%+v %+v", spans, p.Origin()); after != before {
			t.Errorf("%s: what the parser returned changed with the lines' buffer:\n before %.300s\n after  %.300s", name, before, after)
		}
	}
}
