# cagrad — top-level driver. Newcomers need only:  make test   and   make demo
#
#   make deps          check/install build+test dependencies (scripts/install-deps.sh)
#   make pyenv         create .venv/ with numpy, pytest, torch 2.13 (CPU), scikit-learn
#   make build         deps, pyenv, configure build/ (RelWithDebInfo, -O2 -g) with the
#                      Python extension, build with -j2
#   make test          build, run the C suites (build/cagrad_tests) and the Python suites
#                      (pytest tests/python against build/python)
#   make test-c        only the C suites (and a 20000-graph random campaign);
#                      make test-py  only the Python suites
#   make fuzz          a random-graph campaign over JOBS processes: N=20000 SEED=20240611
#   make sanitize      ASan+UBSan build in build-asan/ (CA_ASSERT checked): C tests, every
#                      example, Python suites
#   make tsan          ThreadSanitizer build in build-tsan/ and its stress programs (the
#                      thread pool, OpenBLAS on it, compiled steps side by side; one model
#                      shared by threads backwarding into its .grad at once)
#   make demo          build, train an MLP on the digits data from Python (examples/digits_mlp.py)
#   make demo-c        the C example: build/mlp_sgd
#   make bench-compiled  eager vs compiled backward timings (benchmarks/bench_compiled.c)
#   make bench         cagrad vs PyTorch eager and compiled autograd, 1 and 2 threads; writes
#                      benchmarks/results.json, docs/benchmarks.md and docs/benchmarks.png
#   make bench-quick   the same with fewer reps, in under 2 minutes
#   make format        clang-format -i on all C sources/headers
#   make format-check  clang-format --dry-run -Werror
#   make lint          clang-tidy + cppcheck on the library sources, ruff on the Python
#   make clean         remove build directories
#
# Variables: JOBS (2), BUILD_TYPE (RelWithDebInfo), CMAKE_ARGS (extra -D...),
#            CRITERION_ARGS (e.g. CRITERION_ARGS='--filter tensor/*' or '--verbose'),
#            PYTEST_ARGS (e.g. PYTEST_ARGS='-k parity -x').

SHELL := /bin/bash
MAKEFLAGS += --no-print-directory

CMAKE          ?= cmake
JOBS           ?= 2
BUILD_TYPE     ?= RelWithDebInfo
BUILD_DIR      ?= build
ASAN_DIR       ?= build-asan
TSAN_DIR       ?= build-tsan
FUZZ_DIR       ?= build-fuzz
FUZZ_CC        ?= $(firstword $(shell command -v clang clang-16 clang-15 clang-14 2>/dev/null))
FUZZ_SECONDS   ?= 60
CMAKE_ARGS     ?=
CRITERION_ARGS ?=
PYTEST_ARGS    ?=
VENV_PY        := .venv/bin/python
CLANG_FORMAT   ?= clang-format
CLANG_TIDY     ?= clang-tidy
CPPCHECK       ?= cppcheck

LIB_SRCS     := $(sort $(wildcard autograd/*.c graph/*.c codegen/*.c))
EXAMPLES     := $(sort $(basename $(notdir $(wildcard examples/*.c))))
FORMAT_DIRS  := $(wildcard include autograd graph codegen tests examples python_bindings benchmarks)
FORMAT_FILES := $(if $(FORMAT_DIRS),$(shell find $(FORMAT_DIRS) -type f \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort))

# ---------------------------------------------------------------------------
# Sanitizers + Criterion: what was verified (gcc 12, Criterion 2.4.1, Debian 12)
#
# Criterion runs every test in a forked worker. The worker reports the test's
# phases (setup/main/teardown/end) to the runner over a socket; LeakSanitizer
# only runs at process exit, i.e. AFTER the worker has already reported "end".
#  * Default LSan behaviour (exit code 23 on leaks): the runner sees a normal
#    exit after "end" and IGNORES it -> the leak report is printed but the test
#    passes and cagrad_tests exits 0. Leaks are silently missed.
#  * abort_on_error=1: the worker dies by SIGABRT after "end". Criterion prints
#    "Warning! The test `suite::name` crashed during its setup or teardown.",
#    counts a *warning* (NOT a failure: the Synthesis line still says
#    "Passing: N | Failing: 0 | Crashing: 0") and, because warnings > 0, exits 1.
#    So the run fails -- unless --ignore-warnings is passed, which turns it back
#    into exit 0. Never pass --ignore-warnings to the sanitizer run.
#  * ASan errors (overflow, use-after-free) and UBSan errors (with
#    -fno-sanitize-recover=all) happen inside the test body: the test is
#    reported [FAIL] and counted in Failing, with or without abort_on_error.
#  * --jobs 1 vs 2 makes no difference; the runner process itself is leak-free.
# Belt and braces: scripts/run-sanitized.sh also greps the output for sanitizer
# reports and "crashed/exited during its setup or teardown" and fails on them,
# so a leak fails `make sanitize` with a clear message even with odd CRITERION_ARGS.
# ---------------------------------------------------------------------------
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1 \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

.PHONY: all deps dev-deps pyenv configure build py-build py-test test test-c test-py fuzz fuzz-lib fuzz-py sanitize tsan demo demo-c bench-compiled bench bench-quick format format-check lint clean

all: build

deps:
	@bash scripts/install-deps.sh

dev-deps:
	@bash scripts/install-deps.sh --dev-tools

pyenv:
	@bash scripts/python-env.sh >/dev/null

configure: deps pyenv
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCAGRAD_PYTHON=ON \
	    -DPython3_EXECUTABLE=$(abspath $(VENV_PY)) $(CMAKE_ARGS)

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

test: build
	@$(MAKE) test-c test-py

# Aliases for the Python side: the extension is part of every build.
py-build: build
py-test: test-py

test-c:
	$(BUILD_DIR)/cagrad_tests --jobs $(JOBS) $(CRITERION_ARGS)
	@bash scripts/fuzz.sh $(BUILD_DIR) 20000 20240611 $(JOBS)
	@bash scripts/check-header-example.sh $(BUILD_DIR)
	@bash scripts/test-check-symbols.sh
	@bash scripts/check-symbols.sh $(BUILD_DIR)
	@bash scripts/test-install.sh $(BUILD_DIR)
	@bash scripts/test-mpi.sh $(BUILD_DIR)

# The package under test is build/python (the extension plus symlinked sources).
test-py:
	PYTHONPATH=$(abspath $(BUILD_DIR))/python $(VENV_PY) -m pytest tests/python -q $(PYTEST_ARGS)

# The Python suites run under the sanitizers too: python itself is not instrumented, so
# the runtimes are preloaded, and leak checking is off there (the interpreter, NumPy and
# torch keep memory at exit; the C suites check cagrad's own leaks).
SAN_PRELOAD = $(shell $(CC) -print-file-name=libasan.so):$(shell $(CC) -print-file-name=libubsan.so)

# ThreadSanitizer: the library and tests/tsan/stress.c and shared.c (Criterion's runner
# cannot start under TSan). It links the same OpenBLAS wheel as the Python build, so the
# threads callback path is the one checked. Both run a second time with CAGRAD_INTEROP=1:
# every compiled graph then runs its steps side by side, which the chooser only picks when
# it times faster, so that path is checked on every run.
tsan: deps pyenv
	$(CMAKE) -S . -B $(TSAN_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_C_FLAGS=-fsanitize=thread \
	    -DCAGRAD_BUILD_TESTS=OFF -DCAGRAD_BUILD_EXAMPLES=OFF -DCAGRAD_BUILD_BENCHMARKS=OFF \
	    -DCAGRAD_TSAN_STRESS=ON -DCAGRAD_BLAS=scipy-openblas32 \
	    -DPython3_EXECUTABLE=$(abspath $(VENV_PY)) $(CMAKE_ARGS)
	$(CMAKE) --build $(TSAN_DIR) -j $(JOBS) --target tsan_stress tsan_shared
	TSAN_OPTIONS=halt_on_error=1 CAGRAD_NUM_THREADS=2 $(TSAN_DIR)/tsan_stress
	TSAN_OPTIONS=halt_on_error=1 CAGRAD_NUM_THREADS=2 $(TSAN_DIR)/tsan_shared
	TSAN_OPTIONS=halt_on_error=1 CAGRAD_NUM_THREADS=2 CAGRAD_INTEROP=1 $(TSAN_DIR)/tsan_stress
	TSAN_OPTIONS=halt_on_error=1 CAGRAD_NUM_THREADS=2 CAGRAD_INTEROP=1 $(TSAN_DIR)/tsan_shared

# Coverage-guided fuzzing of the C API (tests/fuzz/fuzz_backward.c) with libFuzzer, ASan
# and UBSan, for FUZZ_SECONDS, from the corpus in tests/fuzz/corpus (new inputs go to
# $(FUZZ_DIR)/corpus; the committed ones are replayed first).
fuzz-lib: deps
	@test -n "$(FUZZ_CC)" || { echo "fuzz-lib: needs clang (apt-get install clang)"; exit 1; }
	CC=$(FUZZ_CC) $(CMAKE) -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCAGRAD_FUZZ=ON \
	    -DCMAKE_C_FLAGS="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined" \
	    -DCAGRAD_BUILD_TESTS=OFF -DCAGRAD_BUILD_EXAMPLES=OFF -DCAGRAD_BUILD_BENCHMARKS=OFF \
	    -DCAGRAD_BLAS=system $(CMAKE_ARGS)
	$(CMAKE) --build $(FUZZ_DIR) -j $(JOBS) --target fuzz_backward
	mkdir -p $(FUZZ_DIR)/corpus
	ASAN_OPTIONS=detect_leaks=1 $(FUZZ_DIR)/fuzz_backward -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=256 -print_final_stats=1 $(FUZZ_DIR)/corpus tests/fuzz/corpus

# The same over the Python API with atheris, differential against torch
# (tests/fuzz/fuzz_python.py), from tests/fuzz/pycorpus.
fuzz-py: build
	@$(VENV_PY) -c "import atheris" 2>/dev/null || $(VENV_PY) -m pip install -q atheris
	mkdir -p $(FUZZ_DIR)/pycorpus
	PYTHONPATH=$(abspath $(BUILD_DIR))/python $(VENV_PY) tests/fuzz/fuzz_python.py \
	    -max_total_time=$(FUZZ_SECONDS) -max_len=128 -print_final_stats=1 \
	    $(FUZZ_DIR)/pycorpus tests/fuzz/pycorpus

sanitize: deps pyenv
	$(CMAKE) -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCAGRAD_SANITIZE=ON -DCAGRAD_PYTHON=ON \
	    -DPython3_EXECUTABLE=$(abspath $(VENV_PY)) $(CMAKE_ARGS)
	$(CMAKE) --build $(ASAN_DIR) -j $(JOBS)
	$(SAN_ENV) bash scripts/run-sanitized.sh $(ASAN_DIR)/cagrad_tests --jobs $(JOBS) $(CRITERION_ARGS)
	@set -e; for ex in $(EXAMPLES); do \
	    $(SAN_ENV) bash scripts/run-sanitized.sh $(ASAN_DIR)/$$ex; \
	done
	LD_PRELOAD=$(SAN_PRELOAD) ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1 \
	    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 CAGRAD_SANITIZED=1 \
	    PYTHONPATH=$(abspath $(ASAN_DIR))/python $(VENV_PY) -m pytest tests/python -q -p no:cacheprovider $(PYTEST_ARGS)

# Eager vs compiled backward, side by side in one run (medians; see benchmarks/).
# A random-graph campaign (compiled against eager, float32 judged by a float64 oracle),
# split over JOBS processes: make fuzz N=1000000 SEED=7. make test runs 20000.
N ?= 20000
SEED ?= 20240611
fuzz: build
	bash scripts/fuzz.sh $(BUILD_DIR) $(N) $(SEED) $(JOBS)

bench-compiled: build
	$(BUILD_DIR)/bench_compiled

# cagrad against PyTorch eager and PyTorch compiled autograd, side by side (issue 5):
# benchmarks/bench.py runs one child process per thread count (1, 2) with the malloc-count
# shim preloaded, then writes results.json, docs/benchmarks.md and docs/benchmarks.png.
# Extra harness arguments: BENCH_ARGS='--threads 2 --workloads w1,w5'.
BENCH_ARGS ?=
bench: build
	PYTHONPATH=$(abspath $(BUILD_DIR))/python $(VENV_PY) benchmarks/bench.py \
	    --build-dir $(BUILD_DIR) $(BENCH_ARGS)

bench-quick: build
	PYTHONPATH=$(abspath $(BUILD_DIR))/python $(VENV_PY) benchmarks/bench.py --quick \
	    --build-dir $(BUILD_DIR) $(BENCH_ARGS)

demo: build
	PYTHONPATH=$(abspath $(BUILD_DIR))/python $(VENV_PY) examples/digits_mlp.py

demo-c: build
	$(BUILD_DIR)/mlp_sgd

format: dev-deps
	@$(if $(FORMAT_FILES),$(CLANG_FORMAT) -i $(FORMAT_FILES),echo "format: no C files")

format-check: dev-deps
	@$(if $(FORMAT_FILES),$(CLANG_FORMAT) --dry-run -Werror $(FORMAT_FILES) && echo "format-check: OK ($(words $(FORMAT_FILES)) files)",echo "format-check: no C files")

# clang-tidy reads flags from $(BUILD_DIR)/compile_commands.json (configure
# writes it); checks and WarningsAsErrors come from .clang-tidy. Both tools run
# even if the first one fails; the target fails if either reports anything.
# cppcheck's invalidPointerCast is suppressed: it flags every typed read from
# a tensor's byte storage (`*(const float *)(char *)p`), the core pattern here.
lint: dev-deps configure
	@rc=0; \
	echo "== clang-tidy ($(words $(LIB_SRCS)) files)"; \
	printf '%s\n' $(LIB_SRCS) | xargs -r -P $(JOBS) -n 1 $(CLANG_TIDY) -p $(BUILD_DIR) --quiet || rc=1; \
	echo "== cppcheck"; \
	$(CPPCHECK) --quiet --std=c11 --platform=unix64 -j $(JOBS) \
	    --enable=warning,performance,portability --error-exitcode=1 --inline-suppr \
	    --suppress=missingIncludeSystem --suppress=invalidPointerCast -D__x86_64__ -D_GNU_SOURCE -Iinclude -I. \
	    $(LIB_SRCS) || rc=1; \
	echo "== ruff (Python)"; \
	$(dir $(VENV_PY))ruff check --quiet python_bindings/cagrad tests/python examples benchmarks || rc=1; \
	if [ $$rc -ne 0 ]; then echo "lint: FAILED"; else echo "lint: OK"; fi; \
	exit $$rc

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR)
