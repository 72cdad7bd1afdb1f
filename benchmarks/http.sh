#!/usr/bin/env bash
# Writes the HTTP section of ../BENCHMARKS.md to stdout: httplimit's
# middleware beside a bare handler (BenchmarkMiddleware), grpclimit's server
# interceptor beside a bare handler (BenchmarkInterceptor), and a
# hello-world server end to end under wrk (cmd/e2e). report.sh appends it to
# the file it writes; run alone, it prints the section:
#
#   bash benchmarks/http.sh >/tmp/http.md       # the published size, about 5 min
#   COUNT=2 BENCHTIME=20ms ROUNDS=1 DURATION=2s bash benchmarks/http.sh
#
# COUNT, BENCHTIME  -count and -benchtime of the two benchmarks
# ROUNDS, DURATION  cmd/e2e's -rounds and -duration; E2E=0 leaves it out
#                   (it needs wrk: apt-get install wrk)
set -euo pipefail
cd "$(dirname "$0")"

COUNT="${COUNT:-10}"
BENCHTIME="${BENCHTIME:-100ms}"
ROUNDS="${ROUNDS:-5}"
DURATION="${DURATION:-10s}"
E2E="${E2E:-1}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

middleware="go test -run '^\$' -bench '^BenchmarkMiddleware\$' -benchtime=$BENCHTIME -count=$COUNT ."
interceptor="go test -run '^\$' -bench '^BenchmarkInterceptor\$' -benchtime=$BENCHTIME -count=$COUNT ."
e2e="go run ./cmd/e2e -rounds $ROUNDS -duration $DURATION"
stat="go tool benchstat -format csv"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "+ (cd httplimit && $middleware)" >&2
(cd ../httplimit && eval "$middleware") >"$tmp/middleware.txt"
echo "+ (cd grpclimit && $interceptor)" >&2
(cd ../grpclimit && eval "$interceptor") >"$tmp/interceptor.txt"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
for f in middleware interceptor; do
	$stat "$tmp/$f.txt" >"$tmp/$f.csv" 2>/dev/null
done

# table PREFIX "UNIT:HEADING ...": a Markdown table from benchstat's CSV on
# stdin, a row per benchmark named PREFIX/<row>, a column per unit given.
# Times are shown in ns with benchstat's 95% confidence interval.
table() {
	awk -v prefix="$1" -v columns="$2" '
	function show(v, count) {
		if (count || v >= 100) return sprintf("%.0f", v)
		if (v >= 10) return sprintf("%.1f", v)
		return sprintf("%.2f", v)
	}
	BEGIN {
		FS = ","; nc = split(columns, c, " ")
		for (i = 1; i <= nc; i++) { split(c[i], kv, ":"); unit[i] = kv[1]; head[i] = kv[2]; col[kv[1]] = i }
	}
	/^,/ { if ($3 == "CI") u = $2; next }
	NF < 3 || !(u in col) { next }
	{
		name = $1
		if (index(name, prefix "/") != 1) next
		name = substr(name, length(prefix) + 2); sub(/-[0-9]+$/, "", name)
		if (!(name in seen)) { seen[name] = 1; rows[++nr] = name }
		v = $2; time = u ~ /sec\/op$/
		if (time) v *= 1e9
		cell[name, col[u]] = show(v, u ~ /(allocs|B)\/op$/) (time && $3 != "" && $3 != "∞" ? " ±" $3 : "")
	}
	END {
		printf "| row |"; for (i = 1; i <= nc; i++) printf " %s |", head[i]; print ""
		printf "|---|"; for (i = 1; i <= nc; i++) printf "---:|"; print ""
		for (r = 1; r <= nr; r++) {
			printf "| `%s` |", rows[r]
			for (i = 1; i <= nc; i++) printf " %s |", ((rows[r], i) in cell) ? cell[rows[r], i] : "–"
			print ""
		}
	}'
}

cat <<EOF

## HTTP and gRPC: the middleware beside a bare handler, and end to end

Written by \`bash benchmarks/http.sh\` (which \`report.sh\` runs), at commit $(git rev-parse --short HEAD)$([ -n "$(git status --porcelain -- ..)" ] && echo ", with uncommitted changes"), $(date -u '+%Y-%m-%d %H:%M UTC'),
on the machine above ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores); load average $load_before before the two
benchmarks, $load_after after. The median of $COUNT runs, ± benchstat's 95% confidence interval:

\`\`\`
(cd httplimit && $middleware)
(cd grpclimit && $interceptor)
EOF
if [ "$E2E" != 0 ]; then echo "(cd benchmarks && $e2e)"; fi
cat <<EOF
$stat <output of each benchmark command>
\`\`\`

**BenchmarkMiddleware** (httplimit): a request through the middleware to a handler that does
nothing, on an \`httptest.ResponseRecorder\`, over 1024 clients, each policy a bucket no request
empties, of 100 tokens refilled one a nanosecond, so that its fields carry a real quota's few
digits, as the floor's do (\`refused\`: one that refuses every request measured). The bare handler runs in turn
with it, 64 requests each, so *overhead* is measured under the load the middleware's requests
met. *allocs* and *B* are the middleware's requests, the recorder included; *bare allocs* is
the recorder's. \`floor/two-fields\` is no limiter: a handler wrapper that sets a RateLimit value
formatted for the request and RateLimit-Policy, the least a middleware sending them can do;
\`floor/refusal\` is the least a refusal can do: those two, Retry-After, Cache-Control and
Content-Type, the status 429 and a problem body of the default's size (a constant).

$(table Middleware "overhead-sec/op:overhead&nbsp;ns sec/op:ns/op bare-sec/op:bare&nbsp;ns allocs/op:allocs bare-allocs/op:bare&nbsp;allocs B/op:B" <"$tmp/middleware.csv")

**BenchmarkInterceptor** (grpclimit): the server interceptor alone, called without a network,
one policy admitting (\`admitted\`) or two of which one refuses (\`refused\`), beside the bare
handler.

$(table Interceptor "sec/op:ns/op allocs/op:allocs B/op:B" <"$tmp/interceptor.csv")
EOF

if [ "$E2E" != 0 ]; then
	echo "+ $e2e" >&2
	{
		echo
		echo "**End to end** (\`benchmarks/cmd/e2e\`): a hello-world handler on one server core, bare and behind each"
		echo "middleware (keyed by the client's address, one policy that never refuses), under wrk on the other"
		echo "core; \`floor-two-fields\` is the floor row above, served. The server's CPU time per request is"
		echo "read from /proc; on a shared machine it moves less than requests a second do."
		echo
		eval "$e2e"
	}
fi
