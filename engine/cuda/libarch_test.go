package cuda

import (
	"strings"
	"testing"
)

// TestSearchListsNameOneArchitecture: the driver candidates and library
// folders of an architecture name its own folders and never another's
// (doctor on amd64 once listed /usr/lib/aarch64-linux-gnu/libcuda.so.1).
func TestSearchListsNameOneArchitecture(t *testing.T) {
	t.Setenv(DriverEnv, "")
	t.Setenv(LibDirEnv, "")
	t.Setenv("LD_LIBRARY_PATH", "")
	t.Setenv("CUDA_HOME", "/opt/cuda")
	for _, c := range []struct {
		goarch     string
		want, deny []string
	}{
		{"amd64", []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/opt/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"},
			[]string{"aarch64", "sbsa", "ppc64le", "powerpc"}},
		{"arm64", []string{"/usr/lib/aarch64-linux-gnu/libcuda.so.1", "/opt/cuda/targets/sbsa-linux/lib", "/usr/local/cuda/targets/aarch64-linux/lib", "/usr/lib/aarch64-linux-gnu"},
			[]string{"x86_64", "ppc64le", "powerpc"}},
		{"riscv64", []string{"libcuda.so.1", "/usr/local/cuda/lib64"},
			[]string{"x86_64", "aarch64", "sbsa", "ppc64le", "targets"}},
	} {
		a := libArchOf(c.goarch)
		all := append(driverCandidates(a), librarySearchDirs(a)...)
		joined := strings.Join(all, "\n")
		for _, w := range c.want {
			if !strings.Contains("\n"+joined+"\n", "\n"+w+"\n") {
				t.Errorf("%s: search lists lack %s:\n%s", c.goarch, w, joined)
			}
		}
		for _, d := range c.deny {
			if strings.Contains(joined, d) {
				t.Errorf("%s: search lists name %q, another architecture's:\n%s", c.goarch, d, joined)
			}
		}
	}
}
