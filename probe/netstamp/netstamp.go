// Package netstamp times streamed responses by when their bytes reached
// this machine rather than when the goroutine reading them got a core.
//
// With a loaded client — 1,000 streams on two cores, or a probe beside a
// CPU engine that keeps every core busy — the second can trail the first
// by milliseconds, and that delay is the client's, not the server's. The
// kernel stamps every received packet when a socket asks (SO_TIMESTAMPNS)
// and hands the stamp of the last packet a read consumed to recvmsg as
// control data. Dialer makes connections (Conn) that read through recvmsg
// on their syscall.RawConn — Go's netpoller still does the waiting and
// net/http still speaks HTTP above them — and keep that stamp; Tracker
// follows the connection a request got (net/http/httptrace) so the
// request's reader can ask when the data it just read arrived.
//
// Two tokens that reach the socket before the client reads the first are
// merged by TCP into one buffer carrying the later stamp: stamps take the
// client's lateness out of the figures up to one inter-token gap, not
// beyond. HTTPS (a TLS record hides which packet brought a token) and
// systems other than Linux fall back to the time of the read.
package netstamp

import (
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Stamper is a connection that knows when the data of its latest read
// reached this machine (Conn on Linux).
type Stamper interface {
	// Arrival is the trace offset of that moment; false before the first
	// read.
	Arrival() (time.Duration, bool)
}

// Tracker follows the connection one request got. Its zero value is ready;
// it is safe for concurrent use (net/http reports the connection from its
// own goroutine).
type Tracker struct {
	conn atomic.Value // Stamper
}

// Trace returns the httptrace hooks that feed the tracker, with
// firstByte (may be nil) called at the response's first byte with its
// arrival.
func (t *Tracker) Trace(clock trace.Clock, firstByte func(at time.Duration)) *httptrace.ClientTrace {
	ct := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if s, ok := i.Conn.(Stamper); ok {
			t.Track(s)
		}
	}}
	if firstByte != nil {
		ct.GotFirstResponseByte = func() { firstByte(t.Arrived(clock)) }
	}
	return ct
}

// Track makes s the request's connection.
func (t *Tracker) Track(s Stamper) { t.conn.Store(s) }

// Since is Arrived as an offset from sent (a request's send time), at least
// 1 ns so that a zero still means "not seen".
func (t *Tracker) Since(clock trace.Clock, sent time.Duration) time.Duration {
	return max(t.Arrived(clock)-sent, 1)
}

// Arrived is when the data of the latest read on the request's connection
// reached this machine, or clock's now when there is no stamp (no
// connection yet, HTTPS, no kernel support).
func (t *Tracker) Arrived(clock trace.Clock) time.Duration {
	if s, ok := t.conn.Load().(Stamper); ok {
		if at, ok := s.Arrival(); ok {
			return at
		}
	}
	return clock.Now()
}
