#!/usr/bin/env bash
# Run one command under ASan/UBSan and fail if it exits non-zero OR if its
# output shows a sanitizer report or a Criterion worker that died after its
# test had ended (how a leak shows up, see the comment in the Makefile).
#
#   scripts/run-sanitized.sh <program> [args...]
#
# ASAN_OPTIONS / UBSAN_OPTIONS come from the caller (the Makefile sets them);
# defaults here only apply when run by hand.
set -uo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 <program> [args...]" >&2
    exit 2
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

case ":$ASAN_OPTIONS:" in
    *:abort_on_error=1:*) ;;
    *) echo "run-sanitized: warning: ASAN_OPTIONS lacks abort_on_error=1; leaks in Criterion tests will NOT fail" >&2 ;;
esac

log="$(mktemp "${TMPDIR:-/tmp}/cagrad-san.XXXXXX")"
trap 'rm -f "$log"' EXIT

echo "run-sanitized: $*"
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

pattern='ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|crashed during its setup or teardown|exited during its setup or teardown'
if grep -Eq "$pattern" "$log"; then
    echo "" >&2
    echo "run-sanitized: FAILED: $1 produced sanitizer/worker errors:" >&2
    grep -E "$pattern|SUMMARY: " "$log" | sort | uniq -c | sed 's/^/    /' >&2
    [[ $rc -ne 0 ]] || rc=1
elif [[ $rc -ne 0 ]]; then
    echo "run-sanitized: FAILED: $1 exited with status $rc" >&2
else
    echo "run-sanitized: OK: $1"
fi
exit "$rc"
