package proc

import (
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"syscall"
)

// fdCache keeps /proc files of the tree's processes open between readings
// and re-reads them with pread at offset 0, which makes the kernel
// regenerate their contents. Opening a /proc path costs a path walk that
// is most of a reading's price in a VM; with the descriptors kept, a
// process costs three system calls per reading instead of nine. A
// descriptor stays bound to its process: once the process is gone, reads
// fail (ESRCH) and the entry is dropped, so a reused PID is never
// misread.
type fdCache struct {
	procfs string
	m      map[int]*pidFDs
}

// pidFDs are one process's open files; -1 means not opened yet, denied
// means opening failed for lack of permission (not retried).
type pidFDs struct {
	stat, io, children int
}

const denied = -2

func newFDCache(procfs string) *fdCache { return &fdCache{procfs: procfs, m: map[int]*pidFDs{}} }

// which file of a process.
type which int

const (
	fileStat which = iota
	fileIO
	fileChildren // the main thread's children
)

func (c *fdCache) path(pid int, w which) string {
	p := c.procfs + "/" + strconv.Itoa(pid)
	switch w {
	case fileIO:
		return p + "/io"
	case fileChildren:
		return p + "/task/" + strconv.Itoa(pid) + "/children"
	}
	return p + "/stat"
}

// read returns the current contents of one of pid's files, in buf.
func (c *fdCache) read(pid int, w which, buf []byte) ([]byte, error) {
	e := c.m[pid]
	if e == nil {
		e = &pidFDs{-1, -1, -1}
		c.m[pid] = e
	}
	fd := &e.stat
	switch w {
	case fileIO:
		fd = &e.io
	case fileChildren:
		fd = &e.children
	}
	if *fd == denied {
		return nil, &fs.PathError{Op: "open", Path: c.path(pid, w), Err: syscall.EACCES}
	}
	if *fd < 0 {
		path := c.path(pid, w)
		n, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			if err == syscall.EACCES || err == syscall.EPERM {
				*fd = denied
			}
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		*fd = n
	}
	b, err := preadAll(*fd, buf)
	if err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			syscall.Close(*fd)
			*fd = denied
		} else {
			c.drop(pid) // gone
		}
		return nil, &fs.PathError{Op: "read", Path: c.path(pid, w), Err: err}
	}
	return b, nil
}

// drop closes pid's files.
func (c *fdCache) drop(pid int) {
	e := c.m[pid]
	if e == nil {
		return
	}
	for _, fd := range []int{e.stat, e.io, e.children} {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
	delete(c.m, pid)
}

// keep drops every process not in pids.
func (c *fdCache) keep(pids []int) {
	for pid := range c.m {
		if !slices.Contains(pids, pid) {
			c.drop(pid)
		}
	}
}

// closeAll closes every file.
func (c *fdCache) closeAll() {
	for pid := range c.m {
		c.drop(pid)
	}
}

// preadAll reads the whole file from offset 0 into buf.
func preadAll(fd int, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(512, cap(buf)))
		}
		n, err := syscall.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf)))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
