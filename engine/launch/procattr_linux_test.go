package launch

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// helperEnv makes the test binary act as a treni-top that launched a target
// and then dies without stopping it.
const helperEnv = "TRENI_LAUNCH_DEATH_HELPER"

// TestHelperLauncher is not a test: run by TestTargetDiesWithLauncher in a
// child process, it launches `sleep 60`, prints its pid and waits to be
// killed.
func TestHelperLauncher(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestTargetDiesWithLauncher")
	}
	p, err := Start(context.Background(), Spec{Command: []string{"sleep", "60"}, URL: "http://127.0.0.1:1"}, &collector{}, trace.NewClock(), 0)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("target", p.PID())
	time.Sleep(time.Minute)
	os.Exit(1)
}

// TestTargetDiesWithLauncher: a treni-top killed with SIGKILL (no chance to
// stop its target) must not leave the target running.
func TestTargetDiesWithLauncher(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLauncher$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	target := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "target "); ok {
			target, _ = strconv.Atoi(v)
			break
		}
		if strings.HasPrefix(sc.Text(), "error") {
			t.Fatalf("helper: %s", sc.Text())
		}
	}
	if target <= 0 {
		t.Fatalf("the helper printed no target pid")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if !alive(target, 0) {
		t.Fatalf("target %d is not running before the launcher dies", target)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for alive(target, 0) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(target, syscall.SIGKILL)
			t.Fatalf("target %d still running 5 s after its launcher was killed", target)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
