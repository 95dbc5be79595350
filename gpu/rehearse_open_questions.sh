#!/usr/bin/env bash
# gpu/rehearse_open_questions.sh BUILD_DIR: the ctest rehearse_open_questions. Runs the third
# GPU session's one command (gpu/open_questions_device.sh --rehearse) on a CPU and checks what
# would come back, so the command cannot rot before a session that has a GPU:
# - it exits 0, within its budgets;
# - zero_floor.fbp from fb-mma-probe's --dry-run (BUILD_DIR/gpu/fb-mma-probe, where nvcc built
#   it) passes gpu/zero_floor_decide.py --self-test (each rule's predictions decided as that
#   rule); without the binary that part is reported as skipped;
# - captures_paths.tar.xz holds exactly the plan's open-question captures (capture_paths.py
#   --list --open-questions) and a capture log per path, and every capture passes
#   gpu/check_paths.py --strict (provenance: CPU stand-ins say so; metadata against tensors;
#   values against float64);
# - gpu/import_session.sh imports the folder (into a scratch DEST) and replays each capture
#   under its model: exit 0 or 1 (stand-ins are not the kernels), or 2 only as a shape the
#   model refuses, naming why ("does not model this shape").
# Exit 0 when all holds; 77 (skip) when no python3 here has torch and numpy; 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: gpu/rehearse_open_questions.sh BUILD_DIR}" && pwd)
. "$root/gpu/find_python.sh"
py=$(find_python "torch, numpy")  # the stand-ins need both
[ -n "$py" ] || { echo "SKIPPED: no python3 with torch and numpy here"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

zf=$build/gpu/fb-mma-probe
OUT=$tmp/out FB_PYTHON=$py ZF_BIN=$zf bash "$root/gpu/open_questions_device.sh" --rehearse > "$tmp/run.txt" 2>&1
rc=$?
echo "open_questions_device.sh --rehearse: exit $rc ($(grep '^== total' "$tmp/run.txt"))"
[ "$rc" = 0 ] || { cat "$tmp/run.txt"; fail=1; }

if [ -x "$zf" ]; then
  "$py" "$root/gpu/zero_floor_decide.py" --self-test "$tmp/out/zero_floor.fbp" > "$tmp/zf.txt" 2>&1
  rc=$?
  echo "zero_floor_decide.py --self-test on the dry run's zero_floor.fbp: exit $rc"
  [ "$rc" = 0 ] || { tail -20 "$tmp/zf.txt"; fail=1; }
else
  echo "zero_floor: no $zf (nvcc absent): not rehearsed"
fi

mkdir -p "$tmp/unpacked"
tar -xJf "$tmp/out/captures_paths.tar.xz" -C "$tmp/unpacked" || { echo "captures_paths.tar.xz: unreadable"; exit 1; }
for p in math flex; do
  want=$("$py" "$root/gpu/capture_paths.py" --path "$p" --list --open-questions | cut -d' ' -f1 | sort)
  have=$(ls "$tmp/unpacked/$p" 2>/dev/null | grep '\.safetensors$' | sed 's/\.safetensors$//' | sort)
  if [ -z "$want" ] || [ "$want" != "$have" ]; then
    echo "$p: the captures differ from the open questions:"; diff <(echo "$want") <(echo "$have"); fail=1
  fi
  [ -s "$tmp/unpacked/$p/capture_log.jsonl" ] || { echo "$p: no capture_log.jsonl"; fail=1; }
done
echo "captures: $(ls "$tmp"/unpacked/*/*.safetensors 2>/dev/null | wc -l) open-question captures"
"$py" "$root/gpu/check_paths.py" "$tmp/unpacked" --strict > "$tmp/check.txt" 2>&1
rc=$?
echo "check_paths --strict: exit $rc ($(tail -1 "$tmp/check.txt"))"
[ "$rc" = 0 ] || { cat "$tmp/check.txt"; fail=1; }

FLASHBITS=$build/tools/flashbits bash "$root/gpu/import_session.sh" "$tmp/out" "$tmp/dest" > "$tmp/import.txt" 2>&1
rc=$?
echo "import_session.sh into a scratch DEST: exit $rc"
[ "$rc" = 0 ] || { tail -20 "$tmp/import.txt"; fail=1; }
imported=$(ls "$tmp"/dest/paths/*/*.safetensors 2>/dev/null | wc -l)
[ "$imported" -gt 0 ] || { echo "import: no path capture imported"; fail=1; }
# import_session.sh replayed each capture under its model (import_report.txt: "== replay-path
# FILE under MODEL", the result or error lines, "replay-path exit N").
counts=$("$py" - "$tmp/dest/import_report.txt" <<'EOF2'
import re, sys
replayed = refused = bad = 0
block = []
for line in open(sys.argv[1]):
    if line.startswith("== replay-path"):
        block = [line]
        continue
    block.append(line)
    m = re.match(r"replay-path exit (\d+)", line)
    if m:
        rc = int(m.group(1))
        if rc <= 1:
            replayed += 1
        elif rc == 2 and any("does not model this shape: it " in b for b in block):
            refused += 1
        else:
            bad += 1
            sys.stderr.write("".join(block))
print(replayed, refused, bad)
EOF2
)
read -r replayed refused bad <<< "$counts"
[ "${bad:-1}" = 0 ] && [ $((replayed + refused)) = "$imported" ] || fail=1
echo "imported $imported; flashbits replay: $replayed replayed (exit 0/1), $refused refused as shapes their model does not cover, ${bad:-?} otherwise"
exit $fail
