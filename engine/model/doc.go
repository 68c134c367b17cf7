// Package model reads Hugging Face model directories for the built-in engine:
// config.json for the Qwen3, Qwen2 and Llama families, and safetensors weights
// (single file or sharded with model.safetensors.index.json) in BF16, F16 or
// F32. Weight files are mmapped once, read-only; every header is parsed once
// and validated against the architecture before a backend sees a byte, so a
// broken checkpoint fails at load with an error that names the file and the
// tensor instead of producing garbage logits later.
//
// The cost of building the index is the tensor_index_build stage and the cost
// of pulling the weight bytes into RAM is the page_cache stage (Prefetch); both
// are measured here and reported by the caller as stage lines.
package model
