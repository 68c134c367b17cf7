#!/usr/bin/env bash
# e2e-ollama: treni-top against a real external server (issue 5, "Real peer").
#
# Builds Ollama v0.9.6 from source into .peers/bin-simd (skipped when
# present; OLLAMA_BIN=PATH uses another build),
# makes a Qwen2-architecture random-weight checkpoint with
# `treni-top model synth`, imports it into Ollama, then runs
#
#     treni-top run --headless -- .peers/bin/ollama serve
#
# Ollama loads its model lazily, inside the first request, so the cold
# request (cold_1) contains the whole model load. The script checks that the
# session has stages from Ollama's own log, the runner subprocess in the
# process tree, and that our cold TTFT agrees with Ollama's own
# load_duration + prompt_eval_duration (see TOLERANCE below).
#
# The build passes -O3 and a fixed instruction-set baseline to cgo:
# `go install` alone compiles ggml's CPU kernels with cgo's default flags
# (-O2, no -m options), so none of the SSE/AVX2/FMA code paths a CMake build
# selects are compiled in and the peer runs ~10x slower than llama.cpp
# should. The baseline is x86-64-v3 (AVX2, FMA, F16C) on x86_64 and
# armv8.2-a with dot product and fp16 on aarch64, not -march=native: what
# the host's CPU offers must not change what builds. -march=native on a CPU
# with AMX turns on ggml's AMX path, whose source the cgo build does not
# compile, and the link fails (undefined reference to
# ggml_backend_amx_buffer_type). PEER_CFLAGS=... overrides the flags. Check
# the "msg=system" line of `ollama serve`'s log: it lists CPU.0.AVX2=1
# CPU.0.FMA=1 … when the SIMD kernels are in. (An older build without them
# may sit in .peers/bin; OLLAMA_BIN=.peers/bin/ollama runs it.)
#
# Not in CI: it builds the peer (2–6 min on 2 cores) and needs
# nlohmann-json3-dev and libstb-dev. Everything it makes stays under .peers/
# (ignored by git). Usage: scripts/e2e-ollama.sh [--preset tiny|0.6b]
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PEERS=$ROOT/.peers
PRESET=tiny
if [[ "${1:-}" == "--preset" && -n "${2:-}" ]]; then PRESET=$2; fi
OUT=$PEERS/e2e-ollama
mkdir -p "$PEERS/models" "$OUT"
OLLAMA_BIN=${OLLAMA_BIN:-$PEERS/bin-simd/ollama}

export OLLAMA_MODELS=$PEERS/models
export OLLAMA_HOST=127.0.0.1:11500
# Keep the model loaded between requests (warm requests must be warm), and
# do not let a stray GPU or a cloud proxy change what is measured.
export OLLAMA_KEEP_ALIVE=10m
export OLLAMA_NOPRUNE=1

step() { printf '\n== %s\n' "$*"; }

# --- 1. the peer --------------------------------------------------------------
if [[ ! -x $OLLAMA_BIN ]]; then
	if [[ $OLLAMA_BIN != "$PEERS/bin-simd/ollama" ]]; then
		echo "OLLAMA_BIN=$OLLAMA_BIN is not an executable" >&2
		exit 2
	fi
	step "building Ollama v0.9.6 from source with SIMD (2-6 min)"
	if ! dpkg -s nlohmann-json3-dev libstb-dev >/dev/null 2>&1; then
		echo "needs: apt-get install -y nlohmann-json3-dev libstb-dev" >&2
		exit 2
	fi
	case "$(uname -m)" in
	x86_64) baseline=-march=x86-64-v3 ;;
	aarch64 | arm64) baseline=-march=armv8.2-a+dotprod+fp16 ;;
	*) baseline= ;;
	esac
	flags=${PEER_CFLAGS:-"-O3 $baseline"}
	echo "cgo flags: $flags"
	mkdir -p "$PEERS/bin-simd"
	CGO_CFLAGS="$flags" CGO_CXXFLAGS="$flags" CGO_CPPFLAGS="-I/usr/include/stb" \
		GOBIN=$PEERS/bin-simd go install github.com/ollama/ollama@v0.9.6
fi
"$OLLAMA_BIN" --version 2>/dev/null | head -1 || true

# --- 2. treni-top -----------------------------------------------------------
step "building treni-top"
go build -o "$ROOT/bin/treni-top" ./cmd/treni-top
TT=$ROOT/bin/treni-top

# --- 3. the checkpoint --------------------------------------------------------
CKPT=$PEERS/synth-qwen2-$PRESET
if [[ ! -f $CKPT/config.json ]]; then
	step "making a Qwen2-architecture synth checkpoint ($PRESET)"
	rm -rf "$CKPT"
	"$TT" model synth --arch qwen2 --preset "$PRESET" --out "$CKPT"
fi

# --- 4. import it into Ollama (a temporary server, stopped afterwards) --------
MODEL=synth-qwen2-$PRESET
if [[ ! -f $OLLAMA_MODELS/manifests/registry.ollama.ai/library/$MODEL/latest ]]; then
	step "ollama create $MODEL"
	"$OLLAMA_BIN" serve >"$OUT/create-serve.log" 2>&1 &
	SERVE_PID=$!
	trap 'kill $SERVE_PID 2>/dev/null || true' EXIT
	for _ in $(seq 1 300); do
		curl -fsS "http://$OLLAMA_HOST/api/version" >/dev/null 2>&1 && break
		sleep 0.1
	done
	printf 'FROM %s\n' "$CKPT" >"$OUT/Modelfile"
	"$OLLAMA_BIN" create "$MODEL" -f "$OUT/Modelfile"
	kill "$SERVE_PID"
	wait "$SERVE_PID" 2>/dev/null || true
	trap - EXIT
fi

# --- 5. the traced run --------------------------------------------------------
step "treni-top run --headless -- $OLLAMA_BIN serve"
SESSION=$OUT/session.jsonl
rm -f "$SESSION"
"$TT" run --headless --json --record "$SESSION" \
	--request-model "$MODEL" --warmup 1 --repeat 3 --max-tokens 16 \
	--prompt "Why is the first request slow?" \
	-- "$OLLAMA_BIN" serve >"$OUT/report.json" 2>"$OUT/progress.log" || {
	echo "treni-top run failed; progress:" >&2
	cat "$OUT/progress.log" >&2
	exit 1
}
cat "$OUT/progress.log"

# --- 6. checks ------------------------------------------------------------------
# TOLERANCE. Our cold TTFT is measured by the client: request sent → first
# token-bearing line of the /api/generate stream. Ollama's load_duration
# (scheduling + starting the runner subprocess + loading the weights) plus
# prompt_eval_duration (the prefill that yields the first token) cover the
# same interval except for what happens outside those two timers: our HTTP
# request to `ollama serve`, its request parsing and prompt templating, the
# hop to the runner subprocess and back, tokenization of a short prompt, and
# the streaming of the first line to us, all on loopback. So:
#   * ours must not be shorter than Ollama's, allowing 5 ms because the two
#     processes' timers do not start and stop at exactly the same instants;
#   * ours may exceed it by at most 250 ms. The uncovered work is a fixed
#     cost that does not grow with the model (the load itself is inside both
#     figures, so its run-to-run noise cancels out): a few ms on an idle
#     machine; 250 ms absorbs scheduling delays on a 2-core box shared with
#     compilers. Measured here at load average ~16: +4.4 ms (tiny preset,
#     506 ms cold) and +21.9 ms (0.6b preset, 36.0 s cold).
step "checking the session"
python3 scripts/ollama_session_check.py "$SESSION"
echo "session: $SESSION"
