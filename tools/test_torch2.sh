#!/usr/bin/env bash
# tools/test_torch2.sh [CHROOT]: runs flashbits.torch's and flashbits.train's tests under a
# PyTorch 2.x, as root on a Debian 12 machine without network access to PyPI.
#
# Debian 12 ships torch 1.13 (what tools/setup.sh installs and CI tests); Debian 13 (trixie)
# ships torch 2.6 with Python 3.13 and numpy 2. This script debootstraps trixie into CHROOT
# (default /var/tmp/flashbits-trixie; about 2.5 GB, kept for the next run), copies the
# committed tree into it, builds the Python module there (its compiler is GCC 14, so this is
# also a -Werror build with a newer compiler) and runs python/tests/test_torch.py,
# test_train.py and test_model_resolution.py. Not part of CI: it downloads about 700 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-/var/tmp/flashbits-trixie}
if [ "$(id -u)" != 0 ]; then
  echo "error: tools/test_torch2.sh needs root (debootstrap, chroot)" >&2
  exit 2
fi
if [ ! -x "$root/usr/bin/python3" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  debootstrap --variant=minbase \
    --include=python3,python3-torch,python3-numpy,python3-pytest,pybind11-dev,python3-dev,g++,cmake,ninja-build,libboost-dev,libmpfr-dev,libgmp-dev,zlib1g-dev,nlohmann-json3-dev,libcli11-dev,doctest-dev \
    trixie "$root" http://deb.debian.org/debian
fi
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
rm -rf "$root/src/flashbits"
mkdir -p "$root/src/flashbits"
git archive HEAD | tar -x -C "$root/src/flashbits"
chroot "$root" bash -c '
  set -e
  cd /src/flashbits
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHBITS_CUDA=OFF -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
  ninja -C build flashbits_python >/dev/null
  python3 -c "import torch, numpy, sys; print(\"torch\", torch.__version__, \"numpy\", numpy.__version__, \"python\", sys.version.split()[0])"
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/src/flashbits/build/python python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_torch.py python/tests/test_train.py python/tests/test_model_resolution.py'
