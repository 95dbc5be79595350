#!/usr/bin/env bash
# tests/import_captures.sh FLASHBITS ROOT: the ctest import_captures.
# A user's capture, saved the ways users save them, replays bit for bit once its provenance
# is stated on the command line. The capture is an emulated trace (make-trace, with the
# backward); tests/export_capture.py re-saves it with numpy's and Python's own writers as a
# bare .safetensors (no metadata, SDPA names), flash_attn's [b, s, h, d] layout, an .npz
# (bf16 as uint16), a compressed .npz in the bshd layout, and a directory of .npy files. Each
# must replay under the model that made it with every tensor matching (exit 0), directly
# and after `flashbits import`; grouped-query traces (4 q heads over 1 and 2 kv heads) too.
# Every missing statement, conflict and ambiguity must exit 2 with one `error:` line.
# Skips (exit 77) where python3 has no numpy.
set -u
fb=$1
root=$2
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c 'import numpy' 2>/dev/null; then
  echo "python3 with numpy not found (apt-get install python3-numpy): skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
expect() {  # expect RC DESCRIPTION COMMAND...
  local want=$1 what=$2 out rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL ($what): exit $rc, expected $want: $*"
    echo "$out" | tail -5
    fail=1
  elif [ "$want" -eq 2 ] && [ "$(echo "$out" | grep -c '^error: ')" -ne 1 ]; then
    echo "FAIL ($what): exit 2 without exactly one error line: $*"
    echo "$out" | tail -5
    fail=1
  fi
}
for shape in "--heads 1 --kv-heads 1" "--heads 4 --kv-heads 1" "--heads 4 --kv-heads 2"; do
  for model in fa2-sm80 pytorch-fa2-sm90; do
    d="$work/$model-${shape// /}"
    mkdir -p "$d"
    # shellcheck disable=SC2086
    if ! "$fb" make-trace --model "$model" --scenario random --seqlen 48 --headdim 16 --batch 2 $shape --backward \
         --out "$d/original.safetensors" >/dev/null; then
      echo "FAIL: make-trace --model $model $shape"
      fail=1
      continue
    fi
    "$py" "$root/tests/export_capture.py" "$d/original.safetensors" "$d" || { echo "FAIL: export"; fail=1; continue; }
    stated=(--source emulated --scale "$(cat "$d/scale.txt")" --causal "$(cat "$d/causal.txt")" --dtype bf16)
    expect 0 "bare safetensors" "$fb" replay "$d/bare.safetensors" --model "$model" "${stated[@]}" --layout bhsd
    expect 0 "bshd safetensors" "$fb" replay "$d/bshd.safetensors" --model "$model" "${stated[@]}" --layout bshd
    expect 0 "npz" "$fb" replay "$d/capture.npz" --model "$model" "${stated[@]}" --layout bhsd
    expect 0 "compressed npz, bshd" "$fb" replay "$d/compressed.npz" --model "$model" "${stated[@]}" --layout bshd
    expect 0 "npy directory" "$fb" replay "$d/npy" --model "$model" "${stated[@]}" --layout bhsd
    expect 0 "import" "$fb" import "$d/compressed.npz" --out "$d/imported.safetensors" --model "$model" "${stated[@]}" \
      --layout bshd
    expect 0 "replay of the imported trace" "$fb" replay "$d/imported.safetensors"
    # bias-test reads the same capture (its verdict, exit 0, 1 or 4, is not the point here).
    out=$("$fb" bias-test --traces "$d/bare.safetensors" "${stated[@]}" --layout bhsd 2>&1)
    rc=$?
    if { [ "$rc" -gt 1 ] && [ "$rc" -ne 4 ]; } || ! echo "$out" | grep -q "^verdict"; then
      echo "FAIL (bias-test --traces on a bare capture): exit $rc"
      echo "$out" | tail -3
      fail=1
    fi
  done
done
# The fp8 kernels take grouped-query inputs too (forward only: no fp8 backward is modelled).
d="$work/fp8-gqa"
mkdir -p "$d"
if "$fb" make-trace --model fa3-fp8-sm90 --scenario random --seqlen 64 --headdim 32 --heads 4 --kv-heads 2 \
     --out "$d/original.safetensors" >/dev/null &&
   "$py" "$root/tests/export_capture.py" "$d/original.safetensors" "$d"; then
  expect 0 "fp8 grouped-query npz" "$fb" replay "$d/capture.npz" --model fa3-fp8-sm90 --source emulated \
    --scale "$(cat "$d/scale.txt")" --causal "$(cat "$d/causal.txt")" --dtype bf16 --layout bhsd
else
  echo "FAIL: make-trace/export of an fp8 grouped-query trace"
  fail=1
fi
# A grouped-query replay says that the group sum of dK, dV is assumed.
d=$(ls -d "$work"/fa2-sm80-*heads4--kv-heads2 | head -1)
if ! "$fb" replay "$d/original.safetensors" | grep -q "grouped-query dk, dv.*ASSUMED"; then
  echo "FAIL: a grouped-query replay does not label the assumed group-sum order"
  fail=1
fi
# Errors: one line, exit 2.
d=$(ls -d "$work"/fa2-sm80-*heads1--kv-heads1 | head -1)
expect 2 "no source" "$fb" replay "$d/bare.safetensors" --model fa2-sm80 --layout bhsd
expect 2 "bad source" "$fb" replay "$d/bare.safetensors" --model fa2-sm80 --source H100 --layout bhsd
expect 2 "uint16 without --dtype" "$fb" replay "$d/capture.npz" --model fa2-sm80 --source emulated --layout bhsd
expect 2 "wrong layout" "$fb" replay "$d/bshd.safetensors" --model fa2-sm80 --source emulated --layout bhsd \
  --dtype bf16
expect 2 "conflicting causal" "$fb" replay "$d/original.safetensors" --causal true
expect 2 "conflicting source" "$fb" import "$d/original.safetensors" --source unknown --out "$d/x.safetensors"
expect 2 "bad layout word" "$fb" replay "$d/bare.safetensors" --source emulated --layout hsbd
expect 2 "import over its input" "$fb" import "$d/bare.safetensors" --source emulated --layout bhsd \
  --out "$d/bare.safetensors"
expect 2 "missing file" "$fb" import "$d/nothing.npz" --source emulated --out "$d/y.safetensors"
# An unknown source replays, and says it is not a hardware capture.
out=$("$fb" replay "$d/bare.safetensors" --model fa2-sm80 --source unknown --dtype bf16 --layout bhsd \
  --scale "$(cat "$d/scale.txt")" 2>&1)
if ! echo "$out" | grep -q "UNKNOWN provenance"; then
  echo "FAIL: a capture of unknown source is not reported as such"
  fail=1
fi
[ "$fail" = 0 ] && echo "import_captures: every capture form replayed bit for bit; every bad statement exit 2"
exit $fail
