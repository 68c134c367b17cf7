package tokenizer

import (
	"errors"
	"strings"
)

// Message is one chat turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Chat formats this package renders without a Jinja engine.
const (
	ChatQwen   = "qwen"   // ChatML: <|im_start|>role\ncontent<|im_end|>\n
	ChatLlama3 = "llama3" // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
)

// ChatFormat names the chat format ApplyChat uses, or "" when none
// applies. tokenizer_config.json's chat_template decides when it names one
// of the formats' markers; otherwise the special tokens do (Qwen first).
func (t *Tokenizer) ChatFormat() string {
	tpl := t.chatTemplate
	switch {
	case strings.Contains(tpl, "<|im_start|>"):
		return ChatQwen
	case strings.Contains(tpl, "<|start_header_id|>"):
		return ChatLlama3
	}
	if t.hasAll("<|im_start|>", "<|im_end|>") {
		return ChatQwen
	}
	if t.hasAll("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>") {
		return ChatLlama3
	}
	return ""
}

func (t *Tokenizer) hasAll(toks ...string) bool {
	for _, s := range toks {
		if _, ok := t.TokenID(s); !ok {
			return false
		}
	}
	return true
}

// ErrNoChatFormat is returned by ApplyChat for a tokenizer that has neither
// the Qwen (ChatML) nor the Llama 3 chat tokens.
var ErrNoChatFormat = errors.New("tokenizer has no chat format this engine renders: it needs Qwen's <|im_start|>/<|im_end|> or Llama 3's <|start_header_id|>/<|end_header_id|>/<|eot_id|> tokens; send a raw prompt instead")

// ApplyChat renders messages as the model's chat template would (the
// tool-free subset of the Qwen2/2.5/3 and Llama 3 templates), ending with
// the assistant header when addGenerationPrompt is set. The result contains
// special tokens as text; Encode recognises them.
func (t *Tokenizer) ApplyChat(msgs []Message, addGenerationPrompt bool) (string, error) {
	switch t.ChatFormat() {
	case ChatQwen:
		return t.chatQwen(msgs, addGenerationPrompt), nil
	case ChatLlama3:
		return t.chatLlama3(msgs, addGenerationPrompt), nil
	}
	return "", ErrNoChatFormat
}

// chatLlama3 renders Meta's Llama 3 template: BOS before the first message,
// contents trimmed.
func (t *Tokenizer) chatLlama3(msgs []Message, gen bool) string {
	var b strings.Builder
	bos := t.bosToken
	if bos == "" {
		bos = "<|begin_of_text|>"
	}
	for i, m := range msgs {
		if i == 0 {
			b.WriteString(bos)
		}
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n")
		b.WriteString(strings.TrimSpace(m.Content))
		b.WriteString("<|eot_id|>")
	}
	if gen {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return b.String()
}

// chatQwen renders ChatML. Qwen3 templates (they mention <think>) strip the
// reasoning of earlier assistant turns and give the final assistant turn
// after the last user query an explicit think block; Qwen2/2.5 templates
// insert their default system prompt when the first message is not a
// system one.
func (t *Tokenizer) chatQwen(msgs []Message, gen bool) string {
	var b strings.Builder
	qwen3 := strings.Contains(t.chatTemplate, "<think>")
	if !qwen3 && (len(msgs) == 0 || msgs[0].Role != "system") {
		if sys := defaultSystem(t.chatTemplate); sys != "" {
			b.WriteString("<|im_start|>system\n" + sys + "<|im_end|>\n")
		}
	}
	lastQuery := len(msgs) - 1
	if qwen3 {
		for i := len(msgs) - 1; i >= 0; i-- {
			m := msgs[i]
			if m.Role == "user" && !(strings.HasPrefix(m.Content, "<tool_response>") && strings.HasSuffix(m.Content, "</tool_response>")) {
				lastQuery = i
				break
			}
		}
	}
	for i, m := range msgs {
		switch {
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		case m.Role == "assistant" && qwen3:
			content, reasoning := m.Content, ""
			if k := strings.LastIndex(content, "</think>"); k >= 0 {
				before, _, _ := strings.Cut(m.Content, "</think>")
				before = strings.TrimRight(before, "\n")
				if j := strings.LastIndex(before, "<think>"); j >= 0 {
					before = before[j+len("<think>"):]
				}
				reasoning = strings.TrimLeft(before, "\n")
				content = strings.TrimLeft(content[k+len("</think>"):], "\n")
			}
			if i > lastQuery && (i == len(msgs)-1 || reasoning != "") {
				b.WriteString("<|im_start|>assistant\n<think>\n" + strings.Trim(reasoning, "\n") + "\n</think>\n\n" + strings.TrimLeft(content, "\n"))
			} else {
				b.WriteString("<|im_start|>assistant\n" + content)
			}
			b.WriteString("<|im_end|>\n")
		default:
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
	}
	if gen {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// defaultSystem extracts the default system prompt a Qwen2/2.5 template
// inserts ('<|im_start|>system\nYou are …<|im_end|>' as a Jinja literal).
func defaultSystem(tpl string) string {
	const open = `<|im_start|>system\n`
	for rest := tpl; ; {
		k := strings.Index(rest, open)
		if k < 0 {
			return ""
		}
		rest = rest[k+len(open):]
		end := strings.Index(rest, "<|im_end|>")
		if end < 0 {
			return ""
		}
		lit := rest[:end]
		if !strings.ContainsAny(lit, "'\"{}+") && lit != "" {
			return strings.ReplaceAll(lit, `\n`, "\n")
		}
	}
}

// StopTokenIDs returns the ids that end generation: the configured EOS and
// whichever of <|im_end|>, <|endoftext|>, <|eot_id|>, <|end_of_text|> and
// <|eom_id|> exist. The caller must not modify the slice.
//
// The list is worked out once. The first call builds the piece index for
// the names that are not added tokens (~6 ms for Qwen3's 151k pieces on a
// 2-core VM, BenchmarkPieceIndexQwen3), so a server should call it while
// it loads, not on its first request (engine/serve does).
func (t *Tokenizer) StopTokenIDs() []int32 {
	t.stopOnce.Do(func() {
		seen := map[int32]bool{}
		add := func(s string) {
			if id, ok := t.idOf(s); ok && !seen[id] {
				seen[id] = true
				t.stopIDs = append(t.stopIDs, id)
			}
		}
		add(t.eosToken)
		for _, s := range []string{"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"} {
			add(s)
		}
	})
	return t.stopIDs
}
