package pagecache

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrCannotEvict means a file lives on a file system whose pages cannot be
// dropped (tmpfs, ramfs: the page cache is the file's only copy).
var ErrCannotEvict = errors.New("file system cannot evict page cache")

// fsMagic values from statfs(2).
const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// CanEvict reports whether path's pages can be dropped from the page cache,
// and why not when they cannot.
func CanEvict(path string) (bool, string) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, fmt.Sprintf("statfs %s: %v", path, err)
	}
	switch uint64(st.Type) {
	case tmpfsMagic:
		return false, path + " is on tmpfs: its pages are the file itself and cannot be evicted"
	case ramfsMagic:
		return false, path + " is on ramfs: its pages are the file itself and cannot be evicted"
	}
	return true, ""
}

// Evict drops files from the page cache with posix_fadvise(DONTNEED), which
// needs no root. It first fdatasyncs each file: DONTNEED only drops clean
// pages, and a checkpoint written moments ago (model synth, a download)
// still has dirty ones. Pages mapped and locked by a running process stay;
// verify with Residency afterwards, which is the evidence a page-cache cold
// label needs (docs/ARCHITECTURE.md, "Measurements"). A file on tmpfs or ramfs gives an error wrapping ErrCannotEvict.
func Evict(files []string) error {
	var errs []error
	for _, f := range files {
		if ok, why := CanEvict(f); !ok {
			errs = append(errs, fmt.Errorf("evict %s: %w: %s", f, ErrCannotEvict, why))
			continue
		}
		if err := evictFile(f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func evictFile(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("evict %s from the page cache: %w", path, err)
	}
	defer unix.Close(fd)
	// fdatasync on a read-only descriptor is allowed on Linux; a failure
	// only means dirty pages may survive, which Residency will show.
	_ = unix.Fdatasync(fd)
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("evict %s from the page cache: posix_fadvise: %w", path, err)
	}
	return nil
}
