#!/usr/bin/env bash
# Regenerates ../BENCHMARKS.md: every BenchmarkAllow row in ROUNDS rounds,
# CPU profiles of keylimit's hardest rows, the contention counts and the
# memory of every contender (cmd/benchreport). It takes some minutes.
#
# Each round runs the whole suite once (-count=1), so the rows compared in a
# ratio ran close together in time: on a small shared machine a neighbour's
# burst of work then skews one round, not one contender, and the medians over
# rounds shrug it off.
#
#   ROUNDS=8 BENCHTIME=250ms CPU=$(nproc) bash benchmarks/run.sh
set -euo pipefail
cd "$(dirname "$0")"

ROUNDS="${ROUNDS:-8}"
BENCHTIME="${BENCHTIME:-250ms}"
CPU="${CPU:-$(nproc)}"
CONTENTION_ROUNDS="${CONTENTION_ROUNDS:-5}"
KEYS="${KEYS:-1000000}"

# tmp is where the raw output goes; the commands published name it $tmp.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/profiles"
commands="$tmp/commands.txt"

# say records a command for the report, then runs it.
say() {
	echo "$*" >>"$commands"
	echo "+ $*" >&2
}

bench="go test -run '^\$' -bench '^BenchmarkAllow\$' -benchtime=$BENCHTIME -cpu=$CPU -count=1 -timeout=60m ."
say "# $ROUNDS rounds of:"
say "$bench"
for round in $(seq "$ROUNDS"); do
	echo "== round $round of $ROUNDS" >&2
	eval "$bench" | tee -a "$tmp/bench.txt" | grep -E '^Benchmark' >&2
done

# profile writes the top of a CPU profile of keylimit-bucket on one row,
# the timed loop only.
profile() {
	local limit=$1 keys=$2 mode=$3
	local cmd="go test -run '^\$' -bench '^BenchmarkAllow\$/^$limit\$/^keys=$keys\$/^$mode\$/^keylimit-bucket\$' -benchtime=2s -cpu=$CPU -cpuprofile=\$tmp/cpu.prof -o=\$tmp/bench.test ."
	local top="go tool pprof -top -nodecount=14 -focus=runAllow \$tmp/bench.test \$tmp/cpu.prof"
	say "$cmd"
	say "$top"
	eval "$cmd" >&2
	eval "$top" 2>/dev/null | sed -n '/flat%/,$p' >"$tmp/profiles/keylimit-bucket, $limit, keys=$keys, $mode.txt"
}
profile loose 1 serial
profile loose 1M parallel

report="go run ./cmd/benchreport -bench=\$tmp/bench.txt -rounds=$CONTENTION_ROUNDS -keys=$KEYS -profiles=\$tmp/profiles -notes=NOTES.md -commands=\$tmp/commands.txt -out=../BENCHMARKS.md"
say "$report"
eval "$report"
echo "wrote $(cd .. && pwd)/BENCHMARKS.md" >&2
