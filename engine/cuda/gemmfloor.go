package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"unsafe"
)

// The matrix half of the machine's floors: how fast cuBLASLt multiplies
// bf16 matrices on this card. A serving workload's prefill is arithmetic
// (tens of thousands of prompt tokens through every weight), so its floor
// is its FLOPs over this rate, as its decode's is bytes over the device
// copy rate (probe/roofline). The datasheet rate is a lead, not a floor:
// clocks, power and the library's kernels set what a product really gets.

// gemmFloorSide is the side of the square bf16 product that measures the
// rate: 8192³ is 1.1 TFLOP a product (about 1.4 ms on an H100-class card,
// long past launch overhead), and each operand (128 MiB) is twice the
// largest L2 of those cards, so the product streams from device memory.
const gemmFloorSide = 8192

// gemmFloorBatches × gemmFloorPerBatch products are timed after
// gemmFloorWarmup untimed ones; the rate is the median batch's.
const (
	gemmFloorWarmup   = 3
	gemmFloorBatches  = 5
	gemmFloorPerBatch = 10
)

// GemmFloor is the measured bf16 matrix rate.
type GemmFloor struct {
	// TFLOPS is 2·M·N·K a product over the median batch's time per
	// product, in 10¹² FLOP a second.
	TFLOPS float64 `json:"tflops"`
	// MinTFLOPS and MaxTFLOPS are the slowest and fastest batches.
	MinTFLOPS float64 `json:"min_tflops"`
	MaxTFLOPS float64 `json:"max_tflops"`
	// M, N, K: Y[M,N] = X[M,K]·W[N,K]ᵀ, bf16 in and out, f32 accumulate.
	M int `json:"m"`
	N int `json:"n"`
	K int `json:"k"`
	// Products is how many products were timed.
	Products int `json:"products"`
	// Library is the cuBLASLt file and version that ran them.
	Library string `json:"library"`
}

// measureGemm times bf16 products of gemmFloorSide³ through cuBLASLt on
// s with device events, on random operands (never zeros: a product of
// zeros runs faster than real data does).
func measureGemm(c *Context, s *Stream) (GemmFloor, error) {
	n := gemmFloorSide
	g := GemmFloor{M: n, N: n, K: n, Products: gemmFloorBatches * gemmFloorPerBatch}
	b, err := c.NewBLAS()
	if err != nil {
		return g, err
	}
	defer b.Close()
	g.Library = fmt.Sprintf("%s (version %d)", b.Path, b.Version)
	bytes := n * n * BF16.Size()
	var bufs [3]DevicePtr
	for i := range bufs {
		if bufs[i], err = c.Alloc(bytes); err != nil {
			return g, fmt.Errorf("GEMM operand of %d MiB: %w", bytes>>20, err)
		}
		defer c.Free(bufs[i])
	}
	x, w, y := bufs[0], bufs[1], bufs[2]
	// One 32 MiB block of random bf16 in [-1, 1), copied over each input.
	block := randomBF16(min(n*n, 16<<20), rand.New(rand.NewPCG(1, 2)))
	blockBytes := len(block) * 2
	for _, dst := range []DevicePtr{x, w} {
		for off := 0; off < bytes; off += blockBytes {
			if err := c.CopyHtoD(dst+DevicePtr(off), unsafe.Pointer(&block[0]), min(blockBytes, bytes-off)); err != nil {
				return g, err
			}
		}
	}
	shape := GemmShape{M: n, N: n, K: n, In: BF16, Out: BF16}
	for i := 0; i < gemmFloorWarmup; i++ {
		if err := b.Gemm(s, shape, y, x, w, false); err != nil {
			return g, err
		}
	}
	start, err := c.NewEvent()
	if err != nil {
		return g, err
	}
	defer start.Destroy()
	end, err := c.NewEvent()
	if err != nil {
		return g, err
	}
	defer end.Destroy()
	flop := 2 * float64(n) * float64(n) * float64(n)
	rates := make([]float64, 0, gemmFloorBatches)
	for k := 0; k < gemmFloorBatches; k++ {
		if err := start.Record(s); err != nil {
			return g, err
		}
		for i := 0; i < gemmFloorPerBatch; i++ {
			if err := b.Gemm(s, shape, y, x, w, false); err != nil {
				return g, err
			}
		}
		if err := end.Record(s); err != nil {
			return g, err
		}
		if err := end.Synchronize(); err != nil {
			return g, err
		}
		ms, err := ElapsedMS(start, end)
		if err != nil {
			return g, err
		}
		if ms <= 0 {
			return g, fmt.Errorf("GEMM floor: a batch of %d products timed at %g ms", gemmFloorPerBatch, ms)
		}
		rates = append(rates, flop*gemmFloorPerBatch/(float64(ms)/1e3)/1e12)
	}
	sort.Float64s(rates)
	g.MinTFLOPS, g.TFLOPS, g.MaxTFLOPS = rates[0], rates[len(rates)/2], rates[len(rates)-1]
	return g, nil
}

// randomBF16 is n bf16 values drawn uniformly from [-1, 1) (the top half
// of each float32, truncated).
func randomBF16(n int, r *rand.Rand) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(math.Float32bits(2*r.Float32()-1) >> 16)
	}
	return out
}
