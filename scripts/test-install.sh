#!/usr/bin/env bash
# Install a build into a scratch prefix and build examples/mlp_sgd.c against the installed
# copy twice, through pkg-config and through CMake's find_package(cagrad), then run both.
#   scripts/test-install.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: scripts/test-install.sh BUILD_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix
cmake --install "$build" --prefix "$prefix" >"$scratch/install.log"
pcdir=$(dirname "$(find "$prefix" -name cagrad.pc)")

# pkg-config
cc -O1 -o "$scratch/mlp_pc" "$root/examples/mlp_sgd.c" \
    $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs cagrad)
"$scratch/mlp_pc" >"$scratch/pc.out"

# CMake
mkdir -p "$scratch/proj"
cat >"$scratch/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(uses_cagrad C)
find_package(cagrad REQUIRED)
add_executable(mlp_sgd "$root/examples/mlp_sgd.c")
target_link_libraries(mlp_sgd PRIVATE cagrad::cagrad)
CMAKE
cmake -S "$scratch/proj" -B "$scratch/proj/build" -DCMAKE_PREFIX_PATH="$prefix" >"$scratch/cmake.log"
cmake --build "$scratch/proj/build" >>"$scratch/cmake.log"
"$scratch/proj/build/mlp_sgd" >"$scratch/cmake.out"
echo "test-install: examples/mlp_sgd.c built against an installed cagrad through pkg-config" \
     "and find_package(cagrad), and ran: OK"
