// Package cpu is the built-in engine's CPU backend: a sched.Backend that
// runs Qwen3, Qwen2 and Llama checkpoints with no dependency beyond the Go
// toolchain. It is the fallback when there is no GPU and the numerical
// reference for the CUDA backend.
//
// One Forward step pushes every token of every chunk (prefill chunks and
// decode tokens alike) through each weight matrix together, so a step reads
// the weights once however large the batch: that is what makes 16 decode
// streams cost a few single-stream steps, not sixteen. Work is split over
// weight rows across a worker pool owned by the Backend.
//
// Weights stay where model.Open mapped them, in their stored dtype (bf16,
// f16 or f32), and are widened to float32 in the inner loop; only norm
// weights and biases are copied. Activations and the paged KV cache are
// float32. The matmul, dot and conversion kernels have AVX2/FMA and AVX-512
// assembly versions on amd64 (chosen at New from the CPU's features) and a
// portable Go version used elsewhere or with -tags purego; the tests run
// every variant the machine supports against a float64 reference.
package cpu
