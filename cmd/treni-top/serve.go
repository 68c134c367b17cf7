package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/engine/serve"
	"github.com/treni-top/treni-top/engine/server"
)

// mainStartedAt is when package main finished initialising, i.e. just
// before main runs: the end of the process_start stage and the start of
// runtime_init in `treni-top serve`'s stage lines. It is set once and
// never written again.
var mainStartedAt = time.Now()

func newServeCmd() *cobra.Command {
	var o serve.Options
	var useDemo bool
	var kvGiB float64
	var prefixCache bool
	cmd := &cobra.Command{
		Use:   "serve --model DIR",
		Short: "Run the built-in inference engine as an OpenAI-compatible server",
		Long: `Serve a Hugging Face model directory (Qwen3, Qwen2, Llama) with the built-in
engine: /v1/completions, /v1/chat/completions (SSE streaming or not),
/v1/models, /health and Prometheus /metrics. Each cold stage of startup is
reported as one JSON line on stderr ({"treni_stage":"v1",...}).`,
		Example: `  treni-top serve --model ./qwen3-tiny --addr 127.0.0.1:8000
  treni-top serve --demo --warmup-passes 4
  treni-top serve --demo --enable-sleep-mode --wake-on-request`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.MainStart = mainStartedAt
			if kvGiB < 0 {
				return withExit(2, fmt.Errorf("--kv-gib %v: use a positive size", kvGiB))
			}
			o.KVBytes = int64(kvGiB * (1 << 30))
			o.NoPrefixCache = !prefixCache
			o.Stderr = cmd.ErrOrStderr()
			if useDemo {
				if err := o.UseDemo(cmd.Context()); err != nil {
					return withExit(2, err)
				}
			}
			if o.ModelDir == "" {
				return withExit(2, fmt.Errorf("no model: pass --model DIR, or --demo"))
			}
			if err := serve.Run(cmd.Context(), o); err != nil {
				return withExit(2, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ModelDir, "model", "", "Hugging Face model directory (config.json, safetensors, tokenizer.json)")
	f.BoolVar(&useDemo, "demo", false, "serve the demo checkpoint, creating it in the user cache on first use")
	f.StringVar(&o.ModelID, "served-model-name", "", "model name clients send (default: the directory name)")
	f.StringVar(&o.Addr, "addr", "127.0.0.1:8000", "listen address (port 0 picks a free one)")
	f.StringVar(&o.Device, "device", "auto", "auto, cpu or cuda")
	f.StringVar(&o.APIKey, "api-key", os.Getenv("TRENI_API_KEY"), "require this Bearer token on /v1/* (default $TRENI_API_KEY)")
	f.IntVar(&o.KVBlocks, "kv-blocks", 0, "KV cache blocks (default: max-batch sequences of 2048 positions)")
	f.Float64Var(&kvGiB, "kv-gib", 0, "size the KV cache in GiB instead of blocks")
	f.IntVar(&o.BlockSize, "block-size", 16, "positions per KV block")
	f.IntVar(&o.MaxBatch, "max-batch", 16, "maximum running sequences")
	f.IntVar(&o.MaxBatchedTokens, "max-batched-tokens", 0, "token budget of one step: decodes first, then prompts prefilled in chunks in what is left (0: 2048 on CUDA, 256 on the CPU)")
	f.IntVar(&o.MaxBatchedTokens, "max-num-batched-tokens", 0, "same as --max-batched-tokens (vLLM's name)")
	f.BoolVar(&prefixCache, "prefix-cache", true, "share the KV blocks of common prompt prefixes across requests (--prefix-cache=false turns it off)")
	f.IntVar(&o.MaxSeqLen, "max-model-len", 0, "context length (default: the model's, at most 8192 and at most what the KV pool holds; up to the model's max_position_embeddings and the pool's positions)")
	f.IntVar(&o.Threads, "threads", 0, "CPU backend threads (default GOMAXPROCS)")
	f.IntVar(&o.WarmupPasses, "warmup-passes", 0, "dummy forward passes before serving (the warmup stage)")
	f.StringVar(&o.Load, "load", "", "how the weights are taken: mmap (compute from the mapped files; CPU default) or copy (read them into the engine's own memory, like llama.cpp --no-mmap; the CUDA backend's staged upload, its default)")
	f.BoolVar(&o.EnableSleepMode, "enable-sleep-mode", false, "serve vLLM's sleep endpoints: POST /sleep?level=1|2 frees the device memory (level 1 keeps the weights in host memory, level 2 rereads them from their files on wake), POST /wake_up takes it back, GET /is_sleeping")
	f.BoolVar(&o.WakeOnRequest, "wake-on-request", false, "with --enable-sleep-mode: a request that arrives while asleep wakes the engine and is served (its time to first token holds the wake) instead of a 503")
	f.Float64Var(&o.KVTouchGiB, "kv-touch-gib", 0, "allocate and touch this many GiB during kv_alloc (reproduces a first-allocation cost; refused beyond 90% of the memory available)")
	f.DurationVar(&o.BodyTimeout, "body-timeout", server.DefaultBodyTimeout, "a request's head and body must arrive within this; a stalled one is answered 408 and its connection closed")
	f.IntVar(&o.MaxConnections, "max-connections", server.DefaultMaxConnections, "open HTTP connections at most; one more is answered 503")
	return cmd
}
