//go:build linux

package load

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
// first, then, when stopped, one line per finished stream: "T <prompt> <ns> <ns> …", the
// write instants since the request arrived.
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
	// Truth lines are kept in memory and written after the run, so that
	// the client process does not spend CPU reading them while measured.
	var (
		mu       sync.Mutex
		lines    []string
		handlers sync.WaitGroup
	)
	fmt.Fprintf(out, "ADDR %s\n", ln.Addr())
	out.Flush()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		handlers.Add(1)
		defer handlers.Done()
		var req struct {
			MaxTokens int `json:"max_tokens"`
			Messages  []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		key := req.Messages[0].Content
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		fl.Flush()
		writes := make([]int64, 0, req.MaxTokens)
		chunk := []byte(`data: {"id":"x","object":"chat.completion.chunk","model":"paced","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}` + "\n\n")
		for i := 0; i < req.MaxTokens; i++ {
			if d := time.Until(t0.Add(time.Duration(i+1) * pace)); d > 0 {
				time.Sleep(d)
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			fl.Flush()
			writes = append(writes, int64(time.Since(t0)))
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", req.MaxTokens)
		fl.Flush()
		var b strings.Builder
		b.WriteString("T ")
		b.WriteString(key)
		for _, t := range writes {
			b.WriteByte(' ')
			b.WriteString(strconv.FormatInt(t, 10))
		}
		b.WriteByte('\n')
		mu.Lock()
		lines = append(lines, b.String())
		mu.Unlock()
	})
	srv := &http.Server{Handler: mux}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	handlers.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, l := range lines {
		out.WriteString(l)
	}
	return out.Flush()
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

// accuracy is what a paced run measured.
type accuracy struct {
	streams, tokens        int
	failed                 int
	wall                   time.Duration
	tokPerSec              float64
	clientCPU, serverCPU   time.Duration
	errP50, errP99, errMax time.Duration // |measured gap − server's gap|
	schedP50, schedP99     time.Duration // |server's gap − pace| (how exact the truth is)
	itlP50, itlP99         time.Duration // measured
	missing                int           // streams without a truth line or with a token-count mismatch
}

func (a accuracy) String() string {
	return fmt.Sprintf("%d streams, %d tokens in %v = %.0f tok/s; failed %d, mismatched %d; "+
		"|measured ITL − true ITL| p50 %v p99 %v max %v; measured ITL p50 %v p99 %v; server vs schedule p50 %v p99 %v; "+
		"client CPU %v (%.0f%% of one core, %.1f µs/token), server CPU %v (%.0f%%); load average %s",
		a.streams, a.tokens, a.wall.Round(time.Millisecond), a.tokPerSec, a.failed, a.missing,
		a.errP50, a.errP99, a.errMax, a.itlP50, a.itlP99, a.schedP50, a.schedP99,
		a.clientCPU.Round(time.Millisecond), 100*a.clientCPU.Seconds()/a.wall.Seconds(),
		float64(a.clientCPU.Microseconds())/float64(max(a.tokens, 1)),
		a.serverCPU.Round(time.Millisecond), 100*a.serverCPU.Seconds()/a.wall.Seconds(), loadavg())
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
	c, err := NewClient(ClientConfig{BaseURL: "http://" + srv.addr, Model: "paced", MaxConns: streams}, clock)
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
	cpu0, scpu0 := selfCPU(), srv.cpu()
	res := b.RunOnce(ctx, spec, items, Plan{RepeatRuns: 1}, 1, false)
	a := accuracy{streams: streams, clientCPU: selfCPU() - cpu0, serverCPU: srv.cpu() - scpu0, wall: res.End - res.Start}
	srv.stop()
	var errs, sched, itl []time.Duration
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
			continue
		}
		for j := 1; j < len(truth); j++ {
			m, tr := r.Tokens[j]-r.Tokens[j-1], truth[j]-truth[j-1]
			errs = append(errs, (m - tr).Abs())
			sched = append(sched, (tr - pace).Abs())
			itl = append(itl, m)
		}
	}
	for _, s := range [][]time.Duration{errs, sched, itl} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	a.errP50, a.errP99 = quantile(errs, 0.5), quantile(errs, 0.99)
	if len(errs) > 0 {
		a.errMax = errs[len(errs)-1]
	}
	a.schedP50, a.schedP99 = quantile(sched, 0.5), quantile(sched, 0.99)
	a.itlP50, a.itlP99 = quantile(itl, 0.5), quantile(itl, 0.99)
	if a.wall > 0 {
		a.tokPerSec = float64(a.tokens) / a.wall.Seconds()
	}
	return a
}

// TestPacedAccuracySmall is the always-on version of the proof: 50 streams,
// 20 tokens each, one every 10 ms. Under -race on a loaded machine only a
// loose bound is asserted; the strict one is in TestClientNeverBottleneck.
func TestPacedAccuracySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	a := runPaced(t, 50, 20, 10*time.Millisecond)
	t.Log(a)
	if a.failed > 0 || a.missing > 0 {
		t.Fatalf("failed %d, mismatched %d", a.failed, a.missing)
	}
	if a.tokens != 50*20 {
		t.Fatalf("measured %d tokens, the server sent %d", a.tokens, 50*20)
	}
	if a.errP50 > 2*time.Millisecond {
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
// TRENI_LOAD_PROOF_PACE override 1000, 500 and 10ms. Note that the paced server shares the machine's cores: its CPU is
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
