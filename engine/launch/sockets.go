package launch

// Who holds a listening TCP port: the kernel (inet_diag over netlink, or
// the socket tables /proc/net/tcp and tcp6) gives the listening socket's
// inode, and a process's descriptors (/proc/PID/fd/N → "socket:[INODE]")
// say which process holds it. Used before a launch (is the target's port
// already taken, and by whom?) and at the first healthy answer (is it the
// launched tree that answers?). Outside Linux neither exists and both
// questions get "unknown".

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// tcpListen is the socket state LISTEN in /proc/net/tcp (TCP_LISTEN = 10).
const tcpListen = "0A"

// listener is one listening socket of the kernel's tables.
type listener struct {
	IP    net.IP
	Port  int
	UID   int
	Inode uint64
}

// parseListeners reads a /proc/net/tcp or /proc/net/tcp6 table and
// returns its listening sockets. Rows it cannot read are an error naming
// the row, so a format change is seen rather than read as "no listener".
func parseListeners(r io.Reader) ([]listener, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var out []listener
	row := 0
	for sc.Scan() {
		row++
		f := strings.Fields(sc.Text())
		if row == 1 && len(f) > 0 && f[0] == "sl" {
			continue // the column titles
		}
		if len(f) == 0 {
			continue
		}
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
		if len(f) < 10 {
			return nil, fmt.Errorf("row %d: %d fields, want at least 10", row, len(f))
		}
		if f[3] != tcpListen {
			continue
		}
		ip, port, err := parseSockAddr(f[1])
		if err != nil {
			return nil, fmt.Errorf("row %d: local address %q: %w", row, f[1], err)
		}
		uid, err := strconv.Atoi(f[7])
		if err != nil {
			return nil, fmt.Errorf("row %d: uid %q: %w", row, f[7], err)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("row %d: inode %q: %w", row, f[9], err)
		}
		out = append(out, listener{IP: ip, Port: port, UID: uid, Inode: inode})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// parseSockAddr reads "0100007F:1F90": the address as the kernel prints
// it (each 32-bit word of the network-order bytes printed as a number in
// this machine's byte order) and the port in hex.
func parseSockAddr(s string) (net.IP, int, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return nil, 0, errors.New("no port")
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("port: %w", err)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return nil, 0, fmt.Errorf("address is not 8 or 32 hex digits")
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	return ip, int(port), nil
}

// socketInode reads a descriptor link "socket:[12345]".
func socketInode(link string) (uint64, bool) {
	s, ok := strings.CutPrefix(link, "socket:[")
	if !ok || !strings.HasSuffix(s, "]") {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
	return n, err == nil
}

// procFS is where the socket tables and processes are read: "/proc", or a
// fixture directory laid out the same way in tests.
type procFS string

// liveProc is this machine's /proc: its listeners come from the kernel's
// inet_diag (diagListeners), the tables being the fallback.
const liveProc procFS = "/proc"

// allListeners lists the listening sockets of both families. known is
// false when neither inet_diag nor a table could be read.
func (fs procFS) allListeners() (ls []listener, known bool, err error) {
	if fs == liveProc {
		if ls, err := diagListeners(); err == nil {
			return ls, true, nil
		}
	}
	return fs.tableListeners()
}

// tableListeners reads the listening sockets from fs's net/tcp and
// net/tcp6. known is false when neither table exists.
func (fs procFS) tableListeners() (ls []listener, known bool, err error) {
	for _, name := range []string{"tcp", "tcp6"} {
		f, oerr := os.Open(filepath.Join(string(fs), "net", name))
		if oerr != nil {
			continue // no IPv6, or no /proc
		}
		all, perr := parseListeners(f)
		f.Close()
		if perr != nil {
			return nil, true, fmt.Errorf("read %s/net/%s: %w", fs, name, perr)
		}
		known = true
		ls = append(ls, all...)
	}
	return ls, known, nil
}

// listenersOn returns the sockets listening on port that a connection to
// ip would reach, or that a server binding ip would collide with: bound
// to ip itself, to a loopback address of the same family when ip is one,
// or to a wildcard address ("0.0.0.0" for IPv4, "::" for both: a
// dual-stack listener takes IPv4 connections too). known is false when no
// table could be read (not Linux, or /proc hidden).
func (fs procFS) listenersOn(ip net.IP, port int) (ls []listener, known bool, err error) {
	all, known, err := fs.allListeners()
	if err != nil {
		return nil, known, err
	}
	for _, l := range all {
		if l.Port == port && reaches(l.IP, ip) {
			ls = append(ls, l)
		}
	}
	return ls, known, nil
}

// reaches reports whether a socket bound to bound takes connections to ip.
func reaches(bound, ip net.IP) bool {
	v4 := ip.To4() != nil
	switch {
	case bound.Equal(ip):
		return true
	case bound.IsUnspecified():
		return bound.To4() == nil || v4
	case bound.IsLoopback() && ip.IsLoopback():
		return (bound.To4() != nil) == v4
	}
	return false
}

// socketHolders finds the processes, among pids (nil: every process),
// that hold a descriptor on one of the socket inodes, with the inodes each
// holds. Processes whose descriptors cannot be read (another user's) are
// skipped.
func (fs procFS) socketHolders(inodes map[uint64]bool, pids []int) map[int][]uint64 {
	if pids == nil {
		ents, err := os.ReadDir(string(fs))
		if err != nil {
			return nil
		}
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	out := map[int][]uint64{}
	for _, pid := range pids {
		dir := filepath.Join(string(fs), strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			if n, ok := socketInode(link); ok && inodes[n] {
				out[pid] = append(out[pid], n)
			}
		}
	}
	return out
}

// cmdline is a process's command line ("" when it cannot be read).
func (fs procFS) cmdline(pid int) string {
	b, err := os.ReadFile(filepath.Join(string(fs), strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Join(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), " "))
}

// Holder is a process holding a listening socket.
type Holder struct {
	PID     int
	Command string // its command line, "" when not readable
}

// PortHolders are who listens where a connection to ip:port would go.
type PortHolders struct {
	// Known: the socket tables could be read (Linux).
	Known bool
	// Listening: at least one socket listens there.
	Listening bool
	// Holders are the processes found holding those sockets.
	Holders []Holder
	// Unreadable: some listening socket has no holder whose descriptors
	// could be read (another user's process, or another network
	// namespace's).
	Unreadable bool
	// UIDs are the owners of the sockets no holder was found for.
	UIDs []int
}

// portHolders looks up the holders of port (for a connection to ip).
func (fs procFS) portHolders(ip net.IP, port int) (PortHolders, error) {
	ls, known, err := fs.listenersOn(ip, port)
	ph := PortHolders{Known: known, Listening: len(ls) > 0}
	if err != nil || len(ls) == 0 {
		return ph, err
	}
	inodes := map[uint64]bool{}
	for _, l := range ls {
		inodes[l.Inode] = true
	}
	held := map[uint64]bool{}
	byPID := fs.socketHolders(inodes, nil)
	pids := make([]int, 0, len(byPID))
	for pid, ns := range byPID {
		pids = append(pids, pid)
		for _, n := range ns {
			held[n] = true
		}
	}
	sort.Ints(pids)
	for _, pid := range pids {
		ph.Holders = append(ph.Holders, Holder{PID: pid, Command: fs.cmdline(pid)})
	}
	for _, l := range ls {
		if !held[l.Inode] {
			ph.Unreadable = true
			ph.UIDs = append(ph.UIDs, l.UID)
		}
	}
	return ph, nil
}

// String names the holders for a message: "pid 4242 (vllm serve …)", or
// "another user's process" when the socket's holder cannot be read.
func (ph PortHolders) String() string {
	var parts []string
	for _, h := range ph.Holders {
		cmd := h.Command
		if cmd == "" {
			cmd = "command line not readable"
		}
		parts = append(parts, fmt.Sprintf("pid %d (%s)", h.PID, cmd))
	}
	if ph.Unreadable {
		who := "another user's process"
		switch {
		case len(ph.UIDs) > 0 && ph.UIDs[0] == os.Getuid():
			// Our own user, yet no descriptor links to it: a process in
			// another PID namespace (a container) or one whose
			// descriptors are hidden from us.
			who = "a process of this user whose descriptors cannot be read here (in a container?)"
		case len(ph.UIDs) > 0:
			who = fmt.Sprintf("another user's process (uid %d)", ph.UIDs[0])
		}
		parts = append(parts, who)
	}
	return strings.Join(parts, ", ")
}
