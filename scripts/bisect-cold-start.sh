#!/usr/bin/env bash
# A `git bisect run` step for a cold-start regression (README, "Bisect a
# cold-start regression"; docs/DIFF.md has the verdict rules). At the commit
# under test it builds, records RUNS cold starts and diffs them against a
# session recorded once at the good commit:
#
#   treni-top run --headless --cold-runs 5 --record /tmp/good.jsonl [-- CMD…]   # at the good commit
#   git bisect start BAD GOOD
#   git bisect run scripts/bisect-cold-start.sh /tmp/good.jsonl [-- CMD…]
#
# Exit status, as git bisect reads it: 0 good (no regression), 1 bad (diff
# found one), 125 skip (the build failed, the run failed or diff could not
# use its input — exit 2 of run or diff — so this commit cannot be judged).
#
# Environment:
#   BUILD      the build command (default: go build of treni-top's own
#              engine into a temporary directory, recorded with that binary;
#              for another server, its build, and pass its command after --)
#   TRENI_TOP  the treni-top that diffs (default: treni-top on PATH): a fixed
#              one, since commits under test may predate diff's statistics
#   RUNS       cold runs per side (default 5, the fewest that can give a
#              verdict at the default --alpha)
#   DIFF_ARGS  extra diff flags, e.g. "--threshold 0.05 --min-delta 20ms"
set -uo pipefail
good=${1:?usage: bisect-cold-start.sh GOOD.jsonl [-- CMD ARGS…]}
shift
runs=${RUNS:-5}
differ=${TRENI_TOP:-treni-top}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

recorder=$differ
if [[ -n ${BUILD:-} ]]; then
	bash -c "$BUILD" || exit 125
else
	go build -o "$tmp/treni-top" ./cmd/treni-top || exit 125
	recorder=$tmp/treni-top
fi
# One session per cold run: a commit older than `run --cold-runs` records
# the same way, and diff pools the files.
for ((i = 1; i <= runs; i++)); do
	"$recorder" run --headless --record "$tmp/new-$i.jsonl" "$@" >"$tmp/run-$i.log" 2>&1
	rc=$?
	if ((rc != 0)); then
		echo "bisect-cold-start: run $i exited $rc; skipping this commit (last lines below)" >&2
		tail -5 "$tmp/run-$i.log" >&2
		exit 125
	fi
done
# shellcheck disable=SC2086 # DIFF_ARGS is a list of flags
"$differ" diff "$good" --against "$tmp"/new-*.jsonl ${DIFF_ARGS:-}
case $? in
0) exit 0 ;;
1) exit 1 ;;
*) exit 125 ;;
esac
