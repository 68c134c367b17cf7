package synth

import (
	"fmt"
	"strings"

	"github.com/treni-top/treni-top/engine/model"
)

// Preset names. The sized ones carry a real model's shapes; tiny is for
// tests and demo is the built-in engine's default model.
const (
	PresetTiny = "tiny"
	PresetDemo = "demo"
	Preset0_6B = "0.6b"
	Preset1_7B = "1.7b"
	Preset4B   = "4b"
	Preset8B   = "8b"
)

// Presets lists the preset names in size order.
func Presets() []string {
	return []string{PresetTiny, PresetDemo, Preset0_6B, Preset1_7B, Preset4B, Preset8B}
}

// Shape is a preset's architecture hyper-parameters.
type Shape struct {
	// Model names the real checkpoint whose shape this is ("" for tiny and
	// demo, which are ours).
	Model                                                                string
	Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, Vocab, MaxPos int
	RopeTheta, RMSNormEps                                                float64
	Tied                                                                 bool
	// RopeScaling is Llama 3.1/3.2's llama3 scaling (nil for Qwen).
	RopeScaling *model.RopeScaling
}

// llama32Scaling is Llama 3.2's rope_scaling; 3.1 uses factor 8.
func llamaScaling(factor float64) *model.RopeScaling {
	return &model.RopeScaling{Type: "llama3", Factor: factor, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
}

// PresetShape returns the shape of arch at preset. Vocab is 0 for tiny and
// demo: they take the tokenizer's size, rounded up to a multiple of 64.
// Llama has no model below 1B, so its 0.6b and 1.7b presets are both
// Llama-3.2-1B.
func PresetShape(arch model.Arch, preset string) (Shape, error) {
	preset = strings.ToLower(preset)
	switch arch {
	case model.ArchQwen3:
		q := func(name string, h, inter, layers, heads, vocab int, tied bool) Shape {
			return Shape{Model: name, Hidden: h, Intermediate: inter, Layers: layers, Heads: heads, KVHeads: 8, HeadDim: 128,
				Vocab: vocab, MaxPos: 40960, RopeTheta: 1e6, RMSNormEps: 1e-6, Tied: tied}
		}
		switch preset {
		case PresetTiny:
			return Shape{Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, MaxPos: 4096, RopeTheta: 1e6, RMSNormEps: 1e-6, Tied: true}, nil
		case PresetDemo:
			// Qwen3-0.6B's layer with 10 layers: ~161M parameters, 322 MB
			// in bf16, small enough for the CPU backend on two cores.
			return q("", 1024, 3072, 10, 16, 0, true), nil
		case Preset0_6B:
			return q("Qwen/Qwen3-0.6B", 1024, 3072, 28, 16, 151936, true), nil
		case Preset1_7B:
			return q("Qwen/Qwen3-1.7B", 2048, 6144, 28, 16, 151936, true), nil
		case Preset4B:
			return q("Qwen/Qwen3-4B", 2560, 9728, 36, 32, 151936, true), nil
		case Preset8B:
			return q("Qwen/Qwen3-8B", 4096, 12288, 36, 32, 151936, false), nil
		}
	case model.ArchQwen2:
		q := func(name string, h, inter, layers, heads, kv, vocab int, tied bool) Shape {
			return Shape{Model: name, Hidden: h, Intermediate: inter, Layers: layers, Heads: heads, KVHeads: kv, HeadDim: h / heads,
				Vocab: vocab, MaxPos: 32768, RopeTheta: 1e6, RMSNormEps: 1e-6, Tied: tied}
		}
		switch preset {
		case PresetTiny:
			return Shape{Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, MaxPos: 4096, RopeTheta: 1e6, RMSNormEps: 1e-6, Tied: true}, nil
		case PresetDemo:
			return q("", 1024, 3072, 13, 8, 2, 0, true), nil
		case Preset0_6B:
			return q("Qwen/Qwen2.5-0.5B", 896, 4864, 24, 14, 2, 151936, true), nil
		case Preset1_7B:
			return q("Qwen/Qwen2.5-1.5B", 1536, 8960, 28, 12, 2, 151936, true), nil
		case Preset4B:
			return q("Qwen/Qwen2.5-3B", 2048, 11008, 36, 16, 2, 151936, true), nil
		case Preset8B:
			return q("Qwen/Qwen2.5-7B", 3584, 18944, 28, 28, 4, 152064, false), nil
		}
	case model.ArchLlama:
		l := func(name string, h, inter, layers, heads, kv, hd, vocab int, tied bool, factor float64) Shape {
			return Shape{Model: name, Hidden: h, Intermediate: inter, Layers: layers, Heads: heads, KVHeads: kv, HeadDim: hd,
				Vocab: vocab, MaxPos: 131072, RopeTheta: 500000, RMSNormEps: 1e-5, Tied: tied, RopeScaling: llamaScaling(factor)}
		}
		switch preset {
		case PresetTiny:
			return Shape{Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, MaxPos: 4096, RopeTheta: 500000,
				RMSNormEps: 1e-5, Tied: true, RopeScaling: llamaScaling(32)}, nil
		case PresetDemo:
			return l("", 1024, 4096, 11, 16, 4, 64, 0, true, 32), nil
		case Preset0_6B, Preset1_7B:
			return l("meta-llama/Llama-3.2-1B", 2048, 8192, 16, 32, 8, 64, 128256, true, 32), nil
		case Preset4B:
			return l("meta-llama/Llama-3.2-3B", 3072, 8192, 28, 24, 8, 128, 128256, true, 32), nil
		case Preset8B:
			return l("meta-llama/Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128, 128256, false, 8), nil
		}
	default:
		return Shape{}, fmt.Errorf("architecture %q: %w (choose qwen3, qwen2 or llama)", arch, model.ErrUnknownArch)
	}
	return Shape{}, fmt.Errorf("%w: preset %q (choose one of %s)", ErrBadPreset, preset, strings.Join(Presets(), ", "))
}
