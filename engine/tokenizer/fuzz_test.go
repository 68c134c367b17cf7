package tokenizer

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzEncode: Encode never panics, keeps every byte (DecodeBytes gives the
// NFC form of valid input back, and the raw bytes of any input whose NFC
// form equals it), and the streaming decoder agrees with Decode.
func FuzzEncode(f *testing.F) {
	tok := loadQwen3(f)
	for _, s := range []string{"", " ", "Hello, world!", "a   b", "x\n\n  y", "it'S", "123456", "<|im_start|>user\n<|im_end|>",
		"\xff\xfe", "e\u0301", "🚀👍🏽", "你好，世界", "\r\n\t \u00a0\u3000", "'ſ", "<|im_end", "<think></think>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		want := s
		if utf8.ValidString(s) {
			want = norm.NFC.String(s)
		}
		got := string(tok.DecodeBytes(ids))
		if utf8.ValidString(s) && got != want {
			t.Fatalf("DecodeBytes(Encode(%q)) = %q, want %q", s, got, want)
		}
		if !utf8.ValidString(s) && norm.NFC.String(s) == s && got != s {
			t.Fatalf("invalid input %q lost bytes: %q", s, got)
		}
		d := tok.NewStreamDecoder()
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Push(id))
		}
		b.WriteString(d.Flush())
		if b.String() != tok.Decode(ids) {
			t.Fatalf("stream %q != Decode %q", b.String(), tok.Decode(ids))
		}
	})
}

// FuzzLoad: Parse never panics on arbitrary tokenizer.json and
// tokenizer_config.json contents, and what it accepts can encode.
func FuzzLoad(f *testing.F) {
	f.Add(string(tinyJSON(`{"id":257,"content":"<m>","lstrip":true,"normalized":false,"special":true}`)), `{"eos_token":"<m>"}`)
	f.Add(`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a a"]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`, `{}`)
	f.Add(`{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":" "},"behavior":"Removed"},{"type":"ByteLevel","use_regex":false}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]}}`, `{"chat_template":[{"name":"default","template":"x"}]}`)
	f.Add(`{"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"}]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated"},{"type":"ByteLevel"}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","unk_token":"a","fuse_unk":true,"vocab":{"a":0,"b":1},"merges":[]}}`, `{"bos_token":{"content":"a"}}`)
	tj, cj, err := Train([]byte("the cat sat on the mat. The dog's bone!"), 300)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(tj), string(cj))
	f.Fuzz(func(t *testing.T, tokJSON, cfgJSON string) {
		checkFastJSON(t, []byte(tokJSON))
		tok, err := Parse([]byte(tokJSON), []byte(cfgJSON))
		if err != nil {
			return
		}
		for _, s := range []string{"the cat", "a  b\n", "ab<m>ab", "\xff", "ß 12"} {
			ids := tok.Encode(s)
			tok.Decode(ids)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d outside [0, %d)", s, id, tok.VocabSize())
				}
			}
		}
		tok.ApplyChat([]Message{{"user", "x"}}, true)
		tok.StopTokenIDs()
	})
}

// FuzzCache: a corrupted binary cache file is rejected or usable, never a
// panic or a tokenizer that emits out-of-range ids.
func FuzzCache(f *testing.F) {
	tj, _, err := Train([]byte("the cat sat on the mat"), 280)
	if err != nil {
		f.Fatal(err)
	}
	tok, err := Parse(tj, nil)
	if err != nil {
		f.Fatal(err)
	}
	path := f.TempDir() + "/x.tok"
	if err := writeCache(path, tok); err != nil {
		f.Fatal(err)
	}
	good, err := readFileBytes(path)
	if err != nil {
		f.Fatal(err)
	}
	// The payload is fuzzed behind the checksum, which would otherwise
	// reject nearly every mutation before the structural checks.
	good = good[cacheHeader:]
	f.Add(good, 0, byte(0))
	f.Add(good, 30, byte(1))
	f.Add(good[:40], 0, byte(0))
	f.Fuzz(func(t *testing.T, data []byte, pos int, x byte) {
		data = append([]byte(nil), data...)
		if len(data) > 0 && pos >= 0 {
			data[pos%len(data)] ^= x
		}
		tk, err := decodePayload(data)
		if err != nil {
			return
		}
		for _, id := range tk.Encode("the cat sat\xff") {
			if id < 0 || int(id) >= tk.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
	})
}

// checkFastJSON: whenever the hand-written reader accepts a file, it must
// read exactly what encoding/json reads.
func checkFastJSON(t *testing.T, data []byte) {
	t.Helper()
	var fast fileJSON
	fm, err := fastDecodeFile(data, &fast)
	if err != nil {
		return
	}
	var slow fileJSON
	if err := json.Unmarshal(data, &slow); err != nil {
		t.Fatalf("fast reader accepted what encoding/json rejects (%v): %q", err, data)
	}
	sm, err := parseMerges(slow.Model.Merges)
	if err != nil {
		t.Fatalf("fast reader accepted merges parseMerges rejects (%v)", err)
	}
	if !maps.Equal(fast.Model.Vocab, slow.Model.Vocab) || !slices.Equal(fm, sm) {
		t.Fatalf("fast and encoding/json readings differ: vocab %d/%d merges %d/%d", len(fast.Model.Vocab), len(slow.Model.Vocab), len(fm), len(sm))
	}
	if fast.Model.Type != slow.Model.Type || fast.Model.IgnoreMerges != slow.Model.IgnoreMerges ||
		!bytes.Equal(fast.PreTokenizer, slow.PreTokenizer) || len(fast.AddedTokens) != len(slow.AddedTokens) {
		t.Fatalf("fast and encoding/json readings differ outside the model")
	}
}
