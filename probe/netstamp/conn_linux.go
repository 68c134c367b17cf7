package netstamp

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/treni-top/treni-top/trace"
)

// maxStampAge bounds how old a receive stamp may be and still be trusted: a
// larger age means the wall clock stepped between the packet and the read,
// and the read's own time is used instead.
const maxStampAge = 10 * time.Second

// Supported says whether this system gives reads a receive stamp.
const Supported = true

// KeepOn opens a socket that asks for receive timestamps and holds it
// until the returned closer is called. The kernel stamps packets only
// while some socket on the system wants stamps, and it switches stamping
// on through deferred work: the first packets after the first such socket
// appears arrive unstamped (and are timed on read). Holding one socket for
// the client's whole life, opened before its first request, keeps stamping
// on across its connections coming and going.
func KeepOn() io.Closer {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		unix.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), "receive-timestamp keeper")
}

// Dialer dials TCP connections that record when their data arrived, as
// offsets on Clock.
type Dialer struct {
	net.Dialer
	Clock trace.Clock
}

// DialContext dials and turns on receive timestamps. A socket that refuses
// them is returned as it is: its tokens are timed when they are read.
func (s *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := s.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return c, nil
	}
	// Room for a 64-bit timespec and then some: another control message
	// (none is asked for) would be cut, never overflow.
	sc := &Conn{TCPConn: tc, raw: raw, clock: s.Clock, oob: make([]byte, 2*unix.CmsgSpace(16))}
	sc.readFn = sc.tryRead
	return sc, nil
}

// Conn is a TCP connection whose reads carry the kernel's receive time of
// the data they return. One goroutine reads at a time (net/http's
// connection reader or the request's body reader, never both); the stamp is
// read from others, hence atomic.
type Conn struct {
	*net.TCPConn
	raw   syscall.RawConn
	clock trace.Clock
	// msg, iov and oob are the recvmsg arguments, kept with the connection
	// so that a read allocates nothing.
	msg unix.Msghdr
	iov unix.Iovec
	oob []byte
	// readFn is tryRead bound once (a closure made per read would be an
	// allocation per token); p, n, oobn and err carry its arguments and
	// results.
	readFn  func(fd uintptr) bool
	p       []byte
	n, oobn int
	err     error
	// last is the trace offset at which the data of the latest read
	// arrived, plus one (0: no read yet).
	last atomic.Int64
}

// Read reads with recvmsg and records the arrival of what it returns.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.p = p
	err := c.raw.Read(c.readFn)
	c.p = nil
	n, oobn, rerr := c.n, c.oobn, c.err
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	if rerr != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("recvmsg", rerr)}
	}
	if n == 0 {
		return 0, io.EOF
	}
	now := time.Now()
	at := now.Sub(c.clock.Start())
	if ns, ok := receiveStamp(c.oob[:oobn]); ok {
		if age := time.Duration(now.UnixNano() - ns); age >= 0 && age < maxStampAge {
			at -= age
		}
	}
	// Never earlier than the previous read: the conversion goes through the
	// wall clock, which an NTP slew may nudge by microseconds, and a
	// negative gap between two tokens would be nonsense.
	if prev := time.Duration(c.last.Load() - 1); at < prev {
		at = prev
	}
	c.last.Store(int64(at) + 1)
	return n, nil
}

// tryRead is raw.Read's callback: one recvmsg, false to wait for data.
func (c *Conn) tryRead(fd uintptr) bool {
	c.n, c.oobn, c.err = c.recvmsg(fd, c.p)
	return c.err != unix.EAGAIN && c.err != unix.EINTR
}

// recvmsg reads into p with the connection's control buffer.
func (c *Conn) recvmsg(fd uintptr, p []byte) (n, oobn int, err error) {
	c.iov.Base = &p[0]
	c.iov.SetLen(len(p))
	c.msg.Iov = &c.iov
	c.msg.SetIovlen(1)
	c.msg.Control = &c.oob[0]
	c.msg.SetControllen(len(c.oob))
	r, _, e := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.msg)), 0)
	oobn = int(c.msg.Controllen)
	c.iov.Base = nil // do not keep the caller's buffer alive
	if e != 0 {
		return 0, 0, e
	}
	return int(r), oobn, nil
}

// Arrival is the trace offset at which the data of the latest read
// arrived; false before the first read.
func (c *Conn) Arrival() (time.Duration, bool) {
	v := c.last.Load()
	return time.Duration(v - 1), v != 0
}

// receiveStamp finds SCM_TIMESTAMPNS in recvmsg's control data and returns
// it in Unix nanoseconds. It walks the control messages in place (the
// x/sys parser allocates a slice per call; this runs once per read).
func receiveStamp(oob []byte) (int64, bool) {
	hdr := unix.CmsgLen(0)
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return 0, false
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l-hdr >= 16 {
			d := oob[hdr:l]
			sec := int64(binary.NativeEndian.Uint64(d[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(d[8:16]))
			return sec*1e9 + nsec, true
		}
		next := unix.CmsgSpace(l - hdr)
		if next > len(oob) {
			return 0, false
		}
		oob = oob[next:]
	}
	return 0, false
}
