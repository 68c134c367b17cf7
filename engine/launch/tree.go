package launch

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// procInfo is what the launcher needs from /proc/PID/stat.
type procInfo struct {
	pid, ppid, pgrp int
	state           byte
	start           uint64 // starttime in clock ticks since boot: tells a reused PID apart
}

// readStat parses /proc/PID/stat. The command name sits in parentheses and
// may itself contain spaces and parentheses, so fields are counted from the
// last ')'.
func readStat(pid int) (procInfo, error) { return readStatIn("/proc", pid) }

// readStatIn is readStat under fs.
func readStatIn(fs procFS, pid int) (procInfo, error) {
	b, err := os.ReadFile(filepath.Join(string(fs), strconv.Itoa(pid), "stat"))
	if err != nil {
		return procInfo{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procInfo{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+2:])
	// After the name: state(3) ppid(4) pgrp(5) … starttime(22).
	if len(f) < 20 {
		return procInfo{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	p := procInfo{pid: pid, state: f[0][0]}
	p.ppid, _ = strconv.Atoi(string(f[1]))
	p.pgrp, _ = strconv.Atoi(string(f[2]))
	p.start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	return p, nil
}

// allProcs lists every live (non-zombie) process.
func allProcs() []procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procInfo, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readStat(pid)
		if err != nil || p.state == 'Z' || p.state == 'X' {
			continue
		}
		out = append(out, p)
	}
	return out
}

// treeOf returns root and all its live descendants, plus every live member
// of process group pgid (a grandchild whose parent died is reparented away
// from the tree but stays in the group). pgid 0 means no group. rootStart,
// when not 0, is root's start time: a reused PID is not our root.
func treeOf(root int, rootStart uint64, pgid int) []procInfo {
	procs := allProcs()
	children := map[int][]procInfo{}
	var out []procInfo
	seen := map[int]bool{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
		if pgid > 0 && p.pgrp == pgid {
			out = append(out, p)
			seen[p.pid] = true
		}
	}
	var walk func(pid int)
	walk = func(pid int) {
		for _, c := range children[pid] {
			if !seen[c.pid] {
				seen[c.pid] = true
				out = append(out, c)
				walk(c.pid)
			}
		}
	}
	for _, p := range procs {
		if p.pid == root && (rootStart == 0 || p.start == rootStart) {
			if !seen[root] {
				seen[root] = true
				out = append(out, p)
			}
			walk(root)
		}
	}
	// Descendants of group members that left the group (setsid) too.
	for _, p := range append([]procInfo(nil), out...) {
		walk(p.pid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// alive reports whether pid still runs as the process that was seen with
// the given start time (a zombie counts as gone: it runs no code and holds
// no memory).
func alive(pid int, start uint64) bool {
	p, err := readStat(pid)
	if err != nil || p.state == 'Z' || p.state == 'X' {
		return false
	}
	return start == 0 || p.start == start
}

// killKnown sends sig to every remembered process that is still the same
// process (same start time), so a PID reused by an unrelated process is
// never signalled.
func killKnown(known map[int]uint64, sig syscall.Signal) {
	for pid, start := range known {
		if alive(pid, start) {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// groupAlive reports whether any live process is in process group pgid.
// While one is, the kernel does not hand pgid out as a new PID, so
// signalling -pgid cannot reach an unrelated group.
func groupAlive(pgid int) bool {
	for _, p := range allProcs() {
		if p.pgrp == pgid {
			return true
		}
	}
	return false
}

// signalGroup signals process group pgid if it still has members.
func signalGroup(pgid int, sig syscall.Signal) {
	if groupAlive(pgid) {
		_ = syscall.Kill(-pgid, sig)
	}
}
