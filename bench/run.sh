#!/usr/bin/env bash
# Runs toc's benchmark suite and rewrites bench/RESULTS.md: the bench module's
# command (flags: bash bench/run.sh -h), which builds toc from this checkout
# (or runs --toc BINARY) and drives it through `toc serve` and `toc bench`.
cd "$(dirname "$0")" && exec go run . "$@"
