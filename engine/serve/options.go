package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"path/filepath"
	"time"

	"github.com/treni-top/treni-top/engine/demo"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/server"
	"github.com/treni-top/treni-top/trace"
)

// Options configure Run. Zero values take the defaults named per field.
type Options struct {
	// ModelDir is the Hugging Face model directory to serve (required).
	ModelDir string
	// ModelID is the name clients send as "model" (default: the
	// directory's base name).
	ModelID string
	// Addr is the listen address (default 127.0.0.1:8000; port 0 picks
	// a free port, and the bound address is logged).
	Addr string
	// Device is auto, cpu or cuda (default auto).
	Device string
	// APIKey, when set, is required as a Bearer token on /v1/*.
	APIKey string
	// KVBlocks is the KV pool size in blocks; KVBytes sizes it in bytes
	// instead. Default: MaxBatch sequences of 2048 positions, or one
	// full context, whichever is larger.
	KVBlocks int
	KVBytes  int64
	// BlockSize is positions per KV block (default 16).
	BlockSize int
	// MaxBatch caps running sequences (default 16).
	MaxBatch int
	// MaxBatchedTokens is the per-step token budget; 0 takes the
	// backend's (DefaultBatchedTokens).
	MaxBatchedTokens int
	// NoPrefixCache turns off prefix caching (on by default: requests
	// that share whole KV blocks of prompt reuse them).
	NoPrefixCache bool
	// MaxSeqLen is the context length (default: the model's, at most
	// defaultMaxContext; it may go up to the model's own limit).
	MaxSeqLen int
	// Threads for the CPU backend (default GOMAXPROCS).
	Threads int
	// WarmupPasses runs that many dummy forward passes (a prefill and a
	// decode step each) before serving; the warmup stage.
	WarmupPasses int
	// Load is how the weights are taken: model.LoadMmap or model.LoadCopy;
	// "" is the backend's default (mmap on the CPU, copy on CUDA). On the
	// CPU backend copy reads them into the engine's own memory (the
	// decoder_tensor_upload stage); on CUDA copy is the staged upload (pread
	// into pinned memory) and mmap the upload from the mapped files.
	Load string
	// KVTouchGiB allocates and touches that many GiB during kv_alloc, to
	// reproduce a first-time allocation cost (diagnosis scenario D).
	KVTouchGiB float64
	// TokenizerCacheDir is passed to tokenizer.LoadWith ("" default,
	// "-" disables).
	TokenizerCacheDir string
	// Stderr receives stage lines and log lines (default os.Stderr).
	Stderr io.Writer
	// MainStart is when the program's main began; runtime_init runs from
	// it to the end of option validation (default: when Run is called).
	MainStart time.Time
	// Ready, if set, is called with the bound address once /health
	// answers.
	Ready func(addr string)
	// InitAttrs are added to the runtime_init stage line: work the caller
	// did between main and Run (e.g. preparing the demo checkpoint).
	InitAttrs trace.Attrs
	// BodyTimeout bounds the time a request's head and body may take to
	// arrive; a stalled body is answered 408 (default
	// server.DefaultBodyTimeout).
	BodyTimeout time.Duration
	// MaxConnections caps open HTTP connections; one more is answered
	// 503 (default server.DefaultMaxConnections).
	MaxConnections int
	// EnableSleepMode serves vLLM's sleep endpoints (POST /sleep, POST
	// /wake_up, GET /is_sleeping; docs/ARCHITECTURE.md, "Sleep and wake").
	// On CUDA it allocates the weights and the KV pool through the
	// driver's virtual memory API, so that a wake keeps their addresses.
	EnableSleepMode bool
	// WakeOnRequest has a request that arrives while asleep wake the
	// engine and be served instead of answered 503 (needs
	// EnableSleepMode).
	WakeOnRequest bool
}

// normalize fills defaults and rejects unusable options.
func (o *Options) normalize(lg *log.Logger) error {
	if o.ModelDir == "" {
		return errors.New("no model directory; pass --model DIR (or --demo for the demo checkpoint)")
	}
	if abs, err := filepath.Abs(o.ModelDir); err == nil {
		o.ModelDir = abs
	}
	if o.ModelID == "" {
		o.ModelID = filepath.Base(o.ModelDir)
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:8000"
	}
	switch o.Device {
	case "":
		o.Device = "auto"
	case "auto", "cpu", "cuda":
	default:
		return fmt.Errorf("--device %q: use auto, cpu or cuda", o.Device)
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 16
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 16
	}
	if o.MaxBatchedTokens < 0 {
		return fmt.Errorf("--max-batched-tokens %d: use a positive budget, or 0 for the backend's default", o.MaxBatchedTokens)
	}
	if o.Load != "" { // "" is each backend's default: mmap on CPU, staged (copy) on CUDA
		if _, err := model.CheckLoadMode(o.Load); err != nil {
			return fmt.Errorf("--load: %w", err)
		}
	}
	switch {
	case o.WarmupPasses < 0:
		return fmt.Errorf("--warmup-passes %d: use 0 or more", o.WarmupPasses)
	case o.KVTouchGiB < 0 || o.KVTouchGiB > 1024:
		return fmt.Errorf("--kv-touch-gib %v: use a size in GiB between 0 and 1024", o.KVTouchGiB)
	case o.KVBlocks < 0 || o.KVBytes < 0:
		return errors.New("KV pool size must not be negative")
	case o.BodyTimeout < 0:
		return fmt.Errorf("--body-timeout %v: use a positive duration, or 0 for the default %v", o.BodyTimeout, server.DefaultBodyTimeout)
	case o.MaxConnections < 0:
		return fmt.Errorf("--max-connections %d: use a positive count, or 0 for the default %d", o.MaxConnections, server.DefaultMaxConnections)
	case o.WakeOnRequest && !o.EnableSleepMode:
		return errors.New("--wake-on-request needs --enable-sleep-mode")
	}
	// Before loading, so that an impossible size fails at once (it ended
	// in the Go runtime's "out of memory" and a 189-line stack dump).
	return checkTouch(o.KVTouchGiB, "/")
}

// DefaultBatchedTokens is the step token budget a backend gets when the
// user names none. The CUDA backend takes 2,048: a prefill GEMM of a few
// hundred rows is still bound by reading the weights. On the H100, 64 fresh
// 1024/128 streams ran at 3,461 output tok/s with 2,048 against 2,421 with
// 256 (TPOT p99 16.4 against 11.7 ms), and the chunked_prefill workload's
// ITL p99 rose from 11 to 21 ms; 1,024 bought no lower ITL p99 than 2,048
// (docs/BENCHMARKS.md, "Decode attention at more of HBM, and the step token
// budget"). The CPU backend keeps 256: its steps take milliseconds per
// token, and a larger budget would stall running streams for a whole prompt.
func DefaultBatchedTokens(backend string) int {
	if backend == "cpu" {
		return 256
	}
	return 2048
}

// UseDemo points o at the built-in demo checkpoint, creating it once in
// the user's cache (said on o.Stderr, which must be set). Creating it
// happens once per machine, inside runtime_init: the stage says so
// (demo_created, demo_ensure_ms), so a first run is not mistaken for a
// slow start.
func (o *Options) UseDemo(ctx context.Context) error {
	if o.ModelDir != "" {
		return errors.New("--demo and --model both given; pick one")
	}
	fmt.Fprintln(o.Stderr, "treni-top serve: preparing the demo checkpoint (created once in the user cache)")
	start := time.Now()
	dir, created, err := demo.Ensure(ctx, "")
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintln(o.Stderr, "treni-top serve: created", dir)
	}
	o.ModelDir, o.ModelID = dir, demo.Name
	o.InitAttrs = map[string]any{"demo_created": created, "demo_ensure_ms": time.Since(start).Milliseconds()}
	return nil
}
