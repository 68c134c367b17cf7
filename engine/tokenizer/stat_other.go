//go:build !linux

package tokenizer

import "os"

// statExtra is a no-op off Linux: the memo then relies on path, size and
// modification time only.
func statExtra(fi os.FileInfo) (ino uint64, ctimeNS int64) { return 0, 0 }
