#!/usr/bin/env bash
# gpu/import_session.sh: bring one device session's outputs (gpu/device_session.sh) into the
# tree and check them, in one step (gpu/README.md "After the session").
#
# Usage: gpu/import_session.sh FILES_DIR [DEST]
#   FILES_DIR  the folder the device tool returned (files_at): session.log and the *.tar.xz packs
#   DEST       default traces/hw/<gpu>, <gpu> from the captures' device name (e.g. h200); a
#              rehearsal's files (source "emulated" or dry-run) go to a scratch folder instead,
#              never into traces/hw/.
# Contract:
# - attention captures: torch/, eager/, fa2/ as captured; the stacked bias capture split into
#   files of 16 heads (gpu/split_heads.py), so no file exceeds a few MiB;
# - session.log, capture_log.jsonl, the SFU summary and conflicts, the SASS summary, the
#   reference kernels' SASS and one forward and one backward flash kernel's SASS (code only);
# - a rehearsal's SFU tables (*.fbsfut whose header says source=rehearsal:), into DEST/sfu
#   unless DEST is under traces/hw/;
# - the tensor-core probe verdict (check_big.json) and its mismatching cases and sample;
# - the attention paths (captures_paths: gpu/capture_paths.py) into DEST/paths/<path>/, with
#   their capture logs and Triton SASS; checked by gpu/check_paths.py and replayed under their
#   metadata model or the nearest one (reported as "== replay-path FILE under MODEL (...)");
# - then checks: probe-check on the probe files, and `flashbits replay` of every capture
#   under its metadata model; each result is printed and written to DEST/import_report.txt.
# Exit 0 when everything was imported (whatever the checks found), 2 on a missing or
# unreadable input.
set -uo pipefail
cd "$(dirname "$0")/.."
files=${1:?usage: gpu/import_session.sh FILES_DIR [DEST]}
fb=${FLASHBITS:-build/tools/flashbits}
[ -d "$files" ] || { echo "error: $files: not a folder" >&2; exit 2; }
[ -x "$fb" ] || { echo "error: $fb: not built (cmake --build build --target flashbits)" >&2; exit 2; }
. gpu/find_python.sh
py=$(find_python numpy)  # gpu/check_paths.py and gpu/split_heads.py read the tensors with it
[ -n "$py" ] || { echo "error: no python3 here imports numpy (set FB_PYTHON to one that does)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for pack in "$files"/*.tar.xz; do
  [ -e "$pack" ] || continue
  name=$(basename "$pack" .tar.xz)
  mkdir -p "$work/$name"
  tar -xJf "$pack" -C "$work/$name" || { echo "error: $pack: not a readable tar.xz" >&2; exit 2; }
done

# Where the files go: the GPU's short name, from the first capture's metadata.
first=$(ls "$work"/captures_torch/torch_*.safetensors "$work"/captures_fa2/*.safetensors 2>/dev/null | head -1)
source_line=$("$py" - "$first" <<'EOF'
import json, struct, sys
try:
    data = open(sys.argv[1], "rb").read(1 << 20)
    n = struct.unpack("<Q", data[:8])[0]
    print(json.loads(data[8:8 + n]).get("__metadata__", {}).get("source", ""))
except Exception:
    print("")
EOF
)
case "$source_line" in
  cuda:*) gpu=$(echo "${source_line#cuda:}" | sed 's/NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z') ;;
  *) gpu="" ;;
esac
if [ $# -ge 2 ]; then dest=$2
elif [ -n "$gpu" ]; then dest=traces/hw/$gpu
else dest=$(mktemp -d /tmp/fb-import-rehearsal.XXXXXX); echo "no hardware source ('$source_line'): importing into $dest"
fi
mkdir -p "$dest"
echo "importing $files into $dest"

copy_dir() {  # copy_dir FROM TO [glob]
  [ -d "$1" ] || return 0
  mkdir -p "$2"
  find "$1" -maxdepth 1 -type f -name "${3:-*}" -exec cp {} "$2/" \;
}
copy_dir "$work/captures_torch" "$dest/torch" 'torch_*.safetensors'
copy_dir "$work/captures_torch/eager" "$dest/eager" '*.safetensors'
copy_dir "$work/captures_fa2" "$dest/fa2" '*.safetensors'
[ -f "$work/captures_torch/capture_log.jsonl" ] && cp "$work/captures_torch/capture_log.jsonl" "$dest/"
[ -f "$files/session.log" ] && cp "$files/session.log" "$dest/"
for big in "$work"/captures_bias/*.safetensors "$work"/captures_torch/bias/*.safetensors; do
  [ -e "$big" ] || continue
  mkdir -p "$dest/bias"
  "$py" gpu/split_heads.py "$big" "$dest/bias/$(basename "$big" .safetensors)" 16 >/dev/null || exit 2
done
copy_dir "$work/probes" "$dest/probes"
# The attention paths of issue 38 (gpu/capture_paths.py): captures, capture logs, the Triton
# kernels' SASS summaries and listings, per path.
for p in splitkv flex tutorial math cudnn; do
  [ -d "$work/captures_paths/$p" ] || continue
  copy_dir "$work/captures_paths/$p" "$dest/paths/$p" '*.safetensors'
  copy_dir "$work/captures_paths/$p" "$dest/paths/$p" 'capture_log.jsonl'
  [ -d "$work/captures_paths/$p/sass" ] && copy_dir "$work/captures_paths/$p/sass" "$dest/paths/$p/sass"
done
if [ -d "$work/sfu" ]; then
  mkdir -p "$dest/sfu"
  cp "$work"/sfu/sfu_summary.txt "$dest/sfu/" 2>/dev/null
  [ -f "$work/sfu/ex2_conflicts.txt" ] && xz -c "$work/sfu/ex2_conflicts.txt" > "$dest/sfu/ex2_conflicts.txt.xz"
fi
# A rehearsal's SFU tables (fb-sfu-rehearse, header source=rehearsal:...) are kept for its
# checks (gpu/rehearse_session.sh converts and loads them), in a scratch destination only:
# never under traces/hw/. A GPU's tables stay in the packs (converted by hand, gpu/README.md).
for t in "$work"/sfu/*.fbsfut "$work"/sfu_tables/*.fbsfut; do
  [ -e "$t" ] || continue
  awk '/^end$/ {exit} /^source=rehearsal:/ {found = 1} END {exit !found}' "$t" || continue
  case "$(cd "$dest" && pwd -P)/" in
    */traces/hw/*) echo "sfu: $(basename "$t") is a rehearsal's table: not kept under traces/hw/"; continue ;;
  esac
  mkdir -p "$dest/sfu"
  cp "$t" "$dest/sfu/" && echo "sfu: kept the rehearsal's $(basename "$t") in $dest/sfu"
done
if [ -d "$work/sass" ]; then
  mkdir -p "$dest/sass"
  for f in sass_summary.tsv sass_status.txt sass_probe_default.txt sass_probe_fast_math.txt library.txt; do
    [ -f "$work/sass/$f" ] && cp "$work/sass/$f" "$dest/sass/"
  done
  # One forward and one backward flash kernel (bf16, d64, non-causal), code lines only.
  if [ -f "$work/sass/sass_kernels.txt" ]; then
    "$py" - "$work/sass/sass_kernels.txt" "$dest/sass" <<'EOF'
import re, sys
src, out = sys.argv[1], sys.argv[2]
want = {
    "flash_fwd_d64_bf16.sass": re.compile(r"^==== void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t.*>, false, false,"),
    "flash_bwd_d64_bf16.sass": re.compile(r"^==== void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t.*>, false, false,"),
    "flash_bwd_dot_do_o_d64_bf16.sass": re.compile(r"^==== void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t"),
}
current, files = None, {}
for line in open(src):
    if line.startswith("==== void"):
        current = next((n for n, r in want.items() if r.match(line) and n not in files), None)
        if current:
            files[current] = [line]
        continue
    if line.startswith("==== _Z") or not line.strip():
        if current and line.startswith("==== _Z"):
            files[current].append(line)
        continue
    if line.startswith("===="):
        current = None
        continue
    if current:
        files[current].append(re.sub(r"\s*/\* 0x[0-9a-f]+ \*/", "", line).rstrip() + "\n")
for name, lines in files.items():
    open(f"{out}/{name}", "w").writelines(lines)
    print(f"sass: {name}: {len(lines)} lines")
EOF
  fi
fi

report="$dest/import_report.txt"
{
  echo "import of $files on $(date -u +%FT%TZ) into $dest"
  for p in "$dest"/probes/*.fbp; do
    [ -e "$p" ] || continue
    echo "== probe-check $(basename "$p")"
    "$fb" probe-check "$p" --max-report 0 > "$work/probe_check.txt"
    rc=$?
    grep -v '^  batch' "$work/probe_check.txt"
    echo "exit $rc"
  done
  for t in "$dest"/torch/*.safetensors "$dest"/eager/*.safetensors "$dest"/fa2/*.safetensors "$dest"/bias/*.safetensors; do
    [ -e "$t" ] || continue
    echo "== replay ${t#"$dest"/}"
    "$fb" replay "$t" | grep -E 'match bit|^result|under'
  done
  # The paths' captures: checked against float64 (gpu/check_paths.py), then replayed under
  # the model their metadata names, else flashbits' model of the path, else the nearest one
  # (named as such; gpu/check_paths.py --replay-model).
  if [ -d "$dest/paths" ]; then
    echo "== check-paths"
    "$py" gpu/check_paths.py "$dest/paths" | sed 's/^/    /'
    echo "check-paths exit ${PIPESTATUS[0]}"
    for t in "$dest"/paths/*/*.safetensors; do
      [ -e "$t" ] || continue
      model=$("$py" gpu/check_paths.py --replay-model "$t")
      echo "== replay-path ${t#"$dest"/} under ${model}"
      "$fb" replay "$t" --model "${model%% *}" > "$work/replay_path.txt" 2>&1
      rc=$?
      grep -E 'match bit|^result|^error' "$work/replay_path.txt" | sed 's/^/    /'
      echo "replay-path exit $rc"
    done
  fi
} 2>&1 | tee "$report"
echo "wrote $report"
