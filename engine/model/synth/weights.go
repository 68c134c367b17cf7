package synth

import (
	"encoding/binary"
	"math"

	"github.com/treni-top/treni-top/engine/model"
)

// initStd is transformers' initializer_range for all three families: every
// Linear and Embedding weight is drawn from N(0, 0.02²).
const initStd = 0.02

// valueTable holds the 65536 quantiles of N(0, initStd²) at (i+½)/65536,
// encoded in the output dtype. Drawing a uniform 16-bit index and looking
// it up samples the normal distribution to far better than bf16 precision
// (tails are cut at 4.3σ), at the cost of a table load instead of a
// log/sqrt/sincos per value: this is what makes synth run at disk speed.
type valueTable struct {
	dt   model.DType
	b16  [65536]uint16
	f32  [65536]uint32
	one  uint32 // 1.0 in dt, for norm weights
	size int
}

func newValueTable(dt model.DType) *valueTable {
	t := &valueTable{dt: dt, size: dt.Size()}
	for i := range 65536 {
		p := (float64(i) + 0.5) / 65536
		v := initStd * math.Sqrt2 * math.Erfinv(2*p-1)
		switch dt {
		case model.BF16:
			t.b16[i] = f32ToBF16(float32(v))
		case model.F16:
			t.b16[i] = f64ToF16(v)
		case model.F32:
			t.f32[i] = math.Float32bits(float32(v))
		}
	}
	switch dt {
	case model.BF16:
		t.one = 0x3F80
	case model.F16:
		t.one = 0x3C00
	case model.F32:
		t.one = 0x3F800000
	}
	return t
}

// f32ToBF16 rounds to nearest even, as torch's .to(torch.bfloat16) does.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN stays NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// f64ToF16 rounds to nearest even IEEE half, subnormals included.
func f64ToF16(v float64) uint16 {
	var sign uint16
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	switch {
	case math.IsNaN(v):
		return 0x7e00
	case v >= 65520: // rounds past the largest half
		return sign | 0x7c00
	case v < math.Ldexp(1, -14): // subnormal: units of 2^-24
		return sign | uint16(math.RoundToEven(math.Ldexp(v, 24)))
	}
	frac, exp := math.Frexp(v) // v = frac·2^exp, frac in [0.5, 1)
	m := math.RoundToEven((frac*2 - 1) * 1024)
	e := exp - 1
	if m == 1024 {
		m, e = 0, e+1
	}
	if e > 15 {
		return sign | 0x7c00
	}
	return sign | uint16(e+15)<<10 | uint16(m)
}

// splitmix64 is the SplitMix64 finaliser. Applied to a counter it is a
// counter-based generator: any element's value depends only on (seed,
// tensor, index), so chunks fill in parallel in any order and the bytes
// are the same for any number of workers.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fnv64 hashes a tensor name into its stream id, so a tensor's values do
// not depend on which other tensors the preset has.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// fill kind.
const (
	fillNormal = iota
	fillOnes
)

// fillChunk writes elements [first, first+n) of a tensor into buf
// (n*size bytes). stream identifies (seed, tensor).
func (t *valueTable) fillChunk(buf []byte, kind int, stream uint64, first, n int64) {
	if kind == fillOnes {
		for i := int64(0); i < n; i++ {
			switch t.size {
			case 2:
				binary.LittleEndian.PutUint16(buf[2*i:], uint16(t.one))
			case 4:
				binary.LittleEndian.PutUint32(buf[4*i:], t.one)
			}
		}
		return
	}
	// Element e uses bits [16*(e%4), 16*(e%4)+16) of word e/4.
	i := int64(0)
	// Fast path for whole words: four lookups, one 8- or 16-byte store.
	if first%4 == 0 {
		word := uint64(first / 4)
		if t.size == 2 {
			for ; i+4 <= n; i, word = i+4, word+1 {
				w := splitmix64(stream ^ word*0x9e3779b97f4a7c15)
				v := uint64(t.b16[uint16(w)]) | uint64(t.b16[uint16(w>>16)])<<16 |
					uint64(t.b16[uint16(w>>32)])<<32 | uint64(t.b16[uint16(w>>48)])<<48
				binary.LittleEndian.PutUint64(buf[2*i:], v)
			}
		} else {
			for ; i+4 <= n; i, word = i+4, word+1 {
				w := splitmix64(stream ^ word*0x9e3779b97f4a7c15)
				binary.LittleEndian.PutUint64(buf[4*i:], uint64(t.f32[uint16(w)])|uint64(t.f32[uint16(w>>16)])<<32)
				binary.LittleEndian.PutUint64(buf[4*i+8:], uint64(t.f32[uint16(w>>32)])|uint64(t.f32[uint16(w>>48)])<<32)
			}
		}
	}
	for i < n {
		e := first + i
		w := splitmix64(stream ^ uint64(e/4)*0x9e3779b97f4a7c15)
		for k := e % 4; k < 4 && i < n; k, i = k+1, i+1 {
			idx := uint16(w >> (16 * k))
			if t.size == 2 {
				binary.LittleEndian.PutUint16(buf[2*i:], t.b16[idx])
			} else {
				binary.LittleEndian.PutUint32(buf[4*i:], t.f32[idx])
			}
		}
	}
}
