#!/usr/bin/env bash
# gpu/open_questions_device.sh: the one device command of the third GPU session of issue 38
# (gpu/README.md "The third session"): what the second session's captures and the models leave
# open, in about two minutes of H200 time instead of a whole gpu/device_session.sh.
#   1. the zero_floor probe of item 7 (gpu/zero_floor_device.sh: seconds);
#   2. the captures gpu/capture_paths.py marks as open questions (--open-questions: the math
#      backend over 1024 keys, where PyTorch's softmax changes kernels; FlexAttention at a length
#      that is not a multiple of 128, with and without a causal mask; causal flex decodes with 16
#      of 132 and with 32 splits; flex at d96), one process per path, flex with its Triton
#      kernels' SASS and PTX.
#
# Usage: OUT=DIR bash gpu/open_questions_device.sh              on the GPU machine
#          run: command "bash gpu/open_questions_device.sh", timeout_s 300, carry [".devzf"]
#          (a built fb-mma-probe, git-ignored so it is never committed: gpu/zero_floor_device.sh)
#        OUT=DIR bash gpu/open_questions_device.sh --rehearse   on a CPU: the probe's --dry-run
#          (when ZF_BIN exists) and CPU stand-ins for the captures (gpu/rehearse_open_questions.sh)
#
# Contract:
# - Returns in $OUT: open_questions.log; zero_floor.log and zero_floor.fbp (zero_floor_wgmma.fbp
#   too when the one probe process failed), decided on the CPU by gpu/zero_floor_decide.py;
#   captures_paths.tar.xz (paths/<path>/: the captures, capture_log.jsonl, flex's sass/), in the
#   layout of gpu/device_session.sh's, so gpu/import_session.sh imports it.
# - Each step runs under its own timeout (zero_floor 95 s, math 60 s, flex 150 s), cut short
#   where less is left before the whole run's deadline (OQ_DEADLINE_S, default 270 s after the
#   start, 840 s with --rehearse: the call's timeout_s 300 less the packing, so the device tool never kills the run
#   before its last pack), and the captures are packed after each path, so a failing or
#   hanging step loses nothing before it and does not stop the next.
# - Exit 0 when every step exited 0, else 1.
set -uo pipefail
: "${OUT:?set OUT to the folder whose files come back}"
cd "$(dirname "$0")/.."
rehearse=0
[ "${1:-}" = "--rehearse" ] && rehearse=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/open_questions.log") 2>&1
t0=$(date +%s)
W=$(mktemp -d /tmp/fbopen.XXXXXX)
trap 'rm -rf "$W"' EXIT
py=${FB_PYTHON:-python3}
zf_bin=${ZF_BIN:-.devzf/fb-mma-probe}
fail=0
# The rehearsal's stand-ins on a loaded CI machine may take longer: its deadline is the ctest's.
deadline=${OQ_DEADLINE_S:-$([ "$rehearse" = 1 ] && echo 840 || echo 270)}
# A step's timeout: its planned seconds, or what is left before the deadline less 10 s for the
# timeout's kill grace and the pack after it; 0 when too little is left to start it.
step_budget() {
  local planned=$1 left=$(( deadline - ($(date +%s) - t0) - 10 ))
  (( left < planned )) && planned=$left
  (( planned < 10 )) && planned=0
  echo "$planned"
}
echo "issue 38 open questions: $(date -u +%FT%TZ) on $(hostname)$([ "$rehearse" = 1 ] && echo ' (CPU rehearsal)')"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"

# 1. zero_floor (item 7).
if [ "$rehearse" = 1 ] && [ ! -e "$zf_bin" ]; then
  echo "== zero_floor: no $zf_bin here: skipped in the rehearsal"
else
  zf_args=()
  [ "$rehearse" = 1 ] && zf_args=(--dry-run)
  echo "== [t=$(( $(date +%s) - t0 ))s] zero_floor"
  # Its own probe runs are bounded at 95 s in all, kill grace included (gpu/zero_floor_device.sh).
  ZF_BIN=$zf_bin timeout -k 5 "$(step_budget 95)" bash gpu/zero_floor_device.sh "${zf_args[@]}"
  rc=$?
  echo "== zero_floor: exit $rc"
  [ "$rc" = 0 ] || fail=1
fi

# 2. the open-question captures, path by path.
for p in math flex; do
  extra=()
  [ "$rehearse" = 1 ] && extra=(--stand-in)
  planned=60
  [ "$p" = flex ] && planned=150
  budget=$(step_budget "$planned")
  mkdir -p "$W/paths/$p"
  if [ "$budget" = 0 ]; then
    echo "== [t=$(( $(date +%s) - t0 ))s] path $p: SKIPPED, under 10 s left before the ${deadline}s deadline"
    fail=1
    continue
  fi
  echo "== [t=$(( $(date +%s) - t0 ))s] path $p: budget ${budget}s"
  PYTHONUNBUFFERED=1 timeout -k 10 "$budget" "$py" gpu/capture_paths.py --path "$p" --open-questions \
    --out-dir "$W/paths/$p" --cache-dir "$W/cache_$p" "${extra[@]}"
  rc=$?
  echo "== path $p: exit $rc$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
  [ "$rc" = 0 ] || fail=1
  tar -C "$W/paths" -cf - . | xz -T0 -6 > "$OUT/captures_paths.tar.xz"
  echo "pack captures_paths: $(stat -c %s "$OUT/captures_paths.tar.xz") bytes, $(find "$W/paths" -type f | wc -l) files"
done
ls -l "$OUT"
echo "== total $(( $(date +%s) - t0 ))s, exit $fail"
sleep 1  # let tee write the last lines
exit "$fail"
