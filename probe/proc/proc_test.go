package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// The test binary doubles as the child processes: TRENI_PROC_HELPER picks a
// behaviour, so the tests need nothing installed but sh and sleep.
func TestMain(m *testing.M) {
	switch mode := os.Getenv("TRENI_PROC_HELPER"); {
	case mode == "":
		os.Exit(m.Run())
	case strings.HasPrefix(mode, "alloc:"):
		mib, _ := strconv.Atoi(strings.TrimPrefix(mode, "alloc:"))
		b := make([]byte, mib<<20)
		for i := range b { // touch every page so it is resident
			if i%4096 == 0 {
				b[i] = 1
			}
		}
		fmt.Println("ready")
		time.Sleep(time.Minute)
		fmt.Fprint(os.Stderr, b[0])
		os.Exit(0)
	case mode == "spin":
		fmt.Println("ready")
		end := time.Now().Add(time.Minute)
		for x := 0; time.Now().Before(end); x++ {
		}
		os.Exit(0)
	}
	os.Exit(2)
}

// start runs cmd, waits for its "ready" line when wantReady, and kills its
// process group at the end of the test.
func start(t *testing.T, cmd *exec.Cmd, wantReady bool) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	if wantReady {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			t.Fatalf("helper did not get ready: %q %v", line, err)
		}
	}
}

func helper(t *testing.T, mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TRENI_PROC_HELPER="+mode)
	return cmd
}

func values(t *testing.T, s *Sampler) map[string]float64 {
	t.Helper()
	got, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Source != trace.SourceProcess {
		t.Fatalf("samples = %+v", got)
	}
	return got[0].Values
}

func TestTreeFollowsChildrenSpawnedLater(t *testing.T) {
	// sh starts one sleep now and two more later, like a server that
	// spawns its runner after it is up; the grandchild comes from a nested
	// sh.
	cmd := exec.Command("sh", "-c", "sleep 60 & sleep 0.3; sh -c 'sleep 60 & wait' & sleep 60 & wait")
	start(t, cmd, false)
	s := New(cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	var v map[string]float64
	for {
		v = values(t, s)
		if v[trace.MetricProcs] >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// sh, sleep, sh (nested), its sleep, sleep.
	if v[trace.MetricProcs] != 5 {
		t.Fatalf("procs = %v, want 5 (pids %v)", v[trace.MetricProcs], s.PIDs())
	}
	pids := s.PIDs()
	if pids[0] != cmd.Process.Pid || !slices.IsSorted(pids[1:]) {
		t.Fatalf("PIDs = %v: want the root first, then ascending", pids)
	}
	if v[trace.MetricRSS] <= 0 {
		t.Fatalf("rss = %v", v[trace.MetricRSS])
	}
	// The scan fallback must agree with the children-file walk.
	scanned, err := scanTree(context.Background(), cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(scanned, pids) {
		t.Fatalf("scan %v != children walk %v", scanned, pids)
	}
}

func TestRSSOfAllocatingChild(t *testing.T) {
	small := helper(t, "alloc:1")
	start(t, small, true)
	big := helper(t, "alloc:200")
	start(t, big, true)
	a := values(t, New(small.Process.Pid))[trace.MetricRSS]
	b := values(t, New(big.Process.Pid))[trace.MetricRSS]
	// The 200 MiB process holds at least ~190 MiB more than the 1 MiB one.
	if b-a < 190<<20 {
		t.Fatalf("rss: 1 MiB child %.0f MiB, 200 MiB child %.0f MiB", a/(1<<20), b/(1<<20))
	}
}

// TestCPUPercentOfSpinningChild checks cpu_pct is the tree's CPU time over
// the wall time between two readings. How much CPU the child gets depends
// on the host's load, so the test does not assume a share: it reads until
// an interval in which the child was charged CPU time, then checks the
// reported percentage against that interval's CPU seconds divided by wall
// bounds the test measured itself around the two readings.
func TestCPUPercentOfSpinningChild(t *testing.T) {
	spin := helper(t, "spin")
	start(t, spin, true)
	s := New(spin.Process.Pid)
	outerStart := time.Now()
	first := values(t, s)
	innerStart := time.Now()
	if _, ok := first[trace.MetricCPU]; ok {
		t.Fatal("cpu_pct on the first reading: there is no previous reading to diff against")
	}
	deadline := time.Now().Add(time.Minute)
	for {
		prevCPU := s.CPUSeconds()
		time.Sleep(100 * time.Millisecond)
		innerEnd := time.Now()
		v := values(t, s)
		outerEnd := time.Now()
		dCPU := s.CPUSeconds() - prevCPU
		c, ok := v[trace.MetricCPU]
		if !ok {
			t.Fatal("no cpu_pct on the second reading")
		}
		if dCPU > 0 {
			// The sampler's interval lies between the inner and the outer
			// bracket; 1e-9 absorbs float rounding.
			lo := 100 * dCPU / outerEnd.Sub(outerStart).Seconds()
			hi := 100 * dCPU / innerEnd.Sub(innerStart).Seconds()
			if c < lo*(1-1e-9) || c > hi*(1+1e-9) {
				t.Fatalf("cpu_pct = %.2f for %.3f CPU s in the interval, want within [%.2f, %.2f]", c, dCPU, lo, hi)
			}
			if c <= 0 {
				t.Fatalf("cpu_pct = %.2f with %.3f CPU s charged", c, dCPU)
			}
			return
		}
		if c != 0 {
			t.Fatalf("cpu_pct = %.2f in an interval with no CPU time charged", c)
		}
		if time.Now().After(deadline) {
			t.Fatal("the spinning child was charged no CPU time in a minute")
		}
		outerStart, innerStart = innerEnd, outerEnd
	}
}

func TestReadBytesAndIO(t *testing.T) {
	s := New(os.Getpid())
	v := values(t, s)
	if !s.IOAvailable() {
		t.Skip("/proc/self/io unreadable here")
	}
	if _, ok := v[trace.MetricReadBytes]; !ok {
		t.Fatal("read_bytes missing although /proc/self/io is readable")
	}
}

func TestExitedRoot(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := Tree(context.Background(), cmd.Process.Pid); !errors.Is(err, ErrExited) {
		t.Fatalf("Tree of an exited pid: %v, want ErrExited", err)
	}
	s := New(cmd.Process.Pid)
	v := values(t, s)
	if v[trace.MetricProcs] != 0 || v[trace.MetricRSS] != 0 {
		t.Fatalf("exited root: %v", v)
	}
	if s.PIDs() != nil {
		t.Fatalf("PIDs of an exited root = %v", s.PIDs())
	}
}

// BenchmarkProcSample reads a tree of four processes (sh and three sleeps),
// about what an Ollama server with its runner looks like.
func BenchmarkProcSample(b *testing.B) {
	cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60 & sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	s := New(cmd.Process.Pid)
	for i := 0; i < 500; i++ {
		if pids, _ := Tree(context.Background(), cmd.Process.Pid); len(pids) == 4 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProcScanTree is the fallback for kernels without children files:
// every process on the host is read.
func BenchmarkProcScanTree(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		if _, err := scanTree(ctx, os.Getpid()); err != nil {
			b.Fatal(err)
		}
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestDescriptorsFollowTheTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60 & wait")
	start(t, cmd, false)
	base := openFDs(t)
	s := New(cmd.Process.Pid)
	var v map[string]float64
	for i := 0; i < 500; i++ {
		if v = values(t, s); v[trace.MetricProcs] == 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v[trace.MetricProcs] != 3 {
		t.Fatalf("procs = %v", v[trace.MetricProcs])
	}
	if n := openFDs(t) - base; n < 3 || n > 9 {
		t.Fatalf("%d descriptors open for a tree of 3, want 3 to 9", n)
	}
	// Kill one child: its descriptors are closed on the next reading and
	// the tree shrinks.
	pids := s.PIDs()
	syscall.Kill(pids[1], syscall.SIGKILL)
	for i := 0; i < 500; i++ {
		if v = values(t, s); v[trace.MetricProcs] == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v[trace.MetricProcs] != 2 {
		t.Fatalf("procs after a child died = %v", v[trace.MetricProcs])
	}
	if _, ok := s.fds.m[pids[1]]; ok {
		t.Fatal("descriptors of a dead child kept")
	}
	s.Close()
	if n := openFDs(t) - base; n != 0 {
		t.Fatalf("%d descriptors left open after Close", n)
	}
}

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses must not shift fields.
	line := "1234 (my (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 123456789 512 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.cpu != 3.0 || st.rss != 512*uint64(os.Getpagesize()) {
		t.Fatalf("parseStat = %+v", st)
	}
	for _, bad := range []string{"", "1234 (x", "1 (x) S 1 2"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Fatalf("parseStat(%q) accepted", bad)
		}
	}
}
