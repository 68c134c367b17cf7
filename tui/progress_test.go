package tui

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

func TestHeadlessProgress(t *testing.T) {
	s := loadFixture(t)
	bus := trace.NewBus()
	sub := bus.Subscribe()
	for _, e := range s.Events {
		bus.Emit(e)
	}
	bus.Close()
	var out bytes.Buffer
	if err := sessions.PrintProgress(context.Background(), &out, sub); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"launched pid 4242 (treni)", "stage cuda_init", "stage decoder_tensor_upload", "2.34 GB/s",
		"healthy (1.82 s after launch)", "request cold_1    TTFT 96.4 ms", "request warm_5",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("headless output lacks %q:\n%s", want, got)
		}
	}
	// Each stage once, although it was published open and then closed.
	if n := strings.Count(got, "stage cuda_init"); n != 1 {
		t.Errorf("cuda_init printed %d times", n)
	}
	if strings.Contains(got, "\x1b[") {
		t.Error("headless output contains escape sequences")
	}
}
