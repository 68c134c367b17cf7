package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/engine/cuda"
)

// Every subcommand documents itself with a short line, help text and an
// example (issue 2).
func TestEveryCommandHasHelpAndExample(t *testing.T) {
	var walk func(c *cobra.Command)
	seen := map[string]bool{}
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			seen[sub.CommandPath()] = true
			if sub.Short == "" || strings.TrimSpace(sub.Example) == "" {
				t.Errorf("%s: Short %q, Example %q", sub.CommandPath(), sub.Short, sub.Example)
			}
			walk(sub)
		}
	}
	walk(newRootCmd())
	for _, want := range []string{"run", "attach", "replay", "report", "diff", "import", "serve", "bench", "model", "model synth", "model inspect", "model tokenize", "doctor", "version"} {
		if !seen["treni-top "+want] {
			t.Errorf("subcommand %q missing (have %v)", want, seen)
		}
	}
}

func TestVersion(t *testing.T) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil || !strings.HasPrefix(out.String(), "treni-top ") {
		t.Fatalf("version: %v %q", err, out.String())
	}
}

// diff's exit codes are its CI contract: 0 no regression, 1 regression,
// 2 unusable input; its inputs are what a shell makes (comma lists, quoted
// globs, directories, files after --against).
func TestDiffExitCodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	header := `{"format":"treni-top-session","version":"1.0","tool_version":"t","created":"2026-11-22T00:00:00Z","host":{"hostname":"h","os":"linux","arch":"amd64","cpus":2},"target":{"kind":"builtin"}}`
	// A session of cold runs whose page_cache takes ms + run index (a
	// little spread, no ties), each ending healthy.
	session := func(name string, ms int, runs int) string {
		body := header + "\n"
		for r := 0; r < runs; r++ {
			at := r * 10_000_000_000
			dur := (ms + r) * 1_000_000
			run := strconv.Itoa(r)
			body += `{"t":` + strconv.Itoa(at) + `,"run":` + run + `,"kind":"process","process":{"action":"start","pid":1}}` + "\n" +
				`{"t":` + strconv.Itoa(at+dur) + `,"run":` + run + `,"kind":"stage","stage":{"name":"page_cache","start":` + strconv.Itoa(at) + `,"end":` + strconv.Itoa(at+dur) + `}}` + "\n" +
				`{"t":` + strconv.Itoa(at+dur) + `,"run":` + run + `,"kind":"marker","marker":{"name":"healthy"}}` + "\n"
		}
		return write(name, body)
	}
	base := session("base.jsonl", 100, 5)
	same := session("same.jsonl", 101, 5)
	slow := session("slow.jsonl", 150, 5)
	one := session("one.jsonl", 100, 1)
	oneSlow := session("one-slow.jsonl", 150, 1)
	session("pr/a.jsonl", 150, 2)
	session("pr/b.jsonl", 152, 3)
	garbage := write("garbage.jsonl", "not a session\n")
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"diff", base, "--against", same}, 0},
		{[]string{"diff", base, "--against", slow}, 1},
		{[]string{"diff", base, "--against", slow, "--threshold", "0.6"}, 0},
		{[]string{"diff", base, "--against", slow, "--min-delta", "1s"}, 0},
		{[]string{"diff", base, "--against", slow, "--alpha=0.001"}, 0},
		{[]string{"diff", base, "--against", slow, "--json"}, 1},
		{[]string{"diff", base, "--against", slow, "--format", "markdown"}, 1},
		{[]string{"diff", "--against", slow, base}, 1},
		// 1 run per side: +50% is no verdict, not a regression.
		{[]string{"diff", one, "--against", oneSlow}, 0},
		// Five runs in two files, as a directory, a glob, a comma list
		// and two arguments.
		{[]string{"diff", base, "--against", filepath.Join(dir, "pr")}, 1},
		{[]string{"diff", base, "--against", filepath.Join(dir, "pr", "*.jsonl")}, 1},
		{[]string{"diff", base, "--against", filepath.Join(dir, "pr", "a.jsonl") + "," + filepath.Join(dir, "pr", "b.jsonl")}, 1},
		{[]string{"diff", base, "--against", filepath.Join(dir, "pr", "a.jsonl"), filepath.Join(dir, "pr", "b.jsonl")}, 1},
		{[]string{"diff", base, "--against", garbage}, 2},
		{[]string{"diff", base}, 2},
		{[]string{"diff", base, "--against", filepath.Join(dir, "missing.jsonl")}, 2},
		{[]string{"diff", base, "--against", filepath.Join(dir, "*.none")}, 2},
		{[]string{"diff", base, "--against", slow, "--format", "xml"}, 2},
		{[]string{"diff", base, "--against", slow, "--alpha", "0.7"}, 2},
		{[]string{"diff", base, "--against", slow, "--min-delta", "5"}, 2},
		{[]string{"diff", base, "--against", slow, "--min-delta", "0s"}, 2},
		{[]string{"diff", base, "--against", slow, "--threshold", "0"}, 2},
		{[]string{"report", garbage}, 2},
		{[]string{"report", base, "--format", "nope"}, 2},
	} {
		if got := execute(c.args); got != c.want {
			t.Errorf("treni-top %s: exit %d, want %d", strings.Join(c.args, " "), got, c.want)
		}
	}
}

// replay --headless keeps run --headless's split: progress lines on
// stderr, stdout for the report alone (so it can be redirected to a file).
func TestReplayHeadlessStreams(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.jsonl")
	body := `{"format":"treni-top-session","version":"1.0","tool_version":"t","created":"2026-11-22T00:00:00Z","host":{"hostname":"h","os":"linux","arch":"amd64","cpus":2},"target":{"kind":"builtin"}}` + "\n" +
		`{"t":0,"kind":"process","process":{"action":"start","pid":1}}` + "\n" +
		`{"t":100000000,"kind":"stage","stage":{"name":"page_cache","start":0,"end":100000000}}` + "\n" +
		`{"t":100000000,"kind":"marker","marker":{"name":"healthy"}}` + "\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"replay", "--headless", p})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout.String(), "# treni-top session report") || strings.Contains(stdout.String(), "stage page_cache") {
		t.Errorf("stdout should hold the report alone:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "stage page_cache") || strings.Contains(stderr.String(), "session report") {
		t.Errorf("stderr should hold the progress lines alone:\n%s", stderr.String())
	}
}

// report --format chrome streams the trace to -o through a temporary
// file: a file that turns out malformed half-way leaves nothing at -o.
func TestReportChromeOutput(t *testing.T) {
	dir := t.TempDir()
	body := `{"format":"treni-top-session","version":"1.0","tool_version":"t","created":"2026-11-22T00:00:00Z","host":{"hostname":"h","os":"linux","arch":"amd64","cpus":2},"target":{"kind":"builtin"}}` + "\n" +
		`{"t":0,"kind":"process","process":{"action":"start","pid":1}}` + "\n" +
		`{"t":100000000,"kind":"stage","stage":{"name":"page_cache","start":0,"end":100000000}}` + "\n" +
		`{"t":100000000,"kind":"sample","sample":{"source":"process","values":{"rss_bytes":1e9}}}` + "\n"
	good, bad := filepath.Join(dir, "good.jsonl"), filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(good, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// The sample's payload is broken: only the pass that writes it decodes it.
	if err := os.WriteFile(bad, []byte(body+`{"t":200000000,"kind":"sample","sample":{"source":3}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "trace.json")
	if got := execute([]string{"report", "--format", "chrome", bad, "-o", out}); got != 2 {
		t.Errorf("malformed session: exit %d, want 2", got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*trace.json*")); len(left) != 0 {
		t.Errorf("a failed export left %v", left)
	}
	if got := execute([]string{"report", "--format", "chrome", good, "-o", out}); got != 0 {
		t.Fatalf("exit %d", got)
	}
	b, err := os.ReadFile(out)
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err != nil || json.Unmarshal(b, &doc) != nil || len(doc.TraceEvents) < 5 {
		t.Fatalf("trace (%v): %s", err, b)
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
}

// doctor --floors asks for measurements: with no usable GPU nothing is
// measured, and that is a failure (exit 2), not a report like any other.
func TestDoctorFloorsWithoutGPUFails(t *testing.T) {
	if cuda.Doctor().Usable {
		t.Skip("a usable GPU: --floors measures here")
	}
	if got := execute([]string{"doctor", "--floors", "--floor-bytes", "1048576"}); got != 2 {
		t.Errorf("doctor --floors without a GPU: exit %d, want 2", got)
	}
	if got := execute([]string{"doctor"}); got != 0 {
		t.Errorf("doctor: exit %d, want 0 (a report of what is missing is not a failure)", got)
	}
}

// README's subcommand table names every subcommand (export and completion
// were missing once).
func TestREADMEListsEverySubcommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			if len(sub.Commands()) > 0 && sub.Name() != "completion" {
				walk(sub) // model: its subcommands have the rows
				continue
			}
			path := strings.TrimPrefix(sub.CommandPath(), "treni-top ")
			if !strings.Contains(readme, "\n| `"+path) {
				t.Errorf("README's subcommand table has no row for %q", path)
			}
		}
	}
	walk(newRootCmd())
}

// TestOutputIntoAFIFO: `report -o` and `import -o` write into an existing
// node that is not a regular file (a FIFO here; /dev/null alike) in place:
// the reader gets the output and the node is still there, where a rename
// of a temporary file would have replaced it with a regular file.
func TestOutputIntoAFIFO(t *testing.T) {
	dir := t.TempDir()
	session := filepath.Join(dir, "s.jsonl")
	body := `{"format":"treni-top-session","version":"1.0","tool_version":"t","created":"2026-11-22T00:00:00Z","host":{"hostname":"h","os":"linux","arch":"amd64","cpus":2},"target":{"kind":"builtin"}}` + "\n" +
		`{"t":0,"kind":"process","process":{"action":"start","pid":1}}` + "\n" +
		`{"t":100000000,"kind":"stage","stage":{"name":"page_cache","start":0,"end":100000000}}` + "\n"
	if err := os.WriteFile(session, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob("../../trace/serverlog/testdata/logs/vllm/*.log")
	if len(logs) == 0 {
		t.Fatal("no vLLM log fixture")
	}
	for _, args := range [][]string{
		{"report", "--format", "json", session},
		{"import", "--kind", "vllm", logs[0]},
	} {
		fifo := filepath.Join(dir, "pipe-"+args[0])
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		got := make(chan []byte)
		go func() {
			f, err := os.Open(fifo)
			if err != nil {
				got <- nil
				return
			}
			defer f.Close()
			b, _ := io.ReadAll(f)
			got <- b
		}()
		code := execute(append(args, "-o", fifo))
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			// The reader waits on the replaced node for good.
			t.Fatalf("%s -o FIFO replaced the FIFO (exit %d): %v %v", args[0], code, fi, err)
		}
		if code != 0 {
			t.Errorf("%s -o FIFO: exit %d", args[0], code)
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				w.Close() // unblock the reader
			}
		}
		if b := <-got; !bytes.Contains(b, []byte(`"`)) {
			t.Errorf("%s -o FIFO: the reader got %q", args[0], b)
		}
	}
}
