// Package httpserve runs an http.Handler on an address for as long as a
// context lives: the listener lifecycle that the profiler's own endpoints
// share (the OTLP receiver in probe/otlpin, the fleet /metrics endpoint in
// sessions/fleetmetrics), and ParseHTTPURL, the check of an http(s) URL
// with a host that bench, attach and the OTLP exporter share. It is a
// leaf: it imports nothing of treni-top.
package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// shutdownGrace is how long Close lets requests in flight finish before it
// closes their connections.
const shutdownGrace = 2 * time.Second

// Server is a handler being served on a listener.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed when the serving goroutines have ended
	once sync.Once
	err  error
}

// Start listens on addr and serves h until ctx is done or Close is called.
// A failed listen is returned unwrapped: the caller knows which flag chose
// the address and says so in its error.
func Start(ctx context.Context, addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan struct{})}
	CloseFreshOnShutdown(s.srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	// The owner of the serving goroutine: it shuts the server down when
	// ctx ends and returns once Serve has.
	go func() {
		defer close(s.done)
		select {
		case <-ctx.Done():
			s.shutdown()
		case <-served:
		}
		<-served
	}()
	return s, nil
}

// Addr is the address the server listens on (the port chosen, with :0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

func (s *Server) shutdown() {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
		}
	})
}

// Close stops listening, lets requests in flight finish (up to two
// seconds), waits for the serving goroutine and returns the error that
// ended serving, if any. It may be called more than once.
func (s *Server) Close() error {
	s.shutdown()
	<-s.done
	return s.err
}

// CloseFreshOnShutdown has srv's Shutdown close, at once, the connections
// that have not yet sent a request (http.StateNew) instead of waiting for
// them: Shutdown treats such a connection as busy for its first 5 s, and
// an HTTP client's spare dial, left idle in its pool, is one. It installs
// srv's ConnState hook (srv must not have one) and a RegisterOnShutdown
// function, which runs once the listeners are closed.
func CloseFreshOnShutdown(srv *http.Server) {
	var f freshConns
	srv.ConnState = f.track
	srv.RegisterOnShutdown(f.closeAll)
}

// freshConns tracks a server's connections that have not yet sent a
// request (CloseFreshOnShutdown).
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is an http.Server ConnState hook.
func (f *freshConns) track(c net.Conn, st http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st == http.StateNew {
		if f.conns == nil {
			f.conns = map[net.Conn]struct{}{}
		}
		f.conns[c] = struct{}{}
		return
	}
	delete(f.conns, c)
}

// closeAll closes every connection still waiting for its first request.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
		delete(f.conns, c)
	}
}
