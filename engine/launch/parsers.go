package launch

import (
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// DefaultParsers uses trace/serverlog: kind detection from the command and
// the first lines, and the per-server log patterns (including the built-in
// engine's JSON stage lines).
func DefaultParsers() Parsers {
	return Parsers{
		Detect: func(command, firstLines []string) string {
			return string(serverlog.DetectKind(command, firstLines))
		},
		New: func(kind string, clock trace.Clock) LineParser {
			return serverlogParser{serverlog.NewParser(serverlog.Kind(kind), clock)}
		},
	}
}

// serverlogParser adapts *serverlog.Parser to LineParser.
type serverlogParser struct{ p *serverlog.Parser }

// Feed is serverlog.Parser.Feed.
func (s serverlogParser) Feed(at time.Duration, line string) ([]trace.Span, trace.Stage) {
	return s.p.Feed(at, line)
}

// Flush is serverlog.Parser.Flush.
func (s serverlogParser) Flush(at time.Duration) []trace.Span { return s.p.Flush(at) }
