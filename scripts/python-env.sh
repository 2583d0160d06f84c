#!/usr/bin/env bash
# Create (or refresh) the project's Python environment .venv/ for `make test` and
# `make demo`: numpy, pytest, PyTorch 2.13 (CPU, the reference) and scikit-learn, from
# python_bindings/requirements-dev.txt. Prints the venv's python path on success.
#
#   scripts/python-env.sh            create/refresh .venv (fast when nothing changed)
#   PYTHON=python3.11 scripts/...    use another interpreter to create it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=.venv
req=python_bindings/requirements-dev.txt
stamp="$venv/.requirements-installed"
py="${PYTHON:-python3}"

if ! command -v "$py" >/dev/null; then
    echo "python-env: '$py' not found; install Python 3.9+ (Debian: apt-get install python3 python3-venv python3-dev)" >&2
    exit 1
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "python-env: creating $venv with $($py --version 2>&1)" >&2
    if ! "$py" -m venv "$venv" >&2; then
        echo "python-env: '$py -m venv' failed; on Debian install python3-venv" >&2
        exit 1
    fi
fi

# Reinstall only when the requirements changed since the last successful install.
if [[ ! -f "$stamp" ]] || ! cmp -s "$req" "$stamp"; then
    echo "python-env: installing $(grep -cv '^\s*\(#\|$\)' "$req") packages from $req" >&2
    "$venv/bin/python" -m pip install --quiet -r "$req" >&2
    cp "$req" "$stamp"
fi
echo "$PWD/$venv/bin/python"
