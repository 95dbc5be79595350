#!/usr/bin/env bash
# tools/model_checksums.sh FLASHBITS [OUT]: one line per (kernel model, dtype, scenario) with the
# SHA-256 of everything the engine computes for it, so that a refactoring of the engine can show
# that no output bit moved: run it before and after, and diff the two files.
#   - make-trace --backward: O, LSE, delta, dQ, dK, dV of the untraced run (the .safetensors
#     file, whose metadata holds no time stamp or version);
#   - replay --explain --json: the traced run of row 0 (per-tile maxima, sums, rounding events).
# The models are every base model `flashbits models --json` lists, each variant on fa2-sm80
# and the fp8-only ones on fa3-fp8-sm90.
# Shapes are small (seqlen 80, head dim 32: three KV tiles with a ragged last one) so a run
# takes a few minutes on 2 cores.
set -euo pipefail
fb=$1
out=${2:-/dev/stdout}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mapfile -t bases < <("$fb" models --json | python3 -c '
import json, sys
for m in json.load(sys.stdin)["kernel_models"]:
    if not m["name"].startswith("+"): print(m["name"])')
variants=(+dynmax +unfused-exp +delta-dpp +o-fp32 +o-sr +o-rtz +o-rup +o-rdn +o-rna +o-rto +dynmax+o-fp32)
fp8_variants=(+block-quant +hadamard +promote:2 +block-quant+hadamard)
models=("${bases[@]}")
for v in "${variants[@]}"; do models+=("fa2-sm80$v"); done
for v in "${fp8_variants[@]}"; do models+=("fa3-fp8-sm90$v"); done
{
  for model in "${models[@]}"; do
    # fp32: the models of fp32 inputs (standard-fp32, golden-fp32-*), which refuse another --dtype.
    for dtype in bf16 fp16 fp32; do
      for scenario in sink random ties fa3-outliers; do
        t="$work/t.safetensors"
        if ! "$fb" make-trace --model "$model" --dtype "$dtype" --scenario "$scenario" --seqlen 80 --headdim 32 \
             --seed 7 --backward --out "$t" >/dev/null 2>"$work/err"; then
          echo "$model $dtype $scenario refused: $(head -c 120 "$work/err" | tr '\n' ' ')"
          continue
        fi
        untraced=$(sha256sum "$t" | cut -c1-16)
        # The temporary file's name is not an output: drop the "trace" line.
        traced=$("$fb" replay "$t" --explain --json 2>&1 | grep -v '^  "trace": ' | sha256sum | cut -c1-16)
        echo "$model $dtype $scenario outputs=$untraced explain=$traced"
      done
    done
  done
} > "$out"
