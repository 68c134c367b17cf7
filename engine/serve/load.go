package serve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/treni-top/treni-top/engine/cpu"
	"github.com/treni-top/treni-top/engine/cuda"
	"github.com/treni-top/treni-top/engine/model"
	"github.com/treni-top/treni-top/engine/sched"
	"github.com/treni-top/treni-top/engine/tokenizer"
	"github.com/treni-top/treni-top/trace"
)

// Loading: the CUDA backend started while the checkpoint and tokenizer
// load side by side, then the backend that serves built over them.

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

// stoppedLoading is Run's error when ctx ended (SIGTERM, Ctrl-C) before
// the server was up: whatever the load was doing stopped at its next
// chunk.
func stoppedLoading(ctx context.Context, dir string) error {
	return fmt.Errorf("stopped while loading %s: %w", dir, context.Cause(ctx))
}

// backend is what serve needs of a backend beyond the scheduler's view.
type backend interface {
	sched.Backend
	KVBytes() int64
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
