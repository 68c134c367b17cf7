package launch

import "syscall"

// targetProcAttr puts the target in its own process group (so a terminal's
// ctrl-c reaches treni-top alone, which then stops the target with its
// grace period) and asks the kernel to send it SIGTERM if treni-top dies
// without stopping it (SIGKILL, an OOM kill, a crash): a profiler that
// vanishes must not leave an inference server holding GPU memory.
//
// Pdeathsig fires when the thread that forked exits, not the process; Go
// ends a thread only when a goroutine locked to it returns still locked,
// and the launcher never locks one, so in practice it fires on process
// death.
func targetProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
