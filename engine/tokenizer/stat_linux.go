package tokenizer

import (
	"os"
	"syscall"
)

// statExtra returns the inode and change time of a file. The change time
// cannot be set by users (unlike mtime, which cp -p and tar restore), so a
// replaced file never matches an old cache memo.
func statExtra(fi os.FileInfo) (ino uint64, ctimeNS int64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino, st.Ctim.Nano()
	}
	return 0, 0
}
