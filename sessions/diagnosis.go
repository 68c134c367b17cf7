package sessions

import "github.com/treni-top/treni-top/trace"

// Verdict is the outcome for one hypothesis of the diagnosis table.
type Verdict string

// Verdicts, from strongest to weakest.
const (
	VerdictDominant     Verdict = "dominant"              // this term explains most of the cold penalty
	VerdictContributes  Verdict = "contributes"           // a real but minor term
	VerdictRuledOut     Verdict = "ruled out"             // the evidence says no
	VerdictInsufficient Verdict = "insufficient evidence" // a probe is missing; Missing says which
)

// Evidence is one number behind a verdict, formatted for people.
type Evidence struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Hypothesis is one row of the decision table of DESIGN.md §5.
type Hypothesis struct {
	Code     string     `json:"code"` // A–F
	Title    string     `json:"title"`
	Score    float64    `json:"score"` // 0–1, for ranking
	Verdict  Verdict    `json:"verdict"`
	Evidence []Evidence `json:"evidence,omitempty"`
	// Missing names the probes whose absence keeps this undecided.
	Missing  []string `json:"missing,omitempty"`
	NextKnob string   `json:"next_knob,omitempty"`
}

// Diagnosis is the ranked decision table for a session.
type Diagnosis struct {
	Hypotheses []Hypothesis `json:"hypotheses"`
	// Dominant is the code of the dominant hypothesis, "" when undecided.
	Dominant string `json:"dominant,omitempty"`
	// Summary is one line for headers and diffs.
	Summary string `json:"summary"`
}

// hypothesisTitles are the rows of DESIGN.md §5.
var hypothesisTitles = [...][2]string{
	{"A", "page cache fill dominated"},
	{"B", "HBM transfer / allocation dominated"},
	{"C", "runtime warm-up dominated"},
	{"D", "first-time KV / buffer allocation dominated"},
	{"E", "process / runtime init dominated"},
	{"F", "queueing / scheduling dominated (warm)"},
}

// Diagnose evaluates the decision table over a session's events. Until the
// evidence rules land (issue 7) every hypothesis is reported as
// insufficient evidence rather than guessed.
func Diagnose(events []trace.Event) Diagnosis {
	d := Diagnosis{Summary: "insufficient evidence: the diagnosis rules have not landed yet (issue 7)"}
	for _, t := range hypothesisTitles {
		d.Hypotheses = append(d.Hypotheses, Hypothesis{
			Code: t[0], Title: t[1], Verdict: VerdictInsufficient,
			Missing: []string{"diagnosis rules (issue 7)"},
		})
	}
	return d
}
