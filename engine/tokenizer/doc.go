// Package tokenizer is the built-in engine's byte-level BPE tokenizer: it
// loads Hugging Face tokenizer.json files (Qwen2/Qwen3 and Llama 3), encodes
// and decodes exactly like HF tokenizers, streams decoded text without
// splitting UTF-8 characters, applies chat templates, and trains small
// tokenizers for synthetic checkpoints.
package tokenizer
