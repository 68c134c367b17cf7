package live

import (
	"context"
	"os"
	"syscall"
	"testing"
)

// TestNotifySignals: a caught signal ends the context with the signal as
// its cause, and the exit status is 128 + its number; a context cancelled
// otherwise names no signal.
func TestNotifySignals(t *testing.T) {
	ctx, stop := NotifySignals(context.Background(), syscall.SIGUSR1)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	sig, ok := SignalOf(ctx)
	if !ok || sig.Signal != syscall.SIGUSR1 || sig.ExitCode() != 128+int(syscall.SIGUSR1) {
		t.Errorf("SignalOf = %v, %v (exit %d)", sig, ok, sig.ExitCode())
	}
	if sig.Error() != "user defined signal 1 signal received" {
		t.Errorf("message %q", sig.Error())
	}

	plain, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := SignalOf(plain); ok {
		t.Error("a plain cancellation was taken for a signal")
	}
}
