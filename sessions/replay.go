package sessions

import (
	"context"
	"fmt"
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
//
// A replay of a file (OpenReplayer) reads it as it plays, one event at a
// time, so its memory does not grow with the file; a backwards seek reads
// the file again from its start. A file that was cut short or never
// closed ends its replay with a trace.MarkerSessionTruncated marker.
type Replayer struct {
	src      replaySource
	duration time.Duration

	mu     sync.Mutex
	speed  float64 // playback rate; 0 means as fast as possible
	paused bool
	// emitted: an event went out; lastAt is the offset of the last one.
	emitted bool
	lastAt  time.Duration
	// The virtual clock: at wall time anchorWall the replay was at offset
	// anchorOff; it advances at speed unless paused.
	anchorWall time.Time
	anchorOff  time.Duration
	seek       *time.Duration
	wake       chan struct{}
	truncated  bool
	waitAtEnd  bool
	done       bool // every event went out (until a seek back)
	ended      bool // the end (and a truncated file's marker) was handled
}

// ReplayOptions configures a Replayer.
type ReplayOptions struct {
	// Speed scales time: 2 plays twice as fast. Zero or negative is 1.
	Speed float64
	// Fast emits every event immediately, ignoring offsets.
	Fast bool
	// Kinds, when set, limits a file replay to events of these kinds (and
	// markers): a headless transcript needs no log lines or samples, and
	// skipping them skips their decoding.
	Kinds []trace.Kind
	// WaitAtEnd keeps Run going after the last event, waiting for a seek
	// (or ctx), so that a finished replay can still be rewound (the TUI);
	// without it Run returns once every event is emitted.
	WaitAtEnd bool
}

// NewReplayer prepares a replay of events held in memory (sorted by
// offset here; the input is not modified).
func NewReplayer(events []trace.Event, opts ReplayOptions) *Replayer {
	evs := append([]trace.Event(nil), events...)
	trace.SortEvents(evs)
	r := newReplayer(sliceSource(evs), opts)
	if len(evs) > 0 {
		r.duration = evs[len(evs)-1].At
	}
	return r
}

// OpenReplayer prepares a replay of the session file at path, read as it
// plays. It reads the file once first, without decoding its events, for
// its length and to refuse a malformed file before anything is shown.
func OpenReplayer(path string, opts ReplayOptions) (*Replayer, error) {
	st, err := OpenStream(path, trace.KindMarker)
	if err != nil {
		return nil, err
	}
	var e trace.Event
	for st.Next(&e) {
	}
	st.Close()
	if err := st.Err(); err != nil {
		return nil, fmt.Errorf("read session %s: %w", path, err)
	}
	r := newReplayer(fileSource{path: path, kinds: opts.Kinds}, opts)
	r.duration = st.LastAt()
	return r, nil
}

func newReplayer(src replaySource, opts ReplayOptions) *Replayer {
	speed := opts.Speed
	if speed <= 0 {
		speed = 1
	}
	if opts.Fast {
		speed = 0
	}
	return &Replayer{src: src, speed: speed, wake: make(chan struct{}, 1), waitAtEnd: opts.WaitAtEnd}
}

// replaySource opens the events of a replay from their start, each time
// the replay starts or seeks back.
type replaySource interface {
	open() (eventIter, error)
}

// eventIter yields events in order; done reports why it ended: an error,
// or the marker a cut-short file ends with (nil: none).
type eventIter interface {
	next(e *trace.Event) bool
	done() (*trace.Event, error)
	close()
}

type sliceSource []trace.Event

func (s sliceSource) open() (eventIter, error) { return &sliceIter{evs: s}, nil }

type sliceIter struct {
	evs []trace.Event
	i   int
}

func (it *sliceIter) next(e *trace.Event) bool {
	if it.i >= len(it.evs) {
		return false
	}
	*e = it.evs[it.i]
	it.i++
	return true
}

func (it *sliceIter) done() (*trace.Event, error) { return nil, nil }
func (it *sliceIter) close()                      {}

type fileSource struct {
	path  string
	kinds []trace.Kind
}

func (f fileSource) open() (eventIter, error) {
	st, err := OpenStream(f.path, f.kinds...)
	if err != nil {
		return nil, err
	}
	return &streamIter{st: st}, nil
}

// streamIter replays a Stream, leaving out the light events it did not
// decode.
type streamIter struct{ st *Stream }

func (it *streamIter) next(e *trace.Event) bool {
	for it.st.Next(e) {
		if e.Validate() == nil {
			return true
		}
	}
	return false
}

func (it *streamIter) done() (*trace.Event, error) {
	if err := it.st.Err(); err != nil {
		return nil, err
	}
	reason := ""
	switch {
	case it.st.Truncated():
		reason = "the file ends mid-line (the recorder was killed): what came after is missing"
	case it.st.Unfinished():
		reason = "the file has no clean end (its recorder did not close it): the last events may be missing"
	default:
		return nil, nil
	}
	return &trace.Event{At: it.st.LastAt(), Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerSessionTruncated, Attrs: trace.Attrs{"reason": reason}}}, nil
}

func (it *streamIter) close() { it.st.Close() }

// Duration is the offset of the last event.
func (r *Replayer) Duration() time.Duration { return r.duration }

// Position is the replay's current offset; it stops at the session's end.
func (r *Replayer) Position() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return min(r.virtualLocked(time.Now()), r.duration)
}

// Done reports whether every event has been emitted: the replay is at its
// end (with WaitAtEnd, until a seek back).
func (r *Replayer) Done() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
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

// Truncated reports that the replay ended on a file that was cut short or
// never closed (it emitted trace.MarkerSessionTruncated).
func (r *Replayer) Truncated() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.truncated
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
	it, err := r.src.open()
	if err != nil {
		return err
	}
	defer func() { it.close() }()
	r.mu.Lock()
	r.anchorWall, r.anchorOff = time.Now(), 0
	r.mu.Unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var next trace.Event
	have := it.next(&next)
	emit := func(e trace.Event) {
		r.mu.Lock()
		r.emitted, r.lastAt = true, e.At
		r.mu.Unlock()
		sink.Emit(e)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.mu.Lock()
		if r.seek != nil {
			to := *r.seek
			r.seek = nil
			back := r.emitted && to < r.lastAt
			if back {
				// Position says the target before the reset marker goes
				// out: a consumer that reads it on that marker must not
				// see the place the replay is leaving.
				r.anchorWall, r.anchorOff = time.Now(), to
			}
			r.mu.Unlock()
			if back {
				sink.Emit(trace.Event{At: 0, Kind: trace.KindMarker, Marker: &trace.Marker{Name: trace.MarkerReplayReset}})
				it.close()
				if it, err = r.src.open(); err != nil {
					return err
				}
				have = it.next(&next)
				r.mu.Lock()
				r.done, r.ended = false, false
				r.mu.Unlock()
			}
			for have && next.At <= to {
				emit(next)
				have = it.next(&next)
			}
			r.mu.Lock()
			r.anchorWall, r.anchorOff = time.Now(), to
		}
		if !have {
			ended := r.ended
			r.ended, r.done = true, true
			r.mu.Unlock()
			if !ended {
				end, err := it.done()
				if err != nil {
					return err
				}
				if end != nil {
					r.mu.Lock()
					r.truncated = true
					r.mu.Unlock()
					emit(*end)
				}
			}
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
		var wait time.Duration
		if r.speed != 0 {
			if vt := r.virtualLocked(time.Now()); next.At > vt {
				wait = time.Duration(float64(next.At-vt) / r.speed)
			}
		}
		r.mu.Unlock()
		if wait <= 0 {
			emit(next)
			have = it.next(&next)
			continue
		}
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

// replayQueue bounds the events a replay's consumer has not taken yet:
// a replay waits for a consumer slower than the file (the TUI while it
// draws, a terminal that scrolls slowly) instead of queueing the file.
const replayQueue = 4096

// Play runs the replay on a bus of its own in a goroutine it owns and
// returns the subscription a consumer (the TUI, the headless transcript)
// reads; the bus closes when the events end (with WaitAtEnd, when ctx
// does), so the consumer sees the end. The bus holds at most replayQueue
// events the consumer has not taken: the replay waits for it.
// stop cancels the replay and waits for its goroutine; call it once the
// consumer is done.
func (r *Replayer) Play(ctx context.Context) (sub *trace.Subscription, stop func()) {
	bus := trace.NewBoundedBus(replayQueue)
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
