// Package serve is the `treni-top serve` process: it loads a checkpoint,
// starts the scheduler and the OpenAI-compatible server, and reports every
// cold stage of its own startup as one JSON stage line on stderr
// (trace.StageLine), so the launcher and the TUI can put the built-in
// engine's cold start on the same time axis as any other server's.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/treni-top/treni-top/engine/cpu"
	"github.com/treni-top/treni-top/engine/cuda"
	"github.com/treni-top/treni-top/engine/memstat"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/engine/server"
	"github.com/treni-top/treni-top/engine/tokenizer"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/httpserve"
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

// emitter writes stage lines and log lines to one writer.
type emitter struct {
	mu  sync.Mutex
	w   io.Writer
	log *log.Logger
	pid int
}

func (e *emitter) stage(s trace.Stage, start, end time.Time, attrs trace.Attrs) {
	l := trace.NewStageLine(s, start, end, attrs)
	l.PID = e.pid
	b := append(l.Marshal(), '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(b)
}

// Write lets the logger share the writer's lock with stage lines, so lines
// never interleave.
func (e *emitter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.w.Write(p)
}

// Run starts the engine and serves until ctx ends. Startup failures return
// an error that says what to fix; a clean shutdown returns nil.
func Run(ctx context.Context, o Options) error {
	runStart := time.Now()
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	em := &emitter{w: o.Stderr, pid: os.Getpid()}
	em.log = log.New(em, "treni-top serve: ", log.LstdFlags|log.Lmicroseconds)
	mainStart := o.MainStart
	if mainStart.IsZero() {
		mainStart = runStart
	}
	procStart := reportProcessStart(em, mainStart)

	// runtime_init: flags (parsed by the caller since MainStart) and options.
	if err := o.normalize(em.log); err != nil {
		return err
	}
	initEnd := time.Now()
	initAttrs := trace.Attrs{"device": o.Device, "go": runtime.Version(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	for k, v := range o.InitAttrs {
		initAttrs[k] = v
	}
	em.stage(trace.StageRuntimeInit, mainStart, initEnd, initAttrs)

	starter, err := startCUDA(o, em)
	if err != nil {
		return err
	}
	defer func() {
		if starter != nil {
			starter.Abort() // Load never ran: release what Start began
		}
	}()
	ld, err := loadModel(ctx, o, em, initEnd, starter == nil)
	if err != nil {
		return err
	}
	ck := ld.ck
	defer ck.Close()

	cfg := ck.Config
	maxSeq, err := contextLength(cfg.MaxPositionEmbeddings, o.MaxSeqLen)
	if err != nil {
		return err
	}

	// kv_alloc: the backend's KV pool (and the optional touched pool).
	kvStart := ld.end
	blocks := kvBlocks(o, cfg, maxSeq)
	if maxSeq, err = fitContext(maxSeq, o.MaxSeqLen > 0, blocks, o.BlockSize, em.log); err != nil {
		return err
	}
	be, err := newBackend(ctx, ck, o, blocks, em, starter, ld.resident < 0.5)
	starter = nil // Load consumed it, whatever its outcome
	if err != nil {
		if ctx.Err() != nil {
			return stoppedLoading(ctx, o.ModelDir)
		}
		return err
	}
	defer be.Close()
	if be.Name() != "cpu" {
		// The weights live on the device now: drop the mapping. A device
		// backend reported its own stages (cuda_init, kernel_load,
		// decoder_tensor_upload and its kv_alloc); serve's kv_alloc covers
		// only what follows.
		ck.Close()
		kvStart = time.Now()
	}
	s, touched, hStart, err := startScheduler(ctx, o, em, be, kvStart, blocks, maxSeq)
	if err != nil {
		return err
	}
	err = serveUntilDone(ctx, o, em, s, ld.tok, be, procStart, hStart, blocks, maxSeq)
	runtime.KeepAlive(touched)
	return err
}

// reportProcessStart reports the process_start stage, from the process's exec
// (per /proc) to mainStart, and returns its start: mainStart where /proc
// says nothing (for /metrics).
func reportProcessStart(em *emitter, mainStart time.Time) time.Time {
	ps, err := ProcessStart()
	if err != nil {
		em.log.Printf("process_start not reported: %v", err)
		return mainStart
	}
	if ps.After(mainStart) {
		ps = mainStart // tick rounding never puts exec after main
	}
	em.stage(trace.StageProcessStart, ps, mainStart, trace.Attrs{"source": "/proc/self/stat starttime"})
	return ps
}

// startCUDA starts the CUDA backend's driver and context (cuda_init),
// which come up while the checkpoint and tokenizer load: cuda.Start
// returns at once and fails fast only where there is no driver at all.
// It returns nil on --device cpu, and with --device auto where CUDA
// cannot start (saying so in the log); the caller Aborts a starter that
// Load never consumes.
func startCUDA(o Options, em *emitter) (*cuda.Starter, error) {
	if o.Device == "cpu" {
		return nil, nil
	}
	st, err := cuda.Start(cuda.BackendOptions{Upload: cudaUpload(o.Load), Stage: func(r cuda.StageRecord) { em.stage(r.Stage, r.Start, r.End, r.Attrs) }})
	switch {
	case err == nil:
		return st, nil
	case o.Device == "cuda":
		return nil, fmt.Errorf("--device cuda: %w (run `treni-top doctor` to see what is missing, or use --device cpu)", err)
	default:
		em.log.Print(cpuFallbackNote(err))
		return nil, nil
	}
}

// loaded is the checkpoint and tokenizer that loadModel loaded.
type loaded struct {
	ck  *model.Checkpoint
	tok *tokenizer.Tokenizer
	// end is when the later of the two finished: kv_alloc starts there.
	end time.Time
	// resident is the fraction of the weights in the page cache before
	// loading (loadCheckpoint).
	resident float64
}

// loadModel loads the checkpoint (index, then page cache; loadCheckpoint
// with onHost) and the tokenizer side by side, from start, each
// reporting its stages. If either fails it stops the other and returns
// both errors, or stoppedLoading's when ctx ended.
func loadModel(ctx context.Context, o Options, em *emitter, start time.Time, onHost bool) (loaded, error) {
	var (
		wg      sync.WaitGroup
		tok     *tokenizer.Tokenizer
		tokErr  error
		loadCtx context.Context
	)
	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	// Consecutive stages share their boundary instant: the few
	// microseconds between one stage's end and the next one's first line
	// belong to the next stage, and on a loaded machine a descheduled
	// goroutine must not open an unattributed gap.
	var tokEnd time.Time
	wg.Add(1)
	go func() {
		defer wg.Done()
		t, st, err := tokenizer.LoadWith(o.ModelDir, tokenizer.LoadOptions{CacheDir: o.TokenizerCacheDir})
		if err != nil {
			tokErr = fmt.Errorf("load the tokenizer of %s: %w", o.ModelDir, err)
			cancelLoad()
			return
		}
		// Every request needs the stop tokens; working them out builds
		// the piece index (~5–10 ms for a 151k vocabulary), which the
		// first request waited for before its prefill while it was done
		// lazily. Here it overlaps the checkpoint load.
		stops := t.StopTokenIDs()
		tok = t
		tokEnd = time.Now()
		em.stage(trace.StageTokenizerLoad, start, tokEnd, trace.Attrs{"vocab": st.Vocab, "merges": st.Merges, "json_bytes": st.JSONBytes, "cache_hit": st.CacheHit, "stop_tokens": len(stops)})
	}()
	// The CUDA backend reads the weight files itself (staged upload): the
	// page_cache stage then only measures residency, and storage reads, if
	// any, happen inside decoder_tensor_upload.
	ck, loadEnd, resident, err := loadCheckpoint(loadCtx, o, em, start, onHost)
	wg.Wait()
	if err != nil || tokErr != nil {
		if ck != nil {
			ck.Close()
		}
		if ctx.Err() != nil {
			return loaded{}, stoppedLoading(ctx, o.ModelDir)
		}
		return loaded{}, errors.Join(err, tokErr)
	}
	end := loadEnd
	if tokEnd.After(end) {
		end = tokEnd
	}
	return loaded{ck: ck, tok: tok, end: end, resident: resident}, nil
}

// kvBlocks is the KV pool's size in blocks: o.KVBlocks, or o.KVBytes
// worth, or by default room for MaxBatch sequences of 2048 positions or
// one full context, whichever is larger.
func kvBlocks(o Options, cfg model.Config, maxSeq int) int {
	blocks := o.KVBlocks
	perPos := kvBytesPerPosition(cfg)
	if blocks <= 0 && o.KVBytes > 0 {
		blocks = int(o.KVBytes / (perPos * int64(o.BlockSize)))
	}
	if blocks <= 0 {
		blocks = max(o.MaxBatch*2048, maxSeq) / o.BlockSize
	}
	return blocks
}

// startScheduler ends kv_alloc, begun at kvStart: it touches the
// optional pool (--kv-touch-gib) and creates the scheduler over be. Then
// it runs the warmup stage's passes, if any. It returns the scheduler,
// the touched pool (to be kept alive while serving) and the end of the
// last stage, where http_ready begins.
func startScheduler(ctx context.Context, o Options, em *emitter, be backend, kvStart time.Time, blocks, maxSeq int) (*sched.Scheduler, []byte, time.Time, error) {
	var touched []byte
	if o.KVTouchGiB > 0 {
		// Again now that the weights take their share of the memory.
		if err := checkTouch(o.KVTouchGiB, "/"); err != nil {
			return nil, nil, time.Time{}, err
		}
		var err error
		if touched, err = touchPool(ctx, o.KVTouchGiB); err != nil {
			return nil, nil, time.Time{}, stoppedLoading(ctx, o.ModelDir)
		}
	}
	if o.MaxBatchedTokens == 0 {
		o.MaxBatchedTokens = DefaultBatchedTokens(be.Name())
	}
	s, err := sched.New(be, sched.Config{MaxBatch: o.MaxBatch, MaxBatchedTokens: o.MaxBatchedTokens, MaxSeqLen: maxSeq, NoPrefixCache: o.NoPrefixCache})
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("create the scheduler: %w", err)
	}
	kvEnd := time.Now()
	// backend names the device that serves (cpu or cuda): with --device
	// auto it is decided only here, after any fallback, so the diagnosis
	// reads the device from this stage rather than from runtime_init's.
	em.stage(trace.StageKVAlloc, kvStart, kvEnd, trace.Attrs{
		"blocks": blocks, "block_size": o.BlockSize, "bytes": be.KVBytes(), "touched_bytes": int64(len(touched)), "max_seq_len": maxSeq,
		"backend": be.Name(),
	})

	hStart := kvEnd
	if o.WarmupPasses > 0 {
		tokens, err := warmup(ctx, be, s, o.WarmupPasses, maxSeq)
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("warm-up forward pass: %w", err)
		}
		wEnd := time.Now()
		em.stage(trace.StageWarmup, kvEnd, wEnd, trace.Attrs{"passes": o.WarmupPasses, "tokens": tokens})
		hStart = wEnd
	}
	return s, touched, hStart, nil
}

// serveUntilDone runs the scheduler and the HTTP server until ctx ends or
// the server fails: http_ready from hStart to our own /health answering,
// then the background warm-up, the log lines and o.Ready; at the end the
// scheduler stops first, then the server shuts down.
func serveUntilDone(ctx context.Context, o Options, em *emitter, s *sched.Scheduler, tok *tokenizer.Tokenizer, be backend, procStart, hStart time.Time, blocks, maxSeq int) error {
	// http_ready: listener start → our own /health answers.
	srv, err := server.New(s, tok, serverOptions(o, em, procStart))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w; pick a free address with --addr", o.Addr, err)
	}
	// A connection that never sent a request (an HTTP client's spare
	// dial, left idle in its pool) held Shutdown for 4.2–5 s, net/http's
	// grace for new connections, in 12 of 32 cold starts on the H100
	// (docs/BENCHMARKS.md, sixteenth session): Shutdown closes those at
	// once instead, once the listener is closed.
	hs := srv.HTTPServer()
	httpserve.CloseFreshOnShutdown(hs)
	schedCtx, stopSched := context.WithCancel(context.Background())
	defer stopSched()
	schedDone := make(chan error, 1)
	go func() { schedDone <- s.Run(schedCtx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- hs.Serve(srv.Listener(ln)) }()
	addr := ln.Addr().String()
	if err := selfCheck(ctx, addr); err != nil {
		stopSched()
		_ = hs.Close()
		<-schedDone
		<-serveDone
		return fmt.Errorf("the server did not answer its own health check on %s: %w", addr, err)
	}
	em.stage(trace.StageHTTPReady, hStart, time.Now(), trace.Attrs{"addr": addr})
	// What the load warm-up left out (the CUDA backend's prefill GEMM
	// buckets and decode graphs) warms now, yielding to requests; it
	// reports its own warmup stage when done.
	if w, ok := be.(backgroundWarmer); ok {
		w.WarmBackground(o.MaxBatch)
	}
	em.log.Printf("serving %s on %s: %d KV blocks × %d positions, context %d, max batch %d, %d tokens a step, prefix cache %s", o.ModelID, be.Name(), blocks, o.BlockSize, maxSeq, o.MaxBatch, s.Config().MaxBatchedTokens, map[bool]string{false: "on", true: "off"}[o.NoPrefixCache])
	em.log.Printf("listening on http://%s", addr)
	if o.Ready != nil {
		o.Ready(addr)
	}
	releaseLoadMemory(em.log)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-serveDone:
	}
	// Ending the scheduler first finishes every open request, so the
	// handlers return and Shutdown does not wait on streams.
	stopSched()
	<-schedDone
	shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shCtx); err != nil {
		_ = hs.Close()
	}
	if serveErr == nil {
		serveErr = <-serveDone
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("HTTP server on %s failed: %w", addr, serveErr)
	}
	em.log.Printf("stopped")
	return nil
}

// serverOptions are the HTTP server's options for o: first_request and,
// with sleep mode, each sleep's and wake's parts reported as stage lines.
func serverOptions(o Options, em *emitter, procStart time.Time) server.Options {
	sopt := server.Options{ModelID: o.ModelID, APIKey: o.APIKey, Log: em.log, ProcessStart: procStart,
		BodyTimeout: o.BodyTimeout, MaxConnections: o.MaxConnections,
		FirstRequest: func(arrived, first time.Time, promptTokens int) {
			em.stage(trace.StageFirstRequest, arrived, first, trace.Attrs{"prompt_tokens": promptTokens})
		}}
	if o.EnableSleepMode {
		// Each sleep and each wake reports its parts as stage lines, as
		// the cold start does (docs/ARCHITECTURE.md, "Sleep and wake").
		sopt.Sleep = &server.SleepOptions{WakeOnRequest: o.WakeOnRequest, Phase: func(p sched.Phase) { em.stage(p.Stage, p.Start, p.End, p.Attrs) }}
	}
	return sopt
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

// loadCheckpoint runs tensor_index_build, then page_cache and, for a
// backend computing from host memory (onHost, the CPU backend) with
// --load copy, decoder_tensor_upload:
//   - onHost, --load mmap: page_cache reads every weight byte into the page
//     cache through the mapping, which the backend then computes from;
//   - onHost, --load copy: page_cache only checks how much of the weights
//     the cache holds, and decoder_tensor_upload reads them with pread into
//     the engine's own memory (from storage for the pages not cached);
//   - a device backend: page_cache only checks residency (the backend reads
//     the files itself during its own decoder_tensor_upload).
//
// It returns the end of the last stage and the fraction of the weights
// resident before loading (1 after a prefetch).
func loadCheckpoint(ctx context.Context, o Options, em *emitter, start time.Time, onHost bool) (*model.Checkpoint, time.Time, float64, error) {
	ck, err := model.Open(o.ModelDir)
	if err != nil {
		return nil, time.Time{}, 0, fmt.Errorf("open the checkpoint: %w", err)
	}
	st := ck.Stats
	pStart := time.Now()
	em.stage(trace.StageTensorIndexBuild, start, pStart, trace.Attrs{"tensors": st.Tensors, "bytes": st.Bytes, "files": st.Files, "header_bytes": st.HeaderBytes})
	if !onHost || o.Load == model.LoadCopy {
		res, total, err := ck.Residency()
		if err != nil {
			return ck, time.Time{}, 0, err
		}
		pEnd := time.Now()
		read := trace.ReadDeferred + "decoder_tensor_upload (the CUDA backend reads the files itself)"
		if onHost {
			read = trace.ReadDeferred + "decoder_tensor_upload (--load copy reads the files into the engine's memory)"
		}
		em.stage(trace.StagePageCache, pStart, pEnd, trace.Attrs{"bytes": total, "resident_bytes": res, "files": len(ck.WeightFiles()), trace.AttrRead: read})
		frac := 1.0
		if total > 0 {
			frac = float64(res) / float64(total)
		}
		if !onHost {
			return ck, pEnd, frac, nil
		}
		cs, err := ck.CopyToMemory(ctx, 0)
		if err != nil {
			return ck, time.Time{}, 0, err
		}
		uEnd := time.Now()
		em.stage(trace.StageDecoderTensorUpload, pEnd, uEnd, trace.Attrs{"bytes": cs.Bytes, "gb_per_s": round3(gbPerS(cs.Bytes, uEnd.Sub(pEnd))),
			"mode": model.LoadCopy, "device": "host", "readers": cs.Readers, "files": cs.Files, "resident_before_bytes": res})
		return ck, uEnd, frac, nil
	}
	n, err := ck.Prefetch(ctx, 0)
	if err != nil {
		return ck, time.Time{}, 0, fmt.Errorf("read the weights into the page cache: %w", err)
	}
	pEnd := time.Now()
	em.stage(trace.StagePageCache, pStart, pEnd, trace.Attrs{"bytes": n, "gb_per_s": round3(gbPerS(n, pEnd.Sub(pStart))), "files": len(ck.WeightFiles())})
	return ck, pEnd, 1, nil
}

// cudaUpload maps --load onto the CUDA backend's upload paths: copy is the
// staged upload (pread into pinned memory, the default), mmap the upload
// straight from the mapped files.
func cudaUpload(load string) string {
	if load == model.LoadMmap {
		return cuda.UploadMapped
	}
	return cuda.UploadStaged
}

func gbPerS(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e9
}

// defaultMaxContext caps the default context: a KV pool sized for the
// model's full context (40,960 positions for Qwen3) would be mostly idle.
const defaultMaxContext = 8192

// contextLength is the served context: asked (> 0) up to the model's
// limit, else the model's limit capped at defaultMaxContext.
func contextLength(model, asked int) (int, error) {
	if asked > 0 {
		if model > 0 && asked > model {
			return 0, fmt.Errorf("--max-model-len %d is longer than the model's %d positions (max_position_embeddings in config.json); use at most %d", asked, model, model)
		}
		return asked, nil
	}
	if model <= 0 || model > defaultMaxContext {
		return defaultMaxContext, nil
	}
	return model, nil
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// kvBytesPerPosition estimates the CPU backend's KV bytes per position (K
// and V, every layer, float32) to turn a byte budget into blocks.
func kvBytesPerPosition(c model.Config) int64 {
	v := int64(2) * int64(c.NumLayers) * int64(c.NumKVHeads) * int64(c.HeadDim) * 4
	if v <= 0 {
		return 1
	}
	return v
}

// touchPool allocates gib GiB and writes one byte per page, so the cost of
// faulting in a large first-time allocation shows up in kv_alloc. It
// gives up, with ctx's error, when ctx ends (it looks every 64 MiB).
func touchPool(ctx context.Context, gib float64) ([]byte, error) {
	b := make([]byte, int64(gib*(1<<30)))
	for i := 0; i < len(b); i += 4096 {
		if i&(64<<20-1) == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		b[i] = 1
	}
	return b, nil
}

// stoppedLoading is Run's error when ctx ended (SIGTERM, Ctrl-C) before
// the server was up: whatever the load was doing stopped at its next
// chunk.
func stoppedLoading(ctx context.Context, dir string) error {
	return fmt.Errorf("stopped while loading %s: %w", dir, context.Cause(ctx))
}

// fitContext is the served context length given the KV pool: a sequence
// can never hold more positions than the pool (blocks × blockSize), so a
// context longer than that would be advertised by /v1/models and accepted
// in requests that then stop early, silently, at the pool's end. A
// context the user asked for (--max-model-len) that the pool cannot hold
// is refused, as vLLM refuses it; the default is shortened, and the log
// says so.
func fitContext(maxSeq int, asked bool, blocks, blockSize int, lg *log.Logger) (int, error) {
	pool := blocks * blockSize
	if maxSeq <= pool {
		return maxSeq, nil
	}
	if asked {
		return 0, fmt.Errorf("--max-model-len %d is longer than the KV pool holds (%d blocks × %d positions = %d); give more KV blocks (--kv-blocks, --kv-gib) or a --max-model-len of at most %d",
			maxSeq, blocks, blockSize, pool, pool)
	}
	if pool < 2 {
		return 0, fmt.Errorf("a KV pool of %d blocks × %d positions holds %d position(s), too few for a prompt token and a generated one; give more KV blocks (--kv-blocks, --kv-gib)", blocks, blockSize, pool)
	}
	lg.Printf("context %d instead of %d: the KV pool of %d blocks × %d positions holds no more (give more KV blocks for a longer one)", pool, maxSeq, blocks, blockSize)
	return pool, nil
}

// warmup runs passes of one 32-token prefill and one decode step directly
// on the backend, on blocks borrowed from the scheduler's pool before the
// scheduler starts (sequence id 0 is never handed out to a request).
func warmup(ctx context.Context, be sched.Backend, s *sched.Scheduler, passes, maxSeq int) (int, error) {
	n := min(32, maxSeq-1)
	const warmSeq = 0
	table, err := s.KV().Ensure(warmSeq, n+1)
	if err != nil {
		return 0, fmt.Errorf("no KV blocks for warm-up: %w", err)
	}
	defer s.KV().Release(warmSeq)
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(i % be.VocabSize())
	}
	row := [][]float32{make([]float32, be.VocabSize())}
	tokens := 0
	for range passes {
		if err := be.Forward(ctx, &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: warmSeq, Tokens: prompt, Pos: 0, Blocks: table, WantLogits: true}}}, row); err != nil {
			return tokens, err
		}
		next := []int32{int32(argmax(row[0]))}
		if err := be.Forward(ctx, &sched.Batch{Seqs: []sched.SeqChunk{{SeqID: warmSeq, Tokens: next, Pos: n, Blocks: table, WantLogits: true}}}, row); err != nil {
			return tokens, err
		}
		tokens += n + 1
	}
	return tokens, nil
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// selfCheck polls our own /health until it answers 200, so http_ready ends
// when a client could really be served.
func selfCheck(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/health"
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	var last error
	for range 50 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return last
}

// backgroundWarmer is a backend that warms part of itself after the
// server is ready (the CUDA backend).
type backgroundWarmer interface {
	WarmBackground(maxBatch int)
}

// releaseLoadMemory hands the heap garbage of loading (checkpoint index,
// tokenizer build, staging bookkeeping) back to the OS, so that the RSS
// after load is what serving keeps, and logs the Go side of it: the rest
// of the process's anonymous memory is the driver's and the libraries'.
func releaseLoadMemory(lg *log.Logger) {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	lg.Printf("memory after load: Go heap in use %.1f MB, Go runtime total (heap, stacks, metadata) %.1f MB, released to the OS %.1f MB; process %s",
		float64(ms.HeapInuse)/1e6, float64(ms.Sys-ms.HeapReleased)/1e6, float64(ms.HeapReleased)/1e6, residentMemory())
}

// residentMemory is the process's resident memory for the load log line
// ("RSS not reported" where there is none), so that it shows how much of
// it the Go runtime accounts for.
func residentMemory() string {
	r, err := memstat.Self()
	if err != nil {
		return "RSS not reported"
	}
	return r.String()
}

// backend is what serve needs of a backend beyond the scheduler's view.
type backend interface {
	sched.Backend
	KVBytes() int64
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

// cpuFallbackNote is the one line --device auto logs when it serves on the
// CPU: short where there is no NVIDIA driver at all (a CPU-only machine's
// normal state; `treni-top doctor` lists every place it looked), the
// cause in full when a driver is there and something else failed.
func cpuFallbackNote(err error) string {
	if errors.Is(err, cuda.ErrNoDriver) {
		return "device auto: no NVIDIA driver (libcuda.so.1); serving on the CPU (treni-top doctor: where it looked)"
	}
	return fmt.Sprintf("device auto: no usable CUDA backend (%v); serving on the CPU", err)
}

// newBackend picks the backend for o.Device: cuda when asked (an error if it
// cannot run), auto tries CUDA and falls back to the CPU with one message
// saying why, cpu never touches CUDA. The CUDA backend reports its own cold
// stages (cuda_init, kernel_load, decoder_tensor_upload, kv_alloc,
// graph_capture) as stage lines.
func newBackend(ctx context.Context, ck *model.Checkpoint, o Options, blocks int, em *emitter, starter *cuda.Starter, coldCache bool) (backend, error) {
	if starter != nil {
		cb, err := starter.Load(ctx, ck, cuda.BackendOptions{NumBlocks: blocks, BlockSize: o.BlockSize, ColdPageCache: coldCache, Upload: cudaUpload(o.Load), SleepMode: o.EnableSleepMode,
			Stage: func(r cuda.StageRecord) { em.stage(r.Stage, r.Start, r.End, r.Attrs) }})
		if err == nil {
			return cb, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if o.Device == "cuda" {
			return nil, fmt.Errorf("--device cuda: %w (run `treni-top doctor` to see what is missing, or use --device cpu)", err)
		}
		em.log.Print(cpuFallbackNote(err))
	}
	be, err := cpu.New(ck, cpu.Options{NumBlocks: blocks, BlockSize: o.BlockSize, Threads: o.Threads})
	if err != nil {
		return nil, fmt.Errorf("create the CPU backend for %s (%d KV blocks of %d): %w", o.ModelDir, blocks, o.BlockSize, err)
	}
	return be, nil
}
