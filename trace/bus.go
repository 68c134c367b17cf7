package trace

import (
	"sync"
)

// Sink receives events. Producers take a Sink so that they can feed the live
// bus, a test recorder or anything else.
type Sink interface {
	Emit(Event)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Event)

// Emit calls f.
func (f SinkFunc) Emit(e Event) { f(e) }

// Bus fans events out from any number of producers to any number of
// subscribers. Emit never blocks and never drops: each subscriber has its own
// unbounded queue drained by its own goroutine, so a slow consumer (the TUI
// during a redraw) cannot stall a producer or make the recorder lose lines.
// A bus made by NewBoundedBus bounds the queues instead and makes Emit wait.
type Bus struct {
	mu     sync.Mutex
	subs   []*Subscription
	closed bool
	limit  int // NewBoundedBus's; 0: unbounded
}

// NewBus returns an open bus.
func NewBus() *Bus { return &Bus{} }

// NewBoundedBus returns an open bus whose Emit waits while a subscriber
// has limit events queued, until it takes them or cancels: for a producer
// that can wait (a replay reading a file as fast as it can), so that a
// consumer slower than the file does not make its queue hold the file.
// A live session's producers must never wait: they use NewBus.
func NewBoundedBus(limit int) *Bus { return &Bus{limit: max(limit, 1)} }

// Emit publishes e to every current subscriber. Events emitted after Close
// are ignored.
func (b *Bus) Emit(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for _, s := range b.subs {
		s.push(e)
	}
}

// Subscribe returns a subscription that receives every event emitted from
// now on, in emission order. Subscribing to a closed bus returns a closed
// subscription.
func (b *Bus) Subscribe() *Subscription {
	s := newSubscription(b.limit)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		s.finish()
		return s
	}
	b.subs = append(b.subs, s)
	b.mu.Unlock()
	return s
}

// Close ends the stream: every subscription delivers what it has queued and
// then closes its channel. Close is idempotent.
func (b *Bus) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for _, s := range subs {
		s.finish()
	}
}

// Subscription is one consumer's view of a Bus.
type Subscription struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []Event
	done    bool // no more events will be pushed
	dropped bool // the consumer gave up; discard the queue
	ch      chan Event
	exited  chan struct{}
	// limit bounds the queue (NewBoundedBus; 0: unbounded): push waits
	// on room, which the pump signals when it takes the queue.
	limit int
	room  *sync.Cond
}

func newSubscription(limit int) *Subscription {
	s := &Subscription{ch: make(chan Event), exited: make(chan struct{}), limit: limit}
	s.cond = sync.NewCond(&s.mu)
	s.room = sync.NewCond(&s.mu)
	go s.pump()
	return s
}

// Events is the channel of events; it is closed after the bus closes and
// the queue has been delivered, or after Cancel.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Cancel detaches the consumer: queued events are discarded and the pump
// goroutine exits even if nobody reads the channel any more. It waits for
// the pump to exit.
func (s *Subscription) Cancel() {
	s.mu.Lock()
	s.done, s.dropped = true, true
	s.queue = nil
	s.cond.Broadcast()
	s.room.Broadcast()
	s.mu.Unlock()
	// Unblock a pending send.
	for {
		select {
		case <-s.exited:
			return
		case <-s.ch:
		}
	}
}

func (s *Subscription) push(e Event) {
	s.mu.Lock()
	for s.limit > 0 && len(s.queue) >= s.limit && !s.done {
		s.room.Wait()
	}
	if !s.done {
		s.queue = append(s.queue, e)
		s.cond.Signal()
	}
	s.mu.Unlock()
}

func (s *Subscription) finish() {
	s.mu.Lock()
	s.done = true
	s.cond.Broadcast()
	s.room.Broadcast()
	s.mu.Unlock()
}

// pump moves queued events to the channel. It is the only goroutine a
// subscription owns and it exits when the bus closes or the consumer
// cancels.
func (s *Subscription) pump() {
	defer close(s.exited)
	defer close(s.ch)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.done {
			s.cond.Wait()
		}
		if s.dropped || (len(s.queue) == 0 && s.done) {
			s.mu.Unlock()
			return
		}
		batch := s.queue
		s.queue = nil
		s.room.Broadcast()
		s.mu.Unlock()
		for _, e := range batch {
			s.ch <- e
			s.mu.Lock()
			dropped := s.dropped
			s.mu.Unlock()
			if dropped {
				return
			}
		}
	}
}
