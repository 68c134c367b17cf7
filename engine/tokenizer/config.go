package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// config is what this package reads from tokenizer_config.json.
type config struct {
	added        []addedJSON // added_tokens_decoder, by id
	bos, eos     string
	pad          string
	addBOS       bool
	chatTemplate string
}

// parseConfig reads tokenizer_config.json; nil data is an empty config.
func parseConfig(data []byte) (*config, error) {
	c := &config{}
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	var raw struct {
		AddedTokensDecoder map[string]addedJSON `json:"added_tokens_decoder"`
		BOS                json.RawMessage      `json:"bos_token"`
		EOS                json.RawMessage      `json:"eos_token"`
		Pad                json.RawMessage      `json:"pad_token"`
		AddBOS             *bool                `json:"add_bos_token"`
		ChatTemplate       json.RawMessage      `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not valid JSON (is the file truncated?): %w", err)
	}
	keys := make([]string, 0, len(raw.AddedTokensDecoder))
	for k := range raw.AddedTokensDecoder {
		keys = append(keys, k)
	}
	// Numeric order of the ids, as transformers adds them.
	sort.Slice(keys, func(i, j int) bool {
		a, ea := strconv.ParseInt(keys[i], 10, 64)
		b, eb := strconv.ParseInt(keys[j], 10, 64)
		if ea == nil && eb == nil && a != b {
			return a < b
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		c.added = append(c.added, raw.AddedTokensDecoder[k])
	}
	var err error
	if c.bos, err = tokenField(raw.BOS); err != nil {
		return nil, fmt.Errorf("bos_token: %w", err)
	}
	if c.eos, err = tokenField(raw.EOS); err != nil {
		return nil, fmt.Errorf("eos_token: %w", err)
	}
	if c.pad, err = tokenField(raw.Pad); err != nil {
		return nil, fmt.Errorf("pad_token: %w", err)
	}
	if raw.AddBOS != nil {
		c.addBOS = *raw.AddBOS
	}
	if t := bytes.TrimSpace(raw.ChatTemplate); len(t) > 0 && string(t) != "null" {
		var s string
		if json.Unmarshal(t, &s) == nil {
			c.chatTemplate = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(t, &named); err != nil {
				return nil, fmt.Errorf("chat_template is neither a string nor a list of named templates: %w", err)
			}
			for i, n := range named {
				if n.Name == "default" || i == 0 {
					c.chatTemplate = n.Template
				}
			}
		}
	}
	return c, nil
}

// tokenField reads a special-token field: null, a string, or an AddedToken
// object with "content".
func tokenField(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("neither a string nor a token object: %w", err)
	}
	return o.Content, nil
}

// applyConfig keeps the config fields the tokenizer needs at run time.
func (t *Tokenizer) applyConfig(c *config) {
	t.bosToken, t.eosToken, t.padToken = c.bos, c.eos, c.pad
	t.addBOS = c.addBOS
	t.chatTemplate = c.chatTemplate
}

// BOS returns the beginning-of-sequence token id named by
// tokenizer_config.json, if any.
func (t *Tokenizer) BOS() (int32, bool) { return t.idOf(t.bosToken) }

// EOS returns the end-of-sequence token id named by tokenizer_config.json,
// if any.
func (t *Tokenizer) EOS() (int32, bool) { return t.idOf(t.eosToken) }

// AddBOS reports whether the model expects BOS before every prompt
// (add_bos_token). Encode never adds it; callers prepend BOS themselves.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

func (t *Tokenizer) idOf(s string) (int32, bool) {
	if s == "" {
		return 0, false
	}
	return t.TokenID(s)
}
