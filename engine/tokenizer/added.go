package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens, with the id the
// HF loader assigns to it.
type addedToken struct {
	ID         int32
	Content    string
	SingleWord bool
	LStrip     bool
	RStrip     bool
	Normalized bool
	Special    bool
}

// addedMatcher finds added tokens in text with leftmost-longest,
// non-overlapping semantics (HF uses an Aho-Corasick automaton with
// MatchKind::LeftmostLongest). Added-token sets are small (tens to a few
// hundred), so candidates indexed by first byte and sorted longest first
// are as fast as an automaton and trivially correct.
type addedMatcher struct {
	byFirst [256][]int32 // indices into toks, longest content first
	toks    []addedToken
}

// newAddedMatcher indexes toks (all of one normalized-ness).
func newAddedMatcher(toks []addedToken) *addedMatcher {
	if len(toks) == 0 {
		return nil
	}
	m := &addedMatcher{toks: toks}
	for i, t := range toks {
		if t.Content == "" {
			continue
		}
		b := t.Content[0]
		m.byFirst[b] = append(m.byFirst[b], int32(i))
	}
	for b := range m.byFirst {
		l := m.byFirst[b]
		// Insertion sort: longest first, then by position for determinism.
		for i := 1; i < len(l); i++ {
			for j := i; j > 0 && len(toks[l[j]].Content) > len(toks[l[j-1]].Content); j-- {
				l[j], l[j-1] = l[j-1], l[j]
			}
		}
	}
	return m
}

// span is a piece of the input: an added token (id >= 0) or text to be
// pre-tokenized (id < 0).
type span struct {
	start, end int
	id         int32
}

// split reproduces AddedVocabulary::find_matches: leftmost-longest matches,
// single_word filtering, lstrip/rstrip extension. It appends to out.
func (m *addedMatcher) split(s string, out []span) []span {
	if m == nil || s == "" {
		return append(out, span{0, len(s), -1})
	}
	startOffset := 0
	i := 0
	for i < len(s) {
		cands := m.byFirst[s[i]]
		found := int32(-1)
		for _, ci := range cands {
			if strings.HasPrefix(s[i:], m.toks[ci].Content) {
				found = ci
				break
			}
		}
		if found < 0 {
			i++
			continue
		}
		t := &m.toks[found]
		start, stop := i, i+len(t.Content)
		i = stop // the automaton resumes after the match even if it is discarded
		if t.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if t.LStrip {
			ns := leftmostSpaceAtEnd(s[:start])
			start = max(ns, startOffset)
		}
		if t.RStrip {
			stop += rightmostSpaceAtStart(s[stop:])
		}
		if startOffset < start {
			out = append(out, span{startOffset, start, -1})
		}
		out = append(out, span{start, stop, t.ID})
		startOffset = stop
	}
	if startOffset != len(s) {
		out = append(out, span{startOffset, len(s), -1})
	}
	return out
}

// isWordRune is Rust regex's Unicode \w: alphabetic, marks, decimal
// digits, connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, w := utf8.DecodeLastRuneInString(s)
	return w > 0 && r != utf8.RuneError && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, w := utf8.DecodeRuneInString(s)
	return w > 0 && r != utf8.RuneError && isWordRune(r)
}

// leftmostSpaceAtEnd is the start of the trailing whitespace run of s.
func leftmostSpaceAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		if r == utf8.RuneError && w <= 1 || !unicode.IsSpace(r) {
			break
		}
		i -= w
	}
	return i
}

// rightmostSpaceAtStart is the length of the leading whitespace run of s.
func rightmostSpaceAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w <= 1 || !unicode.IsSpace(r) {
			break
		}
		i += w
	}
	return i
}
