package sessions

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ExpandPaths turns the session arguments of one side of a diff, as a
// shell passes them, into session files: a file; a comma-separated list
// (when no file has the whole name); a glob, quoted so that the shell left
// it to us; or a directory, meaning every .jsonl and .jsonl.gz in it. A
// file named twice (or through the sessions directory's latest.jsonl
// link) counts once. Each argument must name at least one file.
func ExpandPaths(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		key := p
		if real, err := filepath.EvalSymlinks(p); err == nil {
			key = real
		}
		if abs, err := filepath.Abs(key); err == nil {
			key = abs
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, p)
		}
	}
	var expand func(arg string) error
	expand = func(arg string) error {
		if arg == "" {
			return errors.New("an empty session name: check the commas of the list")
		}
		info, err := os.Stat(arg)
		switch {
		case err == nil && info.IsDir():
			files, err := sessionsIn(arg)
			if err != nil {
				return err
			}
			for _, f := range files {
				add(f)
			}
			return nil
		case err == nil:
			add(arg)
			return nil
		case strings.Contains(arg, ","):
			for _, part := range strings.Split(arg, ",") {
				if err := expand(part); err != nil {
					return err
				}
			}
			return nil
		case strings.ContainsAny(arg, "*?["):
			matches, gerr := filepath.Glob(arg)
			if gerr != nil {
				return fmt.Errorf("session pattern %q: %w", arg, gerr)
			}
			if len(matches) == 0 {
				return fmt.Errorf("no session file matches %q", arg)
			}
			for _, m := range matches {
				if err := expand(m); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("open session: %w", err)
	}
	for _, a := range args {
		if err := expand(a); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sessionsIn lists the session files of a directory, sorted by name.
func sessionsIn(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list sessions in %s: %w", dir, err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.Type()&fs.ModeType&^fs.ModeSymlink != 0 || strings.HasPrefix(name, ".") {
			continue
		}
		if !strings.HasSuffix(name, ".jsonl") && !strings.HasSuffix(name, ".jsonl.gz") {
			continue
		}
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil && e.Type()&fs.ModeSymlink != 0 {
			continue // a latest link whose session was deleted
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no session files (.jsonl, .jsonl.gz) in %s", dir)
	}
	slices.Sort(out)
	return out, nil
}

// OpenAll expands args with ExpandPaths and reads what a diff needs of
// every session named (OpenDigest: bounded memory whatever the files'
// size).
func OpenAll(args []string) ([]*Session, error) {
	paths, err := ExpandPaths(args)
	if err != nil {
		return nil, err
	}
	out := make([]*Session, 0, len(paths))
	for _, p := range paths {
		s, err := OpenDigest(p)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
