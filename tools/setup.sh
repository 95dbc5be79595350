#!/usr/bin/env bash
# Install the Debian packages flashbits needs (as root) and build into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq cmake ninja-build g++ clang libboost-dev libmpfr-dev libgmp-dev doctest-dev \
    libcli11-dev nlohmann-json3-dev >/dev/null
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target flashbits
