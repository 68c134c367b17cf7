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
	start := c.starts[rng.IntN(len(c.starts))]
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
