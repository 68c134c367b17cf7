package live

import (
	"errors"
	"os"
	"time"

	"github.com/treni-top/treni-top/sessions"
)

// Options are the settings run and attach share: recording, output and
// the request sequence (the CLI's flags of the same names).
type Options struct {
	// Record is the session file (default: a new file under the user's
	// data directory); NoRecord writes none.
	Record   string
	NoRecord bool
	// Headless prints progress lines instead of the TUI, and the report at
	// the end (JSON with JSON); Start turns it on without a terminal.
	Headless bool
	JSON     bool
	// KeepRunning keeps a headless session sampling after the warm
	// requests until it is interrupted.
	KeepRunning bool
	// Warmup requests follow the cold one unmeasured; Repeat warm ones
	// are measured.
	Warmup, Repeat int
	// MaxTokens and Prompt are every probe request's; RequestModel the
	// model it names (empty: the first the server lists).
	MaxTokens    int
	Prompt       string
	RequestModel string
	// Timeout bounds the wait for health; Grace is the time between
	// SIGINT and SIGKILL when the target is stopped.
	Timeout, Grace time.Duration
	// APIKey is sent as a bearer token (see APIKey).
	APIKey string
	// Version is treni-top's, for the session header.
	Version string
	// Fleet are the OpenTelemetry and Prometheus outputs.
	Fleet FleetOptions
}

// DefaultPrompt is the fixed prompt of the cold sequence: the same text
// every run, so runs compare.
const DefaultPrompt = "Explain in one paragraph why the first request to a freshly started inference server is slower than the next ones."

// Check validates the numbers and the combinations (flag names as the CLI
// spells them).
func (o *Options) Check() error {
	switch {
	case o.Warmup < 0 || o.Repeat < 0:
		return errors.New("--warmup and --repeat must be 0 or more")
	case o.MaxTokens < 1:
		return errors.New("--max-tokens must be at least 1")
	case o.Timeout <= 0:
		return errors.New("--timeout must be positive, e.g. 10m")
	case o.Record != "" && o.NoRecord:
		return sessions.LiveOptions{Record: o.Record, NoRecord: o.NoRecord}.Check()
	case o.JSON && !o.Headless:
		return errors.New("--json prints the final report of a headless run; add --headless")
	}
	return nil
}

// APIKey is the key to send: the flag's, else $OPENAI_API_KEY (what the
// OpenAI clients read), else none.
func APIKey(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("OPENAI_API_KEY")
}
