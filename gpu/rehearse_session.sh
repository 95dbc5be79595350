#!/usr/bin/env bash
# gpu/rehearse_session.sh BUILD_DIR: the ctest rehearse_device_session. Runs the whole device
# session on a CPU (gpu/device_session.sh --rehearse, with the project build's programs in
# place of .devbin/) and then the import steps (gpu/import_session.sh) on what it wrote:
# - every step of the session exits 0 and its files are packed (session.log,
#   captures_torch.tar.xz, probes.tar.xz);
# - tensor cores: the dry-run inputs with the model's own predictions as D pass probe-check,
#   and the same file with one flipped D fails it (inside the session's MMA step);
# - captures: the fake captures (make-trace, source emulated) are imported and replay bit
#   for bit; the probe files brought back pass probe-check.
# - SFU: the session's SFU step runs fb-sfu-rehearse (the emu's hw-sm90 tables standing in
#   for the GPU, reduced domains; tables written by fb-sfu-probe's writer); the import keeps
#   its tables. Each of ex2_sm_table_n23, rcp_table_n23 and lg2_extended_n23 must have been
#   written with table_model_mismatches=0, convert with fb-sfu-table-convert, load with the
#   emu's table loader and give the stand-in's outputs on every input of its domain
#   (fb-sfu-rehearse --check), and load in flashbits from a recipe file: `flashbits replay`
#   of a fake capture with the three tables reports exactly what it reports with --sfu
#   hw-sm90 (the stand-in itself).
# - attention paths (issue 38): the session's five path steps write gpu/capture_paths.py's
#   CPU stand-ins (source emulated) with the first python3 that has torch and numpy
#   (FB_PYTHON); they are packed into captures_paths.tar.xz, imported into paths/, and must
#   pass gpu/rehearse_paths.sh (every planned capture, check_paths --strict, the negative
#   controls, flashbits replay). Without such a python the steps say SKIPPED and so does this.
# - no step is skipped for the session's time limit.
# fb-fa2 needs a GPU and is skipped by the rehearsal (the session log says so). Exit 0 when
# all of the above holds.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: gpu/rehearse_session.sh BUILD_DIR}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
for p in flashbits:tools/flashbits fb-mma-probe:gpu/fb-mma-probe fb-sfu-probe:gpu/fb-sfu-probe fb-fa2:gpu/fb-fa2 \
         fb-sfu-rehearse:gpu/fb-sfu-rehearse fb-sfu-table-convert:gpu/fb-sfu-table-convert; do
  [ -x "$build/${p#*:}" ] || { echo "missing $build/${p#*:}"; exit 1; }
  ln -s "$build/${p#*:}" "$tmp/bin/${p%%:*}"
done
fail=0
. "$root/gpu/find_python.sh"
py=$(find_python "torch, numpy")  # the stand-ins need both
FB_PYTHON=${py:-python3} FB_DEVBIN=$tmp/bin OUT=$tmp/out bash "$root/gpu/device_session.sh" --rehearse > "$tmp/session.txt" 2>&1
echo "session exit $?"
steps=$(grep -cE '^== \[t=[0-9]+s\] [a-z0-9-]+: exit [0-9]+ after' "$tmp/out/session.log")
bad=$(grep -E '^== \[t=[0-9]+s\] [a-z0-9-]+: exit [0-9]+ after' "$tmp/out/session.log" | grep -vc ': exit 0 after')
echo "$steps steps, $bad failed"
[ "$steps" -ge 6 ] && [ "$bad" -eq 0 ] || { fail=1; grep -E ': exit [1-9]' "$tmp/out/session.log"; }
grep -q 'rehearsal: one flipped D: probe-check exit 1 (must be 1)' "$tmp/out/session.log" || { echo "no flipped-D check"; fail=1; }
if grep -q ': SKIPPED (session time limit' "$tmp/out/session.log"; then
  echo "steps skipped for the session time limit:"; grep ': SKIPPED (session time limit' "$tmp/out/session.log"; fail=1
fi
for f in session.log captures_torch.tar.xz probes.tar.xz; do
  [ -s "$tmp/out/$f" ] || { echo "missing $f"; fail=1; }
done
FLASHBITS=$build/tools/flashbits bash "$root/gpu/import_session.sh" "$tmp/out" "$tmp/imported" > "$tmp/import.txt" 2>&1
echo "import exit $?"
report=$tmp/imported/import_report.txt
replays=$(grep -c '^== replay ' "$report")
exact=$(grep -c '^result: all compared values match' "$report")
probes=$(grep -c '^== probe-check' "$report")
probe_ok=$(grep -c '^exit 0' "$report")
echo "import: $exact of $replays replays bit for bit, $probe_ok of $probes probe files pass"
[ "$replays" -ge 24 ] && [ "$exact" -eq "$replays" ] || fail=1
[ "$probes" -ge 2 ] && [ "$probe_ok" -eq "$probes" ] || fail=1

# The attention paths: stand-ins packed, imported, and checked as gpu/rehearse_paths.sh does.
if [ -n "$py" ]; then
  [ -s "$tmp/out/captures_paths.tar.xz" ] || { echo "missing captures_paths.tar.xz"; fail=1; }
  FB_PYTHON=$py bash "$root/gpu/rehearse_paths.sh" "$build" "$tmp/imported/paths" > "$tmp/paths.txt" 2>&1
  rc=$?
  echo "paths: gpu/rehearse_paths.sh on the imported stand-ins: exit $rc"
  [ "$rc" = 0 ] || { cat "$tmp/paths.txt"; fail=1; }
  grep -q '^== replay-path ' "$report" || { echo "paths: the import replayed no path capture"; fail=1; }
else
  echo "paths: SKIPPED (no python3 with torch and numpy here)"
fi

# SFU: the rehearsal's tables, imported, converted, loaded and compared with the stand-in.
sfu=$tmp/sfu_loaded
mkdir -p "$sfu"
checks=()
recipe=""
for entry in ex2:ex2_sm_table_n23 rcp:rcp_table_n23 lg2:lg2_extended_n23; do
  fn=${entry%%:*}
  table=$tmp/imported/sfu/${entry#*:}.fbsfut
  if [ ! -s "$table" ]; then echo "sfu: no ${table##*/} imported"; fail=1; continue; fi
  if ! awk '/^end$/ {exit} /^table_model_mismatches=0$/ {found = 1} END {exit !found}' "$table"; then
    echo "sfu: ${table##*/}: its table model did not reproduce the stand-in"; fail=1
  fi
  if ! "$build/gpu/fb-sfu-table-convert" "$table" "$sfu/$fn.fbsfu" > "$sfu/convert_$fn.txt" 2>&1; then
    echo "sfu: fb-sfu-table-convert ${table##*/} failed:"; cat "$sfu/convert_$fn.txt"; fail=1; continue
  fi
  checks+=(--check "$fn=$sfu/$fn.fbsfu")
  recipe+="${recipe:+, }\"$fn\": \"$fn.fbsfu\""
done
"$build/gpu/fb-sfu-rehearse" "${checks[@]}" > "$sfu/check.txt" 2>&1
rc=$?
exact=$(grep -c '^check .*, all bit for bit' "$sfu/check.txt")
echo "sfu: $exact of 3 converted tables give the stand-in's outputs on their domains (fb-sfu-rehearse --check exit $rc)"
[ "$rc" = 0 ] && [ "$exact" = 3 ] || { cat "$sfu/check.txt"; fail=1; }
printf '{"name": "rehearsal SFU tables", "sfu": {%s}}\n' "$recipe" > "$sfu/recipe.json"
trace=$tmp/imported/torch/torch_bf16_sink_d64.safetensors
# --verbose: the full SFU descriptions (paths, provenance), which the checks below read.
"$build/tools/flashbits" replay "$trace" --recipe "$sfu/recipe.json" --verbose > "$sfu/replay_tables.txt" 2>&1
rc_tables=$?
"$build/tools/flashbits" replay "$trace" --sfu hw-sm90 --verbose > "$sfu/replay_stand_in.txt" 2>&1
rc_stand_in=$?
loaded=$(grep -cE '^SFU model: ex2: table [^ ]*ex2\.fbsfu .*; rcp: table [^ ]*rcp\.fbsfu .*; lg2: table [^ ]*lg2\.fbsfu ' "$sfu/replay_tables.txt")
posing=$(grep '^SFU model: ' "$sfu/replay_tables.txt" | grep -c ', measured on hardware')
echo "sfu: flashbits replay with the tables exit $rc_tables, with hw-sm90 exit $rc_stand_in; recipe loaded: $loaded"
[ "$posing" = 0 ] || { echo "sfu: a rehearsal's table is reported as measured on hardware"; fail=1; }
if [ "$loaded" != 1 ] || [ "$rc_tables" -gt 1 ] || [ "$rc_tables" != "$rc_stand_in" ] ||
   ! diff <(awk '/^[a-z_]+: [0-9]+\/[0-9]+ match/ {on = 1} on' "$sfu/replay_tables.txt") \
          <(awk '/^[a-z_]+: [0-9]+\/[0-9]+ match/ {on = 1} on' "$sfu/replay_stand_in.txt") > "$sfu/replay_diff.txt" ||
   ! grep -q '^result: ' "$sfu/replay_tables.txt"; then
  echo "sfu: the replay with the rehearsal's tables differs from the stand-in's:"; head -5 "$sfu/replay_tables.txt"
  head -20 "$sfu/replay_diff.txt"; fail=1
fi
[ "$fail" = 0 ] || { echo "--- session"; tail -40 "$tmp/out/session.log"; echo "--- import"; tail -20 "$tmp/import.txt"; }
exit $fail
