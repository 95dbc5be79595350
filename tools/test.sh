#!/usr/bin/env bash
# The README's test command: build, run the fast test tier, then a bounded sanitizer slice
# and bounded fuzzing.
# Usage: tools/test.sh            (what CI runs)
#        tools/test.sh --exhaustive  (also the slow `exhaustive` ctest label)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# The house style first: it takes seconds and names every file that drifted (CI installs
# clang-format through tools/setup.sh; elsewhere a missing one only skips the check).
if command -v clang-format >/dev/null; then
  tools/check_format.sh
else
  echo "warning: clang-format not found: the style check (tools/check_format.sh) is skipped" >&2
fi
# The layers: no #include may point up or sideways (docs/DESIGN.md §1).
python3 tools/check_layers.py
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
  python=${python:-/usr/bin/python3}
  # On every core where pytest-xdist is there (python3-pytest-xdist, which setup.sh installs):
  # the suite is ~5 minutes on one core, a sixth of CI's time, and its tests share no files.
  parallel=()
  if "$python" -c "import xdist" 2>/dev/null && [ "$jobs" -gt 1 ]; then parallel=(-n "$jobs"); fi
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$PWD/build/python" "$python" -m pytest -q -p no:cacheprovider "${parallel[@]}" python/tests
elif ! grep -q '^FLASHBITS_PYTHON:STRING=OFF' build/CMakeCache.txt; then
  echo "error: the Python module was not built (apt-get install pybind11-dev python3-dev python3-numpy python3-pytest)" >&2
  exit 1
fi
if [ "${1:-}" = "--exhaustive" ]; then
  ctest --test-dir build -L exhaustive --output-on-failure -j "$jobs"
fi
# The sanitizer stage: one clang build with ASan + UBSan whose libraries are also instrumented
# for libFuzzer (tools/fuzz.sh configures it), so the libraries are compiled with sanitizers
# once and serve both the test suites, on a bounded slice (FLASHBITS_TEST_SCALE shrinks
# loops), and bounded libFuzzer runs of every parser of untrusted input (fuzz/).
export FUZZ_BUILD_DIR=build-asan FUZZ_JOBS="$jobs"
tools/fuzz.sh --build-all
FLASHBITS_TEST_SCALE=sanitizer ctest --test-dir build-asan -L fast --output-on-failure -j "$jobs"
tools/fuzz.sh 100000
