package load

import (
	"embed"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// corpusFS holds the prompt corpus: plain English prose written for this
// repository (no downloaded text), so that prompts are realistic language
// for any tokenizer and identical on every machine.
//
//go:embed corpus/*.txt
var corpusFS embed.FS

// Corpus is the text prompts are cut from. It is immutable after creation
// and safe for concurrent use.
type Corpus struct {
	text string
	// starts are the offsets of sentence beginnings, where passages start.
	starts []int
}

// DefaultCorpus loads the embedded corpus. It returns a new value on every
// call (there is no package-level cache to mutate); keep the one you get.
func DefaultCorpus() (*Corpus, error) {
	ents, err := corpusFS.ReadDir("corpus")
	if err != nil {
		return nil, fmt.Errorf("read the embedded corpus (a broken build?): %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		data, err := corpusFS.ReadFile("corpus/" + n)
		if err != nil {
			return nil, fmt.Errorf("read the embedded corpus file %s: %w", n, err)
		}
		b.WriteString(strings.TrimSpace(string(data)))
		b.WriteString("\n\n")
	}
	return NewCorpus(b.String())
}

// NewCorpus makes a corpus from text (tests, or a user's own corpus).
func NewCorpus(text string) (*Corpus, error) {
	// Collapse every run of whitespace to one space: prompts then hold
	// exactly the prose, and character counts mean what they say.
	text = strings.Join(strings.Fields(text), " ")
	if len(text) < 64 {
		return nil, fmt.Errorf("corpus of %d characters is too small to cut prompts from; give at least a few sentences", len(text))
	}
	c := &Corpus{text: text, starts: []int{0}}
	for i := 0; i+2 < len(text); i++ {
		if (text[i] == '.' || text[i] == '?' || text[i] == '!') && text[i+1] == ' ' {
			c.starts = append(c.starts, i+2)
		}
	}
	return c, nil
}

// Len is the corpus size in bytes.
func (c *Corpus) Len() int {
	if c == nil {
		return 0
	}
	return len(c.text)
}

// Passage returns about n characters of prose starting at a sentence chosen
// by rng, wrapping around the end of the corpus, cut at a word boundary.
func (c *Corpus) Passage(rng *rand.Rand, n int) string {
	if n <= 0 {
		return ""
	}
	return c.passageFrom(c.starts[rng.IntN(len(c.starts))], n)
}

// passageFrom is Passage from the corpus offset start.
func (c *Corpus) passageFrom(start, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	pos := start
	for b.Len() < n {
		take := min(n-b.Len(), len(c.text)-pos)
		b.WriteString(c.text[pos : pos+take])
		pos += take
		if pos >= len(c.text) {
			pos = 0
			b.WriteByte(' ')
		}
	}
	// Finish the word that was cut, rather than leaving half of one.
	end := pos
	for end < len(c.text) && c.text[end] != ' ' && end-pos < 24 {
		end++
	}
	b.WriteString(c.text[pos:end])
	return strings.TrimSpace(b.String())
}

// Tokenizer is the served model's tokenizer, with which a bench sizes its
// prompts in that model's tokens (engine/tokenizer's Tokenizer is one).
// Without one, a prompt of n tokens is n·CharsPerToken characters, which
// real tokenizers count differently: Qwen3's made 848 tokens of the
// 1,024-token workload's 4,096 characters (docs/BENCHMARKS.md,
// fourteenth session).
type Tokenizer interface {
	Encode(text string) []int32
	Decode(ids []int32) string
}

// PassageTokens returns prose starting at a sentence chosen by rng that tok
// encodes as n tokens, and the count it does encode as: a passage long
// enough for n, cut after a token and decoded. A cut inside a word can
// encode differently once decoded (a byte-level BPE may split the last
// piece otherwise with nothing after it), so the cut moves a few tokens
// either way until the text's own count is n; where no nearby cut gives
// exactly n, the nearest count wins (a real tokenizer is rarely off, and
// then by one).
func (c *Corpus) PassageTokens(rng *rand.Rand, n int, tok Tokenizer) (string, int, error) {
	if n <= 0 {
		return "", 0, nil
	}
	start := c.starts[rng.IntN(len(c.starts))]
	chars := 2 * n * CharsPerToken
	var ids []int32
	for {
		ids = tok.Encode(c.passageFrom(start, chars))
		if len(ids) >= n+tokenSlack {
			break
		}
		if chars > 64*n*CharsPerToken {
			return "", 0, fmt.Errorf("the tokenizer makes fewer than %d tokens of %d characters of prose; is it a text tokenizer?", n, chars)
		}
		chars *= 2
	}
	best, bestN := "", -1
	// Cuts at n, n−1, n+1, n−2, n+2, …
	for i := 0; i <= 2*tokenSlack; i++ {
		k := n + (i+1)/2*(1-2*(i%2))
		if k < 1 || k > len(ids) {
			continue
		}
		text := tok.Decode(ids[:k])
		got := len(tok.Encode(text))
		if got == n {
			return text, n, nil
		}
		if bestN < 0 || abs(got-n) < abs(bestN-n) {
			best, bestN = text, got
		}
	}
	return best, bestN, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// tokenSlack is how far PassageTokens moves a cut to hit the count.
const tokenSlack = 16
