package launch

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
	"github.com/treni-top/treni-top/trace/serverlog"
)

// collector is a test sink.
type collector struct {
	mu  sync.Mutex
	evs []trace.Event
}

func (c *collector) Emit(e trace.Event) {
	if err := e.Validate(); err != nil {
		panic(fmt.Sprintf("invalid event emitted: %v", err))
	}
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
}

func (c *collector) events() []trace.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]trace.Event(nil), c.evs...)
}

func (c *collector) logs() []string {
	var out []string
	for _, e := range c.events() {
		if e.Kind == trace.KindLog {
			out = append(out, e.Log.Text)
		}
	}
	return out
}

func (c *collector) markers(name string) []trace.Marker {
	var out []trace.Marker
	for _, e := range c.events() {
		if e.Kind == trace.KindMarker && e.Marker.Name == name {
			out = append(out, *e.Marker)
		}
	}
	return out
}

func (c *collector) exit(t *testing.T) trace.Process {
	t.Helper()
	for _, e := range c.events() {
		if e.Kind == trace.KindProcess && e.Process.Action == trace.ProcessExit {
			return *e.Process
		}
	}
	t.Fatalf("no process exit event")
	return trace.Process{}
}

// waitFor polls cond for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStopLeavesNoOrphan(t *testing.T) {
	// The script ignores SIGINT and so do the children it starts (ignored
	// signals are inherited): one plain, one in a subshell, one that left the
	// process group with setsid. Only SIGKILL after the grace period ends
	// them, and the setsid one only because the tree was remembered.
	script := `trap '' INT
sleep 60 & echo "pid $!"
( trap '' INT; sleep 60 ) & echo "pid $!"
setsid sleep 60 & echo "pid $!"
echo ready
wait`
	c := &collector{}
	p, err := Start(context.Background(), Spec{Command: []string{"sh", "-c", script}, URL: "http://127.0.0.1:1"}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the script's ready line", func() bool {
		for _, l := range c.logs() {
			if l == "ready" {
				return true
			}
		}
		return false
	})
	pids := []int{p.PID()}
	for _, l := range c.logs() {
		if v, ok := strings.CutPrefix(l, "pid "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("bad pid line %q", l)
			}
			pids = append(pids, n)
		}
	}
	if len(pids) != 4 {
		t.Fatalf("want 4 pids, got %v", pids)
	}
	waitFor(t, 5*time.Second, "the whole tree in PIDs()", func() bool {
		return len(p.PIDs()) >= 4
	})
	began := time.Now()
	p.Stop(300 * time.Millisecond)
	if el := time.Since(began); el < 300*time.Millisecond {
		t.Errorf("Stop returned after %v, before the grace period: SIGINT should not have ended processes that ignore it", el)
	}
	for _, pid := range pids {
		if alive(pid, 0) {
			t.Errorf("pid %d still running after Stop", pid)
		}
	}
	ex := c.exit(t)
	if !ex.Expected || ex.Signal != "SIGKILL" {
		t.Errorf("exit = %+v, want expected and SIGKILL", ex)
	}
	if n := len(c.markers(trace.MarkerTargetCrashed)); n != 0 {
		t.Errorf("a stop we asked for was reported as a crash")
	}
	if len(p.PIDs()) != 0 {
		t.Errorf("PIDs() after Stop = %v", p.PIDs())
	}
}

func TestStopGracefulWithinGrace(t *testing.T) {
	c := &collector{}
	p, err := Start(context.Background(), Spec{Command: []string{"sleep", "60"}, URL: "http://127.0.0.1:1"}, c, trace.NewClock(), 2)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	p.Stop(5 * time.Second)
	if el := time.Since(began); el > 2*time.Second {
		t.Errorf("SIGINT should have ended sleep at once; Stop took %v", el)
	}
	ex := c.exit(t)
	if !ex.Expected || ex.Signal != "SIGINT" {
		t.Errorf("exit = %+v, want expected, SIGINT", ex)
	}
	for _, e := range c.events() {
		if e.Run != 2 {
			t.Fatalf("event %+v has run %d, want 2", e, e.Run)
		}
	}
}

func TestCrashReportedWithTail(t *testing.T) {
	// 30 lines, then exit 3: the session must keep every line, the exit
	// code, and the crash marker with the last 20 lines.
	script := `i=1; while [ $i -le 30 ]; do echo "line $i"; i=$((i+1)); done; echo "fatal: out of memory" >&2; exit 3`
	c := &collector{}
	p, err := Start(context.Background(), Spec{Command: []string{"sh", "-c", script}, URL: "http://127.0.0.1:1"}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ex := p.Wait()
	if ex.Code != 3 || ex.Expected {
		t.Fatalf("exit = %+v, want code 3 unexpected", ex)
	}
	pe := c.exit(t)
	if pe.ExitCode != 3 || pe.Expected {
		t.Fatalf("exit event = %+v", pe)
	}
	if got := len(c.logs()); got != 31 {
		t.Errorf("session kept %d log lines, want 31", got)
	}
	ms := c.markers(trace.MarkerTargetCrashed)
	if len(ms) != 1 {
		t.Fatalf("want one crash marker, got %d", len(ms))
	}
	tail, _ := ms[0].Attrs.String("log_tail")
	lines := strings.Split(tail, "\n")
	// stdout and stderr are read by separate goroutines, so the stderr
	// line may be read before the last stdout lines; the tail is the last
	// 20 lines read.
	if len(lines) != TailLines || !strings.Contains(tail, "line 30") || strings.Contains(tail, "line 10\n") {
		t.Errorf("log tail = %q", tail)
	}
	if code, _ := ms[0].Attrs.Float("exit_code"); code != 3 {
		t.Errorf("crash marker exit_code = %v", code)
	}
	// Everything the target printed comes before its exit event.
	seenExit := false
	for _, e := range c.events() {
		if e.Kind == trace.KindProcess && e.Process.Action == trace.ProcessExit {
			seenExit = true
		}
		if seenExit && e.Kind == trace.KindLog {
			t.Errorf("log line %q after the exit event", e.Log.Text)
		}
	}
	if err := p.WaitHealthy(context.Background()); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("WaitHealthy after crash = %v", err)
	}
}

func TestHealthPolling(t *testing.T) {
	// An OpenAI server without /health that answers 503 while loading:
	// the poller must move on to /v1/models and wait for its 200. The URL
	// comes from its listening line.
	c := &collector{}
	p, err := Start(context.Background(), serverSpec("loading", "127.0.0.1:0"), c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	var listenURL string
	for _, l := range c.logs() {
		if u, ok := strings.CutPrefix(l, "INFO: Uvicorn running on "); ok {
			listenURL, _, _ = strings.Cut(u, " ")
		}
	}
	if listenURL == "" || p.BaseURL() != listenURL {
		t.Errorf("base URL from the listener line = %q, want %q", p.BaseURL(), listenURL)
	}
	hm := c.markers(trace.MarkerHealthy)
	if len(hm) != 1 {
		t.Fatalf("want one healthy marker, got %d", len(hm))
	}
	if path, _ := hm[0].Attrs.String("path"); path != "/v1/models" {
		t.Errorf("healthy via %q, want /v1/models", path)
	}
	if owner, _ := hm[0].Attrs.String("listener"); owner != "target" {
		t.Errorf("healthy marker's listener %q, want target (the launched tree holds the socket)", owner)
	}
	var ready *trace.Span
	var healthyAt time.Duration
	for _, e := range c.events() {
		if e.Kind == trace.KindStage && e.Stage.Name == trace.StageHTTPReady {
			ready = e.Stage
		}
		if e.Kind == trace.KindMarker && e.Marker.Name == trace.MarkerHealthy {
			healthyAt = e.At
		}
	}
	if ready == nil {
		t.Fatal("no http_ready span")
	}
	if from, _ := ready.Attrs.String("from"); from != "listen_log_line" {
		t.Errorf("http_ready from %q", from)
	}
	if ready.End != healthyAt || ready.Start >= ready.End {
		t.Errorf("http_ready %v–%v, healthy at %v", ready.Start, ready.End, healthyAt)
	}
	// Four 503s at 10 ms apart: at least ~30 ms between listener and OK.
	if ready.Duration() < 25*time.Millisecond {
		t.Errorf("http_ready lasted %v; polling is not waiting between polls", ready.Duration())
	}
}

func TestHealthFromFirstAcceptedConnection(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	spec := serverSpec("quiet", addr)
	spec.URL = "http://" + addr + "/"
	c := &collector{}
	p, err := Start(context.Background(), spec, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range c.events() {
		if e.Kind == trace.KindStage && e.Stage.Name == trace.StageHTTPReady {
			if from, _ := e.Stage.Attrs.String("from"); from != "first_accepted_connection" {
				t.Errorf("http_ready from %q", from)
			}
			return
		}
	}
	t.Fatal("no http_ready span")
}

func TestStageLinesBecomeSpans(t *testing.T) {
	now := time.Now()
	line := trace.NewStageLine(trace.StageTensorIndexBuild, now, now.Add(5*time.Millisecond), trace.Attrs{"tensors": 3}).Marshal()
	c := &collector{}
	p, err := Start(context.Background(), Spec{Command: []string{"sh", "-c", "echo '" + string(line) + "' >&2; echo plain >&2"}, URL: "http://127.0.0.1:1"}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if p.Kind() != string(serverlog.KindTreni) {
		t.Errorf("kind = %q, want treni (detected from the stage line)", p.Kind())
	}
	var span, marked bool
	for _, e := range c.events() {
		if e.Kind == trace.KindStage && e.Stage.Name == trace.StageTensorIndexBuild {
			span = true
			if d := e.Stage.Duration(); d != 5*time.Millisecond {
				t.Errorf("span lasts %v", d)
			}
		}
		if e.Kind == trace.KindLog && e.Log.Stage == trace.StageTensorIndexBuild {
			marked = true
		}
	}
	if !span || !marked {
		t.Errorf("stage span %v, log line marked %v", span, marked)
	}
	if len(c.markers(trace.MarkerKindDetected)) != 1 {
		t.Errorf("kind detection not reported")
	}
	if n := launcherProcessStarts(c); n != 0 {
		t.Errorf("%d launcher process_start spans: the engine's first line is its own process_start", n)
	}
}

// launcherProcessStarts counts the process_start spans the launcher made
// (spawn → first output), which the built-in engine must not get.
func launcherProcessStarts(c *collector) int {
	n := 0
	for _, e := range c.events() {
		if e.Kind == trace.KindStage && e.Stage.Name == trace.StageProcessStart && e.Stage.Source == "launcher" {
			n++
		}
	}
	return n
}

// TestStageLineOverridesCommandKind: a command that only looks like
// another server (here a model path naming sglang; or treni-top under
// another name) is the built-in engine when its output carries the
// engine's stage lines: the parser switches and the switch is reported.
// A kind the caller forced stays.
func TestStageLineOverridesCommandKind(t *testing.T) {
	now := time.Now()
	line := trace.NewStageLine(trace.StageTensorIndexBuild, now, now.Add(5*time.Millisecond), trace.Attrs{"tensors": 3}).Marshal()
	script := "echo '" + string(line) + "' >&2; echo plain"
	for _, c := range []struct {
		name   string
		forced serverlog.Kind
		want   serverlog.Kind
	}{
		{"guessed from the command", "", serverlog.KindTreni},
		{"forced", serverlog.KindSGLang, serverlog.KindSGLang},
	} {
		col := &collector{}
		spec := Spec{Command: []string{"sh", "-c", script, "/models/sglang-qwen"}, URL: "http://127.0.0.1:1", Kind: c.forced}
		p, err := Start(context.Background(), spec, col, trace.NewClock(), 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Wait()
		var started string
		span := false
		for _, e := range col.events() {
			switch {
			case e.Kind == trace.KindProcess && e.Process.Action == trace.ProcessStart:
				started = e.Process.ServerKind
			case e.Kind == trace.KindStage && e.Stage.Name == trace.StageTensorIndexBuild:
				span = true
			}
		}
		if started != string(serverlog.KindSGLang) {
			t.Fatalf("%s: process start says %q; the command should look like sglang", c.name, started)
		}
		if p.Kind() != string(c.want) || !span {
			t.Errorf("%s: kind %q, stage span %v; want %q", c.name, p.Kind(), span, c.want)
		}
		want := 0
		if c.forced == "" {
			want = 1
		}
		if n := len(col.markers(trace.MarkerKindDetected)); n != want {
			t.Errorf("%s: %d kind detections reported, want %d", c.name, n, want)
		}
	}
}

func TestStartFailsClearly(t *testing.T) {
	_, err := Start(context.Background(), Spec{Command: []string{"/nonexistent/server"}}, &collector{}, trace.NewClock(), 0)
	if err == nil || !strings.Contains(err.Error(), "PATH") {
		t.Errorf("err = %v", err)
	}
	if _, err := Start(context.Background(), Spec{}, &collector{}, trace.NewClock(), 0); err == nil {
		t.Error("empty command accepted")
	}
}

func TestContextCancelStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{}
	p, err := Start(ctx, Spec{Command: []string{"sleep", "60"}, URL: "http://127.0.0.1:1", Grace: time.Second}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("target still running after its context ended")
	}
	if ex := c.exit(t); !ex.Expected {
		t.Errorf("exit after cancel not expected: %+v", ex)
	}
}

func TestAttach(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := &collector{}
	p, err := Attach(context.Background(), AttachSpec{URL: srv.URL}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
		t.Fatal("attached target reported exited after healthy")
	case <-time.After(50 * time.Millisecond):
	}
	p.Stop(time.Second)
	for _, e := range c.events() {
		if e.Kind == trace.KindStage || e.Kind == trace.KindProcess {
			t.Errorf("attach emitted %s event", e.Kind)
		}
	}
	if _, err := Attach(context.Background(), AttachSpec{URL: "localhost"}, c, trace.NewClock(), 0); err == nil {
		t.Error("a URL without scheme was accepted")
	}
}

func TestInferURL(t *testing.T) {
	cases := []struct {
		cmd  []string
		env  []string
		kind serverlog.Kind
		want string
		expl bool
	}{
		{[]string{"vllm", "serve", "m"}, nil, serverlog.KindVLLM, "http://127.0.0.1:8000", false},
		{[]string{"vllm", "serve", "m", "--port", "9001", "--host", "0.0.0.0"}, nil, serverlog.KindVLLM, "http://127.0.0.1:9001", true},
		{[]string{"llama-server", "-m", "x.gguf", "--port=8181"}, nil, serverlog.KindLlamaCpp, "http://127.0.0.1:8181", true},
		{[]string{"ollama", "serve"}, []string{"OLLAMA_HOST=127.0.0.1:11500"}, serverlog.KindOllama, "http://127.0.0.1:11500", true},
		{[]string{"ollama", "serve"}, []string{"OLLAMA_HOST=http://0.0.0.0:11600"}, serverlog.KindOllama, "http://127.0.0.1:11600", true},
		{[]string{"text-generation-launcher", "--model-id", "m"}, nil, serverlog.KindTGI, "http://127.0.0.1:3000", false},
		{[]string{"treni-top", "serve", "--addr", "127.0.0.1:7070"}, nil, serverlog.KindTreni, "http://127.0.0.1:7070", true},
		{[]string{"./myserver"}, nil, serverlog.KindUnknown, "", false},
	}
	for _, tc := range cases {
		got, expl := InferURL(tc.cmd, tc.env, tc.kind)
		if got != tc.want || expl != tc.expl {
			t.Errorf("InferURL(%v, %v) = %q %v, want %q %v", tc.cmd, tc.env, got, expl, tc.want, tc.expl)
		}
	}
}

func TestDetectAndListenLines(t *testing.T) {
	for cmd, want := range map[string]serverlog.Kind{
		"vllm serve Qwen/Qwen3-4B":                        serverlog.KindVLLM,
		"python -m vllm.entrypoints.openai.api_server":    serverlog.KindVLLM,
		"python3 -m sglang.launch_server --model-path m":  serverlog.KindSGLang,
		"text-generation-launcher --model-id m":           serverlog.KindTGI,
		"/opt/llama.cpp/build/bin/llama-server -m m.gguf": serverlog.KindLlamaCpp,
		".peers/bin/ollama serve":                         serverlog.KindOllama,
		"/usr/local/bin/treni-top serve --model d":        serverlog.KindTreni,
		"./my-server --port 1":                            serverlog.KindUnknown,
	} {
		if got := serverlog.DetectKind(strings.Fields(cmd), nil); got != want {
			t.Errorf("Detect(%q) = %q, want %q", cmd, got, want)
		}
	}
	for line, want := range map[string]string{
		`time=2026-11-22T03:00:00Z level=INFO source=routes.go:1 msg="Listening on 127.0.0.1:11500 (version 0.9.6)"`: "http://127.0.0.1:11500",
		"INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)":                                    "http://127.0.0.1:8000",
		"main: server is listening on http://127.0.0.1:8080 - starting the main loop":                                "http://127.0.0.1:8080",
		"treni-top serve: listening on http://127.0.0.1:41234":                                                       "http://127.0.0.1:41234",
	} {
		if got, ok := listenURL(line); !ok || got != want {
			t.Errorf("listenURL(%q) = %q %v, want %q", line, got, ok, want)
		}
	}
	if _, ok := listenURL("loading weights"); ok {
		t.Error("plain line taken for a listener line")
	}
}

func TestBuiltinSpec(t *testing.T) {
	s, err := BuiltinSpec("/models/demo", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != serverlog.KindTreni || !strings.HasPrefix(s.URL, "http://127.0.0.1:") || s.Command[1] != "serve" {
		t.Errorf("spec = %+v", s)
	}
	if got, _ := InferURL(s.Command, nil, serverlog.KindTreni); got != s.URL {
		t.Errorf("the command's --addr (%q) and the URL (%q) disagree", got, s.URL)
	}
}

func TestCrashReapsEscapedChild(t *testing.T) {
	// The target starts a child that leaves its process group (setsid) and
	// keeps the output pipe open, then dies. The child was seen in the tree
	// (as the samplers see it), so it is stopped; and the launcher's
	// watchers end although the pipe's writer outlived the target.
	script := `setsid sleep 30 & echo "pid $!"; sleep 0.5; exit 3`
	c := &collector{}
	p, err := Start(context.Background(), Spec{Command: []string{"sh", "-c", script}, URL: "http://127.0.0.1:1", Grace: 300 * time.Millisecond}, c, trace.NewClock(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	waitFor(t, 5*time.Second, "the child's pid", func() bool {
		for _, l := range c.logs() {
			if v, ok := strings.CutPrefix(l, "pid "); ok {
				child, _ = strconv.Atoi(v)
			}
		}
		return child > 0
	})
	waitFor(t, 5*time.Second, "the child in the tree", func() bool {
		for _, pid := range p.PIDs() {
			if pid == child {
				return true
			}
		}
		return false
	})
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("watchers still running: a pipe held by an escaped child blocks them")
	}
	if ex, _ := p.ExitStatus(); ex.Code != 3 || ex.Expected {
		t.Errorf("exit %+v", ex)
	}
	if alive(child, 0) {
		t.Errorf("escaped child %d still running after its parent crashed", child)
	}
}
