package sessions

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// LatestName is the link in the sessions directory to the session recorded
// last there, so that `treni-top replay ~/.local/share/treni-top/sessions/latest.jsonl`
// needs no file name.
const LatestName = "latest.jsonl"

// LinkLatest points the sessions directory's latest.jsonl at path (a file
// in that directory), replacing the link atomically: a new link under a
// temporary name renamed over the old, so that a reader never finds it
// missing. A regular file of that name is the user's and is left alone.
func LinkLatest(path string) error {
	dir := filepath.Dir(path)
	latest := filepath.Join(dir, LatestName)
	if fi, err := os.Lstat(latest); err == nil && fi.Mode()&os.ModeSymlink == 0 {
		return fmt.Errorf("link %s: a file that is not a link has that name; rename it to get the latest link", latest)
	}
	tmp := filepath.Join(dir, ".latest-"+strconv.Itoa(os.Getpid())+".tmp")
	os.Remove(tmp) // a leftover of a process with our pid that died here
	// Relative, so that the directory can be moved or mounted elsewhere.
	if err := os.Symlink(filepath.Base(path), tmp); err != nil {
		return fmt.Errorf("link %s: %w", latest, err)
	}
	if err := os.Rename(tmp, latest); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link %s: %w", latest, err)
	}
	return nil
}
