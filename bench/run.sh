#!/usr/bin/env bash
# Runs toc's benchmark suite and rewrites bench/RESULTS.md: the bench module's
# command (flags: bash bench/run.sh -h), which builds toc from this checkout
# (or runs --toc BINARY) and drives it through `toc serve` and `toc bench`.
#   bash bench/run.sh baseline ...  one baseline, no toc (flags: baseline -h)
#   bash bench/run.sh loadgen ...   toc bench with a cluster's --redis/--sql
cd "$(dirname "$0")" && exec go run . "$@"
