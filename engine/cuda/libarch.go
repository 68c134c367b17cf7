package cuda

import "runtime"

// libArch is where one CPU architecture's libraries live: the
// distribution's multiarch folder (/usr/lib/<multiarch>) and the CUDA
// toolkit's target folders (/usr/local/cuda/targets/<target>/lib). The
// search lists name only the running architecture's, so doctor on amd64
// does not report looking for an aarch64 library it could never load.
type libArch struct {
	multiarch string
	targets   []string
}

// libArchOf returns goarch's folders (runtime.GOARCH's for the search);
// an architecture CUDA does not ship for has none.
func libArchOf(goarch string) libArch {
	switch goarch {
	case "amd64":
		return libArch{multiarch: "x86_64-linux-gnu", targets: []string{"x86_64-linux"}}
	case "arm64":
		// sbsa-linux: Arm servers (Grace, Graviton); aarch64-linux: Jetson.
		return libArch{multiarch: "aarch64-linux-gnu", targets: []string{"sbsa-linux", "aarch64-linux"}}
	case "ppc64le":
		return libArch{multiarch: "powerpc64le-linux-gnu", targets: []string{"ppc64le-linux"}}
	}
	return libArch{}
}

// hostLibArch is the running architecture's folders.
func hostLibArch() libArch { return libArchOf(runtime.GOARCH) }
