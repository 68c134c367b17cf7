package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Known split patterns. Go's regexp has no lookahead, so the patterns that
// use `\s+(?!\S)` are executed by hand-written scanners that reproduce the
// backtracking semantics of Oniguruma (the engine HF tokenizers uses).
const (
	// patternQwen2 is the Split regex of Qwen2, Qwen2.5 and Qwen3.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternLlama3 is Llama 3's: the same with numbers in groups of up to three.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternGPT2 is the regex of the ByteLevel pre-tokenizer with use_regex.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// Character classes of the split patterns.
const (
	clsOther  = iota // [^\s\p{L}\p{N}]
	clsLetter        // \p{L}
	clsNumber        // \p{N}
	clsSpace         // \s (Unicode White_Space)
)

// asciiClass classifies ASCII bytes without a table lookup in unicode.
var asciiClass = func() (t [128]uint8) {
	for i := range t {
		r := rune(i)
		switch {
		case unicode.IsLetter(r):
			t[i] = clsLetter
		case unicode.IsNumber(r):
			t[i] = clsNumber
		case unicode.IsSpace(r):
			t[i] = clsSpace
		default:
			t[i] = clsOther
		}
	}
	return t
}()

// runeAt decodes the rune at s[i:]. An invalid byte is returned as
// utf8.RuneError of width 1 and classified as "other", so that invalid
// input keeps its bytes (byte-level BPE can encode any byte).
func runeAt(s string, i int) (rune, int, uint8) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w == 1 {
		return r, 1, clsOther
	}
	switch {
	case unicode.IsLetter(r):
		return r, w, clsLetter
	case unicode.IsNumber(r):
		return r, w, clsNumber
	case unicode.IsSpace(r):
		return r, w, clsSpace
	}
	return r, w, clsOther
}

// classAt is runeAt without the rune.
func classAt(s string, i int) (int, uint8) {
	_, w, c := runeAt(s, i)
	return w, c
}

// runOf returns the end of the run of class cls starting at i.
func runOf(s string, i int, cls uint8) int {
	for i < len(s) {
		w, c := classAt(s, i)
		if c != cls {
			break
		}
		i += w
	}
	return i
}

// contraction matches `'s|'t|'re|'ve|'m|'ll|'d` at s[i:] (s[i] is an apostrophe) and
// returns the end, or -1. With fold, letters match case-insensitively under
// Unicode simple case folding (so U+017F LONG S matches 's', as Oniguruma's
// (?i) does).
func contraction(s string, i int, fold bool) int {
	j := i + 1
	if j >= len(s) {
		return -1
	}
	r, w := utf8.DecodeRuneInString(s[j:])
	l := foldRune(r, fold)
	switch l {
	case 's', 't', 'm', 'd':
		return j + w
	case 'r', 'v', 'l':
		k := j + w
		if k >= len(s) {
			return -1
		}
		r2, w2 := utf8.DecodeRuneInString(s[k:])
		want := rune('e')
		if l == 'l' {
			want = 'l'
		}
		if foldRune(r2, fold) == want {
			return k + w2
		}
	}
	return -1
}

// foldRune lowers r for the contraction letters when fold is set.
func foldRune(r rune, fold bool) rune {
	if !fold {
		return r
	}
	if r >= 'A' && r <= 'Z' {
		return r + ('a' - 'A')
	}
	if r == 0x17F { // LATIN SMALL LETTER LONG S folds to 's'
		return 's'
	}
	return r
}

// isCRLF reports whether the byte is '\r' or '\n'.
func isCRLF(c byte) bool { return c == '\r' || c == '\n' }

// spaceMatch implements the whitespace alternatives shared by the Qwen and
// Llama 3 patterns, `\s*[\r\n]+|\s+(?!\S)|\s+`, at i where s[i] is
// whitespace. With nl false the first alternative is skipped (GPT-2).
func spaceMatch(s string, i int, nl bool) int {
	j := i
	lastNL := -1
	lastW := 0
	n := 0
	for j < len(s) {
		w, c := classAt(s, j)
		if c != clsSpace {
			break
		}
		if isCRLF(s[j]) {
			lastNL = j
		}
		lastW = w
		n++
		j += w
	}
	// \s*[\r\n]+ : greedy \s* backs off to the last CR/LF of the run.
	if nl && lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S) : the whole run at end of text, else the run minus its
	// last character when that leaves at least one.
	if j == len(s) {
		return j
	}
	if n >= 2 {
		return j - lastW
	}
	// \s+
	return j
}

// scanQwen returns the end of the match of the Qwen2 (maxDigits 1) or
// Llama 3 (maxDigits 3) pattern starting at i. Every position matches, so
// the pattern splits text into contiguous pieces.
func scanQwen(s string, i int, maxDigits int) int {
	r0, w0, c0 := runeAt(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' {
		if e := contraction(s, i, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0 == clsLetter {
		return runOf(s, i+w0, clsLetter)
	}
	if c0 != clsNumber && r0 != '\r' && r0 != '\n' && i+w0 < len(s) {
		if w1, c1 := classAt(s, i+w0); c1 == clsLetter {
			return runOf(s, i+w0+w1, clsLetter)
		}
	}
	// \p{N} or \p{N}{1,3}
	if c0 == clsNumber {
		j := i + w0
		for k := 1; k < maxDigits && j < len(s); k++ {
			w, c := classAt(s, j)
			if c != clsNumber {
				break
			}
			j += w
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if r0 == ' ' && i+1 < len(s) {
		if w1, c1 := classAt(s, i+1); c1 == clsOther {
			return crlfRun(s, runOf(s, i+1+w1, clsOther))
		}
	}
	if c0 == clsOther {
		return crlfRun(s, runOf(s, i+w0, clsOther))
	}
	// \s*[\r\n]+|\s+(?!\S)|\s+
	return spaceMatch(s, i, true)
}

// crlfRun skips `[\r\n]*` from i.
func crlfRun(s string, i int) int {
	for i < len(s) && isCRLF(s[i]) {
		i++
	}
	return i
}

// scanGPT2 returns the end of the match of the GPT-2 byte-level pattern
// starting at i.
func scanGPT2(s string, i int) int {
	r0, w0, c0 := runeAt(s, i)
	if r0 == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	start := i
	if r0 == ' ' && i+1 < len(s) {
		w1, c1 := classAt(s, i+1)
		if c1 != clsSpace {
			start, w0, c0 = i+1, w1, c1
		}
	}
	switch c0 {
	case clsLetter, clsNumber, clsOther:
		return runOf(s, start+w0, c0)
	}
	return spaceMatch(s, i, false)
}
