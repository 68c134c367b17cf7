package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connLimit caps the server's open connections (Options.MaxConnections):
// each connection holds a slot from accept to close, and one arriving when
// none is free is answered 503 and closed at once, instead of taking a
// file descriptor for as long as its client likes (3,000 clients stalled
// in their bodies held 3,010 descriptors before BodyTimeout existed).
type connLimit struct {
	slots chan struct{}
	// answering bounds the refusals being answered at a time; in a flood
	// beyond it a refused connection is closed without an answer.
	answering chan struct{}
	refused   atomic.Uint64
	resp      []byte // the whole 503 response
}

// refuseWait bounds a refused connection's life: reading what its client
// sent of the request before answering (closing a socket with unread
// bytes resets it, and the client may lose the answer), then waiting for
// the client to close after reading it.
const refuseWait = time.Second

// maxAnswering is how many refused connections are answered at once.
const maxAnswering = 64

func newConnLimit(n int) *connLimit {
	body, _ := json.Marshal(map[string]*apiError{"error": {
		Message: fmt.Sprintf("the server has %d connections open, its limit (--max-connections); retry in a moment", n),
		Type:    "server_error", Code: strp("too_many_connections")}})
	body = append(body, '\n')
	resp := fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n", len(body))
	return &connLimit{slots: make(chan struct{}, n), answering: make(chan struct{}, maxAnswering), resp: append(resp, body...)}
}

// open is the connections holding a slot.
func (l *connLimit) open() int { return len(l.slots) }

// Listener returns ln with the server's connection cap applied: serve
// from it. Closing it waits for the refusals still being answered (at
// most refuseWait each).
func (srv *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, lim: srv.conns}
}

type limitListener struct {
	net.Listener
	lim *connLimit
	wg  sync.WaitGroup // the refusals being answered
}

// Accept returns the next connection that gets a slot, answering the
// others 503.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.lim.slots <- struct{}{}:
			return &limitedConn{Conn: c, lim: l.lim}, nil
		default:
		}
		l.lim.refused.Add(1)
		select {
		case l.lim.answering <- struct{}{}:
			l.wg.Add(1)
			go l.refuse(c)
		default:
			_ = c.Close()
		}
	}
}

// refuse answers c 503 and closes it, within 2×refuseWait.
func (l *limitListener) refuse(c net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.lim.answering }()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseWait))
	readHead(c)
	if _, err := c.Write(l.lim.resp); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(refuseWait))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

// readHead reads c until the end of a request head ("\r\n\r\n"), 8 KiB,
// an error or the deadline, whichever comes first.
func readHead(c net.Conn) {
	buf := make([]byte, 8<<10)
	n := 0
	for n < len(buf) {
		k, err := c.Read(buf[n:])
		n += k
		for i := max(0, n-k-3); i+4 <= n; i++ {
			if string(buf[i:i+4]) == "\r\n\r\n" {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Close closes the listener and waits for the refusals being answered.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	lim  *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.lim.slots })
	return err
}

// CloseWrite passes through to the connection, for net/http's graceful
// close of a connection whose request body it did not read.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
