package launch

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Stop stops the whole process tree: SIGINT to the process group, then,
// for whatever is still running after grace, SIGKILL to the group and to
// every tree member seen (also those that left the group). The exit is
// reported with Expected=true. It waits until everything is gone and the
// watchers have returned. Stopping an attached server only stops watching
// it.
func (p *Process) Stop(grace time.Duration) {
	p.stop(grace)
	<-p.done
}

func (p *Process) stop(grace time.Duration) {
	p.stopOnce.Do(func() {
		p.stopping.Store(true)
		if p.attached {
			p.cancelBG()
			return
		}
		p.PIDs() // remember the tree before its members are reparented
		signalGroup(p.pid, syscall.SIGINT)
		p.reap(grace)
		p.markReaped()
	})
}

// markReaped records that the tree is gone (or was killed).
func (p *Process) markReaped() { p.reapedOnce.Do(func() { close(p.reaped) }) }

// reap waits up to grace for the group and every remembered member to
// exit, then kills what is left.
func (p *Process) reap(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if len(p.PIDs()) == 0 && !p.anyKnownAlive() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.killAll()
	// SIGKILL is delivered asynchronously: wait until the kernel has torn
	// the processes down, so that "stopped" means gone.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && p.anyKnownAlive(); {
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *Process) anyKnownAlive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid, start := range p.known {
		if alive(pid, start) {
			return true
		}
	}
	return false
}

// killAll SIGKILLs the group and every remembered tree member.
func (p *Process) killAll() {
	p.PIDs()
	signalGroup(p.pid, syscall.SIGKILL)
	p.mu.Lock()
	known := make(map[int]uint64, len(p.known))
	for k, v := range p.known {
		known[k] = v
	}
	p.mu.Unlock()
	killKnown(known, syscall.SIGKILL)
}

// waitExit is the goroutine that reaps the main process and reports its
// exit.
func (p *Process) waitExit(outR, errR *os.File) {
	defer p.bg.Done()
	err := p.cmd.Wait()
	at := p.clock.Now()
	expected := p.stopping.Load()
	if !expected {
		// A crash or a voluntary exit: children it left behind are
		// orphans of nobody's; stop them (they still get a grace period
		// to flush their own output).
		p.PIDs()
		signalGroup(p.pid, syscall.SIGINT)
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			p.reap(p.grace())
			p.markReaped()
		}()
	}
	// Let the readers take what the target wrote before it died, so the
	// crash report's tail is complete.
	drained := make(chan struct{})
	go func() {
		p.readers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainAfterExit):
	}
	ex := Exit{At: at, Expected: expected}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.Code, ex.Signal = -1, ws.Signal().String()
			if s := unix2name(ws.Signal()); s != "" {
				ex.Signal = s
			}
		} else {
			ex.Code = ee.ExitCode()
		}
	default:
		ex.Code = -1
		ex.Signal = err.Error()
	}
	p.mu.Lock()
	spans := p.parser.Flush(at)
	tail := append([]string(nil), p.tail...)
	p.exit = &ex
	p.mu.Unlock()
	for i := range spans {
		sp := spans[i]
		p.emit(trace.Event{At: at, Kind: trace.KindStage, Stage: &sp})
	}
	p.emit(trace.Event{At: at, Kind: trace.KindProcess, Process: &trace.Process{
		Action: trace.ProcessExit, PID: p.pid, ServerKind: p.Kind(),
		ExitCode: ex.Code, Signal: ex.Signal, Expected: expected,
	}})
	if !expected {
		p.emit(trace.Event{At: at, Kind: trace.KindMarker, Marker: &trace.Marker{
			Name: trace.MarkerTargetCrashed,
			Attrs: trace.Attrs{
				"exit_code": ex.Code, "signal": ex.Signal, "pid": p.pid,
				"log_tail": strings.Join(tail, "\n"),
			},
		}})
	}
	close(p.exited)
	p.cancelBG()
	// The readers end when every writer is gone. A process that escaped
	// the tree may hold the pipes open forever: once the tree has been
	// reaped (by Stop, or after this unexpected exit), the pipes get a last
	// moment to drain and are then closed, which ends the readers.
	go func() {
		select {
		case <-drained:
			return
		case <-p.reaped:
		}
		select {
		case <-drained:
		case <-time.After(drainAfterExit):
			outR.Close()
			errR.Close()
		}
	}()
	<-drained
	outR.Close()
	errR.Close()
}

// unix2name spells common signals the way people write them.
func unix2name(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	}
	return ""
}
