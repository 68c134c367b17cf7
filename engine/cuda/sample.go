package cuda

// splitmix64 is the mixer sample_f32 uses (kernels.cu); it must stay
// bit-identical to the device version.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// SampleUniform is the uniform draw in [0,1) that sample_f32 takes for a
// row with this seed at this counter value: 24 bits of
// splitmix64(seed ^ splitmix64(counter)). A CPU sampler that uses it draws
// the same stream as the GPU.
func SampleUniform(seed, counter uint64) float32 {
	h := splitmix64(seed ^ splitmix64(counter))
	return float32(h>>40) * (1.0 / 16777216.0)
}
