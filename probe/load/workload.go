// Package load is treni-top's load generator: the serving workloads of the
// serving benchmark log (baseline, continuous_batching, paged_attention,
// chunked_prefill, prefix_caching), QPS sweeps with Poisson arrivals and
// custom workloads, sent to an OpenAI-compatible server by a lean streaming
// client that is built never to be the bottleneck (1,000 concurrent streams
// and 100,000 tokens/s in one process), timed as docs/ARCHITECTURE.md ("Measurements") defines, and
// summarised per run and across repeats in a versioned JSON report
// (docs/BENCH_SCHEMA.md) and a Markdown table.
//
// Every request becomes one trace.Request event (trace.PhaseBench, or
// trace.PhaseWarmup for warm-up runs) on the trace.Sink the caller hands in,
// between trace.MarkerBenchStart and trace.MarkerBenchEnd markers, so that a
// recorded bench session can be reported, replayed and diffed.
package load

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"
)

// CharsPerToken is the approximation used to size prompts: English prose
// averages about four characters per token for the common BPE vocabularies.
// The real counts are the server's (usage.prompt_tokens).
const CharsPerToken = 4

// Arrival patterns.
const (
	// Sequential sends the next request when the previous one has finished.
	Sequential = "sequential"
	// Uniform sends requests evenly spaced at Rate per second.
	Uniform = "uniform"
	// Burst sends every request at once.
	Burst = "burst"
	// Poisson sends requests with exponentially distributed gaps of mean
	// 1/Rate (a Poisson process), drawn from the seed.
	Poisson = "poisson"
)

// Range is an inclusive range of token counts; a value is drawn uniformly.
type Range struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// Fixed is the range holding only n.
func Fixed(n int) Range { return Range{n, n} }

// String renders the range as the benchmark log does: "256" or "[64, 512]".
func (r Range) String() string {
	if r.Min == r.Max {
		return fmt.Sprint(r.Min)
	}
	return fmt.Sprintf("[%d, %d]", r.Min, r.Max)
}

func (r Range) draw(rng *rand.Rand) int {
	if r.Max <= r.Min {
		return r.Min
	}
	return r.Min + rng.IntN(r.Max-r.Min+1)
}

func (r Range) check(what string) error {
	if r.Min < 1 || r.Max < r.Min {
		return fmt.Errorf("%s range %s is invalid: give min ≥ 1 and max ≥ min", what, r)
	}
	if r.Max > 1<<20 {
		return fmt.Errorf("%s max %d is beyond any context window; give at most 1048576", what, r.Max)
	}
	return nil
}

// MixPart is one class of prompt lengths in a mix, with its share of the
// requests.
type MixPart struct {
	Weight float64 `json:"weight"`
	Tokens Range   `json:"tokens"`
}

// Arrival says when requests are sent.
type Arrival struct {
	// Pattern is Sequential, Uniform, Burst or Poisson.
	Pattern string `json:"pattern"`
	// Rate is requests per second for Uniform and Poisson.
	Rate float64 `json:"rate,omitempty"`
}

// String renders the arrival as the benchmark log does: "uniform 4 RPS".
func (a Arrival) String() string {
	switch a.Pattern {
	case Uniform, Poisson:
		return fmt.Sprintf("%s %g RPS", a.Pattern, a.Rate)
	}
	return a.Pattern
}

// Spec defines a workload. It is also the format of a custom workload file
// (JSON, one Spec or an array of them; see docs/BENCH_SCHEMA.md).
type Spec struct {
	Name string `json:"name"`
	// Requests is how many requests one run sends.
	Requests int `json:"requests"`
	// PromptTokens is the prompt length range; ignored when PromptMix is
	// set. With SharedPrefixTokens it is the per-request suffix.
	PromptTokens Range `json:"prompt_tokens"`
	// PromptMix splits the requests into length classes by weight (the
	// counts are exact, by largest remainder, and shuffled by the seed).
	PromptMix []MixPart `json:"prompt_mix,omitempty"`
	// SharedPrefixTokens, when > 0, puts the same prefix of about that many
	// tokens in front of every prompt (prefix caching).
	SharedPrefixTokens int `json:"shared_prefix_tokens,omitempty"`
	// MaxTokens is the output length range, sent as max_tokens.
	MaxTokens Range   `json:"max_tokens"`
	Arrival   Arrival `json:"arrival"`
	// Measures says what the workload is for (from the benchmark log).
	Measures string `json:"measures,omitempty"`
	// PromptSeed is added to the bench's seed for this workload's prompt
	// texts, so that workloads of the same shape send different prompts
	// (a sweep's levels: otherwise each level would resend the last
	// one's prompts, and a server's prefix cache would serve them).
	PromptSeed uint64 `json:"prompt_seed,omitempty"`
}

// Builtin returns the five workloads of the serving benchmark log, exactly
// as it defines them, in its order. Each call returns fresh values.
func Builtin() []Spec {
	return []Spec{
		{Name: "baseline", Requests: 10, PromptTokens: Fixed(256), MaxTokens: Fixed(256),
			Arrival: Arrival{Pattern: Sequential}, Measures: "single-request overhead floor"},
		{Name: "continuous_batching", Requests: 32, PromptTokens: Range{64, 512}, MaxTokens: Range{64, 256},
			Arrival: Arrival{Pattern: Uniform, Rate: 4}, Measures: "TTFT P95/P99 (per-step admit/retire)"},
		{Name: "paged_attention", Requests: 48, PromptTokens: Range{128, 384}, MaxTokens: Range{128, 256},
			Arrival: Arrival{Pattern: Burst}, Measures: "throughput + TTFT (admission per memory budget)"},
		{Name: "chunked_prefill", Requests: 48,
			PromptMix: []MixPart{{Weight: 0.75, Tokens: Range{1024, 2048}}, {Weight: 0.25, Tokens: Range{64, 128}}},
			MaxTokens: Range{64, 256}, Arrival: Arrival{Pattern: Poisson, Rate: 6},
			Measures: "ITL P95/P99 (long prefills block decode)"},
		{Name: "prefix_caching", Requests: 48, SharedPrefixTokens: 1024, PromptTokens: Range{32, 128},
			MaxTokens: Fixed(256), Arrival: Arrival{Pattern: Uniform, Rate: 8},
			Measures: "TTFT P50/P95 (repeated prefill cost)"},
	}
}

// BuiltinNames lists the built-in workloads' names.
func BuiltinNames() []string {
	var out []string
	for _, s := range Builtin() {
		out = append(out, s.Name)
	}
	return out
}

// Lookup returns the built-in workload called name.
func Lookup(name string) (Spec, error) {
	for _, s := range Builtin() {
		if s.Name == name {
			return s, nil
		}
	}
	return Spec{}, fmt.Errorf("no workload %q; choose one of %s, or all", name, strings.Join(BuiltinNames(), ", "))
}

// Custom is a workload of n requests of p prompt tokens and t output tokens
// with the given arrival.
func Custom(n, p, t int, a Arrival) Spec {
	return Spec{Name: fmt.Sprintf("custom_n%d_p%d_t%d", n, p, t), Requests: n,
		PromptTokens: Fixed(p), MaxTokens: Fixed(t), Arrival: a}
}

// QPS sweep defaults, as in the openinfer vs vLLM comparison: Poisson
// arrivals, input 1024 / output 128 tokens.
const (
	SweepPromptTokens = 1024
	SweepMaxTokens    = 128
	// SweepSeconds and SweepMinRequests size a sweep level when no request
	// count is given: 30 seconds' worth of arrivals (unless told another
	// span), at least 16 requests.
	SweepSeconds     = 30
	SweepMinRequests = 16
)

// Sweep returns one Poisson workload per rate, named qps_<rate>, each with
// prompts of its own (PromptSeed: the level's position). n, p and t
// of zero take the defaults (seconds of arrivals at least 16, 1024, 128);
// seconds of zero is SweepSeconds.
func Sweep(rates []float64, n, p, t int, seconds float64) ([]Spec, error) {
	if seconds == 0 {
		seconds = SweepSeconds
	}
	if !(seconds > 0) || math.IsInf(seconds, 0) {
		return nil, fmt.Errorf("a sweep level of %g seconds; give a positive span, e.g. --sweep-seconds 10", seconds)
	}
	if p == 0 {
		p = SweepPromptTokens
	}
	if t == 0 {
		t = SweepMaxTokens
	}
	var out []Spec
	for i, q := range rates {
		if !(q > 0) || math.IsInf(q, 0) {
			return nil, fmt.Errorf("QPS %g is not a positive rate; give e.g. --qps 1,2,4,8", q)
		}
		k := n
		if k == 0 {
			k = max(SweepMinRequests, int(math.Ceil(q*seconds)))
		}
		s := Spec{Name: "qps_" + strings.ReplaceAll(fmt.Sprintf("%g", q), ".", "_"), Requests: k,
			PromptTokens: Fixed(p), MaxTokens: Fixed(t), Arrival: Arrival{Pattern: Poisson, Rate: q},
			Measures: "QPS sweep level", PromptSeed: uint64(i)}
		if err := s.Validate(); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// MaxRequests bounds a run, so that a typo cannot queue millions of requests.
const MaxRequests = 1_000_000

// Validate checks the spec and says what to fix.
func (s Spec) Validate() error {
	if s.Name == "" {
		return errors.New("workload has no name; give it one (\"name\": \"…\")")
	}
	if s.Requests < 1 || s.Requests > MaxRequests {
		return fmt.Errorf("workload %s: requests %d out of range; give 1 to %d", s.Name, s.Requests, MaxRequests)
	}
	if len(s.PromptMix) > 0 {
		var sum float64
		for i, m := range s.PromptMix {
			if !(m.Weight > 0) || math.IsInf(m.Weight, 0) {
				return fmt.Errorf("workload %s: prompt_mix[%d] weight %g must be positive", s.Name, i, m.Weight)
			}
			if err := m.Tokens.check(fmt.Sprintf("workload %s: prompt_mix[%d] tokens", s.Name, i)); err != nil {
				return err
			}
			sum += m.Weight
		}
		if sum <= 0 {
			return fmt.Errorf("workload %s: prompt_mix weights sum to zero", s.Name)
		}
	} else if err := s.PromptTokens.check("workload " + s.Name + ": prompt_tokens"); err != nil {
		return err
	}
	if s.SharedPrefixTokens < 0 || s.SharedPrefixTokens > 1<<20 {
		return fmt.Errorf("workload %s: shared_prefix_tokens %d out of range; give 0 to 1048576", s.Name, s.SharedPrefixTokens)
	}
	if err := s.MaxTokens.check("workload " + s.Name + ": max_tokens"); err != nil {
		return err
	}
	switch s.Arrival.Pattern {
	case Sequential, Burst:
	case Uniform, Poisson:
		if !(s.Arrival.Rate > 0) || math.IsInf(s.Arrival.Rate, 0) {
			return fmt.Errorf("workload %s: %s arrivals need a positive rate (requests per second)", s.Name, s.Arrival.Pattern)
		}
	default:
		return fmt.Errorf("workload %s: arrival pattern %q unknown; use sequential, uniform, burst or poisson", s.Name, s.Arrival.Pattern)
	}
	return nil
}

// PromptDescription renders the prompt lengths as the benchmark log does.
func (s Spec) PromptDescription() string {
	switch {
	case len(s.PromptMix) > 0:
		var sum float64
		for _, m := range s.PromptMix {
			sum += m.Weight
		}
		var parts []string
		for _, m := range s.PromptMix {
			parts = append(parts, fmt.Sprintf("%.0f%% %s", 100*m.Weight/sum, m.Tokens))
		}
		return strings.Join(parts, " + ")
	case s.SharedPrefixTokens > 0:
		return fmt.Sprintf("%d shared prefix + %s suffix", s.SharedPrefixTokens, s.PromptTokens)
	}
	return s.PromptTokens.String()
}

// LoadSpecs reads custom workloads from a JSON file: one Spec object or an
// array of them. Unknown fields are errors, so that a misspelt field is not
// silently ignored.
func LoadSpecs(path string) ([]Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open workload file: %w", err)
	}
	defer f.Close()
	specs, err := ParseSpecs(f)
	if err != nil {
		return nil, fmt.Errorf("workload file %s: %w", path, err)
	}
	return specs, nil
}

// ParseSpecs decodes one Spec or an array of Specs and validates them.
func ParseSpecs(r io.Reader) ([]Spec, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read workloads: %w", err)
	}
	trimmed := strings.TrimSpace(string(b))
	var specs []Spec
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if strings.HasPrefix(trimmed, "[") {
		err = dec.Decode(&specs)
	} else {
		var s Spec
		err = dec.Decode(&s)
		specs = []Spec{s}
	}
	if err != nil {
		return nil, fmt.Errorf("not a workload spec (see docs/BENCH_SCHEMA.md, \"custom workloads\"): %w", err)
	}
	if len(specs) == 0 {
		return nil, errors.New("the file holds no workloads")
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("workload name %q appears twice; names must be unique", s.Name)
		}
		seen[s.Name] = true
	}
	return specs, nil
}

// Item is one request of a generated run.
type Item struct {
	Index int
	// At is the planned send time, from the start of the run. Sequential
	// items have zero: each goes when the previous one ends.
	At time.Duration
	// Prompt is the text sent; PromptTokens the length it was sized for,
	// or with a tokenizer its count of Prompt (the server's count is in
	// the result).
	Prompt       string
	PromptTokens int
	MaxTokens    int
}

// Generate draws a run of the workload from seed: prompt and output lengths,
// prompts from the corpus, arrival times. The same seed gives the same run.
// Prompts are sized at CharsPerToken characters a token; GenerateTokens
// sizes them with the served model's tokenizer.
func (s Spec) Generate(seed uint64, c *Corpus) ([]Item, error) { return s.GenerateTokens(seed, c, nil) }

// GenerateTokens is Generate with prompts of their drawn lengths in tok's
// tokens (a shared prefix and its suffix each, with a blank line between
// them; see Corpus.PassageTokens), and each Item's PromptTokens tok's count
// of the prompt sent; tok nil sizes them as Generate does.
func (s Spec) GenerateTokens(seed uint64, c *Corpus, tok Tokenizer) ([]Item, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if c == nil || c.Len() == 0 {
		return nil, errors.New("no prompt corpus")
	}
	// Separate streams for lengths, text and arrivals, so that changing
	// the arrival pattern does not change the prompts.
	lenRNG := rand.New(rand.NewPCG(seed, 0x6c656e67746873))
	txtRNG := rand.New(rand.NewPCG(seed+s.PromptSeed, 0x70726f6d707473))
	arrRNG := rand.New(rand.NewPCG(seed, 0x617272697661))

	items := make([]Item, s.Requests)
	promptLens := s.promptLengths(lenRNG)
	// passage returns n tokens of prose and tok's count of it (n without
	// a tokenizer).
	passage := func(n int) (string, int, error) {
		if tok == nil {
			return c.Passage(txtRNG, n*CharsPerToken), n, nil
		}
		return c.PassageTokens(txtRNG, n, tok)
	}
	var prefix string
	if s.SharedPrefixTokens > 0 {
		p, _, err := passage(s.SharedPrefixTokens)
		if err != nil {
			return nil, fmt.Errorf("workload %s: shared prefix: %w", s.Name, err)
		}
		prefix = p + "\n\n"
	}
	for i := range items {
		p, n, err := passage(promptLens[i])
		if err != nil {
			return nil, fmt.Errorf("workload %s: prompt %d: %w", s.Name, i, err)
		}
		items[i] = Item{Index: i, Prompt: prefix + p, PromptTokens: s.SharedPrefixTokens + n, MaxTokens: s.MaxTokens.draw(lenRNG)}
		if tok != nil && prefix != "" {
			// What the server will count: the prefix and its blank line
			// may merge with the suffix's first token.
			items[i].PromptTokens = len(tok.Encode(items[i].Prompt))
		}
	}
	var t float64 // seconds
	for i := range items {
		switch s.Arrival.Pattern {
		case Uniform:
			t = float64(i) / s.Arrival.Rate
		case Poisson:
			if i > 0 {
				t += arrRNG.ExpFloat64() / s.Arrival.Rate
			}
		}
		items[i].At = time.Duration(t * float64(time.Second))
	}
	return items, nil
}

// promptLengths draws the prompt (or suffix) length of every request.
func (s Spec) promptLengths(rng *rand.Rand) []int {
	out := make([]int, s.Requests)
	if len(s.PromptMix) == 0 {
		for i := range out {
			out[i] = s.PromptTokens.draw(rng)
		}
		return out
	}
	// Exact class counts by largest remainder, then a seeded shuffle, so
	// that "75%" of 48 is 36 and not whatever a coin gives.
	var sum float64
	for _, m := range s.PromptMix {
		sum += m.Weight
	}
	counts := make([]int, len(s.PromptMix))
	type rem struct {
		i int
		r float64
	}
	var rems []rem
	total := 0
	for i, m := range s.PromptMix {
		exact := float64(s.Requests) * m.Weight / sum
		counts[i] = int(math.Floor(exact))
		total += counts[i]
		rems = append(rems, rem{i, exact - float64(counts[i])})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; total < s.Requests; k++ {
		counts[rems[k%len(rems)].i]++
		total++
	}
	classes := make([]int, 0, s.Requests)
	for i, n := range counts {
		for range n {
			classes = append(classes, i)
		}
	}
	rng.Shuffle(len(classes), func(a, b int) { classes[a], classes[b] = classes[b], classes[a] })
	for i, cl := range classes {
		out[i] = s.PromptMix[cl].Tokens.draw(rng)
	}
	return out
}
