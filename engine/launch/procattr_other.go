//go:build !linux

package launch

import "syscall"

// targetProcAttr puts the target in its own process group. Outside Linux
// there is no parent-death signal, so a treni-top killed with SIGKILL leaves
// its target running.
func targetProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
