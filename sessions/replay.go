package sessions

import (
	"context"
	"sync"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Replayer emits a recorded session's events onto a trace.Sink at their
// recorded offsets, scaled by a speed factor or as fast as possible, so that
// every live consumer (TUI, report, diagnosis) works unchanged. It can be
// paused, sped up and seeked while it runs; a backwards seek emits a
// trace.MarkerReplayReset marker and replays from the start up to the target
// instantly.
type Replayer struct {
	events []trace.Event

	mu     sync.Mutex
	speed  float64 // playback rate; 0 means as fast as possible
	paused bool
	pos    int // index of the next event to emit
	// The virtual clock: at wall time anchorWall the replay was at offset
	// anchorOff; it advances at speed unless paused.
	anchorWall time.Time
	anchorOff  time.Duration
	seek       *time.Duration
	wake       chan struct{}
	waitAtEnd  bool
}

// ReplayOptions configures a Replayer.
type ReplayOptions struct {
	// Speed scales time: 2 plays twice as fast. Zero or negative is 1.
	Speed float64
	// Fast emits every event immediately, ignoring offsets.
	Fast bool
	// WaitAtEnd keeps Run going after the last event, waiting for a seek
	// (or ctx), so that a finished replay can still be rewound (the TUI);
	// without it Run returns once every event is emitted.
	WaitAtEnd bool
}

// NewReplayer prepares a replay of events (sorted by offset here; the input
// is not modified).
func NewReplayer(events []trace.Event, opts ReplayOptions) *Replayer {
	evs := append([]trace.Event(nil), events...)
	trace.SortEvents(evs)
	speed := opts.Speed
	if speed <= 0 {
		speed = 1
	}
	if opts.Fast {
		speed = 0
	}
	return &Replayer{events: evs, speed: speed, wake: make(chan struct{}, 1), waitAtEnd: opts.WaitAtEnd}
}

// Duration is the offset of the last event.
func (r *Replayer) Duration() time.Duration {
	if len(r.events) == 0 {
		return 0
	}
	return r.events[len(r.events)-1].At
}

// Position is the replay's current offset; it stops at the session's end.
func (r *Replayer) Position() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return min(r.virtualLocked(time.Now()), r.Duration())
}

// Done reports whether every event has been emitted: the replay is at its
// end (with WaitAtEnd, until a seek back).
func (r *Replayer) Done() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pos >= len(r.events)
}

// Speed is the playback rate (0 = as fast as possible).
func (r *Replayer) Speed() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.speed
}

// SetSpeed changes the playback rate from now on (clamped to 1/64…1024).
func (r *Replayer) SetSpeed(s float64) {
	if s < 1.0/64 {
		s = 1.0 / 64
	}
	if s > 1024 {
		s = 1024
	}
	r.mu.Lock()
	now := time.Now()
	r.anchorOff, r.anchorWall = r.virtualLocked(now), now
	r.speed = s
	r.mu.Unlock()
	r.poke()
}

// Paused reports whether playback is paused.
func (r *Replayer) Paused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused
}

// SetPaused pauses or resumes playback.
func (r *Replayer) SetPaused(p bool) {
	r.mu.Lock()
	now := time.Now()
	r.anchorOff, r.anchorWall = r.virtualLocked(now), now
	r.paused = p
	r.mu.Unlock()
	r.poke()
}

// Seek moves playback to offset to (clamped to the session).
func (r *Replayer) Seek(to time.Duration) {
	if to < 0 {
		to = 0
	}
	if d := r.Duration(); to > d {
		to = d
	}
	r.mu.Lock()
	r.seek = &to
	r.mu.Unlock()
	r.poke()
}

func (r *Replayer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// virtualLocked is the replay offset at wall time now.
func (r *Replayer) virtualLocked(now time.Time) time.Duration {
	if r.anchorWall.IsZero() {
		return r.anchorOff
	}
	if r.paused || r.speed == 0 {
		return r.anchorOff
	}
	return r.anchorOff + time.Duration(float64(now.Sub(r.anchorWall))*r.speed)
}

// Run emits the events to sink and returns when all were emitted or ctx is
// done. It must be called once.
func (r *Replayer) Run(ctx context.Context, sink trace.Sink) error {
	r.mu.Lock()
	r.anchorWall, r.anchorOff = time.Now(), 0
	r.mu.Unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.mu.Lock()
		if r.seek != nil {
			to := *r.seek
			r.seek = nil
			if r.pos > 0 && (r.pos > len(r.events) || to < r.events[r.pos-1].At) {
				sink.Emit(trace.Event{At: 0, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerReplayReset}})
				r.pos = 0
			}
			for r.pos < len(r.events) && r.events[r.pos].At <= to {
				sink.Emit(r.events[r.pos])
				r.pos++
			}
			r.anchorWall, r.anchorOff = time.Now(), to
		}
		if r.pos >= len(r.events) {
			r.mu.Unlock()
			if !r.waitAtEnd {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-r.wake:
			}
			continue
		}
		if r.paused {
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-r.wake:
			}
			continue
		}
		e := r.events[r.pos]
		var wait time.Duration
		if r.speed != 0 {
			if vt := r.virtualLocked(time.Now()); e.At > vt {
				wait = time.Duration(float64(e.At-vt) / r.speed)
			}
		}
		if wait <= 0 {
			r.pos++
			r.mu.Unlock()
			sink.Emit(e)
			continue
		}
		r.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// Play runs the replay on a bus of its own in a goroutine it owns and
// returns the subscription a consumer (the TUI, the headless transcript)
// reads; the bus closes when the events end (with WaitAtEnd, when ctx
// does), so the consumer sees the end.
// stop cancels the replay and waits for its goroutine; call it once the
// consumer is done.
func (r *Replayer) Play(ctx context.Context) (sub *trace.Subscription, stop func()) {
	bus := trace.NewBus()
	sub = bus.Subscribe()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer bus.Close()
		_ = r.Run(ctx, bus) // ends with ctx or the events; either is fine
	}()
	return sub, func() {
		cancel()
		sub.Cancel()
		<-done
	}
}
