#!/usr/bin/env bash
# Self-test of check-symbols.sh: an archive with a foreign global must fail and name it;
# one with ca_/cai_ globals (and a static) must pass.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/good.c" <<'C'
static int helper(void) { return 1; }
int ca_public(void) { return helper(); }
int cai_internal = 2;
C
cat >"$tmp/bad.c" <<'C'
int tensor_new(void) { return 3; }
C
cc -c "$tmp/good.c" -o "$tmp/good.o"
cc -c "$tmp/bad.c" -o "$tmp/bad.o"
ar rcs "$tmp/libcagrad.a" "$tmp/good.o"
bash "$here/check-symbols.sh" "$tmp" >/dev/null
ar rcs "$tmp/libcagrad.a" "$tmp/bad.o"
if out=$(bash "$here/check-symbols.sh" "$tmp" 2>&1); then
    echo "test-check-symbols: a foreign symbol passed the check" >&2
    exit 1
fi
grep -q '  tensor_new' <<<"$out" || { echo "test-check-symbols: not named: $out" >&2; exit 1; }
echo "test-check-symbols: OK"
