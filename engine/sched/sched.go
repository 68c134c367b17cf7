package sched

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/treni-top/treni-top/engine/kvcache"
)

// Config sizes the scheduler.
type Config struct {
	// MaxBatch caps the sequences in the running batch (default 32).
	MaxBatch int
	// MaxBatchedTokens is the token budget of one forward step, prefill and
	// decode together (default 256). A prompt longer than what is left of
	// the budget is prefilled in chunks across steps, so running decodes
	// keep producing a token every step.
	MaxBatchedTokens int
	// MaxSeqLen is the model's context length: prompt plus generated
	// tokens never exceed it (required). New lowers it to the positions
	// the backend's KV pool holds, where that is less: no sequence can
	// grow beyond the pool, and a server advertises Config().MaxSeqLen.
	MaxSeqLen int
	// NoPrefixCache turns prefix caching off. With it on (the default),
	// every full KV block a sequence computes is kept under a hash of its
	// tokens and everything before them, and a later request that starts
	// with the same blocks shares them read-only instead of prefilling
	// them again (see package kvcache).
	NoPrefixCache bool
}

// Request is one generation request in token ids.
type Request struct {
	// Prompt is the tokenized prompt (at least one token).
	Prompt []int32
	// MaxTokens caps generated tokens (> 0).
	MaxTokens int
	// Sampling chooses greedy or seeded random sampling.
	Sampling Sampling
	// StopTokens end the request when sampled (the token is counted in
	// CompletionTokens but not delivered).
	StopTokens []int32
	// Logprobs asks for each token's log-probability (Token.Logprob). It
	// costs a row of logits copied back from the backend per token, which
	// a device-sampling backend otherwise never sends.
	Logprobs bool
}

// ErrStopped is returned by Submit after Run has ended.
var ErrStopped = errors.New("scheduler stopped")

// ErrInvalid marks requests the scheduler rejects (wrapped with details), so
// a server can answer 400 rather than 500.
var ErrInvalid = errors.New("invalid request")

// Scheduler is a continuous-batching scheduler over one Backend. One
// goroutine, started by Run, owns the batch and the backend; Submit, cancel
// and Metrics may be called from any goroutine.
type Scheduler struct {
	be    Backend
	kv    *kvcache.Manager
	cfg   Config
	vocab int

	mu        sync.Mutex
	nextID    uint64
	incoming  []*seq
	cancelled []uint64
	state     int // 0 not started, 1 running, 2 stopped
	wake      chan struct{}
	excl      []*exclusive // Exclusive calls waiting for the Run goroutine (sleep.go)

	// Owned by the Run goroutine.
	running []*seq
	waiting []*seq
	bySeq   map[uint64]*seq
	tokBE   TokenBackend // be, when it samples on the device; else nil
	copier  BlockCopier  // be, when it can copy KV blocks; else nil
	smp     Sampler
	smps    []*Sampler // per-worker scratch for parallel sampling
	rows    [][]float32

	m counters
}

// seq is the scheduler's state of one request.
type seq struct {
	id       uint64
	req      Request
	stream   *Stream
	tokens   []int32 // prompt then generated tokens
	computed int     // positions already in the KV cache
	seed     uint64  // the request's seed, or a random one when it gave none
	res      Result
	lastTok  time.Time
	stepMark uint64 // step number this sequence was last scheduled in
	running  bool   // in s.running (holds KV blocks)
	admitted bool   // admitted at least once (Result.CachedTokens is set)
}

// New creates a scheduler over be with a block manager sized to the
// backend's KV pool.
func New(be Backend, cfg Config) (*Scheduler, error) {
	if be == nil {
		return nil, errors.New("sched: nil backend")
	}
	if cfg.MaxSeqLen <= 0 {
		return nil, fmt.Errorf("sched: MaxSeqLen must be the model's context length, got %d", cfg.MaxSeqLen)
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 32
	}
	if cfg.MaxBatchedTokens <= 0 {
		cfg.MaxBatchedTokens = 256
	}
	if cfg.MaxBatchedTokens < cfg.MaxBatch {
		// Every running decode needs one token of budget per step.
		cfg.MaxBatchedTokens = cfg.MaxBatch
	}
	kv, err := kvcache.New(be.NumBlocks(), be.BlockSize())
	if err != nil {
		return nil, fmt.Errorf("sched: backend %s reports an unusable KV pool: %w", be.Name(), err)
	}
	if pool := kv.Total() * kv.BlockSize(); cfg.MaxSeqLen > pool {
		cfg.MaxSeqLen = pool
	}
	tb, _ := be.(TokenBackend)
	cp, _ := be.(BlockCopier)
	return &Scheduler{
		be: be, tokBE: tb, copier: cp, kv: kv, cfg: cfg, vocab: be.VocabSize(),
		wake: make(chan struct{}, 1), bySeq: map[uint64]*seq{},
		m: counters{finished: map[FinishReason]uint64{}},
	}, nil
}

// KV is the block manager (for leak checks and /metrics).
func (s *Scheduler) KV() *kvcache.Manager { return s.kv }

// Config is the effective configuration after defaults.
func (s *Scheduler) Config() Config { return s.cfg }

// Backend is the backend the scheduler drives.
func (s *Scheduler) Backend() Backend { return s.be }

// Submit queues a request. The request is cancelled when ctx ends: its KV
// blocks are freed at the next step boundary and its stream finishes with
// FinishCancelled. Errors wrap ErrInvalid for bad requests and ErrStopped
// after Run has ended.
func (s *Scheduler) Submit(ctx context.Context, r Request) (*Stream, error) {
	if err := s.validate(r); err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	if s.state == 2 {
		s.mu.Unlock()
		return nil, fmt.Errorf("sched: cannot accept a request: %w", ErrStopped)
	}
	s.nextID++
	id := s.nextID
	sq := &seq{id: id, req: r, stream: newStream(id), tokens: append(make([]int32, 0, len(r.Prompt)+min(r.MaxTokens, 1024)), r.Prompt...)}
	sq.seed = uint64(r.Sampling.Seed)
	if !r.Sampling.Seeded {
		sq.seed = rand.Uint64()
	}
	sq.res = Result{PromptTokens: len(r.Prompt), Submitted: now}
	s.incoming = append(s.incoming, sq)
	s.mu.Unlock()
	sq.stream.setStop(context.AfterFunc(ctx, func() { s.cancel(id) }))
	s.signal()
	return sq.stream, nil
}

func (s *Scheduler) validate(r Request) error {
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("sched: empty prompt; send at least one token: %w", ErrInvalid)
	case len(r.Prompt) >= s.cfg.MaxSeqLen:
		return fmt.Errorf("sched: prompt of %d tokens leaves no room to generate in the %d-token context; shorten it: %w",
			len(r.Prompt), s.cfg.MaxSeqLen, ErrInvalid)
	case r.MaxTokens <= 0:
		return fmt.Errorf("sched: max_tokens %d must be positive: %w", r.MaxTokens, ErrInvalid)
	case s.kv.BlocksFor(len(r.Prompt)+1) > s.kv.Total():
		return fmt.Errorf("sched: prompt of %d tokens needs more KV blocks than the pool holds (%d of %d positions); shorten it or start with more KV blocks: %w",
			len(r.Prompt), s.kv.Total(), s.kv.BlockSize(), ErrInvalid)
	}
	for _, t := range r.Prompt {
		if t < 0 || int(t) >= s.vocab {
			return fmt.Errorf("sched: prompt token %d outside the vocabulary [0, %d): %w", t, s.vocab, ErrInvalid)
		}
	}
	for t := range r.Sampling.LogitBias {
		if t < 0 || int(t) >= s.vocab {
			return fmt.Errorf("sched: logit_bias names token %d, outside the vocabulary [0, %d): %w", t, s.vocab, ErrInvalid)
		}
	}
	if err := r.Sampling.Validate(); err != nil {
		return fmt.Errorf("sched: %w: %w", err, ErrInvalid)
	}
	return nil
}

func (s *Scheduler) cancel(id uint64) {
	s.mu.Lock()
	s.cancelled = append(s.cancelled, id)
	s.mu.Unlock()
	s.signal()
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run is the scheduler loop. It returns when ctx ends (nil) and finishes
// every pending request with FinishError; it can be called once.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.state != 0 {
		s.mu.Unlock()
		return errors.New("sched: Run called twice; create a new Scheduler")
	}
	s.state = 1
	s.mu.Unlock()
	defer s.shutdown()
	var step uint64
	for {
		s.intake()
		if s.runExclusive() {
			continue
		}
		s.publish()
		if len(s.running) == 0 && len(s.waiting) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-s.wake:
			}
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		step++
		b, owners := s.schedule(ctx, step)
		s.publish()
		if len(b.Seqs) == 0 && len(s.running) == 0 && len(s.waiting) > 0 {
			// An empty pool cannot hold the head of the queue: it never
			// will, so fail it instead of waiting forever.
			s.end(s.waiting[0], FinishError, fmt.Errorf("sequence needs more KV blocks than the pool of %d blocks × %d positions holds; start the server with more KV blocks", s.kv.Total(), s.kv.BlockSize()))
			continue
		}
		if len(b.Seqs) == 0 {
			// Nothing fits (the pool is exhausted by sequences that were
			// all just preempted): wait for a change rather than spin.
			select {
			case <-ctx.Done():
				return nil
			case <-s.wake:
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		s.forward(ctx, b, owners)
		s.publish()
	}
}

// intake moves new requests into the queue and applies cancellations.
func (s *Scheduler) intake() {
	s.mu.Lock()
	in, cs := s.incoming, s.cancelled
	s.incoming, s.cancelled = nil, nil
	s.mu.Unlock()
	for _, sq := range in {
		s.bySeq[sq.id] = sq
		s.waiting = append(s.waiting, sq)
		s.m.mu.Lock()
		s.m.prompt += uint64(len(sq.req.Prompt))
		s.m.mu.Unlock()
	}
	for _, id := range cs {
		if sq, ok := s.bySeq[id]; ok {
			s.end(sq, FinishCancelled, context.Canceled)
		}
	}
}

// schedule builds one step: running decodes first (one token each), then
// running prefills, then new admissions, all inside the token budget.
func (s *Scheduler) schedule(ctx context.Context, step uint64) (*Batch, []*seq) {
	budget := s.cfg.MaxBatchedTokens
	b := &Batch{}
	var owners []*seq
	add := func(sq *seq, n int, table []int32) {
		sq.stepMark = step
		end := sq.computed + n
		b.Seqs = append(b.Seqs, SeqChunk{SeqID: sq.id, Tokens: sq.tokens[sq.computed:end], Pos: sq.computed, Blocks: table, WantLogits: end == len(sq.tokens)})
		owners = append(owners, sq)
		budget -= n
	}
	// Iterate over a snapshot: growing one sequence may preempt others,
	// which reshapes s.running.
	cands := append([]*seq(nil), s.running...)
	for pass := 0; pass < 2; pass++ {
		for _, sq := range cands {
			if budget == 0 {
				break
			}
			left := len(sq.tokens) - sq.computed
			if !sq.running || sq.stepMark == step || (pass == 0) != (left == 1) {
				continue
			}
			n := min(left, budget)
			table, ok := s.grow(sq, n, step)
			if !ok {
				continue // sq itself was preempted or ended
			}
			add(sq, n, table)
		}
	}
	for len(s.waiting) > 0 && len(s.running) < s.cfg.MaxBatch && budget > 0 {
		sq := s.waiting[0]
		if sq.stepMark == step {
			break // preempted in this very step; readmitting it would thrash
		}
		hitBlocks := s.attachPrefix(ctx, sq)
		n := min(len(sq.tokens)-sq.computed, budget)
		if s.kv.Needed(sq.id, sq.computed+n) > s.kv.Free() {
			s.detach(sq)
			break // first come, first served: wait for blocks to free up
		}
		table, err := s.kv.Ensure(sq.id, sq.computed+n)
		if err != nil {
			s.detach(sq)
			break
		}
		s.countPrefix(sq, hitBlocks)
		s.waiting = s.waiting[1:]
		s.running = append(s.running, sq)
		sq.running = true
		add(sq, n, table)
	}
	return b, owners
}

// attachPrefix gives a sequence about to be admitted (holding no blocks)
// the cached blocks that already hold a prefix of its tokens, and starts its
// prefill after them. It returns how many cached blocks it shares.
//
// At least the last token must run, for its logits. When every block of
// the sequence is cached, that token's position lies in a shared block: the
// sequence gets a private copy of that block (BlockCopier) and recomputes
// only the last token into it; without a copier, or if the copy fails, it
// recomputes the whole last block in a block of its own.
func (s *Scheduler) attachPrefix(ctx context.Context, sq *seq) int {
	if s.cfg.NoPrefixCache || sq.computed != 0 {
		return 0
	}
	bs := s.kv.BlockSize()
	blocks := s.kv.Match(sq.tokens)
	boundary := len(blocks) > 0 && len(blocks)*bs == len(sq.tokens)
	if boundary && s.copier == nil {
		blocks, boundary = blocks[:len(blocks)-1], false
	}
	if len(blocks) == 0 {
		return 0
	}
	n, err := s.kv.Attach(sq.id, blocks)
	if err != nil || n == 0 {
		return 0
	}
	sq.computed = n * bs
	if !boundary || n < len(blocks) {
		return n
	}
	src, dst, err := s.kv.Fork(sq.id, n-1)
	if err != nil {
		// No block to copy into: the pool is full, so this admission
		// cannot go ahead anyway.
		s.detach(sq)
		return 0
	}
	if err := s.copier.CopyBlocks(ctx, []int32{src}, []int32{dst}); err != nil {
		sq.computed = (n - 1) * bs // recompute the block into the copy
		return n - 1
	}
	sq.computed = len(sq.tokens) - 1
	return n
}

// detach undoes attachPrefix for a sequence that could not be admitted.
func (s *Scheduler) detach(sq *seq) {
	s.kv.Release(sq.id)
	sq.computed = 0
}

// countPrefix records an admission's prefix-cache hit (the positions it
// skips) and miss (the prompt positions it computes) in the metrics, and
// the first admission's hit in the request's result.
func (s *Scheduler) countPrefix(sq *seq, hitBlocks int) {
	if !sq.admitted {
		sq.admitted = true
		sq.res.CachedTokens = sq.computed
	}
	if s.cfg.NoPrefixCache {
		return
	}
	full := len(sq.tokens) / s.kv.BlockSize()
	s.m.mu.Lock()
	s.m.prefixHitTokens += uint64(sq.computed)
	s.m.prefixMissTokens += uint64(len(sq.tokens) - sq.computed)
	s.m.prefixHitBlocks += uint64(hitBlocks)
	s.m.prefixMissBlocks += uint64(max(full-hitBlocks, 0))
	s.m.mu.Unlock()
}

// grow secures KV blocks for n more positions of sq, preempting the newest
// running sequences not yet in this step when the pool is short. It reports
// false when sq itself had to be preempted.
func (s *Scheduler) grow(sq *seq, n int, step uint64) ([]int32, bool) {
	for {
		table, err := s.kv.Ensure(sq.id, sq.computed+n)
		if err == nil {
			return table, true
		}
		victim := -1
		for j := len(s.running) - 1; j >= 0; j-- {
			if s.running[j] != sq && s.running[j].stepMark != step {
				victim = j
				break
			}
		}
		if victim < 0 {
			if len(s.running) == 1 && s.kv.Used() == len(s.kv.Table(sq.id)) {
				// Alone and still short: the sequence outgrew the whole pool.
				s.end(sq, FinishLength, nil)
				return nil, false
			}
			sq.stepMark = step // keep it out of this step's admissions
			s.preempt(sq)
			return nil, false
		}
		s.running[victim].stepMark = step
		s.preempt(s.running[victim])
	}
}

// preempt frees a running sequence's blocks and puts it back at the head of
// the queue; it will recompute its prompt and generated tokens when
// readmitted (its sampler state is kept, so seeded output is unchanged).
func (s *Scheduler) preempt(sq *seq) {
	s.kv.Release(sq.id)
	sq.computed = 0
	sq.res.Preemptions++
	s.removeRunning(sq)
	s.waiting = append([]*seq{sq}, s.waiting...)
	s.m.mu.Lock()
	s.m.preemptions++
	s.m.mu.Unlock()
}

func (s *Scheduler) removeRunning(sq *seq) {
	sq.running = false
	for i, r := range s.running {
		if r == sq {
			s.running = append(s.running[:i], s.running[i+1:]...)
			return
		}
	}
}

func (s *Scheduler) removeWaiting(sq *seq) {
	for i, r := range s.waiting {
		if r == sq {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return
		}
	}
}

// forward runs the step and turns its output into tokens: through the
// backend's own sampling when it has it (only token ids come back, plus
// logits rows for requests that asked for logprobs), else from logits rows
// sampled here. A request whose sampling needs its row on the host
// (logit_bias, min_p, repetition_penalty: Sampling.NeedsRow) is drawn
// here on every backend, with the same Sampler: a TokenBackend brings its
// row back and the token it chose itself (greedy, the cheapest to ask
// for) is replaced.
func (s *Scheduler) forward(ctx context.Context, b *Batch, owners []*seq) {
	for len(s.rows) < len(b.Seqs) {
		s.rows = append(s.rows, make([]float32, s.vocab))
	}
	logits := make([][]float32, len(b.Seqs))
	var toks []int32
	var err error
	if s.tokBE != nil {
		choice := make([]TokenChoice, len(b.Seqs))
		toks = make([]int32, len(b.Seqs))
		for i, c := range b.Seqs {
			if !c.WantLogits {
				continue
			}
			sq := owners[i]
			choice[i] = sq.choice()
			if sq.req.Logprobs || sq.req.Sampling.NeedsRow() {
				logits[i] = s.rows[i]
			}
			if sq.req.Sampling.NeedsRow() {
				choice[i] = TokenChoice{} // greedy; replaced by the host's draw
			}
		}
		err = s.tokBE.ForwardTokens(ctx, b, choice, toks, logits)
	} else {
		for i, c := range b.Seqs {
			if c.WantLogits {
				logits[i] = s.rows[i]
			}
		}
		err = s.be.Forward(ctx, b, logits)
	}
	s.m.mu.Lock()
	s.m.steps++
	s.m.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down; shutdown() ends every request
		}
		for _, sq := range owners {
			s.end(sq, FinishError, fmt.Errorf("backend %s failed a forward step: %w", s.be.Name(), err))
		}
		return
	}
	now := time.Now()
	if s.tokBE == nil {
		toks = s.sampleAll(b, owners, logits)
	} else {
		for i, c := range b.Seqs {
			if c.WantLogits && owners[i].req.Sampling.NeedsRow() {
				toks[i] = owners[i].draw(&s.smp, logits[i])
			}
		}
	}
	for i, c := range b.Seqs {
		sq := owners[i]
		if s.bySeq[sq.id] != sq {
			continue // ended during the step
		}
		sq.computed += len(c.Tokens)
		if !s.cfg.NoPrefixCache {
			s.kv.Commit(sq.id, sq.tokens, sq.computed)
		}
		if !c.WantLogits {
			continue
		}
		tok := toks[i]
		if tok < 0 || int(tok) >= s.vocab {
			s.end(sq, FinishError, fmt.Errorf("backend %s chose token %d outside the vocabulary [0, %d)", s.be.Name(), tok, s.vocab))
			continue
		}
		out := Token{ID: tok, Time: now}
		if sq.req.Logprobs {
			out.Logprob = logprob(logits[i], tok)
		}
		sq.tokens = append(sq.tokens, tok)
		sq.res.CompletionTokens++
		// Counted before the token is delivered, so that a client that
		// has its last token never reads a /metrics that lacks it.
		s.m.mu.Lock()
		s.m.generated++
		if sq.res.FirstToken.IsZero() {
			sq.res.FirstToken = now
			s.m.ttft.observe(now.Sub(sq.res.Submitted))
		} else {
			s.m.itl.observe(now.Sub(sq.lastTok))
		}
		s.m.mu.Unlock()
		sq.lastTok = now
		if isStop(tok, sq.req.StopTokens) {
			s.end(sq, FinishStop, nil)
			continue
		}
		sq.stream.push(out)
		switch {
		case sq.res.CompletionTokens >= sq.req.MaxTokens:
			s.end(sq, FinishLength, nil)
		case len(sq.tokens) >= s.cfg.MaxSeqLen:
			s.end(sq, FinishLength, nil)
		}
	}
}

// choice is how sq's next token is drawn: its index in the request's
// output names the random number, so a recompute after preemption draws
// the same token.
func (sq *seq) choice() TokenChoice {
	return sq.req.Sampling.choice(sq.seed, uint64(sq.res.CompletionTokens))
}

// draw samples sq's next token from its row of logits on the host, with
// the processors that need the row (SampleRequest) when it uses any.
func (sq *seq) draw(smp *Sampler, row []float32) int32 {
	if sq.req.Sampling.NeedsRow() {
		return smp.SampleRequest(row, sq.choice(), sq.req.Sampling, sq.tokens)
	}
	return smp.Sample(row, sq.choice())
}

// sampleAll draws the next token of every chunk that asked for logits.
// Random sampling over a large vocabulary costs milliseconds per row (an
// exp per entry) while the backend sits idle, so rows are spread over
// GOMAXPROCS workers; the draw depends only on the row and the request's
// (seed, step), so the tokens do not depend on which worker drew them.
func (s *Scheduler) sampleAll(b *Batch, owners []*seq, logits [][]float32) []int32 {
	toks := make([]int32, len(b.Seqs))
	var random []int
	for i, c := range b.Seqs {
		if !c.WantLogits {
			continue
		}
		if owners[i].choice().Greedy() && !owners[i].req.Sampling.NeedsRow() {
			toks[i] = argmax(logits[i])
		} else {
			random = append(random, i)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(random))
	for len(s.smps) < workers {
		s.smps = append(s.smps, &Sampler{})
	}
	if workers <= 1 {
		for _, i := range random {
			toks[i] = owners[i].draw(&s.smp, logits[i])
		}
		return toks
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w; j < len(random); j += workers {
				i := random[j]
				toks[i] = owners[i].draw(s.smps[w], logits[i])
			}
		}()
	}
	wg.Wait()
	return toks
}

func isStop(tok int32, stops []int32) bool {
	for _, s := range stops {
		if s == tok {
			return true
		}
	}
	return false
}

// end finishes a request wherever it is and frees its blocks.
func (s *Scheduler) end(sq *seq, why FinishReason, err error) {
	if s.bySeq[sq.id] != sq {
		return
	}
	delete(s.bySeq, sq.id)
	s.kv.Release(sq.id)
	s.removeRunning(sq)
	s.removeWaiting(sq)
	sq.res.Finish, sq.res.Err, sq.res.Done = why, err, time.Now()
	s.m.mu.Lock()
	s.m.finished[why]++
	s.m.mu.Unlock()
	sq.stream.finish(sq.res)
}

// publish copies the queue sizes into the metrics.
func (s *Scheduler) publish() {
	s.m.mu.Lock()
	s.m.running, s.m.waiting = len(s.running), len(s.waiting)
	s.m.mu.Unlock()
}

// shutdown ends every pending request and refuses new ones.
func (s *Scheduler) shutdown() {
	s.mu.Lock()
	s.state = 2
	s.mu.Unlock()
	s.intake()
	for _, sq := range s.bySeq {
		s.end(sq, FinishError, fmt.Errorf("server shutting down: %w", ErrStopped))
	}
	s.publish()
	s.failExclusive()
}

// Metrics returns a snapshot of the counters.
func (s *Scheduler) Metrics() Metrics {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	fin := make(map[FinishReason]uint64, len(s.m.finished))
	for k, v := range s.m.finished {
		fin[k] = v
	}
	return Metrics{
		Running: s.m.running, Waiting: s.m.waiting,
		KVUsed: s.kv.Used(), KVTotal: s.kv.Total(), KVBlockSize: s.kv.BlockSize(),
		KVCached: s.kv.Cached(), KVEvictions: s.kv.Evictions(), PrefixCaching: !s.cfg.NoPrefixCache,
		PrefixHitTokens: s.m.prefixHitTokens, PrefixMissTokens: s.m.prefixMissTokens,
		PrefixHitBlocks: s.m.prefixHitBlocks, PrefixMissBlocks: s.m.prefixMissBlocks,
		PromptTokens: s.m.prompt, GeneratedTokens: s.m.generated,
		Requests: fin, Preemptions: s.m.preemptions, Steps: s.m.steps,
		TTFT: s.m.ttft.snapshot(), ITL: s.m.itl.snapshot(),
	}
}
