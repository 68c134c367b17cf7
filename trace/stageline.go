package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// StageLineTag is the value of the "treni_stage" key that marks a line as one
// of the built-in engine's stage lines.
const StageLineTag = "v1"

// StageLine is the built-in engine's structured report of one cold stage:
// one JSON object on one stderr line, wall-clock nanoseconds since the Unix
// epoch for start and end, and attributes. The launcher parses these lines
// like any other server's log (docs/ARCHITECTURE.md, "Data flow"), so
// standalone
// `treni-top serve` is a normal server with normal, readable logs.
//
//	{"treni_stage":"v1","stage":"tensor_index_build","start_ns":…,"end_ns":…,"attrs":{"tensors":398,"bytes":…}}
type StageLine struct {
	Tag     string `json:"treni_stage"`
	Stage   Stage  `json:"stage"`
	StartNS int64  `json:"start_ns"`
	EndNS   int64  `json:"end_ns"`
	// PID of the reporting process, so a wrapper's lines are told apart.
	PID   int   `json:"pid,omitempty"`
	Attrs Attrs `json:"attrs,omitempty"`
}

// NewStageLine builds a stage line for the interval [start, end).
func NewStageLine(stage Stage, start, end time.Time, attrs Attrs) StageLine {
	return StageLine{Tag: StageLineTag, Stage: stage, StartNS: start.UnixNano(), EndNS: end.UnixNano(), Attrs: attrs}
}

// Marshal renders the line without a trailing newline.
func (l StageLine) Marshal() []byte {
	b, err := json.Marshal(l)
	if err != nil {
		// Attrs hold only numbers and strings; anything else is a
		// programming error in the engine, reported in the line itself.
		b, _ = json.Marshal(StageLine{Tag: l.Tag, Stage: l.Stage, StartNS: l.StartNS, EndNS: l.EndNS, PID: l.PID,
			Attrs: Attrs{"attrs_error": err.Error()}})
	}
	return b
}

// ErrNotStageLine is returned by ParseStageLine for ordinary log lines.
var ErrNotStageLine = errors.New("not a treni stage line")

// ParseStageLine parses one log line. Lines that are not stage lines return
// ErrNotStageLine; malformed stage lines return a descriptive error.
func ParseStageLine(line string) (StageLine, error) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") || !strings.Contains(line, `"treni_stage"`) {
		return StageLine{}, ErrNotStageLine
	}
	var l StageLine
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		return StageLine{}, fmt.Errorf("malformed treni stage line: %w", err)
	}
	if l.Tag != StageLineTag {
		return StageLine{}, fmt.Errorf("treni stage line version %q, this build reads %q", l.Tag, StageLineTag)
	}
	if !l.Stage.Valid() {
		return StageLine{}, fmt.Errorf("treni stage line names unknown stage %q", l.Stage)
	}
	if l.EndNS < l.StartNS {
		return StageLine{}, fmt.Errorf("treni stage line %s ends before it starts", l.Stage)
	}
	return l, nil
}

// Span converts the line to a span on clock c.
func (l StageLine) Span(c Clock) Span {
	return Span{
		Name:   l.Stage,
		Start:  c.At(time.Unix(0, l.StartNS)),
		End:    c.At(time.Unix(0, l.EndNS)),
		Source: "engine",
		Attrs:  l.Attrs,
	}
}
