//go:build linux

package load

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/treni-top/treni-top/trace"
)

// The paced server is the truth the client is measured against: it streams
// one token every pace, each write scheduled against an absolute deadline
// (request start + i·pace) so a late write does not shift the next ones,
// and it reports the instant every write left it. It runs as a separate
// process (this test binary re-executed with envPacedServer set) so that
// the client's CPU can be measured alone with getrusage.
const (
	envPacedServer = "TRENI_LOAD_PACED_SERVER"
	envPace        = "TRENI_LOAD_PACE"
	// envServerProcs sets the paced server's GOMAXPROCS (default 1), to
	// study how the two processes share the cores.
	envServerProcs = "TRENI_LOAD_PROOF_SERVER_PROCS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envPacedServer) == "1" {
		if err := runPacedServer(); err != nil {
			fmt.Fprintln(os.Stderr, "paced server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runPacedServer serves until its stdin closes. It prints "ADDR host:port"
// first, then, when stopped, one line per finished stream: "T <prompt> <ns>
// <ns> …", the instants each token's write returned, since the request
// arrived.
//
// It is as cheap as it can be made, so that it takes as little CPU as
// possible from the client it measures on a 2-core machine: no net/http
// (its per-response goroutine, timers and buffering cost more than the
// write), a hand-written HTTP/1.1 response with chunked encoding (what real
// servers send for a stream, keep-alive included), and one goroutine — the
// pacer — that owns every stream and writes each one's next chunk at its
// absolute deadline (request arrival + i·pace), sleeping in between with
// nanosleep rather than a Go timer (whose sub-millisecond sleeps round up
// to a millisecond in the netpoller and would make the writes bursty) and
// writing with raw system calls. Connection goroutines only read requests;
// they are idle while streaming. startPacedServer runs it with GOMAXPROCS=1.
func runPacedServer() error {
	pace, err := time.ParseDuration(os.Getenv(envPace))
	if err != nil || pace <= 0 {
		pace = 10 * time.Millisecond
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "ADDR %s\n", ln.Addr())
	if err := out.Flush(); err != nil {
		return err
	}
	p := newPacer(pace)
	go p.run() // ends with the process
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			break // stdin closed: the run is over
		}
		go servePaced(c, p)
	}
	// Truth lines are kept in memory and written after the run, so that
	// the client process does not spend CPU reading them while measured.
	for _, l := range p.finished() {
		out.WriteString(l)
	}
	return out.Flush()
}

const (
	pacedHeader = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
	pacedEvent  = `data: {"id":"x","object":"chat.completion.chunk","model":"paced","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}` + "\n\n"
)

// httpChunk frames b as one chunk of a chunked HTTP/1.1 body.
func httpChunk(b string) []byte { return []byte(fmt.Sprintf("%x\r\n%s\r\n", len(b), b)) }

// servePaced reads requests from one connection and hands each stream to
// the pacer, waiting for it to end before reading the next (keep-alive).
func servePaced(c net.Conn, p *pacer) {
	defer c.Close()
	fd := -1 // the socket, for writes that bypass the runtime (see pacedStream.write)
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = rc.Control(func(f uintptr) { fd = int(f) })
		}
	}
	br := bufio.NewReaderSize(c, 4<<10)
	for {
		t0, key, maxTokens, err := readPacedRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				msg := `{"error":"bad request: ` + strings.ReplaceAll(err.Error(), `"`, `'`) + `"}`
				fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
			}
			return
		}
		if _, err := io.WriteString(c, pacedHeader); err != nil {
			return
		}
		s := &pacedStream{conn: c, fd: fd, key: key, t0: t0, n: maxTokens, writes: make([]int64, 0, maxTokens), done: make(chan bool, 1)}
		s.tail = httpChunk(fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", maxTokens))
		s.tail = append(s.tail, "0\r\n\r\n"...)
		p.add(s)
		if ok := <-s.done; !ok {
			return
		}
	}
}

// readPacedRequest reads one POST with a Content-Length body and returns
// its arrival instant (on the pacer's clock), the first message's content
// (the stream's key) and max_tokens.
func readPacedRequest(br *bufio.Reader) (t0 int64, key string, maxTokens int, err error) {
	line, err := br.ReadString('\n')
	if err != nil {
		if line == "" {
			return 0, "", 0, io.EOF
		}
		return 0, "", 0, err
	}
	if !strings.HasPrefix(line, "POST /v1/chat/completions ") {
		return 0, "", 0, fmt.Errorf("want POST /v1/chat/completions, got %q", strings.TrimSpace(line))
	}
	length := -1
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			return 0, "", 0, err
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(k, "Content-Length") {
			if length, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return 0, "", 0, fmt.Errorf("content-length %q: %w", v, err)
			}
		}
	}
	if length < 0 || length > 1<<20 {
		return 0, "", 0, fmt.Errorf("content-length %d: want a body of at most 1 MiB", length)
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(br, body); err != nil {
		return 0, "", 0, err
	}
	t0 = monoNow()
	var req struct {
		MaxTokens int `json:"max_tokens"`
		Messages  []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return 0, "", 0, fmt.Errorf("request body: %w", err)
	}
	if len(req.Messages) == 0 || req.MaxTokens < 1 {
		return 0, "", 0, errors.New("want a chat request with messages and max_tokens")
	}
	return t0, req.Messages[0].Content, req.MaxTokens, nil
}

// monoStart anchors monoNow: a monotonic nanosecond clock for the pacer.
var monoStart = time.Now()

func monoNow() int64 { return int64(time.Since(monoStart)) }

// pacedStream is one response being paced.
type pacedStream struct {
	conn   net.Conn
	fd     int // conn's socket (non-blocking), or -1
	key    string
	t0     int64 // request arrival, monoNow
	due    int64 // the next write's deadline, monoNow
	sent   int   // token chunks written
	n      int   // token chunks to write
	writes []int64
	tail   []byte    // the usage event, [DONE] and the last chunk
	done   chan bool // true: the response ended cleanly
}

// pacer writes every stream's chunks at their deadlines from one goroutine.
type pacer struct {
	pace  int64
	event []byte // one token's chunk, framed

	mu      sync.Mutex
	pending []*pacedStream
	wake    chan struct{}
	lines   []string
	active  sync.WaitGroup // streams added and not yet recorded

	heap []*pacedStream // by due; owned by run
}

func newPacer(pace time.Duration) *pacer {
	return &pacer{pace: int64(pace), event: httpChunk(pacedEvent), wake: make(chan struct{}, 1)}
}

func (p *pacer) add(s *pacedStream) {
	s.due = s.t0 + p.pace
	p.active.Add(1)
	p.mu.Lock()
	p.pending = append(p.pending, s)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// finished waits for the streams in flight — the client may have read a
// stream's last chunk before the pacer recorded it — and returns the
// truth lines.
func (p *pacer) finished() []string {
	p.active.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lines
}

// run is the pacer's loop. A stream added while it sleeps is due one pace
// after its arrival, never before the earliest deadline it sleeps towards,
// so it is picked up at the next wake-up in time.
func (p *pacer) run() {
	var adds []*pacedStream
	for {
		p.mu.Lock()
		adds, p.pending = p.pending, adds[:0]
		p.mu.Unlock()
		for _, s := range adds {
			p.push(s)
		}
		if len(p.heap) == 0 {
			<-p.wake
			continue
		}
		now := monoNow()
		for len(p.heap) > 0 && p.heap[0].due <= now {
			s := p.heap[0]
			s.sent++
			last := s.sent == s.n
			var err error
			if last {
				err = s.write(append(append([]byte(nil), p.event...), s.tail...))
			} else {
				err = s.write(p.event)
			}
			now = monoNow() // the instant the write returned: the truth
			if err != nil || last {
				if err == nil {
					s.writes = append(s.writes, now-s.t0)
					p.record(s)
				}
				p.pop()
				p.active.Done()
				s.done <- err == nil
				continue
			}
			s.writes = append(s.writes, now-s.t0)
			s.due = s.t0 + int64(s.sent+1)*p.pace
			p.down(0)
		}
		if len(p.heap) > 0 {
			if d := p.heap[0].due - monoNow(); d > 0 {
				// A raw nanosleep: the pacer keeps its P, so waking up
				// costs no scheduler hand-off. The runtime's preemption
				// signal (every 10 ms) cuts the sleep short and lets the
				// connection goroutines run on that P.
				ts := syscall.NsecToTimespec(d)
				_, _, _ = syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
			}
		}
	}
}

// write sends b on the stream's socket. A write to a socket with room in
// its send buffer does not block, so it is made with a raw system call —
// no poller, no scheduler bookkeeping — and only a short or refused write
// falls back to the net.Conn, which waits for room.
func (s *pacedStream) write(b []byte) error {
	if s.fd >= 0 {
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(s.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if errno == 0 && int(n) == len(b) {
			return nil
		}
		if errno == 0 {
			b = b[n:]
		} else if errno != syscall.EAGAIN && errno != syscall.EINTR {
			return errno
		}
	}
	_, err := s.conn.Write(b)
	return err
}

func (p *pacer) record(s *pacedStream) {
	var b strings.Builder
	b.WriteString("T ")
	b.WriteString(s.key)
	for _, t := range s.writes {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(t, 10))
	}
	b.WriteByte('\n')
	p.mu.Lock()
	p.lines = append(p.lines, b.String())
	p.mu.Unlock()
}

// push, pop and down keep p.heap a binary min-heap by due.
func (p *pacer) push(s *pacedStream) {
	p.heap = append(p.heap, s)
	for i := len(p.heap) - 1; i > 0; {
		j := (i - 1) / 2
		if p.heap[j].due <= p.heap[i].due {
			break
		}
		p.heap[i], p.heap[j] = p.heap[j], p.heap[i]
		i = j
	}
}

func (p *pacer) pop() {
	n := len(p.heap) - 1
	p.heap[0] = p.heap[n]
	p.heap[n] = nil
	p.heap = p.heap[:n]
	if n > 0 {
		p.down(0)
	}
}

func (p *pacer) down(i int) {
	h := p.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].due < h[l].due {
			m = r
		}
		if h[i].due <= h[m].due {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// pacedServer is a running paced server process.
type pacedServer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	mu    sync.Mutex
	truth map[string][]time.Duration
	done  chan struct{}
}

func startPacedServer(t testing.TB, pace time.Duration) *pacedServer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envPacedServer+"=1", envPace+"="+pace.String())
	// One P: the server has one busy goroutine (the pacer); a second P
	// only adds runtime threads competing with the client for the cores.
	procs := "1"
	if v := os.Getenv(envServerProcs); v != "" {
		procs = v
	}
	cmd.Env = append(cmd.Env, "GOMAXPROCS="+procs)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &pacedServer{cmd: cmd, stdin: stdin, truth: map[string][]time.Duration{}, done: make(chan struct{})}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ADDR ") {
		t.Fatalf("paced server did not start: %q %v", sc.Text(), sc.Err())
	}
	s.addr = strings.TrimPrefix(sc.Text(), "ADDR ")
	go func() { // owned by s: ends when the server process closes stdout
		defer close(s.done)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || f[0] != "T" {
				continue
			}
			ts := make([]time.Duration, 0, len(f)-2)
			for _, x := range f[2:] {
				n, _ := strconv.ParseInt(x, 10, 64)
				ts = append(ts, time.Duration(n))
			}
			s.mu.Lock()
			s.truth[f[1]] = ts
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

// cpu is the server process's CPU time so far (user + system).
func (s *pacedServer) cpu() time.Duration { return procCPU(s.cmd.Process.Pid) }

func (s *pacedServer) stop() {
	if s.stdin != nil {
		s.stdin.Close()
		s.stdin = nil
		<-s.done
		_ = s.cmd.Wait()
	}
}

// procCPU reads a process's user + system time from /proc/PID/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rampGaps is how many of each stream's first gaps accuracy reports apart.
const rampGaps = 10

// accuracy is what a paced run measured.
type accuracy struct {
	transport            string
	streams, tokens      int
	failed               int
	wall                 time.Duration
	tokPerSec            float64
	clientCPU, serverCPU time.Duration
	// machineCPU is every core's busy time (user, system, interrupts)
	// from /proc/stat: what is left after the client and the server is
	// the kernel's softirq work for loopback TCP and other processes.
	machineCPU, softirqCPU time.Duration
	errP50, errP99, errMax time.Duration // |measured gap − server's gap|
	// errP99First and errP99Rest split errP99 between each stream's first
	// rampGaps gaps — while the other streams are still connecting and
	// sending their requests — and the rest.
	errP99First, errP99Rest time.Duration
	schedP50, schedP99      time.Duration // |server's gap − pace| (how exact the truth is)
	itlP50, itlP99          time.Duration // measured
	missing                 int           // streams without a truth line or with a token-count mismatch
	// merged counts gaps the server spread over at least half a pace
	// that the client measured under a quarter of one: two tokens that
	// reached the client's socket before it read the first, so one read
	// (and one timestamp) took both.
	merged int
}

func (a accuracy) String() string {
	return fmt.Sprintf("%s: %d streams, %d tokens in %v = %.0f tok/s; failed %d, mismatched %d; "+
		"|measured ITL − true ITL| p50 %v p99 %v max %v (p99 over gaps 1–%d %v, after %v); gaps merged by one read %d (%.2f%%); measured ITL p50 %v p99 %v; server vs schedule p50 %v p99 %v; "+
		"client CPU %v (%.0f%% of one core, %.1f µs/token), server CPU %v (%.0f%%); "+
		"machine busy %.0f%% of %d cores (softirq %.0f%%, other processes ≈%.0f%% of a core); load average %s",
		a.transport, a.streams, a.tokens, a.wall.Round(time.Millisecond), a.tokPerSec, a.failed, a.missing,
		a.errP50, a.errP99, a.errMax, rampGaps, a.errP99First, a.errP99Rest, a.merged, 100*float64(a.merged)/float64(max(a.tokens-a.streams, 1)), a.itlP50, a.itlP99, a.schedP50, a.schedP99,
		a.clientCPU.Round(time.Millisecond), 100*a.clientCPU.Seconds()/a.wall.Seconds(),
		float64(a.clientCPU.Microseconds())/float64(max(a.tokens, 1)),
		a.serverCPU.Round(time.Millisecond), 100*a.serverCPU.Seconds()/a.wall.Seconds(),
		100*a.machineCPU.Seconds()/a.wall.Seconds()/float64(runtime.NumCPU()), runtime.NumCPU(),
		100*a.softirqCPU.Seconds()/a.wall.Seconds(),
		100*max(a.machineCPU-a.softirqCPU-a.clientCPU-a.serverCPU, 0).Seconds()/a.wall.Seconds(), loadavg())
}

// cpuStat is the machine's CPU time from /proc/stat's first line.
type cpuStat struct{ busy, softirq time.Duration }

func machineStat() cpuStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal …
	if len(f) < 9 || f[0] != "cpu" {
		return cpuStat{}
	}
	var s cpuStat
	for i, x := range f[1:9] {
		n, _ := strconv.ParseInt(x, 10, 64)
		d := time.Duration(n) * 10 * time.Millisecond // USER_HZ
		switch i {
		case 3, 4: // idle, iowait
		case 6:
			s.softirq = d
			s.busy += d
		default:
			s.busy += d
		}
	}
	return s
}

// loadavg is the first three fields of /proc/loadavg: how contended the
// machine was while the figures were taken.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func quantile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(int(p*float64(len(ds)-1)+0.5), len(ds)-1)]
}

// runPaced sends streams requests of tokens tokens each to a paced server,
// their starts spread evenly over one pace period, and compares.
func runPaced(t testing.TB, streams, tokens int, pace time.Duration) accuracy {
	t.Helper()
	srv := startPacedServer(t, pace)
	clock := trace.NewClock()
	readStamps := os.Getenv("TRENI_LOAD_PROOF_READ_STAMPS") == "1"
	c, err := NewClient(ClientConfig{BaseURL: "http://" + srv.addr, Model: "paced", MaxConns: streams, ReadTimestamps: readStamps}, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	items := make([]Item, streams)
	for i := range items {
		items[i] = Item{Index: i, Prompt: fmt.Sprintf("stream-%d", i), MaxTokens: tokens,
			At: time.Duration(i) * pace / time.Duration(streams)}
	}
	spec := Spec{Name: "paced", Requests: streams, PromptTokens: Fixed(1), MaxTokens: Fixed(tokens),
		Arrival: Arrival{Pattern: Uniform, Rate: float64(streams) / pace.Seconds()}}
	b := &Bench{Client: c, Clock: clock, Progress: &Progress{}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cpu0, scpu0, m0 := selfCPU(), srv.cpu(), machineStat()
	res := b.RunOnce(ctx, spec, items, Plan{RepeatRuns: 1}, 1, false)
	a := accuracy{transport: "net/http, tokens timed at " + map[string]string{"kernel": "the kernel's receive stamp", "read": "read"}[c.TimestampSource()], streams: streams, clientCPU: selfCPU() - cpu0, serverCPU: srv.cpu() - scpu0, wall: res.End - res.Start}
	m1 := machineStat()
	a.machineCPU, a.softirqCPU = m1.busy-m0.busy, m1.softirq-m0.softirq
	srv.stop()
	var errs, sched, itl []time.Duration
	var first, rest []time.Duration // errors over each stream's first rampGaps gaps, and after
	for i, r := range res.Requests {
		if !r.OK() {
			a.failed++
			if a.failed < 4 {
				t.Logf("request %d: %s: %s", i, r.ErrorKind, r.Error)
			}
			continue
		}
		a.tokens += len(r.Tokens)
		truth := srv.truth[items[i].Prompt]
		if len(truth) != len(r.Tokens) {
			a.missing++
			if a.missing < 4 {
				t.Logf("request %d: the server wrote %d token chunks, the client timed %d (%d completion tokens in usage)",
					i, len(truth), len(r.Tokens), r.CompletionTokens)
			}
			continue
		}
		for j := 1; j < len(truth); j++ {
			m, tr := r.Tokens[j]-r.Tokens[j-1], truth[j]-truth[j-1]
			errs = append(errs, (m - tr).Abs())
			if j <= rampGaps {
				first = append(first, (m - tr).Abs())
			} else {
				rest = append(rest, (m - tr).Abs())
			}
			sched = append(sched, (tr - pace).Abs())
			if tr >= pace/2 && m < pace/4 {
				a.merged++
			}
			itl = append(itl, m)
		}
	}
	for _, s := range [][]time.Duration{errs, sched, itl, first, rest} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	a.errP50, a.errP99 = quantile(errs, 0.5), quantile(errs, 0.99)
	if len(errs) > 0 {
		a.errMax = errs[len(errs)-1]
	}
	a.errP99First, a.errP99Rest = quantile(first, 0.99), quantile(rest, 0.99)
	a.schedP50, a.schedP99 = quantile(sched, 0.5), quantile(sched, 0.99)
	a.itlP50, a.itlP99 = quantile(itl, 0.5), quantile(itl, 0.99)
	if a.wall > 0 {
		a.tokPerSec = float64(a.tokens) / a.wall.Seconds()
	}
	return a
}

// TestPacedAccuracySmall is the always-on version of the proof: 8 streams,
// 20 tokens each, one every 20 ms (400 tokens/s, a load the client carries
// with the race detector on one core). The strict 1 ms bound is
// TestClientNeverBottleneck's (gated, a benchmark-like proof); here the
// median error may reach half a pace only if most gaps were merged into
// one read, i.e. the client was off the CPU for more than a pace on most
// tokens, which no scheduler of a machine of this kind does, even beside a
// CPU hog on every core with GOMAXPROCS=1.
func TestPacedAccuracySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	const pace = 20 * time.Millisecond
	a := runPaced(t, 8, 20, pace)
	t.Log(a)
	if a.failed > 0 || a.missing > 0 {
		t.Fatalf("failed %d, mismatched %d", a.failed, a.missing)
	}
	if a.tokens != 8*20 {
		t.Fatalf("measured %d tokens, the server sent %d", a.tokens, 8*20)
	}
	if a.errP50 > pace/2 {
		t.Fatalf("median ITL error %v: the client does not see tokens when they arrive", a.errP50)
	}
}

// TestClientNeverBottleneck is the proof of issue 8: 1,000 concurrent
// streams at an aggregate 100,000 tokens/s (one token every 10 ms each)
// against a paced server in another process; the ITL the client measures
// must stay within 1 ms of the server's at p99. Heavy, so gated:
//
//	TRENI_LOAD_PROOF=1 go test -run TestClientNeverBottleneck -v ./probe/load/
//
// TRENI_LOAD_PROOF_STREAMS, TRENI_LOAD_PROOF_TOKENS and
// TRENI_LOAD_PROOF_PACE override 1000, 500 and 10ms;
// TRENI_LOAD_PROOF_READ_STAMPS=1 times tokens on read instead of at the
// kernel's receive stamp (scripts/load-proof.sh runs both). Note that the paced server shares the machine's cores: its CPU is
// reported separately and is part of the load the client runs under.
func TestClientNeverBottleneck(t *testing.T) {
	if os.Getenv("TRENI_LOAD_PROOF") != "1" {
		t.Skip("set TRENI_LOAD_PROOF=1 to run the 1,000-stream proof")
	}
	streams, tokens := 1000, 500
	if v, err := strconv.Atoi(os.Getenv("TRENI_LOAD_PROOF_STREAMS")); err == nil && v > 0 {
		streams = v
	}
	if v, err := strconv.Atoi(os.Getenv("TRENI_LOAD_PROOF_TOKENS")); err == nil && v > 1 {
		tokens = v
	}
	pace := 10 * time.Millisecond
	if v, err := time.ParseDuration(os.Getenv("TRENI_LOAD_PROOF_PACE")); err == nil && v > 0 {
		pace = v
	}
	a := runPaced(t, streams, tokens, pace)
	t.Log(a)
	if a.failed > 0 || a.missing > 0 {
		t.Fatalf("failed %d, mismatched %d", a.failed, a.missing)
	}
	if a.errP99 > time.Millisecond {
		t.Errorf("p99 |measured − true| ITL = %v, over 1 ms", a.errP99)
	}
}
