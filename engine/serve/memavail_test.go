package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fsTree writes files (path relative to a temporary root → content) and
// returns the root: a /proc and /sys as this machine or a container
// would show them.
func fsTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const meminfo64G = "MemTotal:       70000000 kB\nMemFree:        1000 kB\nMemAvailable:   67108864 kB\n"

func TestAvailableMemory(t *testing.T) {
	const gi = int64(1) << 30
	cases := []struct {
		name   string
		files  map[string]string
		want   int64
		source string // a part of the source named
	}{
		{"meminfo only", map[string]string{"proc/meminfo": meminfo64G}, 64 * gi, "MemAvailable"},
		{"cgroup v2 limit, page cache not counted", map[string]string{
			"proc/meminfo":                         meminfo64G,
			"proc/self/cgroup":                     "0::/app\n",
			"sys/fs/cgroup/app/memory.max":         "4294967296\n",
			"sys/fs/cgroup/app/memory.current":     "1073741824\n",
			"sys/fs/cgroup/app/memory.stat":        "anon 536870912\nfile 536870912\ninactive_file 536870912\n",
			"sys/fs/cgroup/app/unrelated/file.txt": "",
		}, 4*gi - gi/2, "/sys/fs/cgroup/app"},
		{"cgroup v2 ancestor tighter", map[string]string{
			"proc/meminfo":                       meminfo64G,
			"proc/self/cgroup":                   "0::/a/b\n",
			"sys/fs/cgroup/a/memory.max":         "2147483648\n",
			"sys/fs/cgroup/a/memory.current":     "1073741824\n",
			"sys/fs/cgroup/a/b/memory.max":       "max\n",
			"sys/fs/cgroup/a/b/memory.current":   "1073741824\n",
			"sys/fs/cgroup/a/b/memory.stat":      "inactive_file 0\n",
			"sys/fs/cgroup/unrelated/memory.max": "1\n",
		}, 1 * gi, "/sys/fs/cgroup/a"},
		{"cgroup v1 without limit", map[string]string{
			"proc/meminfo":     meminfo64G,
			"proc/self/cgroup": "5:devices:/\n4:memory:/process_api/x\n0::/\n",
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/x/memory.usage_in_bytes": "9355264\n",
		}, 64 * gi, "MemAvailable"},
		{"cgroup v1 limit, namespaced view", map[string]string{
			"proc/meminfo":     meminfo64G,
			"proc/self/cgroup": "4:cpu,memory:/docker/abc\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "8589934592\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "4294967296\n",
			"sys/fs/cgroup/memory/memory.stat":           "cache 0\ntotal_inactive_file 1073741824\n",
		}, 5 * gi, "limit of 8.0 GiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := availableMemory(fsTree(t, c.files))
			if err != nil {
				t.Fatal(err)
			}
			if got.bytes != c.want || !strings.Contains(got.source, c.source) {
				t.Fatalf("available %d (%s), want %d from %q", got.bytes, got.source, c.want, c.source)
			}
		})
	}
	if _, err := availableMemory(t.TempDir()); !errors.Is(err, errMemNotReported) {
		t.Fatalf("nothing to read: %v, want %v", err, errMemNotReported)
	}
}

// TestCheckTouch: --kv-touch-gib beyond the share of the available memory
// it may take is refused in one line that says how much there is and where
// that figure comes from; within it, or where nothing says (not Linux),
// it goes ahead.
func TestCheckTouch(t *testing.T) {
	root := fsTree(t, map[string]string{"proc/meminfo": meminfo64G})
	if err := checkTouch(32, root); err != nil {
		t.Fatalf("32 GiB of 64 available: %v", err)
	}
	err := checkTouch(1000, root)
	if err == nil {
		t.Fatal("1000 GiB of 64 available accepted")
	}
	msg := err.Error()
	for _, want := range []string{"--kv-touch-gib 1000", "64.0 GiB", "MemAvailable", "at most 57.6"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("message %q is more than one line", msg)
	}
	if err := checkTouch(1000, t.TempDir()); err != nil {
		t.Fatalf("no figure reported: %v, want the request let through", err)
	}
}
