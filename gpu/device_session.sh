#!/usr/bin/env bash
# gpu/device_session.sh: everything one device session does, in one command (gpu/README.md).
# Builds gpu/ standalone with nvcc, runs the tensor-core and SFU probes, captures PyTorch's
# flash SDPA and fb-fa2 (standard, +dynmax, and causal) on the same inputs (gpu/inputs/, from
# gpu/make_inputs.sh, when present), and leaves at most 8 files under $OUT: session.log,
# probes.fbp, sfu_summary.txt, up to 2 ex2 tables, sfu_tables_n23.tar (the rcp table and,
# when the lg2 hypothesis holds, the lg2 table: 4 MiB each plus escapes), traces_d64.tar and traces_d128.tar (one per head dim: each stays under 16 MiB, about 7 and
# 14.5 MiB at --seq 256 --heads 2).
set -uo pipefail
: "${OUT:?set OUT to the folder whose files come back}"
cd "$(dirname "$0")/.."
exec > >(tee "$OUT/session.log") 2>&1
jobs=$(nproc)
echo "== device"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv || true
python3 -c "import torch, safetensors; print('torch', torch.__version__, 'cuda', torch.version.cuda)" || true
echo "== build"
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S gpu -B build-device "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc || exit 1
cmake --build build-device -j "$jobs" --target fb-mma-probe fb-sfu-probe fb-fa2 || exit 1
echo "== tensor-core probes"
./build-device/fb-mma-probe --out "$OUT/probes.fbp" --tiles 4
echo "== SFU probe (all 2^32 inputs per function)"
sfu_dir=$(mktemp -d)
./build-device/fb-sfu-probe --out-dir "$sfu_dir" --ex2-bits 16,18,20,22,23,24 \
  --ex2-roundings floor,nearest_even,toward_zero
# The run tool brings back 8 files: the 2^23-entry tables travel as one tar.
mv "$sfu_dir"/sfu_summary.txt "$sfu_dir"/ex2_table_*.fbsfut "$OUT"/ 2>/dev/null
n23=$(cd "$sfu_dir" && ls rcp_table_n23.fbsfut lg2_table_n23.fbsfut 2>/dev/null)
[ -n "$n23" ] && tar -C "$sfu_dir" -cf "$OUT/sfu_tables_n23.tar" $n23
echo "== attention captures"
# Inputs from flashbits' C++ scenario generators (gpu/make_inputs.sh, run before the session)
# when present; otherwise capture_torch.py's own generators (not the C++ ones).
for hdim in 64 128; do
  work=$(mktemp -d)
  for scenario in random sink fa3-outliers; do
    base="${scenario}_d${hdim}"
    if [ -f "gpu/inputs/${base}.safetensors" ]; then
      echo "-- ${base}: inputs from gpu/inputs/${base}.safetensors (flashbits make-trace)"
      inputs=(--input "gpu/inputs/${base}.safetensors")
    else
      echo "-- ${base}: NO gpu/inputs/${base}.safetensors: capture_torch.py generates the inputs itself"
      inputs=(--scenario "$scenario" --hdim "$hdim" --seq 256 --heads 2 --seed 7)
    fi
    python3 gpu/capture_torch.py "${inputs[@]}" --out "$work/torch_${base}.safetensors" || continue
    # the torch trace holds q, k, v, do: fb-fa2 reads them, so both saw identical inputs
    ./build-device/fb-fa2 --input "$work/torch_${base}.safetensors" --out "$work/fa2_${base}.safetensors" \
      --trace-rows 0,1,17,100
    ./build-device/fb-fa2 --input "$work/torch_${base}.safetensors" --out "$work/fa2dynmax_${base}.safetensors" \
      --variant dynmax --trace-rows 0,1,17,100
    # causal on the same q, k, v, do (fb-fa2 only: the torch capture is non-causal)
    ./build-device/fb-fa2 --input "$work/torch_${base}.safetensors" --out "$work/fa2causal_${base}.safetensors" \
      --causal --trace-rows 0,1,17,100
  done
  tar -C "$work" -cf "$OUT/traces_d${hdim}.tar" .
done
ls -l "$OUT"
