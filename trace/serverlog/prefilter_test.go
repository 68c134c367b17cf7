package serverlog

import (
	"strings"
	"testing"
)

// containsText is what the prefilter answers: whether s contains one of
// texts.
func containsText(texts []string, s string) bool {
	for _, t := range texts {
		if strings.Contains(s, t) {
			return true
		}
	}
	return false
}

// TestPrefilterFindsTexts puts every text of every kind at every place of
// a chatty line (alone, at its start, in its middle, at its end, cut short
// by a byte) and checks the prefilter's answer against strings.Contains.
func TestPrefilterFindsTexts(t *testing.T) {
	chatter := "INFO 05-09 22:56:48 [x.py:1] 127.0.0.1:52614 - \"POST /v1/completions HTTP/1.1\" 200 OK, so on and so forth: "
	for kind, texts := range ruleTexts {
		f := prefilters[kind]
		for _, text := range texts {
			for _, line := range []string{
				text, "x" + text, text + "x", chatter + text, text + chatter, chatter[:7] + text + chatter[7:],
				text[:len(text)-1], text[1:], chatter + text[:len(text)-1], chatter[:len(chatter)-1],
			} {
				for cut := 0; cut < 3 && cut < len(line); cut++ {
					s := line[cut:]
					if got, want := f.mayMatch(s), containsText(texts, s); got != want {
						t.Errorf("%s: mayMatch(%q) = %v, want %v", kind, s, got, want)
					}
				}
			}
		}
		if f.mayMatch(chatter) {
			t.Errorf("%s: the chatter passes: %q", kind, chatter)
		}
	}
}

// FuzzPrefilter: the prefilter passes a line exactly when it contains one
// of its kind's texts.
func FuzzPrefilter(f *testing.F) {
	for _, s := range []string{"", "load", "load: ", "xload: x", "[GIN] 2026/05/05 - 01:30:24 | 200", " blocks: ", "ready in 3s", "Connecte"} {
		for k := range fuzzKinds {
			f.Add(uint8(k), s)
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, line string) {
		kind := fuzzKinds[int(k)%len(fuzzKinds)]
		texts, ok := ruleTexts[kind]
		if !ok {
			return
		}
		if got, want := prefilters[kind].mayMatch(line), containsText(texts, line); got != want {
			t.Fatalf("%s: mayMatch(%q) = %v, want %v", kind, line, got, want)
		}
	})
}

// BenchmarkPrefilter runs every fixture's lines through its kind's
// prefilter (SetBytes: the lines' bytes).
func BenchmarkPrefilter(b *testing.B) {
	type log struct {
		f     *prefilter
		lines []string
	}
	var logs []log
	var n int64
	for _, rel := range fixtureLogs(b) {
		lines := readFixture(b, rel)
		if f := prefilters[DetectKind(nil, lines)]; f != nil {
			logs = append(logs, log{f, lines})
			for _, l := range lines {
				n += int64(len(l))
			}
		}
	}
	b.SetBytes(n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, lg := range logs {
			for _, l := range lg.lines {
				lg.f.mayMatch(l)
			}
		}
	}
}
