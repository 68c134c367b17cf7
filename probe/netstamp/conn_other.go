//go:build !linux

package netstamp

import (
	"context"
	"io"
	"net"

	"github.com/treni-top/treni-top/trace"
)

// Supported says whether this system gives reads a receive stamp.
const Supported = false

// Dialer dials plain TCP connections: kernel receive timestamps are read
// on Linux only, so elsewhere data is timed when it is read.
type Dialer struct {
	net.Dialer
	Clock trace.Clock
}

// DialContext dials.
func (s *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return s.Dialer.DialContext(ctx, network, addr)
}

// KeepOn does nothing: there are no receive stamps to keep on.
func KeepOn() io.Closer { return nil }
