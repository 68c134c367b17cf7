//go:build !linux

package load

import (
	"context"
	"io"
	"net"

	"github.com/treni-top/treni-top/trace"
)

// kernelStamps says whether this system gives reads a receive stamp.
const kernelStamps = false

// stampDialer dials plain TCP connections: kernel receive timestamps are
// read on Linux only, so elsewhere tokens are timed when they are read.
type stampDialer struct {
	d     net.Dialer
	clock trace.Clock
}

// DialContext dials.
func (s *stampDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return s.d.DialContext(ctx, network, addr)
}

// keepStampsOn does nothing: there are no receive stamps to keep on.
func keepStampsOn() io.Closer { return nil }
