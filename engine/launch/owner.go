package launch

// Making sure the server treni-top times is the one it launched: before the
// launch its address must not answer, and at the first healthy answer the
// listening socket must belong to the launched process tree.

import (
	"context"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"time"
)

// PortInUseError is a launch refused because the target's address already
// answers or has a listener: treni-top would otherwise time that server.
type PortInUseError struct {
	URL  string
	Port int
	// Holders are the listening socket's processes, where the socket
	// tables show one.
	Holders PortHolders
}

func (e *PortInUseError) Error() string {
	fix := fmt.Sprintf("stop it, or give the target another port (and --url), or profile the running server with 'treni-top attach %s'", e.URL)
	if e.Holders.Listening {
		return fmt.Sprintf("%s is taken before the launch: port %d is held by %s; %s", e.URL, e.Port, e.Holders, fix)
	}
	return fmt.Sprintf("something already answers at %s before the launch (no listener on this machine shows for it: another host, or another network namespace); %s", e.URL, fix)
}

// hostPort splits a base URL into host and port (the scheme's default
// when it names none).
func hostPort(base string) (string, int, error) {
	u, err := neturl.Parse(base)
	if err != nil || u.Host == "" {
		return "", 0, fmt.Errorf("%q is not a server URL", base)
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return "", 0, fmt.Errorf("%q: port %q: %w", base, p, err)
		}
	}
	return u.Hostname(), port, nil
}

// localIP resolves host and reports whether it is an address of this
// machine, where the socket tables can say who listens.
func localIP(ctx context.Context, host string) (net.IP, bool) {
	ip := net.ParseIP(host)
	if ip == nil {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil || len(addrs) == 0 {
			return nil, false
		}
		ip = addrs[0].IP
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return ip, true
	}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return ip, false
	}
	for _, a := range ifs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return ip, true
		}
	}
	return ip, false
}

// checkPortFree refuses a launch whose address is already taken: a
// listener in the socket tables (named with its holder), or, where the
// tables cannot tell (another host, another network namespace, not Linux),
// a connection that succeeds.
func checkPortFree(ctx context.Context, base string, fs procFS) error {
	host, port, err := hostPort(base)
	if err != nil {
		return fmt.Errorf("launch: %w; pass --url http://HOST:PORT", err)
	}
	if ip, local := localIP(ctx, host); local {
		ph, err := fs.portHolders(ip, port)
		if err == nil && ph.Listening {
			return &PortInUseError{URL: base, Port: port, Holders: ph}
		}
	}
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil
	}
	conn.Close()
	return &PortInUseError{URL: base, Port: port}
}

// checkListener decides whether the healthy answer at base came from the
// launched tree. It returns how that was established (the healthy
// marker's listener attribute), or an error when another process holds
// the listener: a server that was there first, whose answers would be
// timed as the target's. A listener whose holder cannot be read (another
// user's, or in a container: a container runtime's port proxy is one) is
// accepted, since the port was free before the launch; so is one held by
// a process started after the launch outside the tree (a server that
// daemonized).
func (p *Process) checkListener(ctx context.Context, base string) (string, error) {
	return p.checkListenerIn(ctx, base, liveProc)
}

func (p *Process) checkListenerIn(ctx context.Context, base string, fs procFS) (string, error) {
	host, port, err := hostPort(base)
	if err != nil {
		return "not checked: " + err.Error(), nil
	}
	ip, local := localIP(ctx, host)
	if !local {
		return "not checked: not an address of this machine", nil
	}
	ls, known, err := fs.listenersOn(ip, port)
	switch {
	case err != nil:
		return "not checked: " + err.Error(), nil
	case !known:
		return "not checked: no socket tables (/proc/net/tcp)", nil
	case len(ls) == 0:
		return "not checked: no listening socket in the tables (another network namespace?)", nil
	}
	inodes := map[uint64]bool{}
	for _, l := range ls {
		inodes[l.Inode] = true
	}
	// The tree members seen so far (the samplers walk the tree every
	// 10 ms while cold), not a fresh walk of every process: this check
	// delays the cold request. A member too new to be seen is found by
	// the full scan below, as started after the launch.
	p.mu.Lock()
	rootStart := p.known[p.pid]
	tree := make([]int, 0, len(p.known))
	for pid := range p.known {
		tree = append(tree, pid)
	}
	p.mu.Unlock()
	if len(fs.socketHolders(inodes, tree)) > 0 {
		return "target", nil
	}
	ph, err := fs.portHolders(ip, port)
	if err != nil {
		return "not checked: " + err.Error(), nil
	}
	var foreign []Holder
	for _, h := range ph.Holders {
		if info, err := readStatIn(fs, h.PID); err == nil && rootStart > 0 && info.start >= rootStart {
			return fmt.Sprintf("pid %d, started after the launch outside its process tree", h.PID), nil
		}
		foreign = append(foreign, h)
	}
	if len(foreign) > 0 {
		ph.Holders, ph.Unreadable = foreign, false
		return "", fmt.Errorf("%s answers, but not from the launched target (pid %d): port %d is held by %s, which was running before the launch; the target could not take the port (see its log). Stop that server or give the target another port (and --url)", base, p.pid, port, ph)
	}
	return "not checked: held by " + ph.String() + "; accepted, as the port was free before the launch", nil
}
