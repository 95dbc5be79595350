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
# The SFU probe and fb-fa2 need a GPU and are skipped by the rehearsal (the session log says
# so). Exit 0 when all of the above holds.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: gpu/rehearse_session.sh BUILD_DIR}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
for p in flashbits:tools/flashbits fb-mma-probe:gpu/fb-mma-probe fb-sfu-probe:gpu/fb-sfu-probe fb-fa2:gpu/fb-fa2; do
  [ -x "$build/${p#*:}" ] || { echo "missing $build/${p#*:}"; exit 1; }
  ln -s "$build/${p#*:}" "$tmp/bin/${p%%:*}"
done
fail=0
FB_DEVBIN=$tmp/bin OUT=$tmp/out bash "$root/gpu/device_session.sh" --rehearse > "$tmp/session.txt" 2>&1
echo "session exit $?"
steps=$(grep -cE '^== \[t=[0-9]+s\] [a-z0-9-]+: exit [0-9]+ after' "$tmp/out/session.log")
bad=$(grep -E '^== \[t=[0-9]+s\] [a-z0-9-]+: exit [0-9]+ after' "$tmp/out/session.log" | grep -vc ': exit 0 after')
echo "$steps steps, $bad failed"
[ "$steps" -ge 6 ] && [ "$bad" -eq 0 ] || { fail=1; grep -E ': exit [1-9]' "$tmp/out/session.log"; }
grep -q 'rehearsal: one flipped D: probe-check exit 1 (must be 1)' "$tmp/out/session.log" || { echo "no flipped-D check"; fail=1; }
for f in session.log captures_torch.tar.xz probes.tar.xz; do
  [ -s "$tmp/out/$f" ] || { echo "missing $f"; fail=1; }
done
FLASHBITS=$build/tools/flashbits bash "$root/gpu/import_session.sh" "$tmp/out" "$tmp/imported" > "$tmp/import.txt" 2>&1
echo "import exit $?"
report=$tmp/imported/import_report.txt
replays=$(grep -c '^== replay' "$report")
exact=$(grep -c '^result: all compared values match' "$report")
probes=$(grep -c '^== probe-check' "$report")
probe_ok=$(grep -c '^exit 0' "$report")
echo "import: $exact of $replays replays bit for bit, $probe_ok of $probes probe files pass"
[ "$replays" -ge 24 ] && [ "$exact" -eq "$replays" ] || fail=1
[ "$probes" -ge 2 ] && [ "$probe_ok" -eq "$probes" ] || fail=1
[ "$fail" = 0 ] || { echo "--- session"; tail -40 "$tmp/out/session.log"; echo "--- import"; tail -20 "$tmp/import.txt"; }
exit $fail
