#!/usr/bin/env bash
# Check (and, as root, install) everything cagrad needs to build and test.
#
#   scripts/install-deps.sh              build + test dependencies
#   scripts/install-deps.sh --dev-tools  ... plus clang-format, clang-tidy, cppcheck
#   scripts/install-deps.sh --check      only report; never install (exit 1 if missing)
#
# Fast path: when everything is present this runs no apt command at all.
# As root: apt-get update + apt-get install -y the missing Debian packages.
# Not root: print the exact sudo command and exit non-zero.
set -euo pipefail

dev_tools=0
check_only=0
for arg in "$@"; do
    case "$arg" in
        --dev-tools) dev_tools=1 ;;
        --check) check_only=1 ;;
        -h | --help)
            sed -n '2,10p' "$0"
            exit 0
            ;;
        *)
            echo "install-deps: unknown argument '$arg'" >&2
            exit 2
            ;;
    esac
done

MIN_CMAKE=3.20

missing_pkgs=()
missing_what=()
need() { # need <debian-package> <human description>
    local p
    for p in "${missing_pkgs[@]+"${missing_pkgs[@]}"}"; do
        [[ "$p" == "$1" ]] && return 0
    done
    missing_pkgs+=("$1")
    missing_what+=("$2")
}

have() { command -v "$1" >/dev/null 2>&1; }

version_ge() { # version_ge A B  -> A >= B
    [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]
}

check_all() {
    missing_pkgs=()
    missing_what=()

    # C compiler that can actually build and link a program (needs libc headers too).
    local cc="${CC:-}"
    if [[ -z "$cc" ]]; then
        if have cc; then cc=cc; elif have gcc; then cc=gcc; fi
    fi
    if [[ -z "$cc" ]] || ! have "${cc%% *}"; then
        need gcc "C compiler"
    else
        local tmp
        tmp="$(mktemp -d)"
        printf 'int main(void) { return 0; }\n' >"$tmp/t.c"
        if ! $cc "$tmp/t.c" -o "$tmp/t" >/dev/null 2>&1; then
            need gcc "working C compiler"
            need libc6-dev "C library headers"
        fi
        rm -rf "$tmp"
    fi

    # CMake >= MIN_CMAKE
    if ! have cmake; then
        need cmake "cmake"
    else
        local v
        v="$(cmake --version 2>/dev/null | sed -n '1s/[^0-9]*\([0-9][0-9.]*\).*/\1/p')"
        if [[ -z "$v" ]] || ! version_ge "$v" "$MIN_CMAKE"; then
            need cmake "cmake >= $MIN_CMAKE (found '${v:-?}')"
        fi
    fi

    # pkg-config modules
    if ! have pkg-config; then
        need pkg-config "pkg-config"
        need libopenblas-dev "pkg-config module openblas"
        need libsleef-dev "pkg-config module sleef"
        need libcriterion-dev "pkg-config module criterion"
    else
        pkg-config --exists openblas || need libopenblas-dev "pkg-config module openblas"
        pkg-config --exists sleef || need libsleef-dev "pkg-config module sleef"
        pkg-config --exists criterion || need libcriterion-dev "pkg-config module criterion"
    fi

    # Python headers (for the Python package later): python3-config's include
    # dirs must contain Python.h, or Debian's python3-dev must be installed.
    local py_ok=0
    if have python3-config; then
        local inc
        for inc in $(python3-config --includes 2>/dev/null); do
            inc="${inc#-I}"
            if [[ -f "$inc/Python.h" ]]; then
                py_ok=1
                break
            fi
        done
    fi
    if [[ $py_ok -eq 0 ]] && have dpkg-query &&
        [[ "$(dpkg-query -W -f='${Status}' python3-dev 2>/dev/null)" == "install ok installed" ]]; then
        py_ok=1
    fi
    [[ $py_ok -eq 1 ]] || need python3-dev "Python 3 headers (Python.h)"
    # scripts/python-env.sh makes .venv with `python3 -m venv` (Debian splits it out).
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need python3-venv "Python venv + ensurepip"

    # Open MPI for cagrad.distributed (CMake's CAGRAD_MPI=AUTO uses it when found): the
    # launcher, and the headers and library (pkg-config module ompi-c).
    have mpirun || need openmpi-bin "Open MPI launcher (mpirun, for cagrad.distributed)"
    if ! have pkg-config || ! pkg-config --exists ompi-c; then
        need libopenmpi-dev "Open MPI headers and library (pkg-config module ompi-c)"
    fi

    # Graphviz's dot renders the compiled backward graph as SVG (make demo).
    have dot || need graphviz "graphviz (dot, for the demo's graph SVG)"

    if [[ $dev_tools -eq 1 ]]; then
        have clang-format || need clang-format "clang-format"
        have clang-tidy || need clang-tidy "clang-tidy"
        have cppcheck || need cppcheck "cppcheck"
    fi
}

check_all
if [[ ${#missing_pkgs[@]} -eq 0 ]]; then
    echo "install-deps: all dependencies present$([[ $dev_tools -eq 1 ]] && echo ' (incl. dev tools)')"
    exit 0
fi

echo "install-deps: missing:" >&2
for w in "${missing_what[@]}"; do
    echo "  - $w" >&2
done

if [[ $check_only -eq 1 ]]; then
    echo "install-deps: install with: sudo apt-get install -y ${missing_pkgs[*]}" >&2
    exit 1
fi

if [[ "$(id -u)" -ne 0 ]]; then
    echo "install-deps: not root; run this, then retry:" >&2
    echo "" >&2
    echo "    sudo apt-get update && sudo apt-get install -y ${missing_pkgs[*]}" >&2
    echo "" >&2
    exit 1
fi

if ! have apt-get; then
    echo "install-deps: apt-get not found; install the equivalents of: ${missing_pkgs[*]}" >&2
    exit 1
fi

echo "install-deps: installing: ${missing_pkgs[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q </dev/null
apt-get install -y -q "${missing_pkgs[@]}" </dev/null

# Re-check so a package that installed but did not provide what we need is caught.
check_all
if [[ ${#missing_pkgs[@]} -ne 0 ]]; then
    echo "install-deps: still missing after apt-get install: ${missing_what[*]}" >&2
    exit 1
fi
echo "install-deps: done"
