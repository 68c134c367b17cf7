package trace

import "time"

// Clock turns instants into session offsets. Its start carries Go's
// monotonic reading, so offsets of Now never go backwards even if the wall
// clock is stepped; wall-clock stamps from other processes (the built-in
// engine's stage lines, parsed log timestamps) are converted with At.
type Clock struct {
	start time.Time
}

// NewClock starts a clock now.
func NewClock() Clock { return Clock{start: time.Now()} }

// ClockAt makes a clock whose zero is the given wall-clock time (replay,
// import).
func ClockAt(start time.Time) Clock { return Clock{start: start} }

// Start is the wall-clock time of offset zero.
func (c Clock) Start() time.Time { return c.start }

// Now is the offset of this instant.
func (c Clock) Now() time.Duration { return time.Since(c.start) }

// At converts a wall-clock time from elsewhere into an offset. It may be
// negative when the instant precedes the session (a process started before
// treni-top attached); callers clamp as they see fit.
func (c Clock) At(wall time.Time) time.Duration { return wall.Round(0).Sub(c.start.Round(0)) }
