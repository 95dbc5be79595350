#!/usr/bin/env bash
# gpu/device_replay.sh: the second device session: settle on the GPU what the CPU cannot.
#
# Usage: OUT=DIR bash gpu/device_replay.sh   (device tool: carry [".devbin"], timeout_s 420)
#
# Contract (each step under its own timeout; each step's results are in $OUT when it ends):
# 1. SFU model checks (fb-sfu-probe with SFU_PROBE_ARGS): the CPU-derived ex2 rule and the
#    lg2 extended-precision analysis on all 2^32 inputs; tables when they hold. sfu2.tar.xz.
# 2. SFU dumps: ex2.approx.ftz, lg2.approx.ftz and rcp.approx.ftz on all 2^32 inputs
#    (fb-sfu-dump, 16 GiB each, in /dev/shm when it has room, else /tmp).
# 3. Replays: every hardware trace under traces/hw/*/ is replayed by the static flashbits
#    with those dumps as its SFU models (--sfu-dump), so a difference that remains is the
#    model's, not the SFU approximation's; for the traces listed in REPLAY_RECORD the
#    hardware SFU outputs the replay used are recorded (--sfu-record) so that CI can replay
#    them bit for bit without a GPU. replay_report.txt, sfu_values.tar.xz.
# 4. Tensor-core probes: a fresh set of >= 10^6 cases per form (another seed), checked by the
#    static flashbits with the current models; its verdict and mismatching cases.
# 5. SASS of the FlashAttention kernels PyTorch runs (gpu/sass_flash.py), if time is left.
set -uo pipefail
: "${OUT:?set OUT to the folder whose files come back}"
cd "$(dirname "$0")/.."
export FB_ROOT=$PWD BIN=$PWD/.devbin JOBS=$(nproc)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
export T0=$(date +%s)
export W=$(mktemp -d /tmp/fbreplay.XXXXXX)
STATUS=()
now() { echo $(( $(date +%s) - T0 )); }
run_step() {
  local name=$1 budget=$2 fn=$3 s rc e
  s=$(date +%s)
  echo "== [t=$(now)s] $name: budget ${budget}s"
  timeout -k 10 "$budget" bash -c "$fn"
  rc=$?
  e=$(( $(date +%s) - s ))
  echo "== [t=$(now)s] $name: exit $rc after ${e}s of ${budget}s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
  STATUS+=("$name: exit $rc, ${e}s of ${budget}s")
}
pack() {  # pack NAME DIR: over 15 MiB, the largest files are dropped (and named) until it fits
  [ -d "$2" ] && [ -n "$(ls -A "$2" 2>/dev/null)" ] || { echo "pack $1: nothing to pack"; return; }
  local f
  while :; do
    tar -C "$2" -cf - . | xz -T"$JOBS" -6 > "$OUT/$1.tar.xz"
    [ "$(stat -c %s "$OUT/$1.tar.xz")" -le $((15 * 1024 * 1024)) ] && break
    f=$(find "$2" -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
    [ -n "$f" ] || break
    echo "pack $1: over 15 MiB, dropping $(basename "$f")"
    rm -f "$f"
  done
  echo "pack $1: $(stat -c %s "$OUT/$1.tar.xz") bytes"
}
# Traces whose SFU values are recorded for CI (a few MiB in all).
export REPLAY_RECORD=${REPLAY_RECORD:-"torch/torch_bf16_random_d64 torch/torch_bf16_sink_d64_causal torch/torch_fp16_fa3-outliers_d128 torch/torch_fp16_random_d64_causal torch/torch_bf16_fa3-outliers_d128_causal torch/torch_fp16_random_d128 fa2/fa2_random_d64 fa2/fa2dynmax_sink_d64 fa2/fa2causal_fa3-outliers_d128"}

step_info() {
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv || true
  df -h /dev/shm /tmp | sed 's/^/  /'
  free -g | sed 's/^/  /'
  "$BIN/flashbits" models >/dev/null && echo "static flashbits runs"
}
export -f step_info

step_dumps() {
  local dir=/dev/shm/fbdump
  mkdir -p "$dir"
  local avail; avail=$(df -B1 --output=avail /dev/shm | tail -1)
  if [ "${avail:-0}" -lt $((52 * 1024 * 1024 * 1024)) ]; then dir=/tmp/fbdump; mkdir -p "$dir"; fi
  echo "$dir" > "$W/dumpdir"
  for fn in ex2 lg2 rcp; do "$BIN/fb-sfu-dump" --function "$fn" --out "$dir/$fn.dump" || return 1; done
  ls -l "$dir"
}
export -f step_dumps

replay_one() {  # replay_one TRACE (path under traces/hw/)
  local t=$1 dir rel name rec=() model
  dir=$(cat "$W/dumpdir")
  rel=${t#"$FB_ROOT"/traces/hw/}
  name=$(echo "${rel%.safetensors}" | tr '/' '_')
  for r in $REPLAY_RECORD; do
    case "$rel" in */"$r".safetensors) rec=(--sfu-record "$W/values/$name.sfuval") ;; esac
  done
  "$BIN/flashbits" replay "$t" --sfu-dump ex2="$dir/ex2.dump" --sfu-dump lg2="$dir/lg2.dump" \
    --sfu-dump rcp="$dir/rcp.dump" "${rec[@]}" > "$W/replay/$name.txt" 2>&1
  echo "exit $?" >> "$W/replay/$name.txt"
}
export -f replay_one

step_replays() {
  mkdir -p "$W/replay" "$W/values"
  find "$FB_ROOT"/traces/hw -name '*.safetensors' | sort | xargs -P "$JOBS" -I{} bash -c 'replay_one {}'
  for f in "$W"/replay/*.txt; do
    echo "== $(basename "$f" .txt): $(grep -E '^result|^exit' "$f" | tr '\n' ' ')"
    grep -E 'match bit for bit \(' "$f" | sed 's/^/    /'
  done > "$W/replay_report.txt"
  cp "$W/replay_report.txt" "$OUT/"
  grep -c "result: all compared values match" "$W"/replay/*.txt | awk -F: '{s+=$2} END {print s " traces match bit for bit"}'
  ls "$W"/replay/*.txt | wc -l | sed 's/$/ traces replayed/'
}
export -f step_replays

# fb-fa2 again on the PyTorch captures' own inputs (the kernel changed since the traces in
# traces/hw/<gpu>/fa2 were taken): the new captures replace them here and come back.
step_fa2() {
  mkdir -p "$W/fa2"
  local dir; dir=$(ls -d "$FB_ROOT"/traces/hw/*/torch | head -1)
  for hdim in 64 128; do
    for scen in random sink fa3-outliers; do
      local in="$dir/torch_bf16_${scen}_d${hdim}.safetensors"
      [ -f "$in" ] || { echo "no $in"; continue; }
      "$BIN/fb-fa2" --input "$in" --out "$W/fa2/fa2_${scen}_d${hdim}.safetensors" --trace-rows 0,1,17,100
      "$BIN/fb-fa2" --input "$in" --out "$W/fa2/fa2dynmax_${scen}_d${hdim}.safetensors" --variant dynmax --trace-rows 0,1,17,100
      "$BIN/fb-fa2" --input "$in" --out "$W/fa2/fa2causal_${scen}_d${hdim}.safetensors" --causal --trace-rows 0,1,17,100
    done
  done
  local n; n=$(ls "$W"/fa2/*.safetensors 2>/dev/null | wc -l)
  [ "$n" -eq 18 ] && cp "$W"/fa2/*.safetensors "$(dirname "$dir")/fa2/" && echo "fb-fa2: 18 new captures replace the old ones"
}
export -f step_fa2

step_mma() {
  mkdir -p "$W/mma"
  "$BIN/fb-mma-probe" --out "$W/probes_big.fbp" --tiles 620 --seed 21 || return 1
  "$BIN/flashbits" probe-check "$W/probes_big.fbp" --json --max-report 20 --jobs "$JOBS" \
    --mismatches-out "$W/mma/mismatches_big2.fbp" --max-mismatches 4000 \
    --sample-out "$W/mma/sample_big2.fbp" --sample-per-batch 32 > "$W/mma/check_big2.json"
  echo "probe-check exit $?"
  rm -f "$W/probes_big.fbp"
  python3 - "$W/mma/check_big2.json" <<'EOF' || true
import json, sys
d = json.load(open(sys.argv[1]))
for f in d.get("forms", []):
    print(f"{f.get('form')}: model {f.get('model')}, {f.get('cases')} cases, {f.get('mismatches')} mismatches")
    for name, b in (f.get("batches") or {}).items():
        if b.get("mismatches"):
            print(f"    {name}: {b.get('mismatches')} of {b.get('cases')}")
EOF
}
export -f step_mma

# The SFU models derived on the CPU, checked on all 2^32 inputs: ex2's sign-magnitude rule
# (its table is written when it reproduces the hardware) and lg2's extended-precision split.
export SFU_PROBE_ARGS=${SFU_PROBE_ARGS:-"--functions lg2 --lg2-extended --lg2-raw-evidence never"}
step_sfu_models() {
  mkdir -p "$W/sfu"
  # shellcheck disable=SC2086
  "$BIN/fb-sfu-probe" --out-dir "$W/sfu" $SFU_PROBE_ARGS
  local rc=$?
  grep -h 'HOLDS\|fails\|REPRODUCES\|table model\|wrote\|lg2 extended\|rounding' "$W/sfu/sfu_summary.txt" 2>/dev/null | head -40
  return $rc
}
export -f step_sfu_models

start_sass() {
  mkdir -p "$W/sass"
  local lib
  lib=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cuda.so'))" 2>/dev/null)
  command -v cuobjdump >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
  [ -f "$lib" ] && command -v cuobjdump >/dev/null || { echo "sass: skipped"; return; }
  ( timeout -k 5 "$1" bash -c "cuobjdump -sass -arch sm_90 '$lib' | python3 '$FB_ROOT/gpu/sass_flash.py' \
      --kernels-from '$FB_ROOT/traces/hw/h200/capture_log.jsonl' --out-dir '$W/sass'" > "$W/sass/filter_stdout.txt" 2>&1
    echo "exit $?" >> "$W/sass/filter_stdout.txt" ) &
  echo $! > "$W/sass_pid"
}

echo "== flashbits device replay session $(date -u +%FT%TZ)"
echo "== budgets (s): info 20, sfu-models 90, fb-fa2 60, sfu-dumps 90, replays 150, mma 90, sass wait 60"
run_step info 20 step_info
[ "${WITH_SASS:-0}" = 1 ] && start_sass 420
run_step sfu-models 90 step_sfu_models
mkdir -p "$W/sfu_lg2"; mv "$W"/sfu/lg2_* "$W/sfu_lg2/" 2>/dev/null
pack sfu2 "$W/sfu"; pack sfu2_lg2 "$W/sfu_lg2"
run_step fb-fa2-captures 60 step_fa2
pack captures_fa2 "$W/fa2"
run_step sfu-dumps 90 step_dumps
run_step replays 150 step_replays
( cd "$W/values" 2>/dev/null && [ -n "$(ls -A .)" ] && tar -cf - . | xz -T"$JOBS" -6 > "$OUT/sfu_values.tar.xz" )
rm -rf /dev/shm/fbdump /tmp/fbdump
run_step mma-probes 90 step_mma
pack probes2 "$W/mma"
if [ -f "$W/sass_pid" ]; then
  pid=$(cat "$W/sass_pid"); waited=0
  while kill -0 "$pid" 2>/dev/null && [ $waited -lt 60 ]; do sleep 3; waited=$((waited + 3)); done
  kill -0 "$pid" 2>/dev/null && { echo "sass: still running: stopped"; pkill -f "cuobjdump -sass"; sleep 1; }
  cat "$W/sass/filter_stdout.txt" 2>/dev/null
  pack sass2 "$W/sass"
fi
echo "== summary"
for s in "${STATUS[@]}"; do echo "  $s"; done
echo "== total $(now)s"
ls -l "$OUT"
sleep 1
