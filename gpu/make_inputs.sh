#!/usr/bin/env bash
# gpu/make_inputs.sh: writes the attention inputs a device session captures, with flashbits'
# own scenario generators (attention/scenarios.cpp), BEFORE the session, on this machine:
# gpu/inputs/<scenario>_d<hdim>.safetensors for scenarios random, sink, fa3-outliers and head
# dims 64 and 128 (seq 256, seed 7, with dO: `flashbits make-trace --backward`, source
# "emulated"). gpu/device_session.sh feeds each to capture_torch.py --input and fb-fa2
# --input, so PyTorch's flash kernel, fb-fa2 and the CPU replay all see the C++ scenarios.
# Usage: gpu/make_inputs.sh [FLASHBITS_BINARY]   (default build/tools/flashbits)
set -euo pipefail
cd "$(dirname "$0")/.."
flashbits=${1:-build/tools/flashbits}
mkdir -p gpu/inputs
for hdim in 64 128; do
  for scenario in random sink fa3-outliers; do
    "$flashbits" make-trace --model fa2-sm90 --scenario "$scenario" --seqlen 256 --headdim "$hdim" --seed 7 \
      --backward --out "gpu/inputs/${scenario}_d${hdim}.safetensors"
  done
done
