#!/usr/bin/env bash
# Writes ../BENCHMARKS.md: keylimit beside other Go rate limiters, from one
# run of this module's benchmarks and its contention test. benchstat
# (golang.org/x/perf, a tool in this module's go.mod) does the statistics;
# this script only runs the commands and lays their results out as tables.
#
#   bash benchmarks/report.sh       # the published size (COUNT=6 BENCHTIME=50ms took 9.5 min on 2 cores)
#   COUNT=2 BENCHTIME=20ms KEYS=20000 SHORT=1 OUT=/tmp/b.md bash benchmarks/report.sh
#
# COUNT      runs of each speed row (benchstat gives a 95% interval from 6)
# BENCHTIME  -benchtime of each speed row
# CPU        the -cpu list of the hot-path rows (default: every core)
# HOTCPU     the -cpu list of the one-hot-key rows (default: 2,4,8)
# KEYS       keys of the memory measurement; MEMCOUNT its runs
# SHORT=1    leaves out the million-key rows and counts contention at the
#            test's own size: to check the script, not to publish
# NOTE       a paragraph printed under the title (why the figures are what they are)
# OUT        the file to write (default ../BENCHMARKS.md)
# HTTP=0     leaves out the HTTP section (http.sh, which says its own settings)
set -euo pipefail
cd "$(dirname "$0")"

COUNT="${COUNT:-6}"
BENCHTIME="${BENCHTIME:-200ms}"
CPU="${CPU:-$(nproc)}"
HOTCPU="${HOTCPU:-2,4,8}"
KEYS="${KEYS:-1000000}"
MEMCOUNT="${MEMCOUNT:-3}"
SHORT="${SHORT:-}"
NOTE="${NOTE:-}"
OUT="${OUT:-../BENCHMARKS.md}"

short="" full=" -args -full"
if [ -n "$SHORT" ]; then short=" -short" full=""; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The commands, run from benchmarks/ with their output in $tmp, and
# published as they are.
allow="go test -run '^\$' -bench '^BenchmarkAllow(Refused|RefusedRefilling)?\$' -benchtime=$BENCHTIME -cpu=$CPU -count=$COUNT -timeout=0$short ."
hot="go test -run '^\$' -bench '^BenchmarkAllow\$/.*/keys=1\$/parallel' -benchtime=$BENCHTIME -cpu=$HOTCPU -count=$COUNT -timeout=0 -short ."
memory="go test -run '^\$' -bench '^BenchmarkMemory\$' -benchtime=${KEYS}x -count=$MEMCOUNT -timeout=0 ."
redis="go test -run '^\$' -bench '^BenchmarkRedis\$' -benchtime=$BENCHTIME -count=$COUNT -timeout=0 ."
semaphore="go test -run '^\$' -bench '^BenchmarkAcquireRelease\$' -benchtime=$BENCHTIME -count=$COUNT -timeout=0 ."
contention="go test -run '^TestHotKeyContention\$' -count=1 -v -timeout=0 .$full"
stat="go tool benchstat -format csv"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
run() { # run NAME COMMAND: runs COMMAND, its output to $tmp/NAME.txt
	echo "+ $2" >&2
	eval "$2" >"$tmp/$1.txt"
}
run allow "$allow"
run hot "$hot"
run memory "$memory"
run redis "$redis"
run semaphore "$semaphore"
run contention "$contention"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
for f in allow hot memory redis semaphore; do
	$stat "$tmp/$f.txt" >"$tmp/$f.csv" 2>/dev/null
done

# pivot PREFIX UNITS [STRIP]: a Markdown table from benchstat's CSV on
# stdin, of the rows named PREFIX/<contender>/<column>: a row per
# contender, a column per <column> and unit. STRIP=1 drops the -GOMAXPROCS
# suffix from the columns. Times are shown in ns, with benchstat's 95%
# confidence interval when it gives one.
pivot() {
	awk -v prefix="$1" -v units="$2" -v strip="${3:-}" '
	function commas(n, s, out) {
		s = sprintf("%.0f", n); out = ""
		while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
		return s out
	}
	function show(v, count) {
		if (v >= 1000) return commas(v)
		if (count && v == int(v) || v >= 100) return sprintf("%.0f", v)
		if (v >= 10) return sprintf("%.1f", v)
		if (v >= 1) return sprintf("%.2f", v)
		return sprintf("%.3g", v)
	}
	BEGIN { FS = ","; nu = split(units, u, " "); for (i = 1; i <= nu; i++) want[u[i]] = 1 }
	/^,/ { if ($3 == "CI") unit = $2; next }
	NF < 3 || !(unit in want) { next }
	{
		n = split($1, part, "/")
		if (part[1] != prefix || n < 3) next
		c = part[2]; col = part[3]
		for (i = 4; i <= n; i++) col = col "/" part[i]
		if (strip) sub(/-[0-9]+$/, "", col)
		label = unit; v = $2
		if (label ~ /sec\/op$/) { sub(/sec\/op$/, "ns/op", label); v *= 1e9 }
		if (nu > 1) col = col " " label
		if (!(c in seen)) { seen[c] = 1; rows[++nr] = c }
		if (!(col in seencol)) { seencol[col] = 1; cols[++nc] = col }
		cell[c, col] = show(v, label ~ /^(allocs|B|admitted)\/op$/) (label ~ /ns\/op$/ && $3 != "∞" && $3 != "" ? " ±" $3 : "")
	}
	END {
		printf "| contender |"; for (j = 1; j <= nc; j++) printf " %s |", cols[j]; print ""
		printf "|---|"; for (j = 1; j <= nc; j++) printf "---:|"; print ""
		for (i = 1; i <= nr; i++) {
			printf "| `%s` |", rows[i]
			for (j = 1; j <= nc; j++) printf " %s |", ((rows[i], cols[j]) in cell) ? cell[rows[i], cols[j]] : "–"
			print ""
		}
	}'
}

# exactness BURST: a heading and a Markdown table of TestHotKeyContention's
# lines for one burst, a row per contender over its rounds.
exactness() {
	awk -v burst="$1" '
	{
		for (s = 1; s <= NF && $s != "contention"; s++) {}
		if (s > NF) next
		delete f
		for (i = s + 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = (kv[2] == "" ? 1 : kv[2]) }
		if (f["burst"] != burst) next
		c = f["contender"]
		if (!(c in seen)) { seen[c] = 1; order[++n] = c; amin[c] = bmin[c] = 1e18; amax[c] = bmax[c] = -1 }
		if ("unbuildable" in f) { unbuildable[c] = 1; next }
		a = f["admitted"] + 0; b = f["bound"] + 0
		rounds[c]++; calls[c] = f["goroutines"] " × " f["attempts"]
		if (a < amin[c]) amin[c] = a
		if (a > amax[c]) amax[c] = a
		if (b < bmin[c]) bmin[c] = b
		if (b > bmax[c]) bmax[c] = b
		if (a - b > over[c]) over[c] = a - b
		if (burst - a > under[c]) under[c] = burst - a
		errors[c] += f["errors"]
	}
	function commas(n, s, out) {
		s = sprintf("%d", n); out = ""
		while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
		return s out
	}
	function span(lo, hi) { return lo == hi ? commas(lo) : commas(lo) "–" commas(hi) }
	END {
		print "### burst " commas(burst) " per hour\n"
		print "| contender | goroutines × calls | rounds | admitted | bound | verdict |"
		print "|---|---|---:|---:|---:|---|"
		for (i = 1; i <= n; i++) {
			c = order[i]
			if (c in unbuildable) { printf "| `%s` | | | – | – | cannot be built for this burst |\n", c; continue }
			v = ""
			if (over[c] > 0) v = v "; **over-admits**, by up to " over[c]
			if (under[c] > 0) v = v "; **under-admits**, by up to " under[c]
			if (errors[c] > 0) v = v "; **" errors[c] " calls failed with an error**"
			v = (v == "" ? "exact" : substr(v, 3))
			printf "| `%s` | %s | %d | %s | %s | %s |\n", c, calls[c], rounds[c], span(amin[c], amax[c]), span(bmin[c], bmax[c]), v
		}
	}' "$tmp/contention.txt"
}

strip=""
case "$CPU" in *,*) ;; *) strip=1 ;; esac
commit=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain -- ..)" ]; then commit="$commit, with uncommitted changes"; fi
bursts=$(grep -o 'contention contender=[^ ]* burst=[0-9]*' "$tmp/contention.txt" | sed 's/.*burst=//' | awk '!seen[$0]++')

{
	cat <<EOF
# Benchmarks

keylimit beside the Go rate limiters people use today, written by \`bash benchmarks/report.sh\`
from one run: the hot path (on the one harness, \`internal/hotpath\`, with the *floor* measured
beside it), exactness on one hot key under contention, memory per key, and the Redis backend
beside redis_rate. Read the ratios between rows of one table more than the nanoseconds.
[\`benchmarks/NOTES.md\`](benchmarks/NOTES.md) says what each contender is and how to read the tables.
EOF
	if [ -n "$NOTE" ]; then printf '\n%s\n' "$NOTE"; fi
	cat <<EOF

## Machine and commands

| | |
|---|---|
| CPU | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores |
| memory | $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) |
| OS | $(uname -sr) |
| Go | $(go version | cut -d' ' -f3-) |
| commit | $commit |
| generated | $(date -u '+%Y-%m-%d %H:%M UTC') |
| load average | $load_before before, $load_after after (1, 5, 15 min) |

Run from \`benchmarks/\`; benchstat reads each output file:

\`\`\`
$allow
$hot
$memory
$redis
$semaphore
$contention
$stat <output of each benchmark command>
\`\`\`

## Speed: ns/op of one Allow on a key the limiter holds

The median of $COUNT runs (\`-count\`), ± benchstat's 95% confidence interval (given from 6 runs).
*serial* is one goroutine, *parallel* \`b.RunParallel\`, GOMAXPROCS goroutines ($([ -n "$strip" ] && echo "GOMAXPROCS=$CPU" || echo "the -N suffix")).

**BenchmarkAllow**: a limit that admits nearly every call (\`hotpath.Loose\`, 31 events per 250 ns).

$(pivot Allow sec/op "$strip" <"$tmp/allow.csv")

**BenchmarkAllowRefused**: a limit that refuses every call measured (\`hotpath.Tight\`, 1 an hour).

$(pivot AllowRefused sec/op "$strip" <"$tmp/allow.csv")

**BenchmarkAllowRefusedRefilling**: a limit that refuses nearly every call but refills (\`hotpath.Refilling\`,
10 a second, the key spent before each run): each refusal is at most 100 ms from the key's next event.
One key only.

$(pivot AllowRefusedRefilling sec/op "$strip" <"$tmp/allow.csv")

### One hot key as goroutines outnumber cores

BenchmarkAllow's one-key parallel row again, at GOMAXPROCS (\`-cpu\`) $HOTCPU on these $(nproc) cores: the
median of $COUNT runs of each. Beyond the cores, the operating system takes threads off their CPUs,
so a mutex's holder can stall its key's waiters; a lost compare-and-swap holds nothing
(DESIGN.md, "One hot key").

$(pivot Allow sec/op <"$tmp/hot.csv")

### Allocations per call

BenchmarkAllow:

$(pivot Allow allocs/op "$strip" <"$tmp/allow.csv")

BenchmarkAllowRefused:

$(pivot AllowRefused allocs/op "$strip" <"$tmp/allow.csv")

BenchmarkAllowRefusedRefilling:

$(pivot AllowRefusedRefilling allocs/op "$strip" <"$tmp/allow.csv")

### The share of calls admitted (admitted/op), BenchmarkAllow

$(pivot Allow admitted/op "$strip" <"$tmp/allow.csv")

## Concurrency limits: one slot acquired and released

BenchmarkAcquireRelease, the median of $COUNT runs: keylimit's \`Concurrency\` beside what a Go
program writes without it (\`NOTES.md\` says what each is), 64 slots a key so that no call
waits, on keys the semaphore holds already. *serial* is one goroutine, *parallel*
\`b.RunParallel\`.

$(pivot AcquireRelease sec/op 1 <"$tmp/semaphore.csv")

## Exactness: one hot key, many goroutines

Each round builds a new limiter, then the goroutines, released at once, call \`Allow\` on one key
it has never seen, on a limit of *burst* per hour. The *bound* is the most the contender's
algorithm allows in the time the round took (\`Bound\` in \`contention.go\`). An error is a
refusal the library could not decide. \`TestHotKeyContention\` asserts that every keylimit type
admits between the burst and the bound, with no error; the peers' counts are what they did here.
EOF
	for b in $bursts; do
		echo
		exactness "$b"
	done
	cat <<EOF

## Memory: heap bytes per key

BenchmarkMemory over $KEYS keys, each used once (the median of $MEMCOUNT runs): the live heap after
two \`runtime.GC()\`, less the live heap before the limiter was built, over the keys. *held*:
under a limit of 10 an hour, so no key may be forgotten. *idle*: under 10 per 100 ms, once the
keys have gone idle and the contender (asked to sweep every 100 ms) has evicted what it can;
– for a contender that never evicts.

$(pivot Memory B/key 1 <"$tmp/memory.csv")

## Redis: one admitted decision

The median of $COUNT runs of BenchmarkRedis: one redis-server on 127.0.0.1 started by the benchmark,
one go-redis client for every row, distinct keys. \`floor\` is the client running \`EVALSHA\` of
\`return 1\`: the round trip with no work. *server-ns/op* is the time Redis spent in the script
(\`INFO commandstats\`), which the round trip's noise does not reach.

$(pivot Redis "sec/op server-sec/op allocs/op" 1 <"$tmp/redis.csv")
EOF
} >"$OUT"
if [ "${HTTP:-1}" != 0 ]; then
	bash http.sh >>"$OUT"
fi
echo "wrote $OUT" >&2
