#!/usr/bin/env bash
# The C collectives across two ranks: mpirun -np 2 BUILD/dist_collectives. Skipped, with
# the reason, when this build has no MPI (CAGRAD_MPI) or mpirun is missing. The Python
# side (DDP, faults) is tests/python/test_distributed_mpi.py, in the Python suites.
#   scripts/test-mpi.sh [build-dir]
set -euo pipefail
build="${1:-build}"
if [[ ! -x "$build/dist_collectives" ]]; then
    echo "test-mpi: skipped: $build was configured without MPI (install openmpi-bin and" \
         "libopenmpi-dev: scripts/install-deps.sh; CMake CAGRAD_MPI=AUTO or ON)"
    exit 0
fi
if ! command -v mpirun >/dev/null 2>&1; then
    echo "test-mpi: skipped: mpirun not found (apt-get install openmpi-bin)"
    exit 0
fi
# Open MPI refuses root unless told; --oversubscribe lets 2 ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 120 mpirun -np 2 --oversubscribe "$build/dist_collectives"
echo "test-mpi: OK"
