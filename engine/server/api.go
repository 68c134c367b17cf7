package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// apiError is an OpenAI-style error: {"error":{"message","type","param","code"}}.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// badRequest is a 400 invalid_request_error about param.
func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{status: 400, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error", Param: strp(param), Code: strp(code)}
}

// decodeError turns a json.Unmarshal error into a 400 that names the field.
func decodeError(err error) *apiError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// Embedded structs show up in the path; the client only knows
		// the JSON names.
		field := strings.TrimPrefix(te.Field, "commonParams.")
		if field == "" {
			return badRequest("", "invalid_type", "request body must be a JSON object, got a JSON %s", te.Value)
		}
		return badRequest(field, "invalid_type", "field %q must be %s, got a JSON %s", field, jsonTypeName(te.Type.String()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest("", "invalid_json", "request body is not valid JSON (at byte %d: %v); send a JSON object", se.Offset, err)
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return badRequest(fe.field, "invalid_type", "%s", fe.msg)
	}
	return badRequest("", "invalid_json", "could not parse the request body: %v", err)
}

func jsonTypeName(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case goType == "bool", goType == "*bool":
		return "a boolean"
	case strings.Contains(goType, "string"):
		return "a string"
	}
	return "of type " + goType
}

// fieldError is a type error in a union field we decode by hand.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.msg }

// streamOptions is stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// commonParams are the sampling and control fields both endpoints share.
// Pointers tell "absent or null" from a value.
type commonParams struct {
	Model            *string         `json:"model"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"` // vLLM extension
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	Stream           *bool           `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	N                *int            `json:"n"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	IgnoreEOS        *bool           `json:"ignore_eos"` // vLLM extension
	User             *string         `json:"user"`
	// LogitBias maps token ids (as JSON object keys) to a value added to
	// their logits, clamped to [-100, 100] as vLLM does.
	LogitBias         map[string]float64 `json:"logit_bias"`
	MinP              *float64           `json:"min_p"`              // vLLM extension
	RepetitionPenalty *float64           `json:"repetition_penalty"` // vLLM extension
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	commonParams
	Prompt   json.RawMessage `json:"prompt"`
	Echo     *bool           `json:"echo"`
	Logprobs *int            `json:"logprobs"`
	BestOf   *int            `json:"best_of"`
	Suffix   *string         `json:"suffix"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	commonParams
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Logprobs            *bool         `json:"logprobs"`
}

// chatMessage is one message; Content is a string or a list of text parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    *string         `json:"name"`
}

// text returns the message content as one string.
func (m chatMessage) text(i int) (string, error) {
	field := fmt.Sprintf("messages[%d].content", i)
	c := strings.TrimSpace(string(m.Content))
	if c == "" || c == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", &fieldError{field, field + " must be a string or an array of {\"type\":\"text\",\"text\":…} parts"}
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", &fieldError{field, fmt.Sprintf("%s[%d] is a %q part; this server takes text parts only", field, j, p.Type)}
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// stops parses "stop": null, a string, or an array of up to 4 strings.
func (p commonParams) stops() ([]string, error) {
	c := strings.TrimSpace(string(p.Stop))
	if c == "" || c == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(p.Stop, &s); err == nil {
		if s == "" {
			return nil, nil
		}
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(p.Stop, &list); err != nil {
		return nil, &fieldError{"stop", "field \"stop\" must be a string or an array of strings"}
	}
	if len(list) > 4 {
		return nil, &fieldError{"stop", fmt.Sprintf("field \"stop\" has %d sequences; at most 4 are allowed", len(list))}
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// promptInput is a completion prompt: text or token ids.
type promptInput struct {
	text   string
	tokens []int32
	isIDs  bool
}

// prompt parses "prompt": a string, an array of one string, an array of
// token ids, or an array of one array of token ids.
func (r completionRequest) prompt() (promptInput, error) {
	c := strings.TrimSpace(string(r.Prompt))
	if c == "" || c == "null" {
		return promptInput{}, &fieldError{"prompt", "field \"prompt\" is required"}
	}
	var s string
	if err := json.Unmarshal(r.Prompt, &s); err == nil {
		return promptInput{text: s}, nil
	}
	var ss []string
	if err := json.Unmarshal(r.Prompt, &ss); err == nil {
		if len(ss) != 1 {
			return promptInput{}, &fieldError{"prompt", fmt.Sprintf("this server takes one prompt per request, got %d; send them as separate requests", len(ss))}
		}
		return promptInput{text: ss[0]}, nil
	}
	var ids []int32
	if err := json.Unmarshal(r.Prompt, &ids); err == nil {
		return promptInput{tokens: ids, isIDs: true}, nil
	}
	var idss [][]int32
	if err := json.Unmarshal(r.Prompt, &idss); err == nil {
		if len(idss) != 1 {
			return promptInput{}, &fieldError{"prompt", fmt.Sprintf("this server takes one prompt per request, got %d; send them as separate requests", len(idss))}
		}
		return promptInput{tokens: idss[0], isIDs: true}, nil
	}
	return promptInput{}, &fieldError{"prompt", "field \"prompt\" must be a string, an array of one string, or an array of token ids"}
}

// usage is the OpenAI usage object.
type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails *promptDetail `json:"prompt_tokens_details,omitempty"`
}

// promptDetail is OpenAI's usage.prompt_tokens_details: cached_tokens is how
// many prompt tokens came from the prefix cache (their prefill skipped).
type promptDetail struct {
	CachedTokens int `json:"cached_tokens"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type chatOutMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatOutMessage `json:"message"`
	Logprobs     any            `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage,omitempty"`
}
