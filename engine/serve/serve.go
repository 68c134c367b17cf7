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
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/treni-top/treni-top/engine/memstat"
	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/engine/server"
	"github.com/treni-top/treni-top/engine/tokenizer"
	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/httpserve"
)

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

func gbPerS(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e9
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

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
