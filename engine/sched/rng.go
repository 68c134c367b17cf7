package sched

// SplitMix64 is the SplitMix64 finaliser (Steele, Lea and Flood, 2014).
// Applied to a counter it gives a stream of well-mixed 64-bit values with
// no state to carry between draws, which is what a sampler needs when the
// same request may be drawn on the host one step and on a device the next:
// the device kernel (sample_f32 in engine/cuda/kernels) computes exactly
// this function, so it must stay bit-identical.
func SplitMix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// SampleUniform is the uniform draw in [0, 1) for a request's seed at a
// counter value (the index of the token being drawn in that request's
// output): 24 bits of SplitMix64(seed ^ SplitMix64(counter)), as a float32
// exactly like the device computes it. Because the pair names the number,
// a request draws the same tokens whatever else is in the batch, after a
// preemption and recompute, and on either backend.
func SampleUniform(seed, counter uint64) float32 {
	h := SplitMix64(seed ^ SplitMix64(counter))
	return float32(h>>40) * (1.0 / 16777216.0)
}
