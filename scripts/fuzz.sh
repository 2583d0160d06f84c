#!/usr/bin/env bash
# fuzz.sh - a random-graph campaign: N graphs of the compiled-vs-eager differential test
# (tests/c/test_compiled_random.c), split into JOBS disjoint ranges of graph indices that
# run side by side, one process each.
#
#   bash scripts/fuzz.sh BUILD_DIR N [SEED] [JOBS]     (make fuzz N=... SEED=... JOBS=...)
#
# Prints each range's line, then graphs per second, the ranges that found a mismatch or a
# crash (with the test's message: seed, graph index, what differs), and the eager
# fallbacks (any fallback fails its range, naming the graph and the reason). A range stops
# at its first mismatch: replay that graph with CAGRAD_RANDOM_SEED=SEED
# CAGRAD_RANDOM_FIRST=<index> CAGRAD_RANDOM_GRAPHS=1. Exits 1 if any range failed.
set -euo pipefail

build=${1:?usage: fuzz.sh BUILD_DIR N [SEED] [JOBS]}
n=${2:?usage: fuzz.sh BUILD_DIR N [SEED] [JOBS]}
seed=${3:-20240611}
jobs=${4:-$(nproc)}
tests="$build/cagrad_tests"
[[ -x "$tests" ]] || { echo "fuzz: $tests not found; build first (make build)" >&2; exit 2; }
((jobs >= 1 && n >= jobs)) || jobs=1

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s.%N)
per=$(((n + jobs - 1) / jobs))
pids=()
for ((j = 0; j < jobs; j++)); do
    first=$((j * per))
    count=$((first + per > n ? n - first : per))
    ((count > 0)) || continue
    CAGRAD_RANDOM_SEED=$seed CAGRAD_RANDOM_FIRST=$first CAGRAD_RANDOM_GRAPHS=$count \
        "$tests" --jobs 1 --verbose --filter 'compiled_random/differential' \
        >"$out/$j.log" 2>&1 &
    pids+=("$!:$j:$first:$count")
done
failed=0
fallbacks=0
for entry in "${pids[@]}"; do
    IFS=: read -r pid j first count <<<"$entry"
    if wait "$pid"; then
        line=$(grep -m1 'compiled_random: .* graphs' "$out/$j.log" | sed 's/^\[----\] //')
        echo "graphs [$first, $((first + count))): ${line#compiled_random: }"
        f=$(sed -n 's/.* \([0-9][0-9]*\) eager fallbacks$/\1/p' <<<"$line")
        fallbacks=$((fallbacks + ${f:-0}))
    else
        failed=$((failed + 1))
        echo "graphs [$first, $((first + count))): FAILED"
        grep -E 'Assertion Failed|seed [0-9]+ graph|CRASH|signal' "$out/$j.log" | head -n 6 |
            sed 's/^/    /'
    fi
done
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
rate=$(awk -v n="$n" -v s="$secs" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }')
printf 'fuzz: %d graphs (seed %s) in %.1f s on %d processes: %s graphs/s; %d of %d ranges ' \
    "$n" "$seed" "$secs" "$jobs" "$rate" "$failed" "${#pids[@]}"
printf 'failed (a mismatch, a crash or an eager fallback); %d eager fallbacks\n' \
    "$fallbacks"
((failed == 0))
