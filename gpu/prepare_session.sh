#!/usr/bin/env bash
# gpu/prepare_session.sh: everything a device session needs, made on this (CPU) machine first,
# so the GPU's minutes go to measuring:
# - .devbin/: fb-mma-probe, fb-sfu-probe, fb-fa2 (gpu/ built standalone with nvcc, sm_80 and
#   sm_90a) and a statically linked `flashbits` (build-static/), which checks the
#   tensor-core probes on the device so that only the verdict and the mismatches come back;
# - gpu/inputs/: the attention inputs (gpu/make_inputs.sh).
# - gpu/vendor/triton_06_fused_attention.py: Triton's fused-attention tutorial, which the
#   session's tutorial step runs; not in this repo (gpu/README.md "Attention paths"):
#   TRITON_TUTORIAL=FILE copies it there, else a warning says the tutorial step will fail.
# All three are git-ignored. The device tool carries at most 64 MiB with the tracked tree (58 MiB
# of it since the captures of 2026-12-04), so only .devbin/ travels, as one xz pack
# (.devcarry/carry.tar.xz, about 4 MB) that gpu/device_session.sh unpacks first; gpu/inputs/
# (21 MB, run 1's torch inputs, whose captures are in traces/hw/ and were bit-identical when
# re-run) stays here, and the session skips the torch and fb-fa2 steps without it:
#   run: command "bash gpu/device_session.sh", carry [".devcarry", "gpu/vendor"], timeout_s 420
# Usage: gpu/prepare_session.sh   (needs tools/setup.sh's packages and nvcc)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
cmake -S gpu -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
cmake --build build-device -j "$jobs" --target fb-mma-probe fb-sfu-probe fb-sfu-dump fb-fa2
cmake -S . -B build-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHBITS_CUDA=OFF \
  -DCMAKE_EXE_LINKER_FLAGS="-static" -DMPFR_LIBRARY="$(gcc -print-file-name=libmpfr.a)" \
  -DGMP_LIBRARY="$(gcc -print-file-name=libgmp.a)" -DZLIB_LIBRARY_RELEASE="$(gcc -print-file-name=libz.a)" \
  -DZLIB_LIBRARY="$(gcc -print-file-name=libz.a)" >/dev/null
cmake --build build-static -j "$jobs" --target flashbits
mkdir -p .devbin
cp build-device/fb-mma-probe build-device/fb-sfu-probe build-device/fb-sfu-dump build-device/fb-fa2 build-static/tools/flashbits .devbin/
strip .devbin/* 2>/dev/null || true
[ -x build/tools/flashbits ] || cmake --build build -j "$jobs" --target flashbits
gpu/make_inputs.sh build/tools/flashbits
mkdir -p gpu/vendor
[ -n "${TRITON_TUTORIAL:-}" ] && cp "$TRITON_TUTORIAL" gpu/vendor/triton_06_fused_attention.py
if [ -f gpu/vendor/triton_06_fused_attention.py ]; then
  sha256sum gpu/vendor/triton_06_fused_attention.py
else
  echo "warning: no gpu/vendor/triton_06_fused_attention.py: the session's tutorial step will fail (alone)" >&2
fi
rm -rf .devcarry && mkdir -p .devcarry
tar -cf - .devbin | xz -T"$jobs" -6 > .devcarry/carry.tar.xz
du -sh .devbin gpu/inputs gpu/vendor .devcarry
