package httpserve

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func get(t *testing.T, url string) (string, error) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestServesUntilClose(t *testing.T) {
	s, err := Start(context.Background(), "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hi") }))
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(t, "http://"+s.Addr()+"/"); err != nil || body != "hi" {
		t.Fatalf("GET: %q, %v", body, err)
	}
	// The address is taken while it serves.
	if _, err := Start(context.Background(), s.Addr(), http.NotFoundHandler()); err == nil {
		t.Fatalf("a second server on %s started", s.Addr())
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := get(t, "http://"+s.Addr()+"/"); err == nil {
		t.Fatal("still serving after Close")
	}
}

func TestStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, "127.0.0.1:0", http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-s.done // the owner goroutine ends once ctx is done, without Close
	if _, err := get(t, "http://"+s.Addr()+"/"); err == nil {
		t.Fatal("still serving after its context ended")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after the context ended: %v", err)
	}
}

// TestCloseDoesNotWaitForFreshConnections: a connection that never sent a
// request (an HTTP client's spare dial) is closed when shutting down
// starts, so Close does not sit out its grace for it (net/http's Shutdown
// counts such a connection as busy for 5 s).
func TestCloseDoesNotWaitForFreshConnections(t *testing.T) {
	s, err := Start(context.Background(), "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hi") }))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// One listener accepts in order: once a later connection's request is
	// answered, the fresh one has been accepted and tracked.
	if body, err := get(t, "http://"+s.Addr()+"/"); err != nil || body != "hi" {
		t.Fatalf("GET: %q, %v", body, err)
	}
	t0 := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(t0); took >= shutdownGrace {
		t.Fatalf("Close took %v: it waited out its %v grace for a connection that sent no request", took, shutdownGrace)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the fresh connection is still open after Close")
	}
}
