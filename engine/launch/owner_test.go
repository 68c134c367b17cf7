package launch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// Socket tables as a little-endian Linux prints them: a LISTEN socket on
// 127.0.0.1:18181 (inode 1001, uid 1000), a wildcard one on :8000 (inode
// 1002, uid 65534), a TIME_WAIT row on 18181 (not a listener).
const fixtureTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4705 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1001 1 0000000050b716cd 100 0 0 10 0
   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 1002 1 00000000abc4f589 100 0 0 10 0
   2: 0100007F:4705 0100007F:80AA 06 00000000:00000000 03:000005DC 00000000     0        0 0 3 00000000550520a1
`

// fixtureTCP6: [::1]:8080 (inode 2001) and [::]:18181 (inode 2002, uid 65534).
const fixtureTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2001 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:4705 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 2002 1 0000000000000000 100 0 0 10 0
`

func littleEndian(t *testing.T) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the fixture tables are a little-endian machine's")
	}
}

func TestParseListeners(t *testing.T) {
	littleEndian(t)
	ls, err := parseListeners(strings.NewReader(fixtureTCP))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 {
		t.Fatalf("%d listeners, want 2 (the TIME_WAIT row is not one): %+v", len(ls), ls)
	}
	if !ls[0].IP.Equal(net.IPv4(127, 0, 0, 1)) || ls[0].Port != 18181 || ls[0].UID != 1000 || ls[0].Inode != 1001 {
		t.Errorf("first listener %+v, want 127.0.0.1:18181 uid 1000 inode 1001", ls[0])
	}
	if !ls[1].IP.IsUnspecified() || ls[1].Port != 8000 {
		t.Errorf("second listener %+v, want 0.0.0.0:8000", ls[1])
	}
	ls6, err := parseListeners(strings.NewReader(fixtureTCP6))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls6) != 2 || !ls6[0].IP.Equal(net.IPv6loopback) || ls6[0].Port != 8080 || !ls6[1].IP.IsUnspecified() || ls6[1].Port != 18181 {
		t.Errorf("tcp6 listeners %+v, want [::1]:8080 and [::]:18181", ls6)
	}
	for _, bad := range []string{
		"   0: 0100007F:4705 00000000:0000 0A\n",                                                               // too few fields
		"   0: 0100007F 00000000:0000 0A 0:0 0:0 0 1000 0 1001\n",                                              // no port
		"   0: 01007F:4705 00000000:0000 0A 0:0 0:0 0 1000 0 1001\n",                                           // short address
		"   0: 0100007F:4705 00000000:0000 0A 0:0 0:0 0 x 0 1001\n",                                            // uid
		"   0: 0100007F:4705 00000000:0000 0A 0:0 0:0 0 1000 0 -1\n",                                           // inode
		"   0: 0100007F:4G6C5 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1001 1\n", // port
	} {
		if _, err := parseListeners(strings.NewReader(bad)); err == nil {
			t.Errorf("row %q was accepted", bad)
		}
	}
}

func TestSocketInode(t *testing.T) {
	for link, want := range map[string]uint64{"socket:[12345]": 12345, "socket:[]": 0, "pipe:[12345]": 0, "socket:[12345": 0, "/dev/null": 0} {
		if n, ok := socketInode(link); n != want || ok != (want != 0) {
			t.Errorf("socketInode(%q) = %d, %v; want %d", link, n, ok, want)
		}
	}
}

// fixtureProc lays out a /proc with the fixture tables and process 4242
// (a vLLM server) holding the socket of inode 1001 on fd 7; nobody
// readable holds 1002 or 2002.
func fixtureProc(t *testing.T) procFS {
	t.Helper()
	root := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("net/tcp", fixtureTCP)
	write("net/tcp6", fixtureTCP6)
	write("4242/cmdline", "vllm\x00serve\x00Qwen/Qwen3-4B\x00--port\x0018181\x00")
	write("4242/stat", "4242 (vllm) S 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0")
	write("77/cmdline", "bash\x00")
	for fd, target := range map[string]string{"4242/fd/0": "/dev/null", "4242/fd/7": "socket:[1001]", "77/fd/3": "socket:[999]"} {
		p := filepath.Join(root, fd)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return procFS(root)
}

func TestPortHoldersFixture(t *testing.T) {
	littleEndian(t)
	if os.Getuid() == 65534 {
		t.Skip("the fixture's other user is this one")
	}
	fs := fixtureProc(t)
	ph, err := fs.portHolders(net.IPv4(127, 0, 0, 1), 18181)
	if err != nil {
		t.Fatal(err)
	}
	// 127.0.0.1:18181 (held by 4242) and [::]:18181 (dual stack, nobody
	// readable holds it, uid 65534).
	if !ph.Known || !ph.Listening || len(ph.Holders) != 1 || ph.Holders[0].PID != 4242 || !ph.Unreadable {
		t.Fatalf("holders of 18181: %+v", ph)
	}
	want := "pid 4242 (vllm serve Qwen/Qwen3-4B --port 18181), another user's process (uid 65534)"
	if got := ph.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	ph, _ = fs.portHolders(net.IPv4(127, 0, 0, 1), 8000)
	if !ph.Listening || len(ph.Holders) != 0 || ph.String() != "another user's process (uid 65534)" {
		t.Errorf("holders of 8000 (wildcard, uid 65534): %+v %q", ph, ph.String())
	}
	// Our own user's socket without a readable holder: another PID
	// namespace, not another user.
	own := PortHolders{Known: true, Listening: true, Unreadable: true, UIDs: []int{os.Getuid()}}
	if !strings.Contains(own.String(), "in a container?") {
		t.Errorf("own uid, no holder: %q", own.String())
	}
	for _, ip := range []net.IP{net.IPv4(10, 1, 2, 3), net.IPv4(127, 0, 0, 1)} {
		if ph, _ := fs.portHolders(ip, 8080); ph.Listening {
			t.Errorf("[::1]:8080 reported for a connection to %s: %+v", ip, ph)
		}
	}
	if ph, _ := fs.portHolders(net.IPv6loopback, 8080); !ph.Listening {
		t.Errorf("[::1]:8080 not reported for a connection to [::1]: %+v", ph)
	}
	if ph, _ := fs.portHolders(net.IPv6loopback, 8000); ph.Listening {
		t.Errorf("0.0.0.0:8000 reported for a connection to [::1]: %+v", ph)
	}
	if ph, _ := fs.portHolders(net.IPv4(127, 0, 0, 1), 9); !ph.Known || ph.Listening {
		t.Errorf("port 9: %+v, want known and free", ph)
	}
	if ph, _ := procFS(t.TempDir()).portHolders(net.IPv4(127, 0, 0, 1), 18181); ph.Known {
		t.Errorf("a /proc without tables: %+v, want not known", ph)
	}
}

// TestCheckListenerFixture: who may answer for a launched target whose
// tree holds no listener: a holder started after the launch (a server that
// daemonized) and an unreadable one (a container's port proxy) are
// accepted and say so; a holder that ran before the launch is refused.
func TestCheckListenerFixture(t *testing.T) {
	littleEndian(t)
	fs := fixtureProc(t) // pid 4242 started at tick 5000 holds 127.0.0.1:18181
	proc := func(rootStart uint64) *Process {
		p := newProcess(Spec{}, &collector{}, trace.NewClock(), 0)
		p.pid = 1 << 30 // no such process: its tree holds nothing
		p.known[p.pid] = rootStart
		return p
	}
	owner, err := proc(4000).checkListenerIn(context.Background(), "http://127.0.0.1:18181", fs)
	if err != nil || !strings.Contains(owner, "pid 4242, started after the launch") {
		t.Errorf("holder started after the launch: %q, %v", owner, err)
	}
	_, err = proc(6000).checkListenerIn(context.Background(), "http://127.0.0.1:18181", fs)
	if err == nil || !strings.Contains(err.Error(), "held by pid 4242 (vllm serve Qwen/Qwen3-4B --port 18181), which was running before the launch") {
		t.Errorf("holder running before the launch: %v", err)
	}
	owner, err = proc(6000).checkListenerIn(context.Background(), "http://127.0.0.1:8000", fs)
	if err != nil || !strings.Contains(owner, "another user's process") || !strings.Contains(owner, "accepted") {
		t.Errorf("unreadable holder: %q, %v", owner, err)
	}
	if owner, err := proc(6000).checkListenerIn(context.Background(), "http://127.0.0.1:9", fs); err != nil || !strings.HasPrefix(owner, "not checked") {
		t.Errorf("no listener in the tables: %q, %v", owner, err)
	}
}

// TestPortTakenRefused: a listener already on the target's port (this test
// process) refuses the launch, naming the holder.
func TestPortTakenRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	spec := serverSpec("ok", addr)
	spec.URL = "http://" + addr
	err = CheckFree(context.Background(), spec)
	var pe *PortInUseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a PortInUseError", err)
	}
	for _, want := range []string{addr, fmt.Sprintf("pid %d (%s", os.Getpid(), os.Args[0]), "another port", "treni-top attach http://" + addr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The URL inferred from the command (--addr) is checked the same way.
	if err := CheckFree(context.Background(), Spec{Command: []string{"treni-top", "serve", "--addr", addr}}); !errors.As(err, &pe) {
		t.Errorf("URL from the command: %v", err)
	}
	// Nothing known before the launch: nothing to check.
	if err := CheckFree(context.Background(), Spec{Command: []string{"sleep", "60"}}); err != nil {
		t.Errorf("no URL: %v", err)
	}

	// Where the socket tables cannot tell (here: a /proc without them), a
	// connection that succeeds is enough to refuse.
	err = checkPortFree(context.Background(), "http://"+addr, procFS(t.TempDir()))
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "something already answers at http://"+addr) {
		t.Errorf("without tables: %v", err)
	}
	l.Close()
	if err := checkPortFree(context.Background(), "http://"+addr, liveProc); err != nil {
		t.Errorf("a closed port: %v", err)
	}
}

// TestForeignListenerDuringHealth: a server that takes the port after the
// check but is not the launched tree (this test process, running before
// the launch) is not accepted as the target's health.
func TestForeignListenerDuringHealth(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	c := &collector{}
	p, err := Start(context.Background(), Spec{Command: []string{"sleep", "60"}, URL: "http://" + addr}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = p.WaitHealthy(ctx)
	if err == nil {
		t.Fatal("healthy from another process's server")
	}
	for _, want := range []string{"not from the launched target", fmt.Sprintf("pid %d", os.Getpid()), "running before the launch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := len(c.markers(trace.MarkerHealthy)); n != 0 {
		t.Errorf("%d healthy markers for a foreign server", n)
	}
}

// TestAttachRefusedSaysSo: attaching where nothing listens says so with the
// first poll, and the wait's end names what was seen.
func TestAttachRefusedSaysSo(t *testing.T) {
	u := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	c := &collector{}
	p, err := Attach(context.Background(), AttachSpec{URL: u, HealthWait: 10 * time.Minute}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	waitFor(t, 5*time.Second, "the health_wait marker", func() bool { return len(c.markers(trace.MarkerHealthWait)) > 0 })
	m := c.markers(trace.MarkerHealthWait)[0]
	if r, _ := m.Attrs.String("reason"); r != "connection refused" {
		t.Errorf("reason %q, want connection refused", r)
	}
	if w, _ := m.Attrs.Float("timeout_s"); w != 600 {
		t.Errorf("timeout_s %v, want 600", w)
	}
	if url, _ := m.Attrs.String("url"); url != u+"/health" {
		t.Errorf("url %q", url)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = p.WaitHealthy(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no healthy answer (last poll "+u) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("WaitHealthy = %v", err)
	}
	if n := len(c.markers(trace.MarkerHealthWait)); n != 1 {
		t.Errorf("%d health_wait markers for one unchanged reason, want 1", n)
	}
}

// TestNoURLSaysSo: a server whose URL cannot be inferred is not polled,
// and both the wait and its end say that --url is needed.
func TestNoURLSaysSo(t *testing.T) {
	c := &collector{}
	p, err := Start(context.Background(), Spec{Command: []string{"sleep", "60"}}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	waitFor(t, 5*time.Second, "the health_wait marker", func() bool { return len(c.markers(trace.MarkerHealthWait)) > 0 })
	if r, _ := c.markers(trace.MarkerHealthWait)[0].Attrs.String("reason"); !strings.Contains(r, "no URL to poll") || !strings.Contains(r, "--url") {
		t.Errorf("reason %q", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = p.WaitHealthy(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "none could be inferred") || !strings.Contains(err.Error(), "pass --url") {
		t.Errorf("WaitHealthy = %v", err)
	}
}

// TestHealthAPIKey: the health poll sends the key; a 401 ends the wait at
// once naming the flag, and says whether a key was sent.
func TestHealthAPIKey(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	for _, tc := range []struct {
		key, want string
	}{
		{"", "the server wants an API key; pass --api-key KEY (or set OPENAI_API_KEY)"},
		{"sk-wrong", "the server refused the API key given (--api-key or OPENAI_API_KEY)"},
		{"sk-test", ""},
	} {
		c := &collector{}
		p, err := Attach(context.Background(), AttachSpec{URL: srv.URL, APIKey: tc.key}, c, trace.NewClock(), 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = p.WaitHealthy(ctx)
		cancel()
		p.Stop(time.Second)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("key %q: %v", tc.key, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "401")):
			t.Errorf("key %q: %v, want it to say %q", tc.key, err, tc.want)
		}
	}
}

func FuzzParseListeners(f *testing.F) {
	f.Add(fixtureTCP)
	f.Add(fixtureTCP6)
	f.Add("   0: 0100007F:4705 00000000:0000 0A 0:0 0:0 0 1000 0 1001\n")
	f.Fuzz(func(t *testing.T, text string) {
		ls, err := parseListeners(strings.NewReader(text))
		if err != nil {
			return
		}
		for _, l := range ls {
			if len(l.IP) != 4 && len(l.IP) != 16 || l.Port < 0 || l.Port > 65535 {
				t.Errorf("listener %+v from %q", l, text)
			}
		}
	})
}
