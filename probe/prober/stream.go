package prober

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"
)

// stream turns parsed chunks into the Request's timings.
type stream struct {
	c   *Client
	res *Result
	// arrived is the offset since Sent at which the bytes just read
	// reached this machine.
	arrived func() time.Duration

	text, reasoning strings.Builder

	usage UsageCounter
}

// UsageCounter counts a stream's tokens from per-chunk usage (vLLM's
// continuous_usage_stats): when the first token-bearing chunk carries
// usage, usage deltas count the tokens of each chunk; otherwise each
// choice carrying a token counts as one. The zero value is ready.
type UsageCounter struct {
	continuous bool
	last       int
}

// Count is the tokens of a chunk that carries usage (completion tokens so
// far) and n tokens by its choices, first when no token came before it.
func (u *UsageCounter) Count(n int, first bool, completion int) int {
	if n > 0 && first {
		u.continuous = true
	}
	if u.continuous && n > 0 {
		if d := completion - u.last; d > n {
			n = d
		}
	}
	u.last = completion
	return n
}

// event records that a protocol event (SSE event or JSON line) arrived and
// returns its arrival time, which is also the time of its tokens.
func (s *stream) event() time.Duration {
	at := s.arrived()
	if s.res.Request.FirstEvent == 0 {
		s.res.Request.FirstEvent = at
	}
	return at
}

// tokens records a chunk carrying n > 0 tokens that arrived at at.
func (s *stream) tokens(n int, at time.Duration) {
	r := &s.res.Request
	r.Tokens = append(r.Tokens, at)
	if n > 1 {
		r.MultiTokenChunks++
	}
	if r.FirstToken == 0 {
		r.FirstToken = at
		s.c.emit(r) // live update: TTFT is known
	}
}

// malformed counts an unparsable line.
func (s *stream) malformed() { s.res.Malformed++ }

// openAIChunk is one streamed chunk of /v1/completions or
// /v1/chat/completions. Content fields are raw so that a server sending
// content parts (arrays) instead of a string is still understood.
type openAIChunk struct {
	Choices []struct {
		Text  json.RawMessage `json:"text"`
		Delta *struct {
			Content          json.RawMessage `json:"content"`
			ReasoningContent json.RawMessage `json:"reasoning_content"`
			Reasoning        json.RawMessage `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// nonEmpty reports whether a raw JSON value carries something: a non-empty
// string, array or object; and returns the string when it is one.
func nonEmpty(raw json.RawMessage) (bool, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `""` || string(raw) == "[]" || string(raw) == "{}" {
		return false, ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s != "", s
		}
	}
	return true, ""
}

// readSSE reads an OpenAI-compatible event stream. It reports whether the
// stream ended properly: "data: [DONE]", or (for servers that omit it) a
// clean end of stream after a finish_reason.
func (s *stream) readSSE(body io.Reader) (complete bool, err error) {
	sr := newSSEReader(body)
	finished := false
	for {
		ev, err := sr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return finished, nil
			}
			return false, err
		}
		at := s.event()
		data := bytes.TrimSpace(ev.Data)
		if string(data) == "[DONE]" {
			return true, nil
		}
		if ev.Type == "error" {
			s.res.Request.ErrorKind = KindServer
			s.res.Request.Error = "the server reported an error mid-stream: " + ErrorMessage(data)
			return true, nil
		}
		if len(data) == 0 {
			continue
		}
		var ch openAIChunk
		if json.Unmarshal(data, &ch) != nil {
			s.malformed()
			continue
		}
		if m := rawMessage(ch.Error); m != "" {
			s.res.Request.ErrorKind = KindServer
			s.res.Request.Error = "the server reported an error mid-stream: " + m
			return true, nil
		}
		n := 0
		for _, c := range ch.Choices {
			has := false
			if ok, str := nonEmpty(c.Text); ok {
				has = true
				s.text.WriteString(str)
			}
			if d := c.Delta; d != nil {
				if ok, str := nonEmpty(d.Content); ok {
					has = true
					s.text.WriteString(str)
				}
				for _, rc := range []json.RawMessage{d.ReasoningContent, d.Reasoning} {
					if ok, str := nonEmpty(rc); ok {
						has = true
						s.reasoning.WriteString(str)
					}
				}
				if ok, _ := nonEmpty(d.ToolCalls); ok {
					has = true
				}
			}
			if has {
				n++
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				finished = true
			}
		}
		r := &s.res.Request
		if u := ch.Usage; u != nil {
			n = s.usage.Count(n, len(r.Tokens) == 0, u.CompletionTokens)
			r.PromptTokens = u.PromptTokens
			r.CompletionTokens = u.CompletionTokens
		}
		if n > 0 {
			s.tokens(n, at)
		}
		s.res.Text, s.res.Reasoning = s.text.String(), s.reasoning.String()
	}
}

// ollamaLine is one line of /api/generate or /api/chat.
type ollamaLine struct {
	Response *string `json:"response"`
	Thinking *string `json:"thinking"`
	Message  *struct {
		Content   string          `json:"content"`
		Thinking  string          `json:"thinking"`
		ToolCalls json.RawMessage `json:"tool_calls"`
	} `json:"message"`
	Done               bool   `json:"done"`
	Error              string `json:"error"`
	TotalDuration      int64  `json:"total_duration"`
	LoadDuration       int64  `json:"load_duration"`
	PromptEvalCount    int    `json:"prompt_eval_count"`
	PromptEvalDuration int64  `json:"prompt_eval_duration"`
	EvalCount          int    `json:"eval_count"`
	EvalDuration       int64  `json:"eval_duration"`
}

// readNDJSON reads Ollama's native stream, one JSON object per line; it is
// complete at the line with "done": true. Every non-empty line is an event;
// Ollama sends one token per line.
func (s *stream) readNDJSON(body io.Reader) (complete bool, err error) {
	lr := newLineReader(body)
	for {
		line, err := lr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		at := s.event()
		var l ollamaLine
		if json.Unmarshal(line, &l) != nil {
			s.malformed()
			continue
		}
		if l.Error != "" {
			s.res.Request.ErrorKind = KindServer
			s.res.Request.Error = "the server reported an error mid-stream: " + l.Error
			return true, nil
		}
		has := false
		if l.Response != nil && *l.Response != "" {
			has = true
			s.text.WriteString(*l.Response)
		}
		if l.Thinking != nil && *l.Thinking != "" {
			has = true
			s.reasoning.WriteString(*l.Thinking)
		}
		if m := l.Message; m != nil {
			if m.Content != "" {
				has = true
				s.text.WriteString(m.Content)
			}
			if m.Thinking != "" {
				has = true
				s.reasoning.WriteString(m.Thinking)
			}
			if ok, _ := nonEmpty(m.ToolCalls); ok {
				has = true
			}
		}
		if has {
			s.tokens(1, at)
		}
		s.res.Text, s.res.Reasoning = s.text.String(), s.reasoning.String()
		if l.Done {
			r := &s.res.Request
			r.PromptTokens, r.CompletionTokens = l.PromptEvalCount, l.EvalCount
			if l.TotalDuration > 0 || l.LoadDuration > 0 || l.EvalDuration > 0 {
				s.res.Server = &ServerTimings{
					Total:           time.Duration(l.TotalDuration),
					Load:            time.Duration(l.LoadDuration),
					PromptEval:      time.Duration(l.PromptEvalDuration),
					Eval:            time.Duration(l.EvalDuration),
					PromptEvalCount: l.PromptEvalCount,
					EvalCount:       l.EvalCount,
				}
			}
			return true, nil
		}
	}
}
