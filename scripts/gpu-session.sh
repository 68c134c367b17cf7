#!/usr/bin/env bash
# One GPU-machine session's whole check of the built-in engine, in one
# command, so the same script gives the baseline and the result:
#   1. correctness: nvcc rebuilds the fatbin (must match the committed one
#      byte for byte), every GPU test of engine/cuda (kernels against a CPU
#      reference, logits against the CPU backend and HF transformers,
#      greedy, ForwardTokens, CopyBlocks, graphs) — scripts/gpu-cuda-check.sh;
#   2. cold start of both shapes beside HF transformers, floors in the same
#      run — scripts/gpu-cold-bench.sh;
#   3. the server under load: 64 streams against their bound, the QPS
#      sweep and its saturation, the five workloads, prefix-hit TTFT —
#      scripts/gpu-serve-bench.sh (with the cold part's floors when it ran
#      in the same call);
#   4. optionally (PARTS=... peer), the engine beside Ollama v0.9.6
#      (llama.cpp's CUDA backend) and HF transformers on one checkpoint —
#      scripts/gpu-peer.sh (OLLAMA, and SRC or LIBS; PACK=dir packs a
#      fresh ggml build for the next call);
#   5. optionally (PARTS=... sleep), sleep and wake —
#      scripts/gpu-sleep-wake.sh, when present;
#   6. optionally (OLLAMA=path), Ollama on the GPU under treni-top —
#      scripts/gpu-ollama.sh;
#   7. optionally (PARTS=... profile), TestGPUStepProfile: per-operation
#      device time of the serve bench's step shapes, attn_mma beside
#      its four-warp-only form and paged_attention (and the committed
#      fatbin's kernels first, when the check built a new one).
# When the check's nvcc build differs from the committed fatbin (kernel
# sources changed), the later parts run with TRENI_CUDA_FATBIN set to it.
# Each part runs under its own time limit (CHECK_S, COLD_S, SERVE_S,
# PEER_S, SLEEP_S, OLLAMA_S) so one slow part cannot eat the machine's
# lease; the defaults fit one H200 call of the device tool (at most 600 s)
# for "check" alone and for "cold serve", so a whole session is two calls.
# Full logs in $OUT/session.tgz. The short table, self-explaining (machine,
# commit, floors, every target with its floor and ratio, the peers), is
# written to $OUT/<date>-<gpu>-session.md (scripts/session_table.py) and
# printed last; commit it as docs/gpu-runs/<date>-<gpu>-session.md. When
# that file is already in docs/gpu-runs/ (an earlier call of the same day,
# copied in), the new call's table is appended to it.
# Built elsewhere and carried: BIN (treni-top), TESTBIN (go test -c
# ./engine/cuda), TOK (the Qwen3 tokenizer directory); COMMIT names the
# commit they were built from (the carried tree has no .git).
# Usage: BIN=.carry/s/treni-top TESTBIN=.carry/s/cuda.test TOK=.carry/s/qwen3-tok \
#          COMMIT=$(git rev-parse --short HEAD) OUT=/tmp/out bash scripts/gpu-session.sh
set -u
OUT=${OUT:-$(mktemp -d)}
R=$OUT/s
mkdir -p "$R"
T0=$SECONDS
PARTS=${PARTS:-"check cold serve"}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
t() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$R/session.log"; }
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
echo "$gpu; $(nproc) cores; $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); kernel $(uname -r)" >"$R/machine.txt"
date -u +%F >"$R/date.txt"
t "start $(date -u +%FT%TZ) on $gpu"
summary=()
for part in $PARTS; do
	case $part in
	check)
		# 340 s: the 16 GPU tests took ~300 s on the H200 (170 s cut them off).
		TESTBIN=$TESTBIN OUT=$R/check SANITIZE=${SANITIZE:-0} timeout "${CHECK_S:-340}" bash scripts/gpu-cuda-check.sh >"$R/check.txt" 2>&1
		rc=$?
		cmp -s "$R/check/kernels.fatbin" engine/cuda/kernels/kernels.fatbin && fb=identical || fb=DIFFERS
		san=$(grep -h "ERROR SUMMARY" "$R/check/sanitizer.log" 2>/dev/null | tail -1 | sed -E "s/^=+ *//")
		summary+=("check rc=$rc fatbin $fb; $(grep -cE '^--- PASS' "$R/check/gpu-tests.log" 2>/dev/null) tests passed, $(grep -cE '^--- FAIL' "$R/check/gpu-tests.log" 2>/dev/null) failed; compute-sanitizer: ${san:-not run (SANITIZE=1 runs it)}")
		# Kernel sources changed since the committed fatbin: the later parts
		# load the one nvcc just built (the binaries embed the old one).
		# Only a fatbin whose tests passed: otherwise they keep the embedded one.
		if [[ $fb == DIFFERS && $rc == 0 && -s $R/check/kernels.fatbin ]]; then
			export TRENI_CUDA_FATBIN=$R/check/kernels.fatbin
			t "later parts load the fresh fatbin ($TRENI_CUDA_FATBIN)"
		fi
		;;
	profile)
		# Where a step's device time goes, per attention kernel, on the
		# serve bench's 4B-shaped checkpoint (TestGPUStepProfile).
		m=/tmp/treni-cold-bench/qwen3-4b
		[[ -f $m/config.json ]] || "$BIN" model synth --arch qwen3 --preset 4b --out "$m" --seed 7 --tokenizer "$TOK" >"$R/profile.txt" 2>&1
		# profile [ENV...]: the test once, env applying ENV.
		profile() { (cd engine/cuda && env "$@" TRENI_PROFILE_MODEL=$m timeout "${PROFILE_S:-120}" "$TESTBIN" -test.v -test.count=1 -test.run 'TestGPUStepProfile$') >>"$R/profile.txt" 2>&1; }
		# With a freshly built fatbin, the committed one's kernels first, in
		# the same call, for the ratio.
		if [[ -n ${TRENI_CUDA_FATBIN:-} ]]; then
			echo "PROFILE of the committed fatbin (embedded), for comparison" >>"$R/profile.txt"
			profile -u TRENI_CUDA_FATBIN
			echo "PROFILE of the fresh fatbin ($TRENI_CUDA_FATBIN)" >>"$R/profile.txt"
		fi
		profile
		rc=$?
		summary+=("profile rc=$rc")
		;;
	cold)
		BIN=$BIN TOK=$TOK OUT=$R/cold HF=${HF:-1} RUNS=${RUNS:-3} timeout "${COLD_S:-260}" bash scripts/gpu-cold-bench.sh >"$R/cold.txt" 2>&1
		rc=$?
		summary+=("cold bench rc=$rc")
		;;
	serve)
		# The bound's floors: the cold part's of this call, when it ran.
		PARTS=${SERVE_PARTS:-"streams qps workloads prefix"} VARIANTS=${VARIANTS:-} BIN=$BIN TOK=$TOK OUT=$R/serve WORK=/tmp/treni-cold-bench \
			FLOORS_JSON=$R/cold/res/floors.json timeout "${SERVE_S:-280}" bash scripts/gpu-serve-bench.sh >"$R/serve.txt" 2>&1
		rc=$?
		summary+=("serve bench rc=$rc")
		;;
	peer)
		BIN=$BIN TOK=$TOK OUT=$R/peer timeout "${PEER_S:-420}" bash scripts/gpu-peer.sh >"$R/peer.txt" 2>&1
		rc=$?
		summary+=("peer rc=$rc")
		;;
	sleep)
		# Sleep and wake (scripts/gpu-sleep-wake.sh, issue 44's sibling
		# work), when the script is in this tree.
		if [[ -f scripts/gpu-sleep-wake.sh ]]; then
			BIN=$BIN TOK=$TOK OUT=$R/sleep timeout "${SLEEP_S:-200}" bash scripts/gpu-sleep-wake.sh >"$R/sleep.txt" 2>&1
			rc=$?
			summary+=("sleep rc=$rc")
		else
			summary+=("sleep skipped: scripts/gpu-sleep-wake.sh is not in this tree")
		fi
		;;
	ollama)
		BIN=$BIN OLLAMA=$OLLAMA SRC=$SRC OUT=$R/ollama PRESET=${OLLAMA_PRESET:-1.7b} timeout "${OLLAMA_S:-300}" bash scripts/gpu-ollama.sh >"$R/ollama.txt" 2>&1
		rc=$?
		summary+=("ollama rc=$rc")
		;;
	esac
	# A part cut off by its time limit may leave its GPU processes (the
	# test binary, compute-sanitizer, a server) running beside the next
	# part's measurements: stop them.
	[[ -n ${TESTBIN:-} ]] && pkill -f "^$TESTBIN" 2>/dev/null; pkill -f "^/usr/local/cuda/bin/compute-sanitizer" 2>/dev/null
	pkill -f "^$BIN serve" 2>/dev/null
	t "$part done: ${summary[-1]}"
done
printf '%s\n' "${summary[@]}" >"$R/summary.txt"
# The short table, written to stand alone; appended to an earlier call's
# table of the same day when that is in docs/gpu-runs/.
name=$(date -u +%F)-$(echo "$gpu" | grep -oiE 'h[0-9]+|a[0-9]+|l[0-9]+' | head -1 | tr 'A-Z' 'a-z')-session.md
[[ -f docs/gpu-runs/$name ]] && cp "docs/gpu-runs/$name" "$OUT/$name"
python3 scripts/session_table.py "$R" --commit "${COMMIT:-}" --parts "$PARTS" >>"$OUT/$name" 2>>"$R/session.log"
tar -C "$OUT" -czf "$OUT/session.tgz" s
for part in $PARTS; do
	echo "=== $part"
	case $part in
	check) grep -E "^(--- FAIL|FAIL)|attn_mma|LOGITS|fatbin|compute-sanitizer" "$R/check.txt" | head -30 ;;
	cold) sed -n '/^### Floors/,$p' "$R/cold.txt" | grep -vE '^\| (process_start|runtime_init|tensor_index|tokenizer|page_cache|kernel_load|kv_alloc|http_ready|cuda_init|graph_capture|warmup|first_request|decoder_tensor)' | head -60 ;;
	serve) sed -n '/^### 64/,$p' "$R/serve.txt" | head -45 ;;
	profile) grep -E "PROFILE|^(--- |FAIL|ok)" "$R/profile.txt" | sed -E 's/^ +//; s/profile_gpu_test.go:[0-9]+: //' | cut -c1-400 ;;
	ollama) grep -vE '^--|^\[.*\] (building|ollama create)' "$R/ollama.txt" | tail -25 ;;
	peer) grep -E '^\[' "$R/peer.txt" | tail -20 ;;
	sleep) tail -20 "$R/sleep.txt" 2>/dev/null ;;
	esac
done
printf '%s\n' "${summary[@]}"
t "total"
echo "=== $OUT/$name"
cat "$OUT/$name"
