#!/usr/bin/env bash
# gpu/make_inputs.sh: writes the attention inputs a device session captures, with flashbits'
# own scenario generators (studies/scenarios.cpp), BEFORE the session, on this machine:
# - gpu/inputs/<scenario>_d<hdim>_<dtype>.safetensors for scenarios random, sink,
#   fa3-outliers, head dims 64 and 128, dtypes bf16 and fp16 (seq 256, seed 7, with dO:
#   `flashbits make-trace --backward`, source "emulated");
# - gpu/inputs/bias/sink_d64_bf16_seed<S>.safetensors for S = 1000..1063: the trials of the
#   hardware bias test (capture_torch.py --stack captures them as the 64 heads of one run).
# gpu/device_session.sh feeds them to capture_torch.py and (bf16) fb-fa2, so PyTorch's flash
# kernel, fb-fa2 and the CPU replay all see the C++ scenarios. seq 256 keeps FA2's backward
# at two KV blocks (dQ's atomic adds then commute: capture_torch.py's header).
# Usage: gpu/make_inputs.sh [FLASHBITS_BINARY]   (default build/tools/flashbits)
set -euo pipefail
cd "$(dirname "$0")/.."
flashbits=${1:-build/tools/flashbits}
mkdir -p gpu/inputs/bias
for dtype in bf16 fp16; do
  for hdim in 64 128; do
    for scenario in random sink fa3-outliers; do
      "$flashbits" make-trace --model fa2-sm90 --dtype "$dtype" --scenario "$scenario" --seqlen 256 \
        --headdim "$hdim" --seed 7 --backward --out "gpu/inputs/${scenario}_d${hdim}_${dtype}.safetensors" >/dev/null
    done
  done
done
for seed in $(seq 1000 1063); do
  "$flashbits" make-trace --model fa2-sm90 --dtype bf16 --scenario sink --seqlen 256 --headdim 64 --seed "$seed" \
    --backward --out "gpu/inputs/bias/sink_d64_bf16_seed${seed}.safetensors" >/dev/null
done
echo "wrote $(find gpu/inputs -name '*.safetensors' | wc -l) input traces under gpu/inputs/"
