#!/usr/bin/env bash
# Runs toc's benchmarks and rewrites bench/RESULTS.md: `toc bench suite` (flags: `go run ./cmd/toc bench suite -h`).
cd "$(dirname "$0")/.." && exec go run ./cmd/toc bench suite "$@"
