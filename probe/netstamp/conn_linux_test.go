package netstamp

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/treni-top/treni-top/trace"
)

// dialStamped connects a Conn to a fresh loopback listener and
// returns it with the server's end.
func dialStamped(t *testing.T, clock trace.Clock) (*Conn, net.Conn) {
	t.Helper()
	if k := KeepOn(); k != nil {
		t.Cleanup(func() { k.Close() })
	}
	return dialStampedNoKeeper(t, clock)
}

// dialStampedNoKeeper is dialStamped without a keeper of its own.
func dialStampedNoKeeper(t *testing.T, clock trace.Clock) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := (&Dialer{Clock: clock}).DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	sc, ok := c.(*Conn)
	if !ok {
		t.Fatalf("the stamp dialer returned %T: receive timestamps were refused", c)
	}
	// The kernel switches stamping on through deferred work: exchange
	// bytes until one arrives stamped (see keepStampsOn).
	buf := make([]byte, 8)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := srv.Write([]byte("w")); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Read(buf); err != nil {
			t.Fatal(err)
		}
		if _, ok := receiveStamp(sc.oob[:sc.oobn]); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no read carried a receive stamp within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	sc.last.Store(0)
	return sc, srv
}

// TestConnTimesArrivalNotRead: data that waits in the socket before
// it is read is timed when it arrived. Timing the read instead (what the
// client did before) would be late by the whole wait.
func TestConnTimesArrivalNotRead(t *testing.T) {
	clock := trace.NewClock()
	c, srv := dialStamped(t, clock)
	if _, ok := c.Arrival(); ok {
		t.Fatalf("a connection that has read nothing reports an arrival")
	}
	const wait = 100 * time.Millisecond
	buf := make([]byte, 64)
	var prev time.Duration
	for i := range 3 {
		before := clock.Now()
		if _, err := srv.Write([]byte("data: x\n\n")); err != nil {
			t.Fatal(err)
		}
		after := clock.Now()
		time.Sleep(wait)
		readAt := clock.Now()
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			t.Fatalf("read %d: %d bytes, %v", i, n, err)
		}
		at, ok := c.Arrival()
		if !ok {
			t.Fatalf("read %d: no arrival recorded", i)
		}
		// The stamp converts through the wall clock over a short age;
		// allow a little for that. After the write: loopback normally
		// delivers inside the write call, but on a loaded machine the
		// kernel may defer the receive to ksoftirqd, so the upper bound is
		// a quarter of the wait — still three quarters of it before the
		// read, which is what tells arrival from read time.
		const slack = 2 * time.Millisecond
		if at < before-slack || at > after+wait/4 {
			t.Errorf("read %d: arrival at %v, want between the write's start %v and end %v (read at %v)", i, at, before, after, readAt)
		}
		if readAt-at < wait/2 {
			t.Errorf("read %d: arrival %v is the read's time (%v), not the packet's", i, at, readAt)
		}
		if i > 0 && at <= prev {
			t.Errorf("read %d: arrival %v not after the previous %v", i, at, prev)
		}
		prev = at
	}
	srv.Close()
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("read after the peer closed: %d, %v; want 0, EOF", n, err)
	}
}

// TestConnReadAllocatesNothing: the read runs once per token.
func TestConnReadAllocatesNothing(t *testing.T) {
	c, srv := dialStamped(t, trace.NewClock())
	if _, err := srv.Write([]byte(strings.Repeat("x", 4096))); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Conn.Read allocates %.1f times per call", allocs)
	}
}

// cmsg builds one control message as the kernel lays it out.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := unix.Cmsghdr{Level: level, Type: typ}
	h.SetLen(unix.CmsgLen(len(data)))
	binary.NativeEndian.PutUint64(b[0:8], uint64(h.Len))
	binary.NativeEndian.PutUint32(b[8:12], uint32(level))
	binary.NativeEndian.PutUint32(b[12:16], uint32(typ))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

func timespec(sec, nsec int64) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint64(b[0:8], uint64(sec))
	binary.NativeEndian.PutUint64(b[8:16], uint64(nsec))
	return b
}

func TestReceiveStamp(t *testing.T) {
	if unix.SizeofCmsghdr != 16 {
		t.Skip("the test lays control messages out for 64-bit Linux")
	}
	stamp := cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(1700000000, 123456789))
	other := cmsg(unix.SOL_IP, unix.IP_TOS, []byte{1, 2, 3, 4})
	for _, c := range []struct {
		name string
		oob  []byte
		want int64
		ok   bool
	}{
		{"stamp", stamp, 1700000000123456789, true},
		{"after another message", append(append([]byte{}, other...), stamp...), 1700000000123456789, true},
		{"none", nil, 0, false},
		{"another only", other, 0, false},
		{"cut short", stamp[:len(stamp)-4], 0, false},
		{"header only", stamp[:unix.CmsgLen(0)], 0, false},
		{"length past the end", func() []byte { b := append([]byte{}, stamp...); b[0] = 0xff; return b }(), 0, false},
		{"length below a header", func() []byte { b := append([]byte{}, stamp...); b[0] = 3; return b }(), 0, false},
		{"timespec too short", cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, []byte{1, 2, 3, 4, 5, 6, 7, 8}), 0, false},
	} {
		got, ok := receiveStamp(c.oob)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: receiveStamp = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// FuzzReceiveStamp: control data is never trusted to be well formed.
func FuzzReceiveStamp(f *testing.F) {
	f.Add(cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(1, 2)))
	f.Add(append(cmsg(unix.SOL_IP, unix.IP_TOS, []byte{1}), cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, timespec(3, 4))...))
	f.Add([]byte{})
	f.Add(make([]byte, 15))
	f.Fuzz(func(t *testing.T, oob []byte) {
		// The walk reads unaligned headers through a pointer: give it the
		// alignment the kernel's buffer has.
		b := make([]byte, len(oob), len(oob)+8)
		copy(b, oob)
		receiveStamp(b)
	})
}

// fakeStamper is a connection whose every read arrived at one instant.
type fakeStamper struct{ at time.Duration }

func (f fakeStamper) Arrival() (time.Duration, bool) { return f.at, true }

// TestTracker: without a connection, or with one that has no stamp, the
// tracker answers now; with a stamped one, the stamp. A connection that is
// not a Stamper (TLS) is ignored.
func TestTracker(t *testing.T) {
	clock := trace.NewClock()
	var tr Tracker
	isNow := func(what string) {
		t.Helper()
		before := clock.Now()
		at := tr.Arrived(clock)
		if after := clock.Now(); at < before || at > after {
			t.Errorf("%s: Arrived = %v, want now (between %v and %v)", what, at, before, after)
		}
	}
	isNow("no connection")
	var firstByte time.Duration
	ct := tr.Trace(clock, func(at time.Duration) { firstByte = at })
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	ct.GotConn(httptrace.GotConnInfo{Conn: client}) // not a Stamper
	isNow("plain connection")
	tr.Track(fakeStamper{at: 42 * time.Second})
	if at := tr.Arrived(clock); at != 42*time.Second {
		t.Errorf("stamped connection: Arrived = %v, want 42s", at)
	}
	if d := tr.Since(clock, 40*time.Second); d != 2*time.Second {
		t.Errorf("Since(40s) = %v, want 2s", d)
	}
	if d := tr.Since(clock, 42*time.Second); d != 1 {
		t.Errorf("Since(42s) = %v, want 1ns (zero means not seen)", d)
	}
	ct.GotFirstResponseByte()
	if firstByte != 42*time.Second {
		t.Errorf("first byte at %v, want the stamp 42s", firstByte)
	}
}
