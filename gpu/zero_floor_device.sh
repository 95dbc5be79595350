#!/usr/bin/env bash
# gpu/zero_floor_device.sh: the one device command of the zero_floor probe (issue 38 item 7):
# fb-mma-probe's zero_floor batch only, on the three forms it applies to (mma.sync bf16
# m16n8k16, mma.sync tf32 m16n8k8, wgmma bf16 m64n8k16; 17 tiles each: 2,176 + 2,176 + 8,704
# cases, well under a second of GPU time), into $OUT/zero_floor.fbp (about 1.7 MB), its output
# into $OUT/zero_floor.log. Decided afterwards on the CPU by gpu/zero_floor_decide.py.
#
# Usage: OUT=DIR bash gpu/zero_floor_device.sh [--dry-run]   from any directory; a copy at
# .devzf/zero_floor_device.sh works the same (it cds to the folder above its own)
#   run: command "bash gpu/zero_floor_device.sh", timeout_s 120, carry [".devzf"]
#   (.devzf/ is git-ignored: it travels only when carried)
# Binary: ZF_BIN (default .devzf/fb-mma-probe, a prebuilt fb-mma-probe with --batches; built
# as gpu/prepare_session.sh builds .devbin/'s and copied there). --dry-run: no GPU (D =
# 0xffffffff), for trying the command on a CPU.
# If the one process fails (a wgmma fault loses the whole file), the mma.sync forms run again
# alone into $OUT/zero_floor.fbp and the wgmma form into $OUT/zero_floor_wgmma.fbp.
set -uo pipefail
: "${OUT:?set OUT to the folder whose files come back}"
cd "$(dirname "$0")/.."
BIN=${ZF_BIN:-.devzf/fb-mma-probe}
dry=()
[ "${1:-}" = "--dry-run" ] && dry=(--dry-run)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/zero_floor.log") 2>&1
t0=$(date +%s)
echo "zero_floor probe: $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
[ -f "$BIN" ] && [ ! -x "$BIN" ] && chmod +x "$BIN"
if [ ! -x "$BIN" ]; then
  echo "error: no $BIN (copy a built fb-mma-probe there and carry it)"
  exit 2
fi
sha256sum "$BIN"
args=(--batches zero_floor --tiles 17 --seed 12)
timeout -k 5 40 "$BIN" "${dry[@]}" "${args[@]}" --out "$OUT/zero_floor.fbp"
rc=$?
echo "fb-mma-probe --batches zero_floor (all forms): exit $rc"
if [ "$rc" != 0 ]; then
  rm -f "$OUT/zero_floor.fbp" "$OUT/zero_floor.fbp.partial"
  timeout -k 5 20 "$BIN" "${dry[@]}" "${args[@]}" --forms mma --out "$OUT/zero_floor.fbp"
  echo "fb-mma-probe --batches zero_floor --forms mma: exit $?"
  timeout -k 5 20 "$BIN" "${dry[@]}" "${args[@]}" --forms wgmma --out "$OUT/zero_floor_wgmma.fbp"
  echo "fb-mma-probe --batches zero_floor --forms wgmma: exit $?"
  rm -f "$OUT"/*.partial
fi
ls -l "$OUT"
echo "total $(( $(date +%s) - t0 )) s"
[ -f "$OUT/zero_floor.fbp" ] || [ -f "$OUT/zero_floor_wgmma.fbp" ]
