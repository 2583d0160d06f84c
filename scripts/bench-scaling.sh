#!/usr/bin/env bash
# Build cagrad with its Python extension in its own build directory, with every core, and
# run the benchmark at many thread counts: how a machine with more cores than CI's 2
# measures the scaling that docs/benchmarks.md projects.
#
#   scripts/bench-scaling.sh OUT_DIR [THREADS] [bench.py options...]
#   scripts/bench-scaling.sh /tmp/scaling 1,4,8,16 --quick
#
# Writes OUT_DIR/results.json (after each thread count, so a run cut short keeps what it
# measured), OUT_DIR/benchmarks.md and OUT_DIR/benchmarks.png. It needs cmake, a C
# compiler, pkg-config, SLEEF, and a Python (PYTHON, default python3) with torch, numpy and
# scipy-openblas32 (CAGRAD_BLAS chooses another). BUILD_DIR (default build-scaling) and BUILD_TYPE (RelWithDebInfo, as
# `make bench`) choose the build. OPENBLAS_CORETYPE is passed on as the caller set it.
# On a machine without them, copied files do: PKG_CONFIG_PATH to a directory with a sleef.pc
# whose prefix is ${pcfiledir}/../.. (beside SLEEF's header and libsleef.so), LD_LIBRARY_PATH
# to that lib, and PYTHONPATH to a copy of the scipy_openblas32 package.
set -euo pipefail
out=${1:?usage: scripts/bench-scaling.sh OUT_DIR [THREADS] [bench.py options...]}
threads=${2:-1,4,8,16}
shift $(( $# < 2 ? $# : 2 ))
py=$(command -v "${PYTHON:-python3}")
[[ $py == /* ]] || py=$PWD/$py  # absolute, not resolved: a venv's python stays itself
build=${BUILD_DIR:-build-scaling}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
mkdir -p "$out"
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DCAGRAD_PYTHON=ON -DCAGRAD_BUILD_TESTS=OFF -DCAGRAD_BUILD_EXAMPLES=OFF \
    -DCAGRAD_BUILD_BENCHMARKS=ON -DCAGRAD_BLAS="${CAGRAD_BLAS:-scipy-openblas32}" \
    -DPython3_EXECUTABLE="$py" >"$out/build.log"
cmake --build "$build" -j "$(nproc)" >>"$out/build.log"
"$py" benchmarks/bench.py --build-dir "$build" --threads "$threads" \
    --json "$out/results.json" --md "$out/benchmarks.md" --png "$out/benchmarks.png" "$@"
