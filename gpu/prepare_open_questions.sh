#!/usr/bin/env bash
# gpu/prepare_open_questions.sh: what gpu/open_questions_device.sh needs, made on this (CPU)
# machine first: .devzf/fb-mma-probe, gpu/ built standalone with nvcc as gpu/prepare_session.sh
# builds it (libstdc++ linked statically, so it runs on the device machine). .devzf/ is
# git-ignored, so a 2.4 MB binary is never committed, and the device call carries it (the
# tracked tree is about 59 MiB of the device tool's 64 MiB). Then:
#   run: command "bash gpu/open_questions_device.sh", timeout_s 300, carry [".devzf"]
# Usage: gpu/prepare_open_questions.sh   (needs tools/setup.sh's packages and nvcc)
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
cmake -S gpu -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
cmake --build build-device -j "$(nproc)" --target fb-mma-probe
mkdir -p .devzf
cp build-device/fb-mma-probe .devzf/
strip .devzf/fb-mma-probe 2>/dev/null || true
# The probe step rehearsed with this binary: a --dry-run file that zero_floor_decide.py's
# self-test decides (the whole command: ctest rehearse_open_questions).
out=$(mktemp -d)
OUT=$out ZF_BIN=.devzf/fb-mma-probe bash gpu/zero_floor_device.sh --dry-run | tail -1
python3 gpu/zero_floor_decide.py --self-test "$out/zero_floor.fbp" | tail -1
rm -rf "$out"
du -sh .devzf
