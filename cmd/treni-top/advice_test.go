package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/treni-top/treni-top/sessions"
)

// TestAdviceFlagsOnCLI: every flag the diagnosis advises for the built-in
// engine, or names in a probe it asks for, exists on the treni-top command
// the advice names (walking the command tree: `treni-top run … --load`
// needs run's --load, `--serve-arg=--warmup-passes=0` run's --serve-arg
// and serve's --warmup-passes), and what run passes on through --serve-arg
// is accepted by its check. The external servers' flags are checked in
// sessions (TestAdviceFlagsExist).
func TestAdviceFlagsOnCLI(t *testing.T) {
	root := newRootCmd()
	checked := 0
	for _, a := range sessions.AllAdvice() {
		builtin := a.Engine == sessions.EngineBuiltin || a.Engine == sessions.EngineBuiltinCPU || a.Engine == sessions.EngineBuiltinCUDA
		if !builtin && a.Kind != "missing" {
			continue
		}
		for _, n := range sessions.AdviceNames(a.Text) {
			path, ok := strings.CutPrefix(n.Command, "treni-top ")
			if !ok {
				t.Errorf("%s on %s: %q names %s for %q, not a treni-top command", a.Code, a.Engine, a.Text, n.Name, n.Command)
				continue
			}
			cmd, rest, err := root.Find(strings.Fields(path))
			if err != nil || len(rest) > 0 || cmd == root {
				t.Errorf("%s on %s: %q names the command %q, which treni-top does not have", a.Code, a.Engine, a.Text, n.Command)
				continue
			}
			if lookup(cmd, n.Name) == nil {
				t.Errorf("%s on %s: %q names %s, which %s does not take", a.Code, a.Engine, a.Text, n.Name, cmd.CommandPath())
			}
			checked++
		}
		if a.PlainRun {
			// What run forwards must pass run's own check of --serve-arg.
			for _, w := range strings.Fields(strings.ReplaceAll(a.Text, "`", " ")) {
				if v, ok := strings.CutPrefix(strings.TrimRight(w, ",;)"), "--serve-arg="); ok {
					// A capital letter stands for the number the user picks.
					if name, val, _ := strings.Cut(v, "="); len(val) == 1 && val >= "A" && val <= "Z" {
						v = name + "=1"
					}
					if err := checkServeArgs([]string{v}); err != nil {
						t.Errorf("%s: %q: run refuses it: %v", a.Code, a.Text, err)
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d flags checked; the advice format changed?", checked)
	}
}

// lookup finds a flag by its --name or -shorthand among a command's own
// and inherited flags.
func lookup(cmd *cobra.Command, name string) *pflag.Flag {
	if long, ok := strings.CutPrefix(name, "--"); ok {
		return cmd.Flags().Lookup(long)
	}
	return cmd.Flags().ShorthandLookup(strings.TrimPrefix(name, "-"))
}
