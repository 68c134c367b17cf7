package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions"
)

// diffFlags are diff's options as typed.
type diffFlags struct {
	against   []string
	alpha     float64
	threshold float64
	minDelta  time.Duration
	asJSON    bool
	format    string
}

func newDiffCmd() *cobra.Command {
	f := diffFlags{}
	cmd := &cobra.Command{
		Use:   "diff BASE... --against NEW...",
		Short: "Compare sessions and flag cold-start regressions beyond noise",
		Long: `diff compares BASE sessions with NEW sessions, benchstat-style. Every cold run
is one sample (a session recorded with --cold-runs N holds N; several files
per side are pooled); a warm metric's sample is the run's median request.
For every metric it prints both sides' min/median/max, the change of the
median (Hodges–Lehmann) with its confidence interval, and the Mann–Whitney
p-value.

The headline is what a user feels: the cold first token (start → first
token), cold TTFT, warm TTFT, ITL, TPOT and E2E. A REGRESSION is a headline
metric that is significant at --alpha (Holm-corrected over the headline
metrics), slower by more than --threshold, and slower by more than
--min-delta. Stages explain the headline ("page_cache +290 ms explains 94%")
and never fail the comparison on their own. '~' means no significant change;
with too few runs per side (fewer than 5 at the defaults) diff says what to
record instead of guessing, unless the change is beyond any plausible noise
(docs/DIFF.md).

Sessions may be files, comma-separated lists, quoted globs or directories.
Exit status: 0 no regression, 1 regression, 2 unusable input. Put it in CI.`,
		Example: `  treni-top run --headless --cold-runs 5 --record base.jsonl     # on the base
  treni-top run --headless --cold-runs 5 --record new.jsonl      # on the change
  treni-top diff base.jsonl --against new.jsonl
  treni-top diff 'main-*.jsonl' --against pr-1.jsonl,pr-2.jsonl --format markdown
  treni-top diff sessions/main/ --against sessions/pr/ --threshold 0.05 --min-delta 2ms --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Flags after the first file arrive as arguments (interspersed
			// parsing is off so that --against can take several files).
			base, err := parseDiffArgs(args, &f)
			if err != nil {
				return withExit(2, err)
			}
			opts, format, err := f.options()
			if err != nil {
				return withExit(2, err)
			}
			if len(base) == 0 {
				return withExit(2, errors.New("name at least one BASE session (file, directory, glob or comma list)"))
			}
			if len(f.against) == 0 {
				return withExit(2, errors.New("name the NEW sessions with --against (files, a comma list, a quoted glob or a directory)"))
			}
			bs, err := sessions.OpenAll(base)
			if err != nil {
				return withExit(2, fmt.Errorf("BASE: %w", err))
			}
			ns, err := sessions.OpenAll(f.against)
			if err != nil {
				return withExit(2, fmt.Errorf("NEW: %w", err))
			}
			res, err := sessions.Diff(bs, ns, opts)
			if err != nil {
				return withExit(2, err)
			}
			out := cmd.OutOrStdout()
			switch format {
			case "json":
				b, err := res.JSON()
				if err != nil {
					return withExit(2, err)
				}
				out.Write(b)
			case "markdown":
				fmt.Fprint(out, res.Markdown())
			default:
				fmt.Fprint(out, res.Text())
			}
			if res.Regressions > 0 {
				return withExit(1, errors.New(""))
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&f.against, "against", nil, "the NEW sessions: files, comma lists, quoted globs or directories (every argument after it)")
	cmd.Flags().Float64Var(&f.alpha, "alpha", sessions.DefaultAlpha, "significance level, family-wise over the headline metrics")
	cmd.Flags().Float64Var(&f.threshold, "threshold", sessions.DefaultThreshold, "smallest relative slowdown to call a regression (0.1 = 10%)")
	cmd.Flags().DurationVar(&f.minDelta, "min-delta", sessions.DefaultMinDelta, "smallest absolute slowdown to call a regression (ITL and TPOT are held to --threshold only)")
	cmd.Flags().StringVar(&f.format, "format", "text", "output: text, markdown (a pull-request comment) or json")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the comparison as JSON (same as --format json)")
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// options checks the flags and turns them into Diff's options and the
// output format.
func (f diffFlags) options() (sessions.DiffOptions, string, error) {
	o := sessions.DiffOptions{Alpha: f.alpha, Threshold: f.threshold, MinDelta: f.minDelta}
	if err := o.Check(); err != nil {
		return o, "", err
	}
	format := f.format
	if f.asJSON {
		format = "json"
	}
	switch format {
	case "text", "json":
	case "markdown", "md":
		format = "markdown"
	default:
		return o, "", fmt.Errorf("--format %q: use text, markdown or json", f.format)
	}
	return o, format, nil
}

// parseDiffArgs splits "BASE... --against NEW... [flags]" as typed: every
// argument after --against belongs to the new side, flags anywhere. It
// returns the BASE arguments.
func parseDiffArgs(args []string, f *diffFlags) ([]string, error) {
	var base []string
	newSide := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		value := func(example string) (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value such as %s", name, example)
			}
			i++
			return args[i], nil
		}
		switch name {
		case "--against":
			newSide = true
			if hasVal {
				f.against = append(f.against, val)
			}
		case "--json":
			f.asJSON = true
		case "--format":
			v, err := value("markdown")
			if err != nil {
				return nil, err
			}
			f.format = v
		case "--threshold", "--alpha":
			v, err := value("0.05")
			if err != nil {
				return nil, err
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("%s %q is not a number: give a fraction such as 0.05", name, v)
			}
			if name == "--alpha" {
				f.alpha = x
			} else {
				f.threshold = x
			}
		case "--min-delta":
			v, err := value("5ms")
			if err != nil {
				return nil, err
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("--min-delta %q is not a duration: give one such as 5ms", v)
			}
			f.minDelta = d
		default:
			if strings.HasPrefix(a, "-") && a != "-" {
				return nil, fmt.Errorf("unknown flag %q for diff", a)
			}
			if newSide {
				f.against = append(f.against, a)
			} else {
				base = append(base, a)
			}
		}
	}
	return base, nil
}
