package sched

import (
	"context"
	"io"
	"sync"
	"time"
)

// FinishReason says why a request ended, in OpenAI's vocabulary where one
// exists.
type FinishReason string

// Finish reasons.
const (
	// FinishStop: a stop token was sampled.
	FinishStop FinishReason = "stop"
	// FinishLength: max_tokens reached, or the context is full.
	FinishLength FinishReason = "length"
	// FinishCancelled: the caller's context ended (client disconnect).
	FinishCancelled FinishReason = "cancelled"
	// FinishError: the backend failed or the scheduler stopped.
	FinishError FinishReason = "error"
)

// Token is one generated token and when the scheduler produced it.
type Token struct {
	ID   int32
	Time time.Time
	// Logprob is the token's natural-log probability under the model's
	// distribution; set only for requests with Logprobs.
	Logprob float32
}

// Result is a request's outcome, complete once Recv returned io.EOF.
type Result struct {
	Finish FinishReason
	// Err explains FinishError and FinishCancelled.
	Err error
	// PromptTokens is the prompt length.
	PromptTokens int
	// CompletionTokens counts generated tokens, including a final stop
	// token that is not delivered as a Token.
	CompletionTokens int
	// Submitted, FirstToken and Done are the request's timestamps
	// (FirstToken is zero when no token was produced).
	Submitted, FirstToken, Done time.Time
	// Preemptions counts how often the request lost its KV blocks to
	// others and was recomputed.
	Preemptions int
	// CachedTokens is how many prompt positions the request found in the
	// prefix cache when first admitted (their prefill was skipped).
	CachedTokens int
}

// Stream delivers one request's tokens. The scheduler never blocks on it:
// tokens queue until the reader takes them, so a slow client cannot stall
// the batch.
type Stream struct {
	id     uint64
	notify chan struct{}

	mu     sync.Mutex
	queue  []Token
	done   bool
	result Result
	stop   func() bool // unregisters the cancellation hook
	first  time.Time   // when the first delivered token was generated
}

func newStream(id uint64) *Stream {
	return &Stream{id: id, notify: make(chan struct{}, 1)}
}

// setStop installs the cancellation hook's unregister function, calling it
// at once if the request already ended.
func (s *Stream) setStop(stop func() bool) {
	s.mu.Lock()
	done := s.done
	if !done {
		s.stop = stop
	}
	s.mu.Unlock()
	if done {
		stop()
	}
}

// ID is the scheduler's sequence id of the request.
func (s *Stream) ID() uint64 { return s.id }

func (s *Stream) push(t Token) {
	s.mu.Lock()
	if s.first.IsZero() {
		s.first = t.Time
	}
	s.queue = append(s.queue, t)
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) finish(r Result) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done, s.result = true, r
	stop := s.stop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.signal()
}

func (s *Stream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Recv returns the next token. At the end of the request it returns io.EOF
// (then Result is final); if ctx ends first it returns ctx's error.
func (s *Stream) Recv(ctx context.Context) (Token, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			t := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return t, nil
		}
		done := s.done
		s.mu.Unlock()
		if done {
			return Token{}, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Token{}, ctx.Err()
		}
	}
}

// FirstToken is when the first token was generated (zero before that). It
// is valid while the request runs, unlike Result.
func (s *Stream) FirstToken() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.first.IsZero() {
		return s.first
	}
	return s.result.FirstToken // a first token that was a stop token
}

// Result is the request's outcome; it is final after Recv returned io.EOF.
func (s *Stream) Result() Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.result
}

// Collect reads the whole stream: every token and the result.
func (s *Stream) Collect(ctx context.Context) ([]Token, Result, error) {
	var toks []Token
	for {
		t, err := s.Recv(ctx)
		if err == io.EOF {
			return toks, s.Result(), nil
		}
		if err != nil {
			return toks, Result{}, err
		}
		toks = append(toks, t)
	}
}
