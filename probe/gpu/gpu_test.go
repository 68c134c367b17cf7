package gpu

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/treni-top/treni-top/trace"
)

// TestOpen checks the no-driver path where there is no driver (here and in
// CI) and a real reading where there is one.
func TestOpen(t *testing.T) {
	s, err := Open(func() []int { return []int{os.Getpid()} })
	if err != nil {
		if !errors.Is(err, ErrNoGPU) {
			t.Fatalf("Open without a usable GPU returned %v, want an error wrapping ErrNoGPU", err)
		}
		if s != nil {
			t.Fatal("Open returned a sampler with an error")
		}
		msg := StatusOf(err)
		if !strings.Contains(msg, "no NVIDIA GPU") || !strings.Contains(msg, "driver") {
			t.Fatalf("status %q does not tell the user what is missing", msg)
		}
		// A second Open must fail the same way (no state left behind).
		if _, err2 := Open(nil); !errors.Is(err2, ErrNoGPU) {
			t.Fatalf("second Open: %v", err2)
		}
		return
	}
	defer s.Close()
	if s.Status() == "" {
		t.Fatal("empty status")
	}
	samples, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) == 0 || samples[0].Source != trace.GPUSource(0) {
		t.Fatalf("samples = %+v", samples)
	}
	if samples[0].Values[trace.MetricGPUMemTotal] <= 0 {
		t.Fatalf("gpu0 reports no memory: %+v", samples[0].Values)
	}
}

func TestInventory(t *testing.T) {
	devs, err := Inventory()
	if err != nil {
		if !errors.Is(err, ErrNoGPU) {
			t.Fatalf("Inventory: %v, want ErrNoGPU", err)
		}
		return
	}
	if len(devs) == 0 || devs[0].Name == "" || devs[0].MemoryTotal == 0 {
		t.Fatalf("inventory = %+v", devs)
	}
	t.Log(devs[0].String())
}

func TestStatusOf(t *testing.T) {
	if StatusOf(nil) != "ok" {
		t.Fatal("StatusOf(nil)")
	}
	e := &noGPU{reason: "libnvidia-ml.so.1 not found"}
	if !errors.Is(e, ErrNoGPU) || !strings.Contains(StatusOf(e), "libnvidia-ml.so.1") {
		t.Fatalf("StatusOf = %q", StatusOf(e))
	}
}

// BenchmarkGPUSampleNoDriver is what the GPU probe costs on a machine
// without a driver: one failed Open per session (no sampler runs after it).
func BenchmarkGPUSampleNoDriver(b *testing.B) {
	for b.Loop() {
		s, err := Open(nil)
		if err == nil {
			s.Close()
			b.Skip("a GPU is present; this benchmark measures the no-driver path")
		}
	}
}

// BenchmarkGPUSample is one reading of every device, where there are any.
func BenchmarkGPUSample(b *testing.B) {
	s, err := Open(func() []int { return []int{os.Getpid()} })
	if err != nil {
		b.Skip(err)
	}
	defer s.Close()
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
