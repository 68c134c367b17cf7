package probe_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/treni-top/treni-top/probe"
	"github.com/treni-top/treni-top/probe/gpu"
	"github.com/treni-top/treni-top/probe/pagecache"
	"github.com/treni-top/treni-top/probe/proc"
	"github.com/treni-top/treni-top/trace"
)

// costSetup starts a four-process tree and a 1 GB sparse weight file, the
// load the samplers see for a small server, and returns the samplers that
// would run on this machine (the GPU sampler only where there is a GPU).
func costSetup(b *testing.B) []probe.Sampler {
	cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60 & sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	path := filepath.Join(b.TempDir(), "model.safetensors")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		b.Fatal(err)
	}
	f.Close()
	ps := proc.New(cmd.Process.Pid)
	samplers := []probe.Sampler{ps, pagecache.NewSampler(func() []string { return []string{path} })}
	if g, err := gpu.Open(ps.PIDs); err == nil {
		b.Cleanup(func() { g.Close() })
		samplers = append(samplers, g)
	}
	time.Sleep(50 * time.Millisecond) // let sh start its children
	return samplers
}

// BenchmarkAllSamplersTick is one tick of every sampler, one after the
// other: the CPU a 100 ms tick costs (budget: < 1 ms, i.e. < 1 % of a core).
func BenchmarkAllSamplersTick(b *testing.B) {
	samplers := costSetup(b)
	ctx := context.Background()
	for b.Loop() {
		for _, s := range samplers {
			if _, err := s.Sample(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRunnerCPU runs the real runner at the default 100 ms for 3 s per
// iteration and reports the process's CPU time over wall time (getrusage,
// as summed from every thread's schedstat, so the runner's scheduling, event
// building and GC count too) as
// cpu_pct_of_core. Run with -benchtime 1x.
func BenchmarkRunnerCPU(b *testing.B) { runnerCPU(b, costSetup(b)) }

// BenchmarkRunnerCPUIdle is the same runner with one sampler that does
// nothing: the floor (timers, goroutine wake-ups, the Go runtime) that
// BenchmarkRunnerCPU's figure includes.
func BenchmarkRunnerCPUIdle(b *testing.B) { runnerCPU(b, []probe.Sampler{idle{}}) }

type idle struct{}

func (idle) Name() string                                   { return "idle" }
func (idle) Sample(context.Context) ([]trace.Sample, error) { return nil, nil }

// cpuTime is the process's CPU time from every thread's schedstat: exact
// nanoseconds, where getrusage on a tick-accounting kernel samples at the
// timer tick and is off by tens of percent over a few seconds of a mostly
// idle process.
func cpuTime(b *testing.B) time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // thread exited
		}
		var ns int64
		fmt.Sscan(string(raw), &ns)
		sum += time.Duration(ns)
	}
	return sum
}

func runnerCPU(b *testing.B, samplers []probe.Sampler) {
	for b.Loop() {
		before := cpuTime(b)
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		r := probe.NewRunner(trace.SinkFunc(func(trace.Event) {}), trace.NewClock(), probe.DefaultInterval, samplers...)
		r.Run(ctx)
		cancel()
		wall := time.Since(began)
		cpu := cpuTime(b) - before
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu_pct_of_core")
	}
}
