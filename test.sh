#!/usr/bin/env bash
# Runs every test with the race detector: the README's test command, and
# what CI runs. Services a test needs (PostgreSQL, MariaDB, Redis, RabbitMQ,
# NATS) are used when they run on loopback; a test skips when one is absent,
# and fails instead under CI=true. Every suite runs even when one fails; the
# failures are listed at the end, and the exit status is 1 if there was one.
set -uo pipefail
cd "$(dirname "$0")"

failed=()
suite() { # suite NAME COMMAND...: run one suite, remember a failure
	local name=$1
	shift
	echo "== $name"
	if ! "$@"; then
		failed+=("$name")
	fi
}

suite "every package (embedded store)" go test -race -count=1 -timeout 15m ./... "$@"
# The benchmark suite's own module (bench/), which ./... does not reach.
suite "the benchmark suite's module (bench/)" bash -c 'cd bench && exec go test -race -count=1 -timeout 10m ./... "$@"' bash "$@"

# The API behaviour suite again over each cluster backend (the run above
# used the embedded store): PostgreSQL and MariaDB with standalone Redis,
# and PostgreSQL with a three-master Redis Cluster the tests start.
for backend in postgres mysql rediscluster; do
	TOC_TEST_BACKEND=$backend suite "behaviour suite on $backend" go test -race -count=1 -timeout 10m ./internal/httpapi/ "$@"
done

if ((${#failed[@]} > 0)); then
	echo "== FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "== every suite passed"
