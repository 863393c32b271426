#!/usr/bin/env bash
# Runs toc's benchmarks and the peer comparison, and rewrites
# bench/RESULTS.md with the figures, the machine and the exact commands.
#
#   bash bench/run.sh            # the default run, about ten minutes
#   FIRE_N=100000 FIRE_SPREAD=10s PENDING_N=10000000 bash bench/run.sh
#   PEERS=0 bash bench/run.sh    # toc only
#   CLUSTER=0 bash bench/run.sh  # without toc's cluster mode
#
# Needs Go and jq; the peers need Redis on 127.0.0.1:6379 (database
# $REDIS_DB, which must be empty, is flushed afterwards) and PostgreSQL on
# 127.0.0.1:5432 (database toc_bench_river is created and dropped). A peer
# whose service does not answer is skipped and said so. All traffic stays on
# loopback; every run is bounded (see --grace in `toc help bench`).
#
# The cluster section (also psql, redis-cli and curl) runs each workload on a
# fresh cluster of 1, 2 and 3 `toc serve` nodes over PostgreSQL database
# $CLUSTER_DB and Redis keys under $CLUSTER_PREFIX: both are cleared before,
# and dropped or deleted after each run, also when the script fails or is
# interrupted. Only the node processes it started are stopped, by pid.
# CLUSTER_LOGS=DIR keeps the nodes' logs there.
set -euo pipefail

FIRE_N=${FIRE_N:-50000}          # over FIRE_SPREAD: 10,000 fires/s
FIRE_SPREAD=${FIRE_SPREAD:-5s}
PULL_N=${PULL_N:-10000}          # the same through pull consumers: 2,000/s
SINGLE_N=${SINGLE_N:-20000}      # schedule, one task per request, 16 clients,
SINGLE_HOLD=${SINGLE_HOLD:-6s}   #   all due this long after the start
BATCH_N=${BATCH_N:-100000}       # schedule, batches of 1000
BATCH_HOLD=${BATCH_HOLD:-10s}
PENDING_N=${PENDING_N:-1000000}  # far-future tasks: the issue's figure (fewer leave Pebble's 32 MiB memtable unspread)
PEERS=${PEERS:-1}
PEER_FIRE_N=${PEER_FIRE_N:-$FIRE_N}
PEER_SINGLE_N=${PEER_SINGLE_N:-10000}
PEER_BATCH_N=${PEER_BATCH_N:-50000}
REDIS_DB=${REDIS_DB:-13}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}   # ends in /DATABASE
CLUSTER=${CLUSTER:-1}
CLUSTER_NODES=${CLUSTER_NODES:-1 2 3}
# The cluster delivers about 700 tasks/s on a 2-core box today: these keep a
# node count's runs to about two minutes (at most about four: see CLUSTER_MAX_WAIT).
CLUSTER_FIRE_N=${CLUSTER_FIRE_N:-20000}        # over CLUSTER_FIRE_SPREAD: 4,000 fires/s
CLUSTER_FIRE_SPREAD=${CLUSTER_FIRE_SPREAD:-$FIRE_SPREAD}
CLUSTER_FIRE_LEAD=${CLUSTER_FIRE_LEAD:-8s}     # scheduling on a cluster is slower: start firing later
CLUSTER_SINGLE_N=${CLUSTER_SINGLE_N:-5000}     # schedule, one task per request, 16 clients
CLUSTER_SINGLE_HOLD=${CLUSTER_SINGLE_HOLD:-5s}
CLUSTER_BATCH_N=${CLUSTER_BATCH_N:-10000}      # schedule, batches of 1000
CLUSTER_BATCH_HOLD=${CLUSTER_BATCH_HOLD:-5s}
CLUSTER_PENDING_N=${CLUSTER_PENDING_N:-100000} # far-future tasks, 1 node
CLUSTER_MAX_WAIT=${CLUSTER_MAX_WAIT:-60s}      # bounds each run's wait for deliveries
CLUSTER_DB=${CLUSTER_DB:-toc_bench_cluster}
CLUSTER_PREFIX=${CLUSTER_PREFIX:-toc-bench-cluster}
CLUSTER_REDIS=${CLUSTER_REDIS:-127.0.0.1:6379}
CLUSTER_LOGS=${CLUSTER_LOGS:-}

cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "run.sh: jq is required" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/toc-bench.XXXXXX")
server_pid=
node_pids=()   # the cluster's `toc serve` processes, started by this script
node_urls=()
cluster_made=  # set while $CLUSTER_DB or keys under $CLUSTER_PREFIX may exist
cluster_dsn=${PG_URL%/*}/$CLUSTER_DB

# cluster_clear: drops $CLUSTER_DB and deletes the keys under $CLUSTER_PREFIX.
cluster_clear() {
	psql "$PG_URL" -qAtc "DROP DATABASE IF EXISTS $CLUSTER_DB WITH (FORCE)" >/dev/null 2>&1 || true
	redis-cli -u "redis://$CLUSTER_REDIS" --scan --pattern "$CLUSTER_PREFIX:*" 2>/dev/null |
		xargs -r -d '\n' -n 500 redis-cli -u "redis://$CLUSTER_REDIS" del >/dev/null 2>&1 || true
}

# cluster_up NODES NAME: a fresh database and prefix, and NODES `toc serve`
# nodes over them, each on its own free port; returns once every node
# answers /readyz, or 1 with the reason in $cluster_err. Logs go to
# $work/NAME.nodeI.err.
cluster_err=
cluster_up() {
	local nodes=$1 name=$2 i url
	cluster_made=1
	cluster_clear
	if ! cluster_err=$(psql "$PG_URL" -qAtc "CREATE DATABASE $CLUSTER_DB" 2>&1); then
		return 1
	fi
	node_pids=() node_urls=()
	for ((i = 0; i < nodes; i++)); do
		"$work/toc" serve --listen 127.0.0.1:0 --sql "$cluster_dsn" --redis "$CLUSTER_REDIS" \
			--redis-prefix "$CLUSTER_PREFIX" --log-level warn >"$work/$name.node$i.out" 2>"$work/$name.node$i.err" &
		node_pids+=($!)
	done
	echo "toc serve --listen 127.0.0.1:0 --sql $cluster_dsn --redis $CLUSTER_REDIS --redis-prefix $CLUSTER_PREFIX --log-level warn   # $nodes node(s), fresh database and prefix" >>"$commands"
	for ((i = 0; i < nodes; i++)); do
		url=
		for _ in $(seq 300); do # 30s
			url=$(sed -n 's/^toc listening on //p' "$work/$name.node$i.out")
			if [[ -n $url ]] && curl -sf -o /dev/null --max-time 2 "$url/readyz"; then
				break
			fi
			if ! kill -0 "${node_pids[i]}" 2>/dev/null; then
				break
			fi
			url=
			sleep 0.1
		done
		if [[ -z $url ]]; then
			cluster_err="node $((i + 1)) of $nodes not ready within 30s: $(tail -c 300 "$work/$name.node$i.err" | tr '\n\t' '  ')"
			return 1
		fi
		node_urls+=("$url")
	done
}

# log_summary FILE: the three most frequent messages of a node's log (slog
# text lines, or the error it exited with), with their counts.
log_summary() {
	{
		grep -o 'msg=\("[^"]*"\|[^ ]*\)' "$1" | sed 's/^msg=//; s/"//g'
		grep -E '^(toc: |panic: )' "$1"
	} | sort | uniq -c | sort -rn | head -3 | sed 's/^ *\([0-9]*\) \(.*\)/\2 (x\1)/' | paste -sd '|' - | sed 's/|/; /g'
}

# cluster_down [NAME]: stops the nodes this script started (SIGTERM, then
# SIGKILL after 20s), notes what they logged and clears the database and
# keys.
cluster_down() {
	local name=${1:-} pid i f lines
	for pid in "${node_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${node_pids[@]}"; do
		for _ in $(seq 200); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	node_pids=() node_urls=()
	if [[ -n $name ]]; then
		# What the run left in Redis: once every task is delivered (or far
		# in the future), the store and prepare queues should be empty.
		local k c left_store=0 left_prepare=0
		while read -r k; do
			c=$(redis-cli -u "redis://$CLUSTER_REDIS" zcard "$k" 2>/dev/null) || continue
			case $k in
			*:store) left_store=$((left_store + c)) ;;
			*:prepare) left_prepare=$((left_prepare + c)) ;;
			esac
		done < <(redis-cli -u "redis://$CLUSTER_REDIS" --scan --pattern "$CLUSTER_PREFIX:{*}:*" 2>/dev/null)
		if ((left_store + left_prepare > 0)); then
			echo "$name: when the nodes stopped, $left_store members were left in Redis store queues and $left_prepare in prepare queues (entries a promotion scan wrote back as their task finished; a running owner drops each when it comes due, a lease's end at most, about 15 s)" >>"$node_notes"
		fi
		for f in "$work/$name".node*.err; do
			[[ -e $f ]] || continue
			if [[ -n $CLUSTER_LOGS ]]; then mkdir -p "$CLUSTER_LOGS" && cp "$f" "$CLUSTER_LOGS/"; fi
			lines=$(grep -c . "$f" || true)
			if ((lines > 0)); then
				i=${f##*.node}; i=${i%.err}
				echo "$name, node $((i + 1)): $lines log lines at warn or above; most frequent: $(log_summary "$f")" >>"$node_notes"
			fi
		done
	fi
	if [[ -n $cluster_made ]]; then
		cluster_clear
		cluster_made=
	fi
}

# cluster_run NODES NAME ARGS...: toc bench ARGS against a fresh cluster of
# NODES nodes.
cluster_run() {
	local nodes=$1 name=$2; shift 2
	local label="cluster, $nodes node"
	if ((nodes > 1)); then label+=s; fi
	if ! cluster_up "$nodes" "$name"; then
		echo "skipped toc $label, $name: $cluster_err" >>"$skipped"
		echo "run.sh: $label, $name: $cluster_err" >&2
		cluster_down "$name"
		return 0
	fi
	local urls pids
	urls=$(IFS=,; echo "${node_urls[*]}")
	pids=$(IFS=,; echo "${node_pids[*]}")
	where=$label
	bench toc --server "$urls" --server-pid "$pids" "$@"
	where=
	cluster_down "$name"
}

cleanup() {
	if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	cluster_down
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

results=$work/results.jsonl   # one JSON result per line
commands=$work/commands.txt   # the commands, as run
skipped=$work/skipped.txt
node_notes=$work/node-notes.txt # what the cluster nodes logged
: >"$results" >"$commands" >"$skipped" >"$node_notes"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date +%s)

echo "building toc and peers" >&2
go build -o "$work/toc" ./cmd/toc
# -mod=mod: the peers module follows the main one through a replace, so
# its go.sum may need the main module's newest requirements.
(cd bench/peers && go build -mod=mod -o "$work/peers" .)

# bench BIN ARGS...: runs one benchmark with --json, records the command and
# the result. With $where set (a cluster run), the result's variant says it
# instead of "server", and a failure is noted rather than fatal.
where=
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
	if [[ $bin == toc && -z $where ]]; then
		out=$("$work/toc" bench "$@" --json)
	elif [[ $bin == toc ]] && ! out=$("$work/toc" bench "$@" --json 2>"$work/bench.err"); then
		cat "$work/bench.err" >&2
		echo "failed: \`$shown\` ($where): $(head -c 300 "$work/bench.err" | tr '\n\t' '  ')" >>"$skipped"
		return 0
	elif [[ $bin == peers ]] && ! out=$("$work/peers" "$@" --json 2>"$work/peer.err"); then
		# A peer's service may be busy (the machine is shared): say so and go on.
		cat "$work/peer.err" >&2
		echo "failed: \`$shown\`: $(head -c 300 "$work/peer.err" | tr '\n\t' '  ')" >>"$skipped"
		return 0
	fi
	jq -c --arg w "$where" 'if $w != "" then .variant |= sub("(server|[0-9]+ servers)$"; $w) else . end' <<<"$out" >>"$results"
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

# toc, cluster mode: each run on a fresh cluster of 1, 2 and 3 nodes over
# one PostgreSQL and one Redis.
if [[ $CLUSTER == 1 ]]; then
	if ! command -v psql >/dev/null || ! command -v redis-cli >/dev/null || ! command -v curl >/dev/null; then
		echo "skipped toc cluster: it needs psql, redis-cli and curl" >>"$skipped"
	elif ! psql "$PG_URL" -qAtc 'select 1' >/dev/null 2>&1; then
		echo "skipped toc cluster: PostgreSQL at $PG_URL did not answer" >>"$skipped"
	elif ! redis-cli -u "redis://$CLUSTER_REDIS" ping >/dev/null 2>&1; then
		echo "skipped toc cluster: Redis at $CLUSTER_REDIS did not answer" >>"$skipped"
	else
		for nodes in $CLUSTER_NODES; do
			cluster_run "$nodes" "c$nodes-fire" --workload fire --n "$CLUSTER_FIRE_N" --spread "$CLUSTER_FIRE_SPREAD" --lead "$CLUSTER_FIRE_LEAD" --max-wait "$CLUSTER_MAX_WAIT"
			cluster_run "$nodes" "c$nodes-single" --workload schedule --n "$CLUSTER_SINGLE_N" --batch 1 --concurrency 16 --hold "$CLUSTER_SINGLE_HOLD" --max-wait "$CLUSTER_MAX_WAIT"
			cluster_run "$nodes" "c$nodes-batch" --workload schedule --n "$CLUSTER_BATCH_N" --batch 1000 --concurrency 16 --hold "$CLUSTER_BATCH_HOLD" --max-wait "$CLUSTER_MAX_WAIT"
			if [[ $nodes == 1 ]]; then
				cluster_run 1 c1-pending --workload pending --n "$CLUSTER_PENDING_N" \
					--redis "$CLUSTER_REDIS" --redis-prefix "$CLUSTER_PREFIX" --sql "$cluster_dsn"
			fi
		done
	fi
fi

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
| toc cluster | nodes with \`toc serve\`'s defaults (4 SQL tables, 64 slots, a 10 min hot window) over PostgreSQL ${pg_version:-?} and Redis ${redis_version:-?}, all on this machine |
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
	cat <<EOF

## Cluster

toc's cluster mode: $(echo "$CLUSTER_NODES" | wc -w) node counts ($CLUSTER_NODES), every run on a fresh cluster (a new
database and Redis prefix, nodes started for it and stopped after). The
scheduling requests go round-robin over the nodes; every node delivers to
the one receiver. The issue's target for a cluster is lateness p99 <= 20 ms
at 10,000 fires/s; the fire runs here are at the rate in the table (set by
CLUSTER_FIRE_N over CLUSTER_FIRE_SPREAD), and their missing tasks are those
not delivered within the wait (--max-wait $CLUSTER_MAX_WAIT after the last
due time). Lateness in ms; the rows are in the table below too.

| nodes | fire/s | fire p50 | fire p99 | fire max | missing | dup | single sched/s | single drain p99 | batch sched/s | batch drain p99 |
|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
EOF
	jq -rs '[.[] | select(.system == "toc" and (.variant // "" | test("cluster")))] | group_by(.nodes)[] |
		(map(select(.workload == "fire"))[0]) as $f |
		(map(select(.workload == "schedule" and .batch == 1))[0]) as $s |
		(map(select(.workload == "schedule" and .batch > 1))[0]) as $b |
		def i: if . == null then "" else floor end;
		[.[0].nodes, (if $f then $f.n / $f.spread_sec else null end | i), $f.lateness_ms.p50, $f.lateness_ms.p99, $f.lateness_ms.max,
		 ([$f, $s, $b] | map(.missing // 0) | add), ([$f, $s, $b] | map(.duplicates // 0) | add),
		 ($s.schedule_per_sec | i), $s.lateness_ms.p99, ($b.schedule_per_sec | i), $b.lateness_ms.p99] |
		"| " + (map(. // "" | tostring) | join(" | ")) + " |"' "$results"
	cat <<'EOF'

missing and dup add up the node count's fire and schedule runs.

## Pending

Far-future tasks (due a day ahead) on a separate `toc serve` process, or on
a cluster of one node: RSS from /proc/PID/status (summed over a cluster's
nodes), the data directory's size (embedded), the growth of the SQL
database (pg_database_size) and of Redis (used_memory of the whole server,
so other clients of a shared Redis count too; and MEMORY USAGE of the keys
under the cluster's prefix, its own share), from before the fill to after.
A cluster keeps only tasks due within its hot window in Redis, so
far-future tasks should cost it SQL rows and next to no Redis memory.
sched/s is a probe scheduled on top of the pending tasks.

| system | variant | n | rss MiB | rss B/task | disk MiB | disk B/task | sql MiB grown | sql B/task | redis B grown | redis B/task | redis prefix B grown | fill/s | sched/s |
|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
EOF
	jq -r 'def i: if . == null then "" else floor end; def mib: if . == null or . == 0 then "" else ./1048576*10 | floor/10 end;
		select(.workload == "pending") | [.system, .variant, .n, (.rss_bytes | mib), (.rss_bytes_per_task | i), (.disk_bytes | mib), (.disk_bytes_per_task | i),
		(.sql_bytes | mib), (.sql_bytes_per_task | i), .redis_bytes, (if .redis_bytes_per_task == null then null else .redis_bytes_per_task * 10 | round / 10 end), .redis_prefix_bytes,
		(.fill_per_sec | i), (.schedule_per_sec | i)] | "| " + (map(. // "" | tostring) | join(" | ")) + " |"' "$results"
	cat <<'EOF'

## Notes

EOF
	jq -r 'select((.notes // []) | length > 0) | "- \([.system, .workload, .variant] | map(select(. != null and . != "")) | join(" ")) n=\(.n) batch \(.batch): " + (.notes | join("; "))' "$results"
	sed 's/^/- /' "$skipped"
	sed 's/^/- cluster: /' "$node_notes"
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
