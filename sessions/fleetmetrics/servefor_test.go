package fleetmetrics

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeFor: the metrics are served at the announced URL until the
// context ends, then the address is released; a busy address is an error.
func TestServeFor(t *testing.T) {
	m, err := FromFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	announce := &syncBuffer{lines: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- ServeFor(ctx, "127.0.0.1:0", m, 0, announce) }()
	url := strings.TrimSpace(strings.TrimPrefix(<-announce.lines, "treni-top: serving "))
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "treni_cold_start_seconds") {
		t.Errorf("%s lacks the cold start:\n%s", url, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeFor after the context ended: %v", err)
	}
	if _, err := http.Get(url); err == nil {
		t.Error("still serving after ServeFor returned")
	}

	// A period ends it as well.
	if err := ServeFor(context.Background(), "127.0.0.1:0", m, time.Millisecond, io.Discard); err != nil {
		t.Errorf("ServeFor for 1ms: %v", err)
	}
	// A busy address is refused before anything is announced.
	busy, err := Serve(context.Background(), "127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var out bytes.Buffer
	if err := ServeFor(context.Background(), busy.Addr(), m, 0, &out); err == nil || out.Len() != 0 {
		t.Errorf("a busy address: %v, announced %q", err, out.String())
	}
}

// syncBuffer hands each write to the test as a line.
type syncBuffer struct{ lines chan string }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.lines <- string(p)
	return len(p), nil
}
