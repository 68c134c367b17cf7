package cpu

import (
	"math"

	"github.com/treni-top/treni-top/engine/sched"
)

// rowGrain is the number of weight rows one work item covers: a multiple of
// the 4-row micro-kernel, large enough that taking an item from the shared
// counter costs nothing next to its work, small enough to balance two cores.
const rowGrain = 16

// mmSeg is one weight matrix of a fused matmul: its output columns start at
// off in every destination row.
type mmSeg struct {
	m     *mat
	bias  []float32
	off   int
	first int // first item of this segment
}

// matmulTask computes dst[t][off+r] (+)= x[t]·W[r] (+ bias[r]) for every
// token t and every row r of up to three matrices that share the input (Q, K
// and V; gate and up). Parallelism is over weight rows: each worker converts
// a 4-row block of weights to float32 once and reuses it for every token of
// the step while it is in L1 (4×4, 4×2 and 4×1 tiles of rows × tokens), so
// a batch of 16 decode tokens streams the weights once: it costs about 4×
// the CPU time of one token here, not 16×.
type matmulTask struct {
	b       *Backend
	x       []float32
	xStride int
	T       int
	dst     [][]float32
	acc     bool
	segs    [3]mmSeg
	nseg    int
	nitems  int
}

func (m *matmulTask) set(x []float32, xStride, T int, dst [][]float32, acc bool) {
	m.x, m.xStride, m.T, m.dst, m.acc = x, xStride, T, dst, acc
	m.nseg, m.nitems = 0, 0
}

func (m *matmulTask) add(w *mat, bias []float32, off int) {
	m.segs[m.nseg] = mmSeg{m: w, bias: bias, off: off, first: m.nitems}
	m.nseg++
	m.nitems += (w.rows + rowGrain - 1) / rowGrain
}

func (m *matmulTask) items() int { return m.nitems }

func (m *matmulTask) runItem(worker, item int) {
	s := 0
	for s+1 < m.nseg && item >= m.segs[s+1].first {
		s++
	}
	seg := &m.segs[s]
	w := seg.m
	r0 := (item - seg.first) * rowGrain
	r1 := min(r0+rowGrain, w.rows)
	cols := w.cols
	buf := m.b.s.wbuf[worker]
	xs := m.xStride
	x := m.x
	T := m.T
	k := m.b.k
	var o16 [16]float32
	var o8 [8]float32
	var o4 [4]float32
	r := r0
	for ; r+4 <= r1; r += 4 {
		// Four rows as float32, contiguous at stride cols: a view for F32
		// weights, converted once into the worker's buffer otherwise, then
		// reused for every token of the step.
		var wb []float32
		if T == 1 && w.dt == dtBF16 && k.fusedBF16() {
			// Single token: widen inside the dot product instead.
			k.tile4x1BF16(w.u16[r*cols:(r+4)*cols], cols, x[:cols], &o4)
			d := m.dst[0][seg.off+r : seg.off+r+4 : seg.off+r+4]
			var b0, b1, b2, b3 float32
			if seg.bias != nil {
				b0, b1, b2, b3 = seg.bias[r], seg.bias[r+1], seg.bias[r+2], seg.bias[r+3]
			}
			if m.acc {
				d[0] += o4[0] + b0
				d[1] += o4[1] + b1
				d[2] += o4[2] + b2
				d[3] += o4[3] + b3
			} else {
				d[0], d[1], d[2], d[3] = o4[0]+b0, o4[1]+b1, o4[2]+b2, o4[3]+b3
			}
			continue
		}
		if w.dt == dtF32 {
			wb = w.f32[r*cols : (r+4)*cols]
		} else {
			for j := 0; j < 4; j++ {
				k.row(w, r+j, buf[j*cols:(j+1)*cols])
			}
			wb = buf[:4*cols]
		}
		var b0, b1, b2, b3 float32
		if seg.bias != nil {
			b0, b1, b2, b3 = seg.bias[r], seg.bias[r+1], seg.bias[r+2], seg.bias[r+3]
		}
		o := seg.off + r
		t := 0
		if k.avx512 {
			for ; t+4 <= T; t += 4 {
				k.tile4x4(wb, cols, x[t*xs:], xs, cols, &o16)
				for tt := 0; tt < 4; tt++ {
					d := m.dst[t+tt][o : o+4 : o+4]
					if m.acc {
						d[0] += o16[4*tt] + b0
						d[1] += o16[4*tt+1] + b1
						d[2] += o16[4*tt+2] + b2
						d[3] += o16[4*tt+3] + b3
					} else {
						d[0], d[1], d[2], d[3] = o16[4*tt]+b0, o16[4*tt+1]+b1, o16[4*tt+2]+b2, o16[4*tt+3]+b3
					}
				}
			}
		}
		for ; t+2 <= T; t += 2 {
			k.tile4x2(wb, cols, x[t*xs:t*xs+cols], x[(t+1)*xs:(t+1)*xs+cols], &o8)
			d := m.dst[t][o : o+4 : o+4]
			e := m.dst[t+1][o : o+4 : o+4]
			if m.acc {
				d[0] += o8[0] + b0
				d[1] += o8[1] + b1
				d[2] += o8[2] + b2
				d[3] += o8[3] + b3
				e[0] += o8[4] + b0
				e[1] += o8[5] + b1
				e[2] += o8[6] + b2
				e[3] += o8[7] + b3
			} else {
				d[0], d[1], d[2], d[3] = o8[0]+b0, o8[1]+b1, o8[2]+b2, o8[3]+b3
				e[0], e[1], e[2], e[3] = o8[4]+b0, o8[5]+b1, o8[6]+b2, o8[7]+b3
			}
		}
		if t < T {
			k.tile4x1(wb, cols, x[t*xs:t*xs+cols], &o4)
			d := m.dst[t][o : o+4 : o+4]
			if m.acc {
				d[0] += o4[0] + b0
				d[1] += o4[1] + b1
				d[2] += o4[2] + b2
				d[3] += o4[3] + b3
			} else {
				d[0], d[1], d[2], d[3] = o4[0]+b0, o4[1]+b1, o4[2]+b2, o4[3]+b3
			}
		}
	}
	for ; r < r1; r++ {
		wr := k.row(w, r, buf[0:cols])
		var bias float32
		if seg.bias != nil {
			bias = seg.bias[r]
		}
		for t := 0; t < T; t++ {
			v := k.dot(wr, x[t*xs:t*xs+cols]) + bias
			if m.acc {
				m.dst[t][seg.off+r] += v
			} else {
				m.dst[t][seg.off+r] = v
			}
		}
	}
}

// attnTask is causal grouped-query attention over the paged KV cache. One
// item is one (token, KV head): the query heads that share the KV head are
// processed together so each K and V row is read once for the whole group.
type attnTask struct {
	b     *Backend
	batch *sched.Batch
	T     int
	layer int
}

func (a *attnTask) runItem(worker, item int) {
	b := a.b
	c := &b.cfg
	s := &b.s
	hd := c.headDim
	group := c.heads / c.kvHeads
	t, g := item/c.kvHeads, item%c.kvHeads
	qkvDim := (c.heads + 2*c.kvHeads) * hd
	sq := &a.batch.Seqs[s.tokSeq[t]]
	n := int(s.tokPos[t]) + 1 // causal: positions [0, pos]
	bs := b.opts.BlockSize

	if cap(s.scores[worker]) < group*n {
		s.scores[worker] = make([]float32, group*n*2)
	}
	scores := s.scores[worker][:group*n]
	q := s.qkv[t*qkvDim+g*group*hd : t*qkvDim+(g+1)*group*hd]
	scale := float32(1 / math.Sqrt(float64(hd)))
	kvf := b.kv.f
	kn := b.k
	layerOff := a.layer * b.layerStride
	kOff := g * b.headStride
	vOff := (c.kvHeads + g) * b.headStride

	// Scores: the K rows of a block are contiguous (stride headDim), the
	// layout of a weight matrix, so the matmul tiles apply: four positions
	// against two query heads per call.
	var o8 [8]float32
	var o4 [4]float32
	for j0 := 0; j0 < n; j0 += bs {
		base := int(sq.Blocks[j0/bs])*b.blockStride + layerOff
		cnt := min(bs, n-j0)
		kb := kvf[base+kOff : base+kOff+cnt*hd]
		j := 0
		for ; j+4 <= cnt; j += 4 {
			kr := kb[j*hd:]
			h := 0
			for ; h+2 <= group; h += 2 {
				kn.tile4x2(kr, hd, q[h*hd:(h+1)*hd], q[(h+1)*hd:(h+2)*hd], &o8)
				for i := 0; i < 4; i++ {
					scores[h*n+j0+j+i] = o8[i] * scale
					scores[(h+1)*n+j0+j+i] = o8[4+i] * scale
				}
			}
			if h < group {
				kn.tile4x1(kr, hd, q[h*hd:(h+1)*hd], &o4)
				for i := 0; i < 4; i++ {
					scores[h*n+j0+j+i] = o4[i] * scale
				}
			}
		}
		for ; j < cnt; j++ {
			k := kb[j*hd : (j+1)*hd]
			for h := 0; h < group; h++ {
				scores[h*n+j0+j] = kn.dot(q[h*hd:(h+1)*hd], k)
				scores[h*n+j0+j] *= scale
			}
		}
	}
	for h := 0; h < group; h++ {
		sc := scores[h*n : (h+1)*n]
		mx := sc[0]
		for _, v := range sc {
			mx = max(mx, v)
		}
		var sum float32
		for j, v := range sc {
			e := float32(math.Exp(float64(v - mx)))
			sc[j] = e
			sum += e
		}
		inv := 1 / sum
		for j := range sc {
			sc[j] *= inv
		}
	}
	out := s.att[t*c.heads*hd+g*group*hd : t*c.heads*hd+(g+1)*group*hd]
	clear(out)
	var p4 [4]float32
	for j0 := 0; j0 < n; j0 += bs {
		base := int(sq.Blocks[j0/bs])*b.blockStride + layerOff
		cnt := min(bs, n-j0)
		vb := kvf[base+vOff : base+vOff+cnt*hd]
		for h := 0; h < group; h++ {
			o := out[h*hd : (h+1)*hd]
			sc := scores[h*n+j0 : h*n+j0+cnt]
			j := 0
			for ; j+4 <= cnt; j += 4 {
				p4 = [4]float32{sc[j], sc[j+1], sc[j+2], sc[j+3]}
				kn.axpy4(&p4, vb[j*hd:], hd, o)
			}
			for ; j < cnt; j++ {
				kn.axpy(sc[j], vb[j*hd:(j+1)*hd], o)
			}
		}
	}
}

// tokPhase selects the per-token work a tokenTask does.
type tokPhase uint8

const (
	phaseAttnNorm  tokPhase = iota // h = RMSNorm(x) with the attention norm
	phaseRopeStore                 // QK norm, RoPE, store K and V in the cache
	phaseMLPNorm                   // h = RMSNorm(x) with the MLP norm
	phaseSwiGLU                    // act = silu(gate) · up
)

// tokenTask is the element-wise work between the matmuls, one item per
// token. It is small next to the matmuls, but a 128-token prefill chunk runs
// hundreds of thousands of exp calls in SwiGLU alone, so it runs on the pool
// too.
type tokenTask struct {
	b     *Backend
	batch *sched.Batch
	phase tokPhase
	layer int
}

func (k *tokenTask) runItem(_, t int) {
	b := k.b
	c := &b.cfg
	s := &b.s
	l := &b.w.layers[k.layer]
	H, hd, half := c.hidden, c.headDim, c.headDim/2
	eps := float32(c.eps)
	switch k.phase {
	case phaseAttnNorm:
		rmsNorm(s.h[t*H:(t+1)*H], s.x[t*H:(t+1)*H], l.attnNorm, eps)
	case phaseMLPNorm:
		rmsNorm(s.h[t*H:(t+1)*H], s.x[t*H:(t+1)*H], l.mlpNorm, eps)
	case phaseSwiGLU:
		I := c.inter
		g, u, a := s.gu[t*2*I:t*2*I+I], s.gu[t*2*I+I:(t+1)*2*I], s.act[t*I:(t+1)*I]
		u = u[:len(a)]
		g = g[:len(a)]
		for i := range a {
			a[i] = silu(g[i]) * u[i]
		}
	case phaseRopeStore:
		qDim, kvDim := c.heads*hd, c.kvHeads*hd
		row := s.dstQKV[t]
		cs, sn := s.cos[t*half:(t+1)*half], s.sin[t*half:(t+1)*half]
		for h := 0; h < c.heads+c.kvHeads; h++ {
			v := row[h*hd : (h+1)*hd]
			if c.qkNorm {
				nw := l.qNorm
				if h >= c.heads {
					nw = l.kNorm
				}
				rmsNorm(v, v, nw, eps)
			}
			ropeNeox(v, cs, sn)
		}
		// Store K and V at the token's slot of its sequence's block.
		sq := &k.batch.Seqs[s.tokSeq[t]]
		pos := int(s.tokPos[t])
		bs := b.opts.BlockSize
		base := int(sq.Blocks[pos/bs])*b.blockStride + k.layer*b.layerStride + (pos%bs)*hd
		for g := 0; g < c.kvHeads; g++ {
			ko := base + g*b.headStride
			vo := ko + c.kvHeads*b.headStride
			copy(b.kv.f[ko:ko+hd], row[qDim+g*hd:qDim+(g+1)*hd])
			copy(b.kv.f[vo:vo+hd], row[qDim+kvDim+g*hd:qDim+kvDim+(g+1)*hd])
		}
	}
}

// sampleTask draws the random (non-greedy) tokens of a ForwardTokens step,
// one row per item, with a Sampler per worker. A draw depends only on the
// row and its TokenChoice, so which worker takes a row does not matter.
type sampleTask struct {
	b       *Backend
	smp     []*sched.Sampler // per worker
	scratch [][]float32      // rows the caller did not ask for
	rows    [][]float32      // this step's rows, the caller's or scratch
	items   []int            // chunk indices to sample
	choice  []sched.TokenChoice
	tokens  []int32
}

func (s *sampleTask) runItem(worker, item int) {
	i := s.items[item]
	s.tokens[i] = s.smp[worker].Sample(s.rows[i][:s.b.cfg.vocab], s.choice[i])
}
