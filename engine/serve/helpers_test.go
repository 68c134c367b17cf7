package serve

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// buildBinary compiles treni-top into a temp dir.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "treni-top")
	build := exec.Command("go", "build", "-o", bin, "github.com/treni-top/treni-top/cmd/treni-top")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// served is a running `treni-top serve` child.
type served struct {
	cmd    *exec.Cmd
	base   string // http://host:port
	stages []trace.StageLine
	log    strings.Builder
	lines  chan string
	exited chan error
}

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// startServe launches bin serve args… and waits for its listening line,
// collecting the stage lines printed before it.
func startServe(t testing.TB, bin string, env []string, args ...string) *served {
	t.Helper()
	s := &served{cmd: exec.Command(bin, append([]string{"serve"}, args...)...), lines: make(chan string, 256), exited: make(chan error, 1)}
	s.cmd.Env = append(os.Environ(), env...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		s.exited <- s.cmd.Wait()
	}()
	t.Cleanup(func() { _ = s.cmd.Process.Kill() })
	timeout := time.After(3 * time.Minute)
	for s.base == "" {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("serve exited before listening:\n%s", s.log.String())
			}
			s.log.WriteString(line + "\n")
			if m := listenRE.FindStringSubmatch(line); m != nil {
				s.base = m[1]
				continue
			}
			l, err := trace.ParseStageLine(line)
			if errors.Is(err, trace.ErrNotStageLine) {
				continue
			}
			if err != nil {
				t.Fatalf("bad stage line %q: %v", line, err)
			}
			s.stages = append(s.stages, l)
		case <-timeout:
			t.Fatalf("no listening line after 3 minutes:\n%s", s.log.String())
		}
	}
	// Keep draining stderr so the child never blocks on a full pipe.
	go func() {
		for range s.lines {
		}
	}()
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (s *served) stop(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.exited:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit 30 s after SIGTERM")
	}
}

// stage returns the stage line of a stage, if printed.
func (s *served) stage(name trace.Stage) (trace.StageLine, bool) {
	for _, l := range s.stages {
		if l.Stage == name {
			return l, true
		}
	}
	return trace.StageLine{}, false
}

// coldStart is process start → HTTP ready from the stage lines.
func (s *served) coldStart() time.Duration {
	ps, ok1 := s.stage(trace.StageProcessStart)
	hr, ok2 := s.stage(trace.StageHTTPReady)
	if !ok1 || !ok2 {
		return 0
	}
	return time.Duration(hr.EndNS - ps.StartNS)
}
