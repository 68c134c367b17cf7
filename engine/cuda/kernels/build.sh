#!/bin/sh
# Builds kernels.fatbin from the .cu sources with nvcc and writes
# manifest.json beside it (sha256 of every source, the nvcc version line,
# the command and the fatbin's sha256). The Go package embeds both; its CI
# test fails when a source no longer matches the manifest.
#
# usage: build.sh [OUTDIR]   (default: this folder)   NVCC=path overrides nvcc
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here}" && cd "${1:-$here}" && pwd)
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1; then
	[ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc || {
		echo "build.sh: nvcc not found; install the CUDA toolkit or set NVCC=/path/to/nvcc" >&2; exit 1; }
fi
GENCODE="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=[sm_90,compute_90]"
cd "$here"
# One translation unit: nvcc takes a single input with -fatbin -o.
"$NVCC" -fatbin $GENCODE -O3 -o "$out/kernels.fatbin.tmp" kernels.cu
mv "$out/kernels.fatbin.tmp" "$out/kernels.fatbin"
ver=$("$NVCC" --version | grep -i 'release' | tail -n 1 | sed 's/"/\\"/g')
{
	printf '{\n'
	printf '  "nvcc": "%s",\n' "$ver"
	printf '  "command": "nvcc -fatbin %s -O3 -o kernels.fatbin kernels.cu",\n' "$GENCODE"
	printf '  "fatbin_sha256": "%s",\n' "$(sha256sum "$out/kernels.fatbin" | cut -d' ' -f1)"
	printf '  "sources": {\n'
	first=1
	for f in $(ls *.cu *.cuh | LC_ALL=C sort); do
		[ $first = 1 ] || printf ',\n'
		first=0
		printf '    "%s": "%s"' "$f" "$(sha256sum "$f" | cut -d' ' -f1)"
	done
	printf '\n  }\n}\n'
} > "$out/manifest.json"
echo "wrote $out/kernels.fatbin ($(wc -c < "$out/kernels.fatbin") bytes) and $out/manifest.json"
