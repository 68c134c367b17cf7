#!/usr/bin/env bash
# The load generator's accuracy proof (issue 8, docs/BENCHMARKS.md "Load
# generator"): TestClientNeverBottleneck at four loads, tokens timed at the
# kernel's receive stamp and on read, RUNS times each, interleaved so that
# both timestamp sources see the same machine. Prints one log line per run.
#
#   scripts/load-proof.sh [RUNS]      (default 3; about 6 minutes)
set -euo pipefail
runs=${1:-3}
cd "$(dirname "$0")/.."
bin=$(mktemp -d)/load.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" ./probe/load
cd probe/load
for cfg in "10ms 1000" "20ms 1000" "20ms 500" "40ms 1000"; do
	set -- $cfg
	for ((i = 1; i <= runs; i++)); do
		for read in 0 1; do
			line=$(TRENI_LOAD_PROOF=1 TRENI_LOAD_PROOF_PACE=$1 TRENI_LOAD_PROOF_STREAMS=$2 TRENI_LOAD_PROOF_READ_STAMPS=$read \
				"$bin" -test.run '^TestClientNeverBottleneck$' -test.v -test.count=1 2>&1 | grep -E 'streams,' || true)
			echo "pace=$1 streams=$2 read_stamps=$read run=$i ${line#*paced_test.go:*: }"
		done
	done
done
