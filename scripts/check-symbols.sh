#!/usr/bin/env bash
# Fail if libcagrad.a defines a global symbol outside the library's two prefixes: ca_ for
# the public API, cai_ for the internal one. cagrad is a guest in its user's program: a
# global named tensor_new or mem_alloc would clash with the user's own at link time.
#   scripts/check-symbols.sh [build-dir]
set -euo pipefail
build="${1:-build}"
lib="$build/libcagrad.a"
if [[ ! -f "$lib" ]]; then
    echo "check-symbols: $lib not found; build first" >&2
    exit 1
fi
# Defined (not U), global (upper-case type letter) symbols, one per line.
all=$(nm -g --defined-only "$lib" | awk 'NF == 3 { print $3 }' | sort -u)
foreign=$(grep -v -E '^(ca_|cai_)' <<<"$all" || true)
if [[ -n "$foreign" ]]; then
    echo "check-symbols: libcagrad.a defines global symbols without the ca_/cai_ prefix:" >&2
    sed 's/^/  /' <<<"$foreign" >&2
    echo "give each the cai_ prefix (internal) or make it static" >&2
    exit 1
fi
echo "check-symbols: OK ($(wc -l <<<"$all") global symbols, all ca_ or cai_)"
