package launch

import (
	"fmt"
	"net"
	"os"
	"testing"
)

// TestDiagMatchesTables: the kernel's inet_diag and /proc/net/tcp name the
// same listening socket (port, uid, inode) for a listener of this process.
func TestDiagMatchesTables(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	diag, err := diagListeners()
	if err != nil {
		t.Skipf("no inet_diag here: %v", err)
	}
	find := func(ls []listener) (listener, bool) {
		for _, x := range ls {
			if x.Port == port && x.IP.Equal(net.IPv4(127, 0, 0, 1)) {
				return x, true
			}
		}
		return listener{}, false
	}
	d, ok := find(diag)
	if !ok {
		t.Fatalf("inet_diag does not list 127.0.0.1:%d", port)
	}
	tables, known, err := liveProc.tableListeners()
	if err != nil || !known {
		t.Fatalf("tables: %v (known %v)", err, known)
	}
	tb, ok := find(tables)
	if !ok || tb.Port != d.Port || tb.UID != d.UID || tb.Inode != d.Inode {
		t.Errorf("inet_diag %+v, tables %+v", d, tb)
	}
	if d.UID != os.Getuid() {
		t.Errorf("uid %d, want ours %d", d.UID, os.Getuid())
	}
	holders := liveProc.socketHolders(map[uint64]bool{d.Inode: true}, []int{os.Getpid()})
	if len(holders[os.Getpid()]) != 1 {
		t.Errorf("this process's descriptors do not hold inode %d: %v", d.Inode, holders)
	}
	if _, err := parseDiagMsg(make([]byte, inetDiagMsgLen-1)); err == nil {
		t.Error("a short inet_diag record was accepted")
	}
}

// BenchmarkListeners: the listening sockets from the kernel's inet_diag
// (what the check at the first healthy answer uses) and from the
// /proc/net/tcp{,6} tables (the fallback), with this process holding 0 and
// 2,000 established connections besides whatever the machine has:
// inet_diag walks the listeners only, the tables every socket.
// docs/BENCHMARKS.md has figures.
func BenchmarkListeners(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, n := range []int{0, 2000} {
		for len(conns) < n {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		b.Run(fmt.Sprintf("inet_diag/conns=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := diagListeners(); err != nil {
					b.Skip(err)
				}
			}
		})
		b.Run(fmt.Sprintf("tables/conns=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, known, err := liveProc.tableListeners(); err != nil || !known {
					b.Fatal(err)
				}
			}
		})
	}
}
