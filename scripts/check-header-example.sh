#!/usr/bin/env bash
# Compile and run the program that opens include/cagrad.h, so the header's example can
# never rot: it is cut out of the comment, built against the library, and must exit 0.
#   scripts/check-header-example.sh [build-dir]
set -euo pipefail
build="${1:-build}"
out="$build/header_example"
mkdir -p "$build"
# The example sits between "A complete program" and "Conventions", indented by " *     ".
sed -n '/A complete program/,/Conventions/p' include/cagrad.h |
    sed -n 's/^ \*     //p' >"$out.c"
if ! grep -q 'int main' "$out.c"; then
    echo "check-header-example: no program found at the top of include/cagrad.h" >&2
    exit 1
fi
# build/cagrad.pc names the library and the BLAS and SLEEF this build links
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror "$out.c" -o "$out" \
    $(PKG_CONFIG_PATH="$build" pkg-config --cflags --libs cagrad)
"$out"
echo "check-header-example: OK"
