#!/usr/bin/env bash
# One GPU-machine session's whole check of the built-in engine, in one
# command, so the same script gives the baseline and the result:
#   1. correctness: nvcc rebuilds the fatbin (must match the committed one
#      byte for byte), every GPU test of engine/cuda (kernels against a CPU
#      reference, logits against the CPU backend and HF transformers,
#      greedy, ForwardTokens, CopyBlocks, graphs) — scripts/gpu-cuda-check.sh;
#   2. cold start of both shapes beside HF transformers, floors in the same
#      run — scripts/gpu-cold-bench.sh;
#   3. the server under load: 64 streams, the QPS sweep, the five
#      workloads, prefix-hit TTFT — scripts/gpu-serve-bench.sh;
#   4. optionally (OLLAMA=path), Ollama on the GPU under treni-top —
#      scripts/gpu-ollama.sh;
#   5. optionally (PARTS=... profile), TestGPUStepProfile: per-operation
#      device time of the serve bench's step shapes, attn_mma beside
#      its four-warp-only form and paged_attention (and the committed
#      fatbin's kernels first, when the check built a new one).
# When the check's nvcc build differs from the committed fatbin (kernel
# sources changed), the later parts run with TRENI_CUDA_FATBIN set to it.
# Each part runs under its own time limit (CHECK_S, COLD_S, SERVE_S,
# OLLAMA_S) so one slow part cannot eat the machine's lease. Full logs in
# $OUT/session.tgz; the short table is printed last.
# Built elsewhere and carried: BIN (treni-top), TESTBIN (go test -c
# ./engine/cuda), TOK (the Qwen3 tokenizer directory).
# Usage: BIN=.carry/s/treni-top TESTBIN=.carry/s/cuda.test TOK=.carry/s/qwen3-tok \
#          OUT=/tmp/out bash scripts/gpu-session.sh
set -u
OUT=${OUT:-$(mktemp -d)}
R=$OUT/s
mkdir -p "$R"
T0=$SECONDS
PARTS=${PARTS:-"check cold serve"}
t() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$R/session.log"; }
t "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
summary=()
for part in $PARTS; do
	case $part in
	check)
		TESTBIN=$TESTBIN OUT=$R/check SANITIZE=${SANITIZE:-0} timeout "${CHECK_S:-170}" bash scripts/gpu-cuda-check.sh >"$R/check.txt" 2>&1
		rc=$?
		cmp -s "$R/check/kernels.fatbin" engine/cuda/kernels/kernels.fatbin && fb=identical || fb=DIFFERS
		summary+=("check rc=$rc fatbin $fb; $(grep -cE '^--- PASS' "$R/check/gpu-tests.log" 2>/dev/null) tests passed, $(grep -cE '^--- FAIL' "$R/check/gpu-tests.log" 2>/dev/null) failed")
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
		PARTS=${SERVE_PARTS:-"streams qps workloads prefix"} VARIANTS=${VARIANTS:-} BIN=$BIN TOK=$TOK OUT=$R/serve WORK=/tmp/treni-cold-bench NREQ=${NREQ:-32} \
			timeout "${SERVE_S:-200}" bash scripts/gpu-serve-bench.sh >"$R/serve.txt" 2>&1
		rc=$?
		summary+=("serve bench rc=$rc")
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
	pkill -f "^$TESTBIN" 2>/dev/null; pkill -f "^/usr/local/cuda/bin/compute-sanitizer" 2>/dev/null
	pkill -f "^$BIN serve" 2>/dev/null
	t "$part done: ${summary[-1]}"
done
tar -C "$OUT" -czf "$OUT/session.tgz" s
for part in $PARTS; do
	echo "=== $part"
	case $part in
	check) grep -E "^(--- FAIL|FAIL)|attn_mma|LOGITS|fatbin|compute-sanitizer" "$R/check.txt" | head -30 ;;
	cold) sed -n '/^### Floors/,$p' "$R/cold.txt" | grep -vE '^\| (process_start|runtime_init|tensor_index|tokenizer|page_cache|kernel_load|kv_alloc|http_ready|cuda_init|graph_capture|warmup|first_request|decoder_tensor)' | head -60 ;;
	serve) sed -n '/^### 64/,$p' "$R/serve.txt" | head -45 ;;
	profile) grep -E "PROFILE|^(--- |FAIL|ok)" "$R/profile.txt" | sed -E 's/^ +//; s/profile_gpu_test.go:[0-9]+: //' | cut -c1-400 ;;
	ollama) grep -vE '^--|^\[.*\] (building|ollama create)' "$R/ollama.txt" | tail -25 ;;
	esac
done
printf '%s\n' "${summary[@]}"
t "total"
