package tokenizer

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
	"golang.org/x/text/unicode/norm"

	"github.com/treni-top/treni-top/engine/regfile"
)

// pieces splits s with the Qwen (digits 1) or Llama 3 (digits 3) scanner.
func pieces(s string, digits int) []string {
	var out []string
	for i := 0; i < len(s); {
		e := scanQwen(s, i, digits)
		out = append(out, s[i:e])
		i = e
	}
	return out
}

func TestScanQwen(t *testing.T) {
	cases := []struct {
		in     string
		digits int
		want   []string
	}{
		{"Hello world", 1, []string{"Hello", " world"}},
		// \s+(?!\S): the run before a word gives its last space to the word.
		{"a   b", 1, []string{"a", "  ", " b"}},
		{"a   ", 1, []string{"a", "   "}},
		{"a \tb", 1, []string{"a", " ", "\tb"}},
		// \s*[\r\n]+ ends at the last newline of the run.
		{"x\n\n  y", 1, []string{"x", "\n\n", " ", " y"}},
		{"x \r\n y", 1, []string{"x", " \r\n", " y"}},
		{"it's IT'S we'LL", 1, []string{"it", "'s", " IT", "'S", " we", "'LL"}},
		{"x'ſ", 1, []string{"x", "'ſ"}}, // (?i) folds U+017F to s
		{"123456", 1, []string{"1", "2", "3", "4", "5", "6"}},
		{"123456 7", 3, []string{"123", "456", " ", "7"}},
		{"  (foo)", 1, []string{" ", " (", "foo", ")"}},
		{"a...\n\nb", 1, []string{"a", "...\n\n", "b"}},
		{"你好，世界", 1, []string{"你好", "，世界"}},
		{"\xff\xfeab", 1, []string{"\xff\xfe", "ab"}},
	}
	for _, c := range cases {
		if got := pieces(c.in, c.digits); !slices.Equal(got, c.want) {
			t.Errorf("scan(%q, %d) = %q, want %q", c.in, c.digits, got, c.want)
		}
	}
}

func TestScanGPT2(t *testing.T) {
	var got []string
	s := "Hello  world 123 ...!\n"
	for i := 0; i < len(s); {
		e := scanGPT2(s, i)
		got = append(got, s[i:e])
		i = e
	}
	want := []string{"Hello", " ", " world", " 123", " ...!", "\n"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q want %q", got, want)
	}
}

// randomText draws strings mixing ASCII, whitespace, punctuation,
// multi-byte letters, emoji, combining marks and special tokens.
func randomText(r *rand.Rand) string {
	parts := []string{"a", "Z", "the", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "7", "42", ".", "!!", "(", "é", "e\u0301",
		"ß", "你", "好", "。", "🚀", "👍🏽", "🇫🇷", "Ω", "ſ", "\u00a0", "\u3000", "<|im_end|>", "<|im_start|>", "<think>", "-", "_", "😀x"}
	var b strings.Builder
	n := r.IntN(24)
	for range n {
		if r.IntN(8) == 0 {
			b.WriteRune(rune(r.IntN(0x2FFFF)))
			continue
		}
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return strings.ToValidUTF8(b.String(), "")
}

func TestRoundTripRandomUTF8(t *testing.T) {
	tok := loadQwen3(t)
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		s := randomText(r)
		ids := tok.Encode(s)
		if got, want := tok.Decode(ids), norm.NFC.String(s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q (ids %v)", s, got, want, ids)
		}
	}
}

func TestInvalidUTF8KeepsBytes(t *testing.T) {
	tok := loadQwen3(t)
	s := "ok\xff\xc3(\xe2\x82"
	if got := string(tok.DecodeBytes(tok.Encode(s))); got != s {
		t.Fatalf("bytes %q, want %q", got, s)
	}
	// Decode repairs like Rust's from_utf8_lossy: one U+FFFD per maximal
	// invalid subsequence (\xe2\x82 is one).
	if got := tok.Decode(tok.Encode(s)); got != "ok\uFFFD\uFFFD(\uFFFD" {
		t.Fatalf("Decode = %q", got)
	}
}

func TestLossyUTF8(t *testing.T) {
	cases := map[string]string{
		"abc":              "abc",
		"\xe2\x82":         "\uFFFD",
		"\xe2\x82A":        "\uFFFDA",
		"\xf0\x9f\x9a":     "\uFFFD",
		"\xed\xa0\x80":     "\uFFFD\uFFFD\uFFFD", // surrogates: ED then A0 invalid
		"\xc0\xaf":         "\uFFFD\uFFFD",
		"\xf4\x90\x80\x80": "\uFFFD\uFFFD\uFFFD\uFFFD",
	}
	for in, want := range cases {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("lossy(%q) = %q, want %q", in, got, want)
		}
	}
}

// checkStream verifies the streaming decoder against Decode on every
// prefix of ids.
func checkStream(t *testing.T, tok *Tokenizer, ids []int32) {
	t.Helper()
	full := tok.Decode(ids)
	d := tok.NewStreamDecoder()
	var sofar strings.Builder
	for k, id := range ids {
		out := d.Push(id)
		if !utf8.ValidString(out) {
			t.Fatalf("Push emitted invalid UTF-8 %q", out)
		}
		sofar.WriteString(out)
		// The pushed text plus what a flush would give equals Decode of
		// the prefix; a copy keeps the stream going.
		cp := &StreamDecoder{t: tok, pending: slices.Clone(d.pending)}
		if got, want := sofar.String()+cp.Flush(), tok.Decode(ids[:k+1]); got != want {
			t.Fatalf("prefix %d: stream %q, Decode %q", k+1, got, want)
		}
		if !strings.HasPrefix(full, sofar.String()) {
			t.Fatalf("prefix %d: stream %q is not a prefix of %q", k+1, sofar.String(), full)
		}
	}
	if got := sofar.String() + d.Flush(); got != full {
		t.Fatalf("stream %q, Decode %q", got, full)
	}
}

func TestStreamDecoder(t *testing.T) {
	tok := loadQwen3(t)
	r := rand.New(rand.NewPCG(3, 4))
	checkStream(t, tok, tok.Encode("Emoji: 🚀🔥👍🏽 and flags 🇫🇷🇯🇵, 你好，世界！"))
	for range 300 {
		checkStream(t, tok, tok.Encode(randomText(r)))
	}
	// Random ids, byte tokens included: arbitrary (often invalid) bytes.
	for range 300 {
		ids := make([]int32, r.IntN(12))
		for i := range ids {
			if r.IntN(2) == 0 {
				ids[i] = tok.byteID[r.IntN(256)]
			} else {
				ids[i] = int32(r.IntN(tok.VocabSize() + 5))
			}
		}
		checkStream(t, tok, ids)
	}
}

func TestQwen3Basics(t *testing.T) {
	tok := loadQwen3(t)
	if tok.VocabSize() != 151669 {
		t.Errorf("VocabSize = %d, want 151669", tok.VocabSize())
	}
	if id, ok := tok.TokenID("<|im_end|>"); !ok || id != 151645 {
		t.Errorf("TokenID(<|im_end|>) = %d %v", id, ok)
	}
	if id, ok := tok.TokenID("Ġworld"); !ok || id != 1879 || tok.Piece(1879) != "Ġworld" {
		t.Errorf("TokenID(Ġworld) = %d %v, Piece %q", id, ok, tok.Piece(1879))
	}
	if tok.Piece(-1) != "" || tok.Piece(1<<30) != "" {
		t.Error("Piece of an unknown id is not empty")
	}
	if got := tok.StopTokenIDs(); !slices.Equal(got, []int32{151645, 151643}) {
		t.Errorf("StopTokenIDs = %v", got)
	}
	// Worked out once: later calls return the same list and allocate
	// nothing (the first built the piece index; engine/serve calls it
	// while loading so that no request pays for it).
	if n := testing.AllocsPerRun(10, func() { tok.StopTokenIDs() }); n != 0 {
		t.Errorf("StopTokenIDs allocated %v times a call after the first", n)
	}
	if !tok.IsSpecial(151644) || tok.IsSpecial(151667) {
		t.Error("IsSpecial wrong for <|im_start|> or <think>")
	}
	if tok.Decode([]int32{-5, 1 << 30, 9707}) != "Hello" {
		t.Error("unknown ids are not skipped")
	}
	// Added tokens that are not special are still matched (<think>).
	if got := tok.Encode("<think>x</think>"); !slices.Equal(got, []int32{151667, 87, 151668}) {
		t.Errorf("Encode(<think>…) = %v", got)
	}
	// NFC: a decomposed é encodes like the composed one.
	if !slices.Equal(tok.Encode("e\u0301"), tok.Encode("é")) {
		t.Error("NFC normalizer not applied")
	}
}

func TestChatQwen3(t *testing.T) {
	tok := loadQwen3(t)
	got, err := tok.ApplyChat([]Message{{"system", "Be brief."}, {"user", "What is TTFT?"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is TTFT?<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	// Qwen3 drops earlier reasoning and adds an empty think block to the
	// final assistant turn.
	got, _ = tok.ApplyChat([]Message{{"user", "hi"}, {"assistant", "<think>\nhmm\n</think>\n\nhello"}, {"user", "again"}, {"assistant", "ok"}}, false)
	want = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nok<|im_end|>\n"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	ids := tok.Encode(want)
	if ids[0] != 151644 {
		t.Errorf("chat text does not start with <|im_start|>: %v", ids[:3])
	}
}

func TestChatLlama3AndNone(t *testing.T) {
	tj, _, err := TrainDefault(600)
	if err != nil {
		t.Fatal(err)
	}
	cfg := []byte(`{"bos_token":"<|begin_of_text|>","eos_token":"<|eot_id|>","chat_template":"{{ '<|start_header_id|>' }}"}`)
	tok, err := Parse(tj, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tok.ApplyChat([]Message{{"user", "  hi there \n"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if ids := tok.StopTokenIDs(); len(ids) == 0 || tok.Piece(ids[0]) != "<|eot_id|>" {
		t.Errorf("StopTokenIDs = %v", ids)
	}
	// A tokenizer without chat tokens refuses clearly.
	plain := strings.Replace(string(tj), `"<|im_start|>"`, `"<|xx_start|>"`, 1)
	plain = strings.Replace(plain, `"<|start_header_id|>"`, `"<|yy|>"`, 1)
	tok2, err := Parse([]byte(plain), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok2.ApplyChat([]Message{{"user", "x"}}, true); err != ErrNoChatFormat {
		t.Errorf("err = %v, want ErrNoChatFormat", err)
	}
}

// tinyJSON is a hand-written byte-level tokenizer for flag tests.
func tinyJSON(added string) []byte {
	var vocab strings.Builder
	for b := 0; b < 256; b++ {
		if b > 0 {
			vocab.WriteString(",")
		}
		vocab.Write(jstr(string(byteToRune[b])))
		vocab.WriteString(":" + strconv.Itoa(b))
	}
	vocab.WriteString(`,"ab":256`)
	return []byte(`{"version":"1.0","added_tokens":[` + added + `],"normalizer":null,
"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":true},
"decoder":{"type":"ByteLevel"},
"model":{"type":"BPE","vocab":{` + vocab.String() + `},"merges":["a b"]}}`)
}

func TestAddedTokenFlags(t *testing.T) {
	added := `{"id":257,"content":"<m>","lstrip":true,"rstrip":true,"normalized":false,"special":true},
{"id":258,"content":"xy","single_word":true,"normalized":false,"special":false},
{"id":259,"content":"<mm>","normalized":false,"special":true}`
	tok, err := Parse(tinyJSON(added), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in   string
		want []int32
	}{
		{"ab  <m>  ab", []int32{256, 257, 256}}, // lstrip/rstrip eat the spaces
		{"xy ab", []int32{258, 32, 256}},        // single word: matched
		{"axy", []int32{97, 120, 121}},          // inside a word: not matched
		{"<mm>", []int32{259}},                  // longest match wins
		{"ab", []int32{256}},                    // the "a b" merge (legacy string form)
	}
	for _, c := range cases {
		if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
		t.Errorf("missing dir: %v", err)
	}
	cases := map[string]string{
		"truncated":   `{"version":"1.0","model":{"type":"BPE","vocab":{"a":0`,
		"not BPE":     `{"model":{"type":"WordPiece","vocab":{"a":0}}}`,
		"bad merge":   `{"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","q"]]}}`,
		"no vocab":    `{"model":{"type":"BPE"}}`,
		"bad id":      `{"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":-3},"merges":[]}}`,
		"normalizer":  `{"normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`,
		"no bytelvl":  `{"pre_tokenizer":{"type":"Whitespace"},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`,
		"lookahead":   `{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"a(?!b)"},"behavior":"Isolated"},{"type":"ByteLevel"}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`,
		"bad decoder": `{"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"WordPiece"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`,
	}
	for name, js := range cases {
		d := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "tokenizer.json"), []byte(js), 0o644)
		if _, _, err := LoadWith(d, LoadOptions{CacheDir: "-"}); err == nil {
			t.Errorf("%s: loaded without error", name)
		} else if !strings.Contains(err.Error(), "tokenizer.json") {
			t.Errorf("%s: error does not name the file: %v", name, err)
		}
	}
}

// TestLoadRefusesNamedPipes: a FIFO in place of tokenizer.json or
// tokenizer_config.json is refused at once; opening one for reading
// would wait for a writer forever, deaf to signals, and hang serve.
func TestLoadRefusesNamedPipes(t *testing.T) {
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		d := t.TempDir()
		if name != "tokenizer.json" {
			os.WriteFile(filepath.Join(d, "tokenizer.json"), []byte(`{"model":{"type":"BPE"}}`), 0o644)
		}
		if err := unix.Mkfifo(filepath.Join(d, name), 0o600); err != nil {
			t.Fatalf("mkfifo: %v", err)
		}
		_, _, err := LoadWith(d, LoadOptions{CacheDir: "-"})
		if !errors.Is(err, regfile.ErrNotRegular) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s as a FIFO: %v, want a not-a-regular-file error naming it", name, err)
		}
	}
}

func TestCache(t *testing.T) {
	cache := t.TempDir()
	cold, st, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: cache})
	if err != nil || st.CacheHit || st.CacheError != "" {
		t.Fatalf("cold load: %v %+v", err, st)
	}
	hot, st, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: cache})
	if err != nil || !st.CacheHit {
		t.Fatalf("second load missed the cache: %v %+v", err, st)
	}
	for _, c := range readGolden(t) {
		if a, b := cold.Encode(c.Text), hot.Encode(c.Text); !slices.Equal(a, b) || !slices.Equal(b, c.IDs) && len(c.IDs) > 0 {
			t.Errorf("%s: cached tokenizer encodes %v, cold %v, golden %v", c.Name, b, a, c.IDs)
		}
		if hot.Decode(c.IDs) != c.Decoded {
			t.Errorf("%s: cached decode differs", c.Name)
		}
	}
	if hot.ChatFormat() != ChatQwen || !slices.Equal(hot.StopTokenIDs(), cold.StopTokenIDs()) {
		t.Error("cached tokenizer lost its config")
	}
	// A corrupt cache file is ignored, reported, and rewritten.
	data, _ := os.ReadFile(st.CachePath)
	data[len(data)/2] ^= 0xff
	os.WriteFile(st.CachePath, data, 0o644)
	_, st2, err := LoadWith(qwen3Dir, LoadOptions{CacheDir: cache})
	if err != nil || st2.CacheHit || !strings.Contains(st2.CacheError, "corrupt") {
		t.Fatalf("corrupt cache: %v %+v", err, st2)
	}
	if _, st3, _ := LoadWith(qwen3Dir, LoadOptions{CacheDir: cache}); !st3.CacheHit {
		t.Error("cache not rewritten after corruption")
	}
	// Truncations never panic.
	for _, n := range []int{0, 10, 24, 100, len(data) - 1} {
		if _, err := decodeCache(data[:n]); err == nil {
			t.Errorf("truncated cache (%d bytes) accepted", n)
		}
	}
}
