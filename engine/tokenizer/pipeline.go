package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// The tokenizer.json pipeline around the model: normalizer, pre-tokenizer
// and decoder, each checked against what this package implements.

// typed reads the "type" of a JSON object (or "" for null).
func typed(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var v struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	if v.Type == "" {
		return "", errors.New("object without a \"type\"")
	}
	return v.Type, nil
}

// parseNormalizer accepts no normalizer, NFC, or a Sequence of those.
func parseNormalizer(raw json.RawMessage) (nfc bool, err error) {
	typ, err := typed(raw)
	if err != nil {
		return false, fmt.Errorf("normalizer: %w", err)
	}
	switch typ {
	case "":
		return false, nil
	case "NFC":
		return true, nil
	case "Sequence":
		var s struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return false, fmt.Errorf("normalizer: %w", err)
		}
		for _, n := range s.Normalizers {
			sub, err := parseNormalizer(n)
			if err != nil {
				return false, err
			}
			nfc = nfc || sub
		}
		return nfc, nil
	}
	return false, fmt.Errorf("normalizer %q is not supported (byte-level BPE tokenizers use none or NFC)", typ)
}

// parsePreTokenizer reads a ByteLevel, Split or Sequence pre-tokenizer. fast
// is 1 or 3 when it is exactly [Split(Qwen2 or Llama 3 pattern, Isolated),
// ByteLevel(no prefix space, no regex)], the common case with a direct path.
func parsePreTokenizer(raw json.RawMessage) (steps []preStep, fast int, err error) {
	steps, err = preSteps(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("pre_tokenizer: %w", err)
	}
	hasByteLevel := false
	for _, s := range steps {
		hasByteLevel = hasByteLevel || s.byteLevel
	}
	if !hasByteLevel {
		return nil, 0, errors.New("pre_tokenizer has no ByteLevel step: only byte-level BPE tokenizers are supported")
	}
	if len(steps) == 2 && !steps[0].byteLevel && steps[0].behavior == "Isolated" &&
		(steps[0].pattern == patQwen2 || steps[0].pattern == patLlama3) &&
		steps[1].byteLevel && !steps[1].addPrefixSpace && !steps[1].useRegex {
		fast = 1
		if steps[0].pattern == patLlama3 {
			fast = 3
		}
	}
	return steps, fast, nil
}

func preSteps(raw json.RawMessage) ([]preStep, error) {
	typ, err := typed(raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "":
		return nil, nil
	case "Sequence":
		var s struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		var out []preStep
		for _, p := range s.PreTokenizers {
			sub, err := preSteps(p)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		}
		return out, nil
	case "ByteLevel":
		v := struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		useRegex := v.UseRegex == nil || *v.UseRegex
		return []preStep{{byteLevel: true, addPrefixSpace: v.AddPrefixSpace, useRegex: useRegex}}, nil
	case "Split":
		var v struct {
			Pattern struct {
				Regex  *string `json:"Regex"`
				String *string `json:"String"`
			} `json:"pattern"`
			Behavior string `json:"behavior"`
			Invert   bool   `json:"invert"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		if v.Invert {
			return nil, errors.New("pre-tokenizer Split with invert=true is not supported")
		}
		if v.Behavior != "Isolated" && v.Behavior != "Removed" {
			return nil, fmt.Errorf("pre-tokenizer Split behavior %q is not supported (Isolated and Removed are)", v.Behavior)
		}
		st := preStep{behavior: v.Behavior}
		switch {
		case v.Pattern.String != nil:
			st.pattern, st.literal = patLiteral, *v.Pattern.String
		case v.Pattern.Regex != nil:
			switch *v.Pattern.Regex {
			case patternQwen2:
				st.pattern = patQwen2
			case patternLlama3:
				st.pattern = patLlama3
			case patternGPT2:
				st.pattern = patGPT2
			default:
				re, err := regexp.Compile(*v.Pattern.Regex)
				if err != nil {
					return nil, fmt.Errorf("pre-tokenizer Split regex %q is neither a known tokenizer pattern (Qwen2, Llama 3, GPT-2) nor one Go's regexp can run: %w", *v.Pattern.Regex, err)
				}
				st.pattern, st.re = patRegexp, re
			}
		default:
			return nil, errors.New("pre-tokenizer Split without a Regex or String pattern")
		}
		return []preStep{st}, nil
	}
	return nil, fmt.Errorf("pre-tokenizer %q is not supported (Sequence, Split and ByteLevel are)", typ)
}

// checkDecoder accepts a ByteLevel decoder, alone or in a Sequence.
func checkDecoder(raw json.RawMessage) error {
	typ, err := typed(raw)
	if err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	switch typ {
	case "ByteLevel":
		return nil
	case "Sequence":
		var s struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("decoder: %w", err)
		}
		if len(s.Decoders) == 1 {
			return checkDecoder(s.Decoders[0])
		}
	}
	return fmt.Errorf("decoder %q is not supported: only the ByteLevel decoder is", typ)
}
