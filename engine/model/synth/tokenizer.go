package synth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/tokenizer"
)

// DefaultTokenizerVocab is the size of the small tokenizer trained when no
// --tokenizer is given; tiny and demo take their vocab from it.
const DefaultTokenizerVocab = 4096

// Tokenizer file names copied from --tokenizer directories.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"}

// tokFiles is a tokenizer to write: file name → content.
type tokFiles struct {
	files  map[string][]byte
	size   int            // max id + 1
	ids    map[string]int // added/special token content → id
	source string         // "trained" or the directory copied from
}

// trainDefault is the one call into the tokenizer package, kept in one
// place so the dependency is easy to see and to stub.
func trainDefault(vocab int) (tokJSON, cfgJSON []byte, err error) {
	return tokenizer.TrainDefault(vocab)
}

func loadTokenizer(dir string) (*tokFiles, error) {
	t := &tokFiles{files: map[string][]byte{}}
	if dir == "" {
		tj, tc, err := trainDefault(DefaultTokenizerVocab)
		if err != nil {
			return nil, fmt.Errorf("train the built-in tokenizer: %w (or pass --tokenizer DIR with a tokenizer.json)", err)
		}
		t.files["tokenizer.json"], t.files["tokenizer_config.json"] = tj, tc
		t.source = "trained"
	} else {
		for _, name := range tokenizerFiles {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if errors.Is(err, os.ErrNotExist) && name != "tokenizer.json" {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("read tokenizer %s: %w (--tokenizer must be a directory with tokenizer.json)", name, err)
			}
			t.files[name] = b
		}
		t.source = dir
	}
	if err := t.index(); err != nil {
		return nil, err
	}
	return t, nil
}

// index reads the vocabulary size and the added tokens' ids.
func (t *tokFiles) index() error {
	var tj struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(t.files["tokenizer.json"], &tj); err != nil {
		return fmt.Errorf("tokenizer.json from %s: %w", t.source, err)
	}
	t.ids = map[string]int{}
	for tok, id := range tj.Model.Vocab {
		t.size = max(t.size, id+1)
		t.ids[tok] = id
	}
	for _, a := range tj.AddedTokens {
		t.size = max(t.size, a.ID+1)
		t.ids[a.Content] = a.ID
	}
	if t.size == 0 {
		return fmt.Errorf("tokenizer.json from %s has an empty vocabulary", t.source)
	}
	return nil
}

// specialIDs picks the family's special tokens from the tokenizer. The
// chat templates need them, so a tokenizer without them is refused.
func (t *tokFiles) specialIDs(arch model.Arch) (tokenIDs, error) {
	need := func(tok string) (int, error) {
		id, ok := t.ids[tok]
		if !ok {
			return 0, fmt.Errorf("tokenizer from %s lacks the special token %s that the %s chat template needs", t.source, tok, arch)
		}
		return id, nil
	}
	var ids tokenIDs
	ids.pad = -1
	switch arch {
	case model.ArchQwen3, model.ArchQwen2:
		eot, err := need("<|endoftext|>")
		if err != nil {
			return ids, err
		}
		if _, err := need("<|im_start|>"); err != nil {
			return ids, err
		}
		imEnd, err := need("<|im_end|>")
		if err != nil {
			return ids, err
		}
		// As Qwen3-0.6B and Qwen2.5-*-Instruct ship: bos <|endoftext|>,
		// eos <|im_end|>, generation stops on either.
		ids.bos, ids.eos, ids.genEOS, ids.pad, ids.configEOS1 = eot, []int{imEnd}, []int{imEnd, eot}, eot, true
	case model.ArchLlama:
		bos, err := need("<|begin_of_text|>")
		if err != nil {
			return ids, err
		}
		eot, err := need("<|eot_id|>")
		if err != nil {
			return ids, err
		}
		for _, tok := range []string{"<|start_header_id|>", "<|end_header_id|>"} {
			if _, err := need(tok); err != nil {
				return ids, err
			}
		}
		ids.bos = bos
		// Llama-3.1/3.2-Instruct: eos [end_of_text, eom_id, eot_id],
		// keeping the ones this tokenizer has.
		for _, tok := range []string{"<|end_of_text|>", "<|eom_id|>"} {
			if id, ok := t.ids[tok]; ok {
				ids.eos = append(ids.eos, id)
			}
		}
		ids.eos = append(ids.eos, eot)
		ids.genEOS = ids.eos
	}
	return ids, nil
}

// llama3ChatTemplate is the tool-free core of Meta's Llama 3.1/3.2
// template: BOS, then header-wrapped, trimmed turns ending in <|eot_id|>.
const llama3ChatTemplate = `{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}`

// adaptTrainedConfig makes the trained tokenizer's tokenizer_config.json
// speak the family's chat dialect. The trained tokenizer carries both
// families' special tokens and a ChatML template; a Llama checkpoint gets
// the Llama 3 template and its bos/eos, a Qwen one Qwen's (no bos token,
// eos <|im_end|>), so the engine and transformers format chats as the real
// model would. Copied tokenizers are left exactly as they are.
func (t *tokFiles) adaptTrainedConfig(arch model.Arch) error {
	if t.source != "trained" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(t.files["tokenizer_config.json"], &m); err != nil {
		return fmt.Errorf("trained tokenizer_config.json: %w", err)
	}
	set := func(k string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		m[k] = b
		return nil
	}
	var err error
	switch arch {
	case model.ArchLlama:
		err = errors.Join(set("bos_token", "<|begin_of_text|>"), set("eos_token", "<|eot_id|>"), set("chat_template", llama3ChatTemplate))
	default:
		err = errors.Join(set("bos_token", nil), set("eos_token", "<|im_end|>"))
	}
	if err != nil {
		return fmt.Errorf("adapt tokenizer_config.json: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("adapt tokenizer_config.json: %w", err)
	}
	t.files["tokenizer_config.json"] = append(b, '\n')
	return nil
}
