#!/usr/bin/env bash
# gpu/device_session.sh: everything one device session does, in one command (gpu/README.md
# "One device session").
#
# Usage: OUT=DIR bash gpu/device_session.sh             on the GPU machine
#        OUT=DIR bash gpu/device_session.sh --rehearse  on a CPU: fakes for every GPU step
#
# Contract:
# - Steps run in order of value: the tensor-core probes, the five attention paths of issue 38
#   (gpu/capture_paths.py: FA2 split-KV, math, cuDNN, the Triton tutorial, FlexAttention; one
#   process and one step each), the PyTorch SDPA flash captures and fb-fa2, the SFU probes,
#   the SASS listings. Each step has its own time budget (timeout), clipped so the whole
#   session ends within SESSION_LIMIT seconds (default 345: under 6 minutes; a step that
#   would start with under 5 s left is skipped and says so), and its results are packed into
#   $OUT the moment it ends, so a failing or hanging step loses nothing that came before it
#   and does not stop the steps after it.
# - At most 8 files come back, 16 MiB each: session.log, probes.tar.xz, captures_paths.tar.xz
#   (the five paths: captures, capture logs, the Triton kernels' SASS/PTX; re-packed after
#   each path), captures_torch.tar.xz (with eager/ and bias/, the stacked bias capture),
#   captures_fa2.tar.xz, sfu.tar.xz (summary, ex2 tables, conflicts), sfu_tables.tar.xz
#   (rcp/lg2 tables, raw ex2 evidence), sass.tar.xz. A pack over 15 MiB is cut down (the log
#   says what was dropped).
# - The tutorial kernel is not in the repo: TRITON_TUTORIAL_FILE (default
#   gpu/vendor/triton_06_fused_attention.py, git-ignored, carried; gpu/README.md "Attention
#   paths") must hold Triton's python/tutorials/06-fused-attention.py, else that step fails
#   alone. FB_PYTHON (default python3) runs the Python steps.
# - Binaries: prebuilt ones in .devbin/ (carried with the tree: fb-mma-probe, fb-sfu-probe,
#   fb-fa2, and a static `flashbits` for checking the probes on the device) are used when
#   they run there; otherwise gpu/ is built on the spot (cmake -S gpu) and the probes come
#   back unchecked, as a smaller raw file.
# - Inputs: gpu/inputs/ (gpu/make_inputs.sh, run before the session on the CPU).
# - The log gives every step's budget, its time and exit status, and the total.
set -uo pipefail
: "${OUT:?set OUT to the folder whose files come back}"
cd "$(dirname "$0")/.."
# gpu/prepare_session.sh's pack of .devbin/ (the carried tree is capped at 64 MiB): unpacked
# here when the folder itself did not travel.
if [ -f .devcarry/carry.tar.xz ] && [ ! -d .devbin ]; then
  xz -dc .devcarry/carry.tar.xz | tar -xf - || echo "warning: .devcarry/carry.tar.xz did not unpack"
fi
export FB_ROOT=$PWD
export REHEARSE=0
# The prebuilt programs (gpu/prepare_session.sh); FB_DEVBIN points elsewhere (the CI rehearsal
# uses the project build's).
export BIN_DIR=${FB_DEVBIN:-$PWD/.devbin}
[ "${1:-}" = "--rehearse" ] && REHEARSE=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
export T0=$(date +%s)
export W=$(mktemp -d /tmp/fbsession.XXXXXX)
export JOBS=$(nproc)
export PACK_LIMIT=$((15 * 1024 * 1024))
# The whole session ends within SESSION_LIMIT s (budgets are clipped; 20 s kept for the last
# packs). The CPU rehearsal is slower than the GPU and is not clipped unless asked.
export SESSION_LIMIT=${SESSION_LIMIT:-$([ "$REHEARSE" = 1 ] && echo 3600 || echo 345)}
export FB_PYTHON=${FB_PYTHON:-python3}
export TRITON_TUTORIAL_FILE=${TRITON_TUTORIAL_FILE:-$FB_ROOT/gpu/vendor/triton_06_fused_attention.py}
STATUS=()
now() { echo $(( $(date +%s) - T0 )); }

# run_step NAME BUDGET FUNCTION [ARG]: runs an exported function under its own timeout.
run_step() {
  local name=$1 budget=$2 fn=$3 s rc e left
  left=$(( SESSION_LIMIT - 20 - $(now) ))
  if [ "$left" -lt 5 ]; then
    echo "== [t=$(now)s] $name: SKIPPED (session time limit ${SESSION_LIMIT}s reached)"
    STATUS+=("$name: skipped (session time limit)")
    STEP_RAN=0
    return
  fi
  STEP_RAN=1
  [ "$budget" -gt "$left" ] && budget=$left
  s=$(date +%s)
  echo "== [t=$(now)s] $name: budget ${budget}s"
  timeout -k 10 "$budget" bash -c "$fn"
  rc=$?
  e=$(( $(date +%s) - s ))
  echo "== [t=$(now)s] $name: exit $rc after ${e}s of ${budget}s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
  STATUS+=("$name: exit $rc, ${e}s of ${budget}s")
}

# pack NAME DIR: DIR's files as $OUT/NAME.tar.xz; over PACK_LIMIT, the largest files are
# dropped one at a time (and named in the log) until it fits.
pack() {
  local name=$1 dir=$2 f
  [ -d "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ] || { echo "pack $name: nothing to pack"; return; }
  while :; do
    tar -C "$dir" -cf - . | xz -T"$JOBS" -6 > "$OUT/$name.tar.xz"
    [ "$(stat -c %s "$OUT/$name.tar.xz")" -le "$PACK_LIMIT" ] && break
    f=$(find "$dir" -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
    [ -n "$f" ] || break
    echo "pack $name: over 15 MiB, dropping $(basename "$f") ($(stat -c %s "$f") bytes)"
    rm -f "$f"
  done
  echo "pack $name: $(stat -c %s "$OUT/$name.tar.xz") bytes, $(find "$dir" -type f | wc -l) files"
}
export -f pack

step_info() {
  echo "host: $(uname -a)"; echo "cores: $JOBS"
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm --format=csv || true
  { command -v nvcc || ls /usr/local/cuda/bin/nvcc; } 2>/dev/null && (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | tail -2
  python3 -c "import torch, safetensors, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'safetensors', safetensors.__version__, 'triton', triton.__version__); print('flash sdp enabled', torch.backends.cuda.flash_sdp_enabled())" 2>&1 || true
  ls "$FB_ROOT/gpu/inputs" 2>/dev/null | wc -l | sed 's/^/input traces: /'
}
export -f step_info

# Prebuilt binaries when they run here; else build gpu/ (the probes then come back unchecked).
step_binaries() {
  local bin=$BIN_DIR ok=1 r1=1 r2=2
  for p in fb-mma-probe fb-sfu-probe fb-fa2 flashbits; do [ -x "$bin/$p" ] || { echo "missing $bin/$p"; ok=0; }; done
  if [ $ok = 1 ]; then
    "$bin/fb-mma-probe" --dry-run --tiles 1 --out "$W/selftest.fbp" >/dev/null; r1=$?
    "$bin/flashbits" probe-check "$W/selftest.fbp" --max-report 0 >/dev/null; r2=$?
    echo "self-test: fb-mma-probe --dry-run exit $r1, flashbits probe-check exit $r2"
  fi
  if [ $ok = 1 ] && [ $r1 = 0 ] && [ $r2 -le 1 ]; then
    echo "using prebuilt $bin (its flashbits runs here)"
    echo "$bin" > "$W/bindir"; echo 1 > "$W/checker"
    return 0
  fi
  [ "$REHEARSE" = 1 ] && { echo "rehearsal: no fallback build"; return 1; }
  echo "prebuilt binaries unusable here: building gpu/ standalone"
  local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$FB_ROOT/gpu" -B "$FB_ROOT/build-device" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc >/dev/null || return 1
  cmake --build "$FB_ROOT/build-device" -j "$JOBS" --target fb-mma-probe fb-sfu-probe fb-fa2 || return 1
  echo "$FB_ROOT/build-device" > "$W/bindir"
  if [ -x "$bin/flashbits" ] && "$bin/flashbits" formats >/dev/null 2>&1; then echo 1 > "$W/checker"; else echo 0 > "$W/checker"; fi
}
export -f step_binaries

step_torch() {
  mkdir -p "$W/torch"
  if [ "$REHEARSE" = 1 ]; then  # fakes: the emulator's own traces under the capture names
    local fb=$BIN_DIR/flashbits
    for dtype in bf16 fp16; do
      for hdim in 64 128; do
        for scen in random sink fa3-outliers; do
          for causal in "" _causal; do
            "$fb" make-trace --model fa2-sm90 --dtype "$dtype" --scenario "$scen" --seqlen 256 --headdim "$hdim" \
              --seed 7 --backward --out "$W/torch/torch_${dtype}_${scen}_d${hdim}${causal}.safetensors" >/dev/null || return 1
          done
        done
      done
    done
    echo '{"capture": "rehearsal", "status": "ok", "kernels": []}' > "$W/torch/capture_log.jsonl"
    return 0
  fi
  if [ ! -d "$FB_ROOT/gpu/inputs" ]; then
    echo "no gpu/inputs (not carried: the 64 MiB cap): torch captures skipped; run 1's stand in traces/hw/"
    return 0
  fi
  PYTHONUNBUFFERED=1 python3 "$FB_ROOT/gpu/capture_torch.py" --plan --inputs-dir "$FB_ROOT/gpu/inputs" \
    --bias-dir "$FB_ROOT/gpu/inputs/bias" --out-dir "$W/torch"
}
export -f step_torch

# One attention path of issue 38 (gpu/capture_paths.py), in its own process; on a CPU the
# same script writes stand-ins (source emulated), or says why it cannot.
step_path() {
  local p=$1 extra=()
  mkdir -p "$W/paths/$p"
  if [ "$REHEARSE" = 1 ]; then
    if ! "$FB_PYTHON" -c 'import torch, numpy' 2>/dev/null; then
      echo "rehearsal: $FB_PYTHON has no torch or numpy: the $p stand-ins are SKIPPED"
      echo "no torch or numpy for $FB_PYTHON" > "$W/paths/$p/SKIPPED"
      return 0
    fi
    extra=(--stand-in)
  fi
  PYTHONUNBUFFERED=1 "$FB_PYTHON" "$FB_ROOT/gpu/capture_paths.py" --path "$p" --out-dir "$W/paths/$p" \
    --cache-dir "$W/cache_$p" --tutorial-file "$TRITON_TUTORIAL_FILE" "${extra[@]}"
}
export -f step_path

step_fa2() {
  mkdir -p "$W/fa2"
  if [ "$REHEARSE" = 1 ]; then echo "rehearsal: fb-fa2 needs a GPU, skipped"; return 0; fi
  local bin; bin=$(cat "$W/bindir")
  for hdim in 64 128; do
    for scen in random sink fa3-outliers; do
      local in="$W/torch/torch_bf16_${scen}_d${hdim}.safetensors"
      [ -f "$in" ] || { echo "no $in: skipped"; continue; }
      "$bin/fb-fa2" --input "$in" --out "$W/fa2/fa2_${scen}_d${hdim}.safetensors" --trace-rows 0,1,17,100
      "$bin/fb-fa2" --input "$in" --out "$W/fa2/fa2dynmax_${scen}_d${hdim}.safetensors" --variant dynmax --trace-rows 0,1,17,100
      "$bin/fb-fa2" --input "$in" --out "$W/fa2/fa2causal_${scen}_d${hdim}.safetensors" --causal --trace-rows 0,1,17,100
    done
  done
}
export -f step_fa2

# Tensor cores: a small file comes back whole (the regression set is cut from it); a file of
# >= 10^6 cases per form is checked here by the static flashbits, and only its verdict and
# its mismatching cases come back.
step_mma() {
  mkdir -p "$W/mma"
  local bin checker dry=(); bin=$(cat "$W/bindir"); checker=$(cat "$W/checker")
  [ "$REHEARSE" = 1 ] && dry=(--dry-run)
  if [ "$checker" != 1 ]; then  # no checker here: a raw file of ~10 MB comes back instead
    "$bin/fb-mma-probe" "${dry[@]}" --out "$W/mma/probes_raw.fbp" --tiles 3 --seed 12
    return
  fi
  # 14 * 128 * 620 = 1,111,040 cases per form, checked here; a 64-per-batch sample (the
  # regression set, ~1 MB) and at most 4000 mismatching cases per form come back. mma.sync
  # and wgmma run as separate processes: a wgmma fault cannot lose the mma.sync results.
  local tiles=620; [ "$REHEARSE" = 1 ] && tiles=20
  local group rc
  for group in mma wgmma; do
    if ! "$bin/fb-mma-probe" "${dry[@]}" --forms "$group" --out "$W/probes_big.fbp" --tiles "$tiles" --seed 12; then
      echo "fb-mma-probe --forms $group failed: its forms are lost, the other group's are kept"
      rm -f "$W/probes_big.fbp" "$W/probes_big.fbp.partial"
      continue
    fi
    if [ "$REHEARSE" = 1 ]; then
      # No GPU: the model's own predictions stand in for the hardware's D. They must pass,
      # and one flipped result must fail.
      "$BIN_DIR/flashbits" probe-check "$W/probes_big.fbp" --max-report 0 \
        --predictions-out "$W/predicted.fbp" > /dev/null
      mv "$W/predicted.fbp" "$W/probes_big.fbp"
      cp "$W/probes_big.fbp" "$W/flipped.fbp"
      python3 - "$W/flipped.fbp" <<'EOF2'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
header_len = struct.unpack_from("<I", b, 12)[0]
header = b[16:16 + header_len].decode()
k = int(dict(l.split("=", 1) for l in header.splitlines() if "=" in l)["k"])
d_at = 16 + header_len + 4 * (2 + 2 * k)  # the first case's D word
b[d_at] ^= 1
open(p, "wb").write(bytes(b))
EOF2
      "$BIN_DIR/flashbits" probe-check "$W/flipped.fbp" --max-report 1 > "$W/mma/rehearsal_flipped_$group.txt"
      rc=$?
      echo "rehearsal: one flipped D: probe-check exit $rc (must be 1)"
      [ "$rc" = 1 ] || return 1
    fi
    "$BIN_DIR/flashbits" probe-check "$W/probes_big.fbp" --json --max-report 20 --jobs "$JOBS" \
      --mismatches-out "$W/mma/mismatches_big_$group.fbp" --max-mismatches 4000 \
      --sample-out "$W/mma/sample_big_$group.fbp" --sample-per-batch 64 > "$W/mma/check_big_$group.json"
    rc=$?
    echo "$group forms: probe-check exit $rc (0 all match, 1 mismatches)"
    rm -f "$W/probes_big.fbp"
    [ "$REHEARSE" = 1 ] && [ "$rc" != 0 ] && return 1
    python3 - "$W/mma/check_big_$group.json" <<'EOF2' || true
import json, sys
d = json.load(open(sys.argv[1]))
for f in d.get("forms", []):
    print(f"{f.get('form')}: model {f.get('model')}, {f.get('cases')} cases, {f.get('mismatches')} mismatches")
    for name, b in (f.get("batches") or {}).items():
        if b.get("mismatches"):
            print(f"    {name}: {b.get('mismatches')} of {b.get('cases')}")
EOF2
  done
}
export -f step_mma

step_sfu() {
  mkdir -p "$W/sfu"
  local rc
  if [ "$REHEARSE" = 1 ]; then
    # No GPU: fb-sfu-rehearse plays fb-sfu-probe's table step on reduced domains with the emu's
    # hw-sm90 tables standing in for the hardware, and writes the summary and the FBSFUT1
    # tables through fb-sfu-probe's writer (gpu/README.md "SFU rehearsal").
    echo "rehearsal: fb-sfu-probe needs a GPU; fb-sfu-rehearse (stand-in: the emu's hw-sm90 tables, reduced domains)"
    [ -x "$BIN_DIR/fb-sfu-rehearse" ] || { echo "missing $BIN_DIR/fb-sfu-rehearse"; return 1; }
    "$BIN_DIR/fb-sfu-rehearse" --out-dir "$W/sfu" --lg2-extended
    rc=$?
  else
    "$(cat "$W/bindir")/fb-sfu-probe" --out-dir "$W/sfu"
    rc=$?
  fi
  # the 2^23-entry tables and any raw evidence travel in a second pack (8 files, 16 MiB each)
  mkdir -p "$W/sfu_tables"
  mv "$W"/sfu/rcp_table_* "$W"/sfu/lg2_table_* "$W"/sfu/lg2_extended_* "$W"/sfu/ex2_raw_* "$W/sfu_tables/" 2>/dev/null
  return $rc
}
export -f step_sfu

# SASS of the FlashAttention kernels that ran (matched by the profiler's names) and of
# gpu/sass_probe.cu's reference kernels. cuobjdump reads all of libtorch_cuda.so: it runs in
# the background from after the captures and is waited for here.
start_sass_background() {
  mkdir -p "$W/sass"
  # the kernels to match: this session's split-KV captures and the first session's flash ones
  cat "$FB_ROOT"/traces/hw/h200/capture_log.jsonl "$W"/paths/splitkv/capture_log.jsonl "$W"/torch/capture_log.jsonl \
    > "$W/kernels_from.jsonl" 2>/dev/null
  local lib
  lib=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cuda.so'))" 2>/dev/null)
  if ! command -v cuobjdump >/dev/null && [ -x /usr/local/cuda/bin/cuobjdump ]; then export PATH=$PATH:/usr/local/cuda/bin; fi
  if [ -z "$lib" ] || [ ! -f "$lib" ] || ! command -v cuobjdump >/dev/null; then
    echo "sass: no libtorch_cuda.so or no cuobjdump: skipped" | tee "$W/sass/sass_status.txt"; return
  fi
  [ "$1" -ge 10 ] || { echo "sass: no time left for cuobjdump: skipped" | tee "$W/sass/sass_status.txt"; return; }
  ls -l "$lib" > "$W/sass/library.txt"
  ( timeout -k 5 "$1" bash -c "cuobjdump -sass -arch sm_90 '$lib' 2>'$W/sass/cuobjdump_stderr.txt' \
      | python3 '$FB_ROOT/gpu/sass_flash.py' --kernels-from '$W/kernels_from.jsonl' --out-dir '$W/sass'" \
      > "$W/sass/filter_stdout.txt" 2>&1; echo "exit $?" >> "$W/sass/filter_stdout.txt" ) &
  echo $! > "$W/sass_pid"
}

step_sass_probe() {
  mkdir -p "$W/sass"
  local nvcc=/usr/local/cuda/bin/nvcc
  for mode in default fast_math; do
    local flags=(); [ $mode = fast_math ] && flags=(--use_fast_math)
    "$nvcc" -arch=sm_90a "${flags[@]}" -cubin -o "$W/sass_probe_$mode.cubin" "$FB_ROOT/gpu/sass_probe.cu" || continue
    if command -v cuobjdump >/dev/null || [ -x /usr/local/cuda/bin/cuobjdump ]; then
      "$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)" -sass "$W/sass_probe_$mode.cubin" > "$W/sass/sass_probe_$mode.txt"
    else
      echo "no cuobjdump" > "$W/sass/sass_probe_$mode.txt"
    fi
  done
}
export -f step_sass_probe

echo "== flashbits device session $(date -u +%FT%TZ) $([ $REHEARSE = 1 ] && echo '(REHEARSAL: fakes, no GPU)')"
echo "== budgets (s): info 20, binaries 200, mma 90, paths: splitkv 45, math 45, cudnn 60, tutorial 90, flex 150;" \
  "torch 120, fa2 60, sfu 60, sass 30 + wait; all clipped to the session limit ${SESSION_LIMIT}s"
run_step info 20 step_info
run_step binaries 200 step_binaries
run_step mma-probes 90 step_mma
pack probes "$W/mma"
run_step path-splitkv 45 "step_path splitkv"
[ "$STEP_RAN" = 1 ] && pack captures_paths "$W/paths"
start_sass_background $(( SESSION_LIMIT - 30 - $(now) ))
run_step path-math 45 "step_path math"
[ "$STEP_RAN" = 1 ] && pack captures_paths "$W/paths"
run_step path-cudnn 60 "step_path cudnn"
[ "$STEP_RAN" = 1 ] && pack captures_paths "$W/paths"
run_step path-tutorial 90 "step_path tutorial"
[ "$STEP_RAN" = 1 ] && pack captures_paths "$W/paths"
run_step path-flex 150 "step_path flex"
[ "$STEP_RAN" = 1 ] && pack captures_paths "$W/paths"
run_step torch-captures 120 step_torch
pack captures_torch "$W/torch"
run_step fb-fa2-captures 60 step_fa2
pack captures_fa2 "$W/fa2"
run_step sfu-probes 60 step_sfu
pack sfu "$W/sfu"; pack sfu_tables "$W/sfu_tables"
run_step sass-probe 30 step_sass_probe
if [ -f "$W/sass_pid" ]; then
  pid=$(cat "$W/sass_pid"); waited=0
  wait_for=$(( SESSION_LIMIT - 15 - $(now) )); [ "$wait_for" -gt 60 ] && wait_for=60
  while kill -0 "$pid" 2>/dev/null && [ $waited -lt "$wait_for" ]; do sleep 2; waited=$((waited + 2)); done
  kill -0 "$pid" 2>/dev/null && { echo "sass: still running after the wait: stopped"; kill -- -"$pid" 2>/dev/null; pkill -f "cuobjdump -sass" ; sleep 1; }
  cat "$W/sass/filter_stdout.txt" 2>/dev/null
fi
pack sass "$W/sass"
echo "== summary"
for s in "${STATUS[@]}"; do echo "  $s"; done
echo "== total $(now)s"
ls -l "$OUT"
sleep 1  # let tee write the last lines of session.log
