// Package trace defines treni-top's event stream: the event types every
// producer emits and every consumer reads, the canonical cold-stage names
// (docs/ARCHITECTURE.md, "Stages"), span arithmetic over stage intervals, and the fan-out bus that
// carries events from producers to consumers. It imports nothing of ours.
package trace

// Stage is a canonical cold-start stage name. Use the constants below, never
// free-form strings, so that files, the UI and the diagnosis agree.
type Stage string

// The cold-stage taxonomy (docs/ARCHITECTURE.md, "Stages"), in the order a cold start usually
// passes through them.
const (
	StageProcessStart        Stage = "process_start"
	StageRuntimeInit         Stage = "runtime_init"
	StageCUDAInit            Stage = "cuda_init"
	StagePageCache           Stage = "page_cache"
	StageTensorIndexBuild    Stage = "tensor_index_build"
	StageTokenizerLoad       Stage = "tokenizer_load"
	StageDecoderTensorUpload Stage = "decoder_tensor_upload"
	StageModelLoad           Stage = "model_load"
	// StageSleep is a server in sleep mode giving up its device memory
	// (weights, KV cache) while the process stays up; it ends the run it
	// interrupts, and the wake that follows is a run of its own.
	StageSleep Stage = "sleep"
	// StageWeightsRestore is a wake from sleep putting the weights back
	// where the engine computes from them: from a host copy kept while
	// asleep (level 1) or from the weight files (level 2).
	StageWeightsRestore Stage = "weights_restore"
	StageKernelLoad     Stage = "kernel_load"
	StageCompile        Stage = "compile"
	StageGraphCapture   Stage = "graph_capture"
	StageKVAlloc        Stage = "kv_alloc"
	StageWarmup         Stage = "warmup"
	StageHTTPReady      Stage = "http_ready"
	StageFirstRequest   Stage = "first_request"
)

// StageUnattributed is the pseudo-stage for wall time that no stage covers.
// It is never emitted as a span; reports and the UI use it to label the gap.
const StageUnattributed Stage = "unattributed"

// taxonomy is the stage order; an array (a value, never modified) so that
// Valid and Order, called from sort comparators, allocate nothing.
var taxonomy = [...]Stage{
	StageProcessStart, StageRuntimeInit, StageCUDAInit, StagePageCache,
	StageTensorIndexBuild, StageTokenizerLoad, StageDecoderTensorUpload,
	StageModelLoad, StageSleep, StageWeightsRestore, StageKernelLoad, StageCompile, StageGraphCapture,
	StageKVAlloc, StageWarmup, StageHTTPReady, StageFirstRequest,
}

// Stages returns every canonical stage in taxonomy order. It returns a fresh
// slice so callers may reorder it freely.
func Stages() []Stage {
	out := taxonomy
	return out[:]
}

// Valid reports whether s is one of the canonical stage names.
func (s Stage) Valid() bool { return s.Order() < len(taxonomy) }

// Order is the stage's position in taxonomy order, or len(Stages()) for an
// unknown name, so sorting by Order puts unknown stages last.
func (s Stage) Order() int {
	for i, c := range taxonomy {
		if c == s {
			return i
		}
	}
	return len(taxonomy)
}

// Description is the one-line meaning of the stage (docs/ARCHITECTURE.md,
// "Stages").
func (s Stage) Description() string {
	switch s {
	case StageProcessStart:
		return "exec → program main"
	case StageRuntimeInit:
		return "interpreter, imports, config"
	case StageCUDAInit:
		return "driver init, context"
	case StagePageCache:
		return "weight bytes storage → RAM"
	case StageTensorIndexBuild:
		return "parse checkpoint headers, map names"
	case StageTokenizerLoad:
		return "tokenizer files → ready"
	case StageDecoderTensorUpload:
		return "weights RAM → device memory"
	case StageModelLoad:
		return "server's own total for loading"
	case StageSleep:
		return "sleep mode: weights and KV cache leave the device"
	case StageWeightsRestore:
		return "wake from sleep: weights back from host memory or files"
	case StageKernelLoad:
		return "module load, JIT, autotune, first GEMM"
	case StageCompile:
		return "torch.compile / inductor"
	case StageGraphCapture:
		return "CUDA graph capture"
	case StageKVAlloc:
		return "KV cache sizing and allocation"
	case StageWarmup:
		return "dummy forward passes"
	case StageHTTPReady:
		return "listener up → health OK"
	case StageFirstRequest:
		return "cold request: queue, prefill, first token"
	case StageUnattributed:
		return "wall time no stage covers"
	}
	return "unknown stage"
}
