package live

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/treni-top/treni-top/sessions"
	"github.com/treni-top/treni-top/trace"
)

// options are valid shared options, as the CLI's defaults make them.
func options() *Options {
	return &Options{Warmup: 1, Repeat: 5, MaxTokens: 64, Prompt: DefaultPrompt, Timeout: time.Minute, Grace: time.Second, NoRecord: true, Version: "test"}
}

// runOptions are valid run options for a built-in engine on dir.
func runOptions(dir string) RunOptions {
	return RunOptions{Model: dir, ColdRuns: 1, SleepLevel: 1, SleepFor: time.Second}
}

// TestPlanRunRefuses: every bad combination is refused before anything
// is launched, with the flag to change named.
func TestPlanRunRefuses(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		lo   func(*Options)
		o    func(*RunOptions)
		args []string
		want string
	}{
		{name: "max tokens", lo: func(o *Options) { o.MaxTokens = 0 }, want: "--max-tokens"},
		{name: "json without headless", lo: func(o *Options) { o.JSON = true }, want: "add --headless"},
		{name: "record and no-record", lo: func(o *Options) { o.Record = "x.jsonl" }, want: "contradict"},
		{name: "cold runs", o: func(o *RunOptions) { o.ColdRuns = 0 }, want: "--cold-runs 0"},
		{name: "sleep cycles", o: func(o *RunOptions) { o.SleepCycles = -1 }, want: "--sleep-cycles -1"},
		{name: "sleep level", o: func(o *RunOptions) { o.SleepLevel = 3 }, want: "--sleep-level 3"},
		{name: "sleep for", o: func(o *RunOptions) { o.SleepFor = 0 }, want: "--sleep-for 0s"},
		{name: "builtin with a command", o: func(o *RunOptions) { o.Engine = "builtin" }, args: []string{"vllm", "serve"}, want: "--engine builtin takes no command"},
		{name: "external without a command", o: func(o *RunOptions) { o.Engine = "external" }, want: "needs the server command after --"},
		{name: "serve-arg with a command", o: func(o *RunOptions) { o.ServeArgs = []string{"--kv-blocks=8"} }, args: []string{"vllm", "serve"}, want: "--serve-arg \"--kv-blocks=8\" is for the built-in engine"},
		{name: "unknown engine", o: func(o *RunOptions) { o.Engine = "gpu" }, want: `--engine "gpu"`},
		{name: "model not a directory", o: func(o *RunOptions) { o.Model = dir + "/missing" }, want: "is not a model directory"},
		{name: "serve-arg refused", o: func(o *RunOptions) {
			o.ServeArgs = []string{"--nope"}
			o.CheckServeArgs = func(a []string) error { return &argError{a} }
		}, want: "bad --nope"},
		{name: "evict without weight files", o: func(o *RunOptions) { o.Evict = true }, want: "--evict-page-cache: no weight files"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lo, o := options(), runOptions(dir)
			if c.lo != nil {
				c.lo(lo)
			}
			if c.o != nil {
				c.o(&o)
			}
			p, err := PlanRun(context.Background(), lo, o, c.args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("PlanRun: %v, %v; want an error containing %q", p, err, c.want)
			}
		})
	}
}

type argError struct{ args []string }

func (e *argError) Error() string { return "bad " + strings.Join(e.args, " ") }

// TestPlanRunTargets: the built-in engine and a command become the
// session's target, with the label of the default file.
func TestPlanRunTargets(t *testing.T) {
	dir := t.TempDir()
	o := runOptions(dir)
	o.Load, o.SleepCycles, o.ServeArgs = "copy", 2, []string{"--kv-blocks=8"}
	p, err := PlanRun(context.Background(), options(), o, nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	tg := p.Header.Target
	if tg.Kind != sessions.TargetBuiltin || tg.ServerKind != "treni" || tg.Model != dir || p.Label != "treni" {
		t.Errorf("builtin target %+v, label %q", tg, p.Label)
	}
	for _, want := range [][]string{{"--load", "copy"}, {"--enable-sleep-mode"}, {"--kv-blocks=8"}} {
		if !containsRun(tg.Command, want) {
			t.Errorf("builtin command %q lacks %q", tg.Command, want)
		}
	}
	if p.Header.ColdRuns != 1 || p.Header.ToolVersion != "test" || tg.Device == "" {
		t.Errorf("header %+v", p.Header)
	}

	lo := options()
	lo.RequestModel = "m"
	cmd := []string{"/opt/bin/my-server", "--port", "8001"}
	p, err = PlanRun(context.Background(), lo, RunOptions{URL: "http://127.0.0.1:8001", ColdRuns: 3, SleepLevel: 1, SleepFor: time.Second}, cmd, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	tg = p.Header.Target
	if tg.Kind != sessions.TargetCommand || !slices.Equal(tg.Command, cmd) || tg.URL != "http://127.0.0.1:8001" || tg.Model != "m" || p.Header.ColdRuns != 3 {
		t.Errorf("command target %+v (cold runs %d)", tg, p.Header.ColdRuns)
	}
	if p.Label != "my-server" {
		t.Errorf("label %q, want the command's base name for an unknown server", p.Label)
	}
}

// containsRun reports whether want appears in s as consecutive elements.
func containsRun(s, want []string) bool {
	for i := 0; i+len(want) <= len(s); i++ {
		if slices.Equal(s[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// TestPlanAttach: a URL without a host is refused; a good one becomes an
// attach target labelled attach.
func TestPlanAttach(t *testing.T) {
	if _, err := PlanAttach(options(), AttachOptions{}, "127.0.0.1:8000"); err == nil || !strings.Contains(err.Error(), "is not a server URL") {
		t.Errorf("a URL without a scheme: %v", err)
	}
	p, err := PlanAttach(options(), AttachOptions{PID: 42, Kind: "ollama"}, "http://127.0.0.1:11434")
	if err != nil {
		t.Fatal(err)
	}
	if tg := p.Header.Target; tg.Kind != sessions.TargetAttach || tg.ServerKind != "ollama" || tg.URL != "http://127.0.0.1:11434" || p.Label != "attach" {
		t.Errorf("attach target %+v, label %q", tg, p.Label)
	}
}

// TestStartWithoutTerminal: without a terminal (as under go test) the
// session runs headless and says so; the runner's index is 0 before it
// starts.
func TestStartWithoutTerminal(t *testing.T) {
	if Interactive() {
		t.Skip("the test has a terminal on stdin and stdout")
	}
	p, err := PlanAttach(options(), AttachOptions{}, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	lo := options()
	var stderr bytes.Buffer
	s, err := Start(context.Background(), lo, p, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	if !lo.Headless || !strings.Contains(stderr.String(), "no terminal: running headless") {
		t.Errorf("headless %v, stderr %q", lo.Headless, stderr.String())
	}
	if s.RunIndex() != 0 || s.Path() != "" {
		t.Errorf("run %d, path %q", s.RunIndex(), s.Path())
	}
}

// TestAPIKey: the flag's key, else $OPENAI_API_KEY.
func TestAPIKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "env")
	if APIKey("flag") != "flag" || APIKey("") != "env" {
		t.Errorf("APIKey: %q, %q", APIKey("flag"), APIKey(""))
	}
}

// openAIServer answers health, the model list and a one-token chat
// stream, as a small OpenAI-compatible server does.
func openAIServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"data":[{"id":"synth-model"}]}`)
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
		case "/metrics":
			http.NotFound(w, r)
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestAttachSessionRun: an attach session runs its warm sequence headless
// to the end, records every request, prints the report on stdout and the
// file on stderr.
func TestAttachSessionRun(t *testing.T) {
	srv := openAIServer(t)
	lo := options()
	lo.NoRecord, lo.Record, lo.Headless, lo.Repeat = false, filepath.Join(t.TempDir(), "s.jsonl"), true, 2
	p, err := PlanAttach(lo, AttachOptions{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	s, err := Start(context.Background(), lo, p, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.StartRunner(); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), nil, &stdout, &stderr); err != nil {
		t.Fatalf("Run: %v\nstderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "session recorded: "+lo.Record) {
		t.Errorf("stderr %q lacks the session's path", stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "#") {
		t.Errorf("stdout is not the Markdown report: %q", stdout.String())
	}
	sess, err := sessions.Open(lo.Record)
	if err != nil {
		t.Fatal(err)
	}
	probes := map[string]bool{}
	for _, e := range sess.Events {
		if e.Kind == trace.KindRequest {
			probes[e.Request.ID] = true
		}
	}
	// No cold request: the server was up before the session.
	if want := lo.Warmup + lo.Repeat; len(probes) != want {
		t.Errorf("%d requests recorded, want %d warm-up and %d warm", len(probes), lo.Warmup, lo.Repeat)
	}
}
