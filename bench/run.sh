#!/usr/bin/env bash
# Runs toc's benchmarks and the peer comparison, and rewrites
# bench/RESULTS.md with the figures, the machine and the exact commands.
#
#   bash bench/run.sh            # the default run, a few minutes
#   FIRE_N=100000 FIRE_SPREAD=10s PENDING_N=1000000 bash bench/run.sh
#   PEERS=0 bash bench/run.sh    # toc only
#
# Needs Go and jq; the peers need Redis on 127.0.0.1:6379 (database
# $REDIS_DB, which must be empty, is flushed afterwards) and PostgreSQL on
# 127.0.0.1:5432 (database toc_bench_river is created and dropped). A peer
# whose service does not answer is skipped and said so. All traffic stays on
# loopback; every run is bounded (see --grace in `toc help bench`).
set -euo pipefail

FIRE_N=${FIRE_N:-50000}          # over FIRE_SPREAD: 10,000 fires/s
FIRE_SPREAD=${FIRE_SPREAD:-5s}
PULL_N=${PULL_N:-10000}          # the same through pull consumers: 2,000/s
SINGLE_N=${SINGLE_N:-20000}      # schedule, one task per request, 16 clients,
SINGLE_HOLD=${SINGLE_HOLD:-6s}   #   all due this long after the start
BATCH_N=${BATCH_N:-100000}       # schedule, batches of 1000
BATCH_HOLD=${BATCH_HOLD:-10s}
PENDING_N=${PENDING_N:-300000}   # far-future tasks (1000000 for the issue's figure)
PEERS=${PEERS:-1}
PEER_FIRE_N=${PEER_FIRE_N:-$FIRE_N}
PEER_SINGLE_N=${PEER_SINGLE_N:-10000}
PEER_BATCH_N=${PEER_BATCH_N:-50000}
REDIS_DB=${REDIS_DB:-13}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}

cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "run.sh: jq is required" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/toc-bench.XXXXXX")
server_pid=
cleanup() {
	if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

results=$work/results.jsonl   # one JSON result per line
commands=$work/commands.txt   # the commands, as run
skipped=$work/skipped.txt
: >"$results" >"$commands" >"$skipped"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date +%s)

echo "building toc and peers" >&2
go build -o "$work/toc" ./cmd/toc
# -mod=mod: the peers module follows the main one through a replace, so
# its go.sum may need the main module's newest requirements.
(cd bench/peers && go build -mod=mod -o "$work/peers" .)

# bench NAME BIN ARGS...: runs one benchmark with --json, records the
# command and the result.
bench() {
	local bin=$1; shift
	local shown
	case $bin in
	toc) shown="toc bench $*" ;;
	peers) shown="(cd bench/peers && go run . $*)" ;;
	esac
	echo "$shown" >&2
	echo "$shown" >>"$commands"
	local out
	if [[ $bin == toc ]]; then
		out=$("$work/toc" bench "$@" --json)
	elif ! out=$("$work/peers" "$@" --json 2>"$work/peer.err"); then
		# A peer's service may be busy (the machine is shared): say so and go on.
		cat "$work/peer.err" >&2
		echo "failed: \`$shown\`: $(head -c 300 "$work/peer.err" | tr '\n\t' '  ')" >>"$skipped"
		return 0
	fi
	jq -c . <<<"$out" >>"$results"
	jq -r '"  -> fired \(.fired)/\(.n), \(.schedule_per_sec|floor)/s, p99 \(.lateness_ms.p99) ms, max \(.lateness_ms.max) ms"' <<<"$out" >&2
}

# toc, embedded: the server runs in the bench process.
bench toc --embedded --workload fire --n "$FIRE_N" --spread "$FIRE_SPREAD"
bench toc --embedded --workload fire --n "$PULL_N" --spread "$FIRE_SPREAD" --pull
bench toc --embedded --workload schedule --n "$SINGLE_N" --batch 1 --concurrency 16 --hold "$SINGLE_HOLD"
bench toc --embedded --workload schedule --n "$BATCH_N" --batch 1000 --concurrency 16 --hold "$BATCH_HOLD"

# toc pending: a separate `toc serve`, so that its RSS is the server's alone.
data=$work/pending-data
"$work/toc" serve --data "$data" --listen 127.0.0.1:0 --log-level warn >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
url=
for _ in $(seq 100); do
	url=$(sed -n 's/^toc listening on //p' "$work/serve.out")
	[[ -n $url ]] && break
	sleep 0.1
done
[[ -n $url ]] || { echo "run.sh: toc serve did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
echo "toc serve --data DIR --listen 127.0.0.1:0   # pid $server_pid, $url" >>"$commands"
bench toc --server "$url" --server-pid "$server_pid" --data-dir "$data" --workload pending --n "$PENDING_N"
kill "$server_pid"; wait "$server_pid" || true; server_pid=

# Peers.
if [[ $PEERS == 1 ]]; then
	if redis-cli -n "$REDIS_DB" ping >/dev/null 2>&1 || (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
		for poll in defaults tight; do
			bench peers --system asynq --poll $poll --redis-db "$REDIS_DB" --workload fire --n "$PEER_FIRE_N" --spread "$FIRE_SPREAD"
		done
		bench peers --system asynq --redis-db "$REDIS_DB" --workload schedule --n "$PEER_SINGLE_N" --batch 1
		bench peers --system asynq --redis-db "$REDIS_DB" --workload schedule --n "$PEER_BATCH_N" --batch 1000
	else
		echo "skipped asynq: Redis on 127.0.0.1:6379 did not answer" >>"$skipped"
	fi
	if (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
		for poll in defaults tight; do
			bench peers --system river --poll $poll --pg "$PG_URL" --workload fire --n "$PEER_FIRE_N" --spread "$FIRE_SPREAD"
		done
		bench peers --system river --pg "$PG_URL" --workload schedule --n "$PEER_SINGLE_N" --batch 1
		bench peers --system river --pg "$PG_URL" --workload schedule --n "$PEER_BATCH_N" --batch 1000
	else
		echo "skipped river: PostgreSQL on 127.0.0.1:5432 did not answer" >>"$skipped"
	fi
fi

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
took=$(($(date +%s) - started))

# The machine and versions.
peer_version() { (cd bench/peers && go list -m -f '{{.Version}}' "$1"); }
redis_version=$(redis-cli info server 2>/dev/null | sed -n 's/^redis_version:\([^\r]*\).*/\1/p' || true)
redis_aof=$(redis-cli config get appendonly 2>/dev/null | sed -n 2p || true)
pg_version=$(psql "$PG_URL" -Atc 'show server_version' 2>/dev/null || true)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain 2>/dev/null) ]]; then commit="$commit + uncommitted changes"; fi

{
	cat <<EOF
# Benchmark results

Written by \`bash bench/run.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC') in ${took}s; run it again to
regenerate this file. What the workloads do: \`toc help bench\` and
\`internal/bench\`. Go micro-benchmarks of the create path:
\`go test -run - -bench Create ./internal/bench/\`.

## Machine

| | |
|---|---|
| CPUs (\`nproc\`) | $(nproc) ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)) |
| memory | $(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) |
| OS | $(uname -sr) |
| Go | $(go env GOVERSION) |
| toc | $commit |
| asynq | $(peer_version github.com/hibiken/asynq), Redis ${redis_version:-?} (appendonly ${redis_aof:-?}) |
| river | $(peer_version github.com/riverqueue/river), riverpgxv5 $(peer_version github.com/riverqueue/river/riverdriver/riverpgxv5), pgx $(peer_version github.com/jackc/pgx/v5), PostgreSQL ${pg_version:-?} |
| load average (1, 5, 15 min) | before $load_before, after $load_after |

The load average is other work on the machine: the figures are only as
quiet as it was.

## Targets

Nothing enforces them; each toc run says whether it met the ones that apply.

EOF
	jq -r 'select(.system == "toc") | . as $r | .targets[]? | "- \(.name): **\(if .met then "met" else "missed" end)** (\(.got); \([$r.workload, $r.variant] | map(select(. != null and . != "")) | join(", ")))"' "$results"
	cat <<'EOF'

## Fire and schedule

Lateness is the first delivery of each task minus its due time, in ms
(negative: early). fire: tasks due at instants spread evenly over the spread.
schedule: tasks/s accepted (the server answered), one per request or in
batches, then all fire at one instant and are counted, so lateness there is
how fast a burst drains. When scheduling outlasts the hold, sched/s counts
only the tasks accepted before the first was due (see the notes).

| system | variant | workload | n | spread s | batch | clients | fired | missing | dup | early | sched/s | p50 | p90 | p99 | p99.9 | max | min |
|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
EOF
	jq -r 'select(.workload != "pending") | [.system, .variant, .workload, .n, (.spread_sec // ""), .batch, .concurrency, .fired, .missing, .duplicates, .early, (.schedule_per_sec|floor), .lateness_ms.p50, .lateness_ms.p90, .lateness_ms.p99, .lateness_ms.p999, .lateness_ms.max, .lateness_ms.min] | "| " + (map(tostring) | join(" | ")) + " |"' "$results"
	cat <<'EOF'

## Pending

Far-future tasks on a separate `toc serve` process: its RSS from
/proc/PID/status and its data directory's size, before and after the fill;
sched/s is a probe scheduled on top of the pending tasks.

| system | n | rss MiB | rss B/task | disk MiB | disk B/task | fill/s | sched/s |
|---|--:|--:|--:|--:|--:|--:|--:|
EOF
	jq -r 'select(.workload == "pending") | [.system, .n, (.rss_bytes/1048576*10|floor/10), (.rss_bytes_per_task|floor), (.disk_bytes/1048576*10|floor/10), (.disk_bytes_per_task|floor), (.fill_per_sec|floor), (.schedule_per_sec|floor)] | "| " + (map(tostring) | join(" | ")) + " |"' "$results"
	cat <<'EOF'

## Notes

EOF
	jq -r 'select((.notes // []) | length > 0) | "- \([.system, .workload, .variant] | map(select(. != null and . != "")) | join(" ")) n=\(.n) batch \(.batch): " + (.notes | join("; "))' "$results"
	sed 's/^/- /' "$skipped"
	cat <<'EOF'
- asynq keeps due times in whole seconds (ProcessAt is stored as a Unix
  second), so it delivers up to a second early; "early" counts those tasks.
- asynq's acceptance is a Redis write; with appendonly no it is not on disk.
  River's and toc's are fsync'd commits.
- Peers run with 1000 concurrent handlers (asynq Config.Concurrency, River
  MaxWorkers); toc's --max-in-flight is 1024.

## Commands

```sh
EOF
	cat "$commands"
	echo '```'
} >bench/RESULTS.md
echo "wrote bench/RESULTS.md in ${took}s" >&2
