package live

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// runOwnedServeFlags are the serve flags that run sets itself: passing
// them again through --serve-arg would silently override run's own.
var runOwnedServeFlags = map[string]string{
	"model":  "pass run's own --model",
	"demo":   "run without --model serves the demo checkpoint",
	"device": "pass run's own --device",
	"load":   "pass run's own --load",
	"addr":   "run picks a free port itself (to choose the address, run -- treni-top serve --addr …)",
}

// CheckServeArgs parses --serve-arg values with serve's own flags (fs, a
// fresh set), so a misspelt flag is refused before the launch instead of
// killing the engine at its start, and refuses the flags run sets itself.
func CheckServeArgs(fs *pflag.FlagSet, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("--serve-arg %q: %w (see treni-top serve --help; give each flag as one argument, e.g. --serve-arg=--warmup-passes=0)", strings.Join(args, " "), err)
	}
	if rest := fs.Args(); len(rest) > 0 {
		return fmt.Errorf("--serve-arg %q: serve takes flags only; give each as one --serve-arg, e.g. --serve-arg=--warmup-passes=0", strings.Join(rest, " "))
	}
	var err error
	fs.Visit(func(f *pflag.Flag) {
		if use, ok := runOwnedServeFlags[f.Name]; ok && err == nil {
			err = fmt.Errorf("--serve-arg=--%s: run sets --%s itself; %s", f.Name, f.Name, use)
		}
	})
	return err
}
