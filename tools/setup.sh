#!/usr/bin/env bash
# Install the Debian packages flashbits needs (as root) and build into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
# Exactly these, no "recommended" extras: clang alone recommends llvm-14-dev (270 MB) and
# python3-torch libtorch-dev with its -dev tree, 157 packages and 120 MB of downloads that
# nothing here uses. llvm gives the sanitizers llvm-symbolizer (file:line in a report); xz
# packs the device session's results (gpu/device_session.sh).
packages=(cmake ninja-build g++ clang clang-format libclang-rt-dev llvm
  libboost-dev libmpfr-dev libgmp-dev zlib1g-dev doctest-dev libcli11-dev nlohmann-json3-dev pybind11-dev
  python3-dev python3-numpy python3-pytest python3-pytest-xdist python3-torch libopenblas0-pthread fortunes xz-utils git)
# apt-get runs only when a package is missing: with all of them installed, `apt-get update`
# would only fail on a machine without network. "installed" is dpkg's state of a package
# that is fully there (one removed but for its config files is not, though `dpkg -s` knows it).
all_installed() {
  local p status
  for p in "${packages[@]}"; do
    # Read whole before grep: under pipefail, grep -q closing the pipe early could fail the test.
    status=$(dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null || true)
    grep -qx installed <<<"$status" || return 1
  done
}
if [ "$(id -u)" = 0 ]; then
  if ! all_installed; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  fi
else
  echo "setup.sh: not root: the Debian packages are not installed (run as root once, or install them:" \
    "see this script); building with what is there" >&2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
# The Python module (python/, build/python) is built too wherever CMake configured it
# (pybind11 and the Python headers found): `PYTHONPATH=build/python python3 -c "import flashbits"`.
targets=flashbits
if [ -d build/python ]; then targets="$targets flashbits_python"; fi
cmake --build build -j "$(nproc)" --target $targets
