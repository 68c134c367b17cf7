package main

import (
	"errors"
	"strings"
	"testing"
)

// TestRunServeArgs: run passes --serve-arg values on to the built-in
// engine only after serve's own flags accept them, and refuses the flags
// run sets itself and a --serve-arg beside a command after --.
func TestRunServeArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" accepted, else in the error
	}{
		{[]string{"--warmup-passes=2", "--kv-blocks=64"}, ""},
		{[]string{"--warmup-passes", "2"}, ""},
		{[]string{"--warmpu-passes=2"}, "unknown flag: --warmpu-passes"},
		{[]string{"--warmup-passes 2"}, "one argument"},
		{[]string{"--kv-blocks=many"}, "invalid argument"},
		{[]string{"--addr=127.0.0.1:9"}, "picks a free port itself"},
		{[]string{"--load=copy"}, "run's own --load"},
		{[]string{"--model=/m"}, "run's own --model"},
		{[]string{"stray"}, "flags only"},
	} {
		err := checkServeArgs(c.args)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: error %v, want one saying %q", c.args, err, c.want)
		}
	}
	var out, errOut strings.Builder
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"run", "--headless", "--no-record", "--serve-arg=--warmup-passes=1", "--", "sh", "-c", "exit 0"})
	err := root.Execute()
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "is for the built-in engine") {
		t.Errorf("run --serve-arg with a command: %v", err)
	}
}
