package runner

import (
	"sync"
	"time"

	"github.com/treni-top/treni-top/probe/pagecache"
)

// WeightFiles finds a target's weight files once they exist: a server may
// download them after it starts, and a lazy one (Ollama) opens them only
// at the first request. Its Get is the Config's WeightFiles and the
// page-cache sampler's file list.
type WeightFiles struct {
	args  []string
	mu    sync.Mutex
	files []string
	last  time.Time
}

// NewWeightFiles looks for weight files among args (model directories,
// files, or a server's command line; see pagecache.FindWeightFiles).
func NewWeightFiles(args []string) *WeightFiles { return &WeightFiles{args: args} }

// Get returns the files; while none were found it looks again, at most
// once a second (the page-cache sampler calls it at every reading).
func (w *WeightFiles) Get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.files) == 0 && len(w.args) > 0 && time.Since(w.last) >= time.Second {
		w.last = time.Now()
		if fs, err := pagecache.FindWeightFiles(w.args); err == nil {
			w.files = fs
		}
	}
	return w.files
}
