#!/usr/bin/env bash
# Runs every test with the race detector: the README's test command, and
# what CI runs. Services a test needs (PostgreSQL, MariaDB, Redis, RabbitMQ,
# NATS) are used when they run on loopback; a test skips when one is absent,
# and fails instead under CI=true.
set -euo pipefail
cd "$(dirname "$0")"

go test -race -count=1 -timeout 15m ./... "$@"

# The API behaviour suite again over each cluster backend (the run above
# used the embedded store): PostgreSQL and MariaDB with standalone Redis,
# and PostgreSQL with a three-master Redis Cluster the tests start.
for backend in postgres mysql rediscluster; do
	echo "== behaviour suite on $backend"
	TOC_TEST_BACKEND=$backend go test -race -count=1 -timeout 10m ./internal/httpapi/ "$@"
done
