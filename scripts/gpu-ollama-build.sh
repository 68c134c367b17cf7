#!/usr/bin/env bash
# Lays out Ollama v0.9.6 with its ggml CUDA backend on the GPU machine, as
# Ollama's Linux distribution does: $ROOT/bin/ollama,
# $ROOT/lib/ollama/libggml-base.so, $ROOT/lib/ollama/cuda_v12/libggml-cuda.so.
#   - the Go binary is built elsewhere and carried as OLLAMA (plain or .xz);
#   - the libraries come, in this order of preference, from $ROOT already
#     (a build earlier in the same call), from LIBS (a folder holding
#     ggml-libs.tar.xz.NN: a previous call's PACK), or are built here
#     for sm_90 only with the flash-attention kernels off (they triple
#     the build; Ollama's default leaves flash attention off anyway) from
#     SRC, a tarball of the v0.9.6 module's CMakeLists.txt,
#     CMakePresets.json and ml/backend/ggml/ggml (101–133 s on 16 cores);
#   - PACK=DIR packs a fresh build's libraries as DIR/ggml-libs.tar.xz.NN,
#     pieces of at most 15 MiB (the device tool brings back files of at
#     most 16 MiB), for LIBS in a later call.
# Two callers in one call share one build: the second waits on the first's
# lock ($WORK/build.lock), then finds the libraries there.
# Usage: OLLAMA=.carry/ollama.xz SRC=.carry/ggml-src.tgz ROOT=/tmp/treni-ollama/dist \
#          WORK=/tmp/treni-ollama [LIBS=dir] [PACK=dir] bash scripts/gpu-ollama-build.sh
set -uo pipefail
ROOT=${ROOT:?ROOT=the distribution folder to lay out}
WORK=${WORK:-/tmp/treni-ollama}
LOG=${LOG:-$WORK/build.log}
mkdir -p "$ROOT/bin" "$ROOT/lib/ollama/cuda_v12" "$WORK"
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
exec 9>"$WORK/build.lock"
flock 9
if [[ ! -x $ROOT/bin/ollama ]]; then
	case ${OLLAMA:?OLLAMA=path to an ollama v0.9.6 binary (plain or .xz)} in
	*.xz) xz -dc "$OLLAMA" >"$ROOT/bin/ollama" ;;
	*) cp "$OLLAMA" "$ROOT/bin/ollama" ;;
	esac
	chmod +x "$ROOT/bin/ollama"
fi
lib=$ROOT/lib/ollama/cuda_v12/libggml-cuda.so
t0=$SECONDS
if [[ -f $lib ]]; then
	say "ggml-cuda already laid out in $ROOT"
elif [[ -n ${LIBS:-} ]] && compgen -G "$LIBS/ggml-libs.tar.xz.*" >/dev/null; then
	cat "$LIBS"/ggml-libs.tar.xz.* | xz -dc | tar -x -C "$ROOT" || { say "unpacking $LIBS/ggml-libs.tar.xz.* failed"; exit 1; }
	say "ggml-cuda unpacked from $LIBS in $((SECONDS - t0)) s"
else
	say "building ggml-cuda (sm_90) with $(/usr/local/cuda/bin/nvcc --version | tail -1)"
	rm -rf "$WORK/src" "$WORK/build" && mkdir -p "$WORK/src"
	tar -xzf "${SRC:?SRC=path to the ggml source tarball}" -C "$WORK/src"
	sed -i 's/set(GGML_CUDA_FA ON)/set(GGML_CUDA_FA OFF)/' "$WORK/src/CMakeLists.txt"
	cmake -S "$WORK/src" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES=90 >>"$LOG" 2>&1 ||
		{ say "cmake configure failed"; tail -30 "$LOG"; exit 1; }
	cmake --build "$WORK/build" --target ggml-base ggml-cuda -j "$(nproc)" >>"$LOG" 2>&1 ||
		{ say "ggml-cuda build failed after $((SECONDS - t0)) s"; grep -m5 -i error "$LOG"; exit 1; }
	cp "$(find "$WORK/build" -name 'libggml-base.so' | head -1)" "$ROOT/lib/ollama/"
	cp "$(find "$WORK/build" -name 'libggml-cuda.so' | head -1)" "$lib"
	say "ggml-cuda built in $((SECONDS - t0)) s: $(du -h "$lib" | cut -f1)"
	if [[ -n ${PACK:-} ]]; then
		mkdir -p "$PACK"
		tar -C "$ROOT" -cf - lib | xz -T0 -6 | split -b 15M -d - "$PACK/ggml-libs.tar.xz."
		say "packed: $(ls -l "$PACK"/ggml-libs.tar.xz.* | awk '{print $5, $9}' | tr '\n' ' ')"
	fi
fi
