package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/treni-top/treni-top/sessions"
)

func newDiffCmd() *cobra.Command {
	var against []string
	var threshold float64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff BASE... --against NEW...",
		Short: "Compare sessions and flag cold-start regressions beyond noise",
		Long: `diff compares one or more BASE sessions with one or more NEW sessions: for every
stage, the cold total and every request metric it prints both sides'
min/median/max and the change of the median in %. A metric is called a
REGRESSION only when it got slower by more than --threshold AND by more than
the run-to-run spread of either side, so record several cold runs per side
(treni-top run --cold-runs 5) to make small changes count.

Exit status: 0 no regression, 1 regression, 2 unusable input. Put it in CI.`,
		Example: `  treni-top diff base.jsonl --against new.jsonl   # each recorded with run --cold-runs 5
  treni-top diff main-1.jsonl main-2.jsonl main-3.jsonl --against pr-1.jsonl pr-2.jsonl pr-3.jsonl
  treni-top diff base.jsonl --against new.jsonl --threshold 0.05 --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Flags after the first file arrive as arguments (interspersed
			// parsing is off so that --against can take several files).
			rest, err := parseDiffArgs(args, &against, &threshold, &asJSON)
			if err != nil {
				return withExit(2, err)
			}
			args = rest
			if len(args) == 0 {
				return withExit(2, errors.New("name at least one BASE session file"))
			}
			if len(against) == 0 {
				return withExit(2, errors.New("name the NEW sessions with --against FILE (repeat it or give a comma-separated list)"))
			}
			if threshold < 0 || threshold > 10 {
				return withExit(2, fmt.Errorf("--threshold %v is out of range: give a fraction such as 0.1 for 10%%", threshold))
			}
			base, err := openAll(args)
			if err != nil {
				return withExit(2, err)
			}
			next, err := openAll(against)
			if err != nil {
				return withExit(2, err)
			}
			res, err := sessions.Diff(base, next, sessions.DiffOptions{Threshold: threshold})
			if err != nil {
				return withExit(2, err)
			}
			if asJSON {
				b, err := res.JSON()
				if err != nil {
					return withExit(2, err)
				}
				cmd.OutOrStdout().Write(b)
			} else {
				fmt.Fprint(cmd.OutOrStdout(), res.Text())
			}
			if res.Regressions > 0 {
				return withExit(1, errors.New(""))
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&against, "against", nil, "the NEW session files (repeatable)")
	cmd.Flags().Float64Var(&threshold, "threshold", sessions.DefaultThreshold, "smallest relative slowdown to call a regression (0.1 = 10%)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the comparison as JSON")
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// parseDiffArgs splits "BASE... --against NEW... [--threshold X] [--json]"
// as typed: every file after --against belongs to the new side.
func parseDiffArgs(args []string, against *[]string, threshold *float64, asJSON *bool) ([]string, error) {
	var base []string
	newSide := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		switch name {
		case "--against":
			newSide = true
			if hasVal {
				*against = append(*against, strings.Split(val, ",")...)
			}
		case "--json":
			*asJSON = true
		case "--threshold":
			if !hasVal {
				if i+1 >= len(args) {
					return nil, errors.New("--threshold needs a value such as 0.1")
				}
				i++
				val = args[i]
			}
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return nil, fmt.Errorf("--threshold %q is not a number: give a fraction such as 0.1", val)
			}
			*threshold = f
		default:
			if strings.HasPrefix(a, "-") && a != "-" {
				return nil, fmt.Errorf("unknown flag %q for diff", a)
			}
			if newSide {
				*against = append(*against, a)
			} else {
				base = append(base, a)
			}
		}
	}
	return base, nil
}

// openAll reads what diff needs of every session file named (a digest:
// bounded memory whatever the files' size).
func openAll(paths []string) ([]*sessions.Session, error) {
	var out []*sessions.Session
	for _, p := range paths {
		s, err := sessions.OpenDigest(p)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
