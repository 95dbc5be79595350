#!/usr/bin/env bash
# The README's test command: build, run the fast test tier, then a bounded sanitizer slice.
# Usage: tools/test.sh            (what CI runs)
#        tools/test.sh --exhaustive  (also the slow `exhaustive` ctest label)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Where nvcc exists (on PATH or at /usr/local/cuda, as on the project's machines), gpu/ must
# compile: a configure that silently skipped the CUDA targets would pass CI untested.
require_cuda=OFF
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then require_cuda=ON; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHBITS_REQUIRE_CUDA=$require_cuda >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build -L fast --output-on-failure -j "$jobs"
# The Python module's tests (python/tests, pytest), with the interpreter the module was built
# for (Debian's /usr/bin/python3 unless configured otherwise). Required unless the build was
# configured with -DFLASHBITS_PYTHON=OFF.
if [ -d build/python/flashbits ]; then
  python=$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' build/CMakeCache.txt)
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$PWD/build/python" "${python:-/usr/bin/python3}" -m pytest -q -p no:cacheprovider python/tests
elif ! grep -q '^FLASHBITS_PYTHON:STRING=OFF' build/CMakeCache.txt; then
  echo "error: the Python module was not built (apt-get install pybind11-dev python3-dev python3-numpy python3-pytest)" >&2
  exit 1
fi
if [ "${1:-}" = "--exhaustive" ]; then
  ctest --test-dir build -L exhaustive --output-on-failure -j "$jobs"
fi
# ASan + UBSan build of the same suites on a bounded slice (FLASHBITS_TEST_SCALE shrinks loops).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" -DFLASHBITS_SANITIZE=ON -DFLASHBITS_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs"
FLASHBITS_TEST_SCALE=sanitizer ctest --test-dir build-asan -L fast --output-on-failure -j "$jobs"
# Bounded libFuzzer runs of every parser of untrusted input (fuzz/; clang, ASan+UBSan).
FUZZ_JOBS="$jobs" tools/fuzz.sh 100000
