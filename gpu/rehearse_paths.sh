#!/usr/bin/env bash
# gpu/rehearse_paths.sh BUILD_DIR [PATHS_DIR]: the ctest rehearse_attention_paths, and the
# attention-path part of gpu/rehearse_session.sh. Checks, on a CPU, that gpu/capture_paths.py
# and its checks cannot rot:
# - without PATHS_DIR: every path's plan (splitkv, flex, tutorial, math, cudnn) is written as
#   CPU stand-ins (capture_paths.py --stand-in; the tutorial step with a synthetic stand-in
#   for the tutorial file, whose checks run: a file that is not the tutorial is refused,
#   exit 2); with PATHS_DIR: the captures found there (the rehearsed session's, imported);
# - every capture of every plan is there (capture_paths.py --list), and each passes
#   gpu/check_paths.py --strict: provenance (source emulated, stand_in saying NOT a hardware
#   capture), metadata against the tensors (seqlen_q, seqlen_k, causal alignment, backward),
#   O, LSE and the gradients against a float64 recomputation with the metadata's mask;
# - the checks can fail: a copy of a bottom-right capture relabelled top-left, and one whose
#   stand_in note is removed, must fail check_paths --strict;
# - the SASS/PTX step (--dump-sass-from) on gpu/sass_probe.cu's cubin and PTX, where nvcc
#   exists: ex2.approx.f32 counted in the PTX, and with cuobjdump MUFU.EX2 and MUFU.RCP in the
#   SASS;
# - flashbits replays each capture under its model or the nearest one: exit 0 or 1 (a
#   mismatch: stand-ins are not the kernels), never 2, except that a capture with seqlen_q !=
#   seqlen_k may be refused (exit 2) by a flashbits without Nq != Nk support, and a capture
#   planned to settle an open question may be refused (exit 2) as a shape its model does not
#   cover, naming why (both reported).
# Exit 0 when all holds; 77 (skip) when no python3 here has torch and numpy (CI); 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: gpu/rehearse_paths.sh BUILD_DIR [PATHS_DIR]}" && pwd)
given=${2:-}
fb=$build/tools/flashbits
[ -x "$fb" ] || { echo "missing $fb"; exit 1; }
. "$root/gpu/find_python.sh"
py=$(find_python "torch, numpy")  # the stand-ins need both
[ -n "$py" ] || { echo "SKIPPED: no python3 with torch and numpy here"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
paths="splitkv flex tutorial math cudnn"
if [ -z "$given" ]; then
  dir=$tmp/paths
  # A synthetic stand-in for the tutorial file (the real one is not in the repo): what
  # capture_paths.py checks before it imports it.
  printf 'class _attention:\n    pass\n\n\ndef _attn_fwd():\n    pass\n\n\nattention = _attention\n' > "$tmp/fake_tutorial.py"
  printf 'def something_else():\n    pass\n' > "$tmp/not_tutorial.py"
  for p in $paths; do
    "$py" "$root/gpu/capture_paths.py" --path "$p" --stand-in --out-dir "$dir/$p" \
      --tutorial-file "$tmp/fake_tutorial.py" > "$tmp/$p.log" 2>&1
    rc=$?
    echo "capture_paths.py --path $p --stand-in: exit $rc ($(tail -1 "$tmp/$p.log"))"
    [ "$rc" = 0 ] || { cat "$tmp/$p.log"; fail=1; }
  done
  "$py" "$root/gpu/capture_paths.py" --path tutorial --stand-in --out-dir "$tmp/refused" \
    --tutorial-file "$tmp/not_tutorial.py" > "$tmp/refused.log" 2>&1
  rc=$?
  echo "a file that is not the tutorial: exit $rc (must be 2)"
  [ "$rc" = 2 ] || { cat "$tmp/refused.log"; fail=1; }
  grep -q "tutorial_sha256" "$dir"/tutorial/*.safetensors || { echo "tutorial captures lack tutorial_sha256"; fail=1; }
else
  dir=$(cd "$given" && pwd)
fi

# The Triton SASS/PTX step (capture_paths.py --dump-sass-from) on a cubin and PTX nvcc makes
# here from gpu/sass_probe.cu, where nvcc exists: one summary row whose PTX counts see the
# ex2.approx.f32 that file holds, and where cuobjdump exists too, SASS counts with MUFU.EX2
# and MUFU.RCP (without cuobjdump the listing says so).
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
  mkdir -p "$tmp/cache/k"
  if "$nvcc" -arch=sm_90a -cubin -o "$tmp/cache/k/sass_probe.cubin" "$root/gpu/sass_probe.cu" &&
     "$nvcc" -arch=sm_90a -ptx -o "$tmp/cache/k/sass_probe.ptx" "$root/gpu/sass_probe.cu"; then
    "$py" "$root/gpu/capture_paths.py" --path flex --dump-sass-from "$tmp/cache" --out-dir "$tmp/sassout" > "$tmp/sass.log" 2>&1
    rc=$?
    counts=$("$py" - "$tmp/sassout/sass/triton_summary.tsv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
r = rows[0] if rows else {}
print(len(rows), r.get("ex2.approx.f32", 0), r.get("MUFU.EX2", 0), r.get("MUFU.RCP", 0), r.get("instructions", 0))
EOF
)
    read -r rows ptx_ex2 ex2 rcp insns <<< "$counts"
    echo "sass step on nvcc's cubin: exit $rc; rows $rows, PTX ex2.approx.f32 $ptx_ex2, SASS MUFU.EX2 $ex2, MUFU.RCP $rcp, instructions $insns ($(tail -1 "$tmp/sass.log"))"
    [ "$rc" = 0 ] && [ "$rows" = 1 ] && [ "${ptx_ex2:-0}" -gt 0 ] || { cat "$tmp/sass.log"; fail=1; }
    # The SASS counter on a listing cuobjdump wrote on the H200 (gpu/sass_probe.cu, run 1):
    # its MUFU.EX2 and FFMA lines, counted independently here with grep.
    listing=$root/traces/hw/h200/sass/sass_probe_default.txt
    want="$(grep -c ' MUFU\.EX2 ' "$listing") $(grep -cE ' FFMA(\.[A-Z0-9_.]+)? ' "$listing")"
    got=$("$py" -c "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('cp', sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m); c = m.count_sass(open(sys.argv[2]).read()); print(c['MUFU.EX2'], c['FFMA'])
" "$root/gpu/capture_paths.py" "$listing")
    echo "SASS counter on the H200 listing of gpu/sass_probe.cu: MUFU.EX2, FFMA $got (grep: $want)"
    [ "$got" = "$want" ] && [ "${got%% *}" -gt 0 ] || fail=1
    if grep -q 'cuobjdump missing' "$tmp/sass.log"; then
      grep -q 'no cuobjdump found' "$tmp"/sassout/sass/*.sass || { echo "sass: no note of the missing cuobjdump"; fail=1; }
    else
      [ "${ex2:-0}" -gt 0 ] && [ "${rcp:-0}" -gt 0 ] && [ "${insns:-0}" -gt 20 ] || { echo "sass: SASS counts missing"; fail=1; }
    fi
  else
    echo "sass step: nvcc could not compile gpu/sass_probe.cu"; fail=1
  fi
else
  echo "sass step: no nvcc here: not checked"
fi

# Every capture of every plan.
for p in $paths; do
  want=$("$py" "$root/gpu/capture_paths.py" --path "$p" --list | cut -d' ' -f1 | sort)
  have=$(ls "$dir/$p" 2>/dev/null | grep '\.safetensors$' | sed 's/\.safetensors$//' | sort)
  if [ "$want" != "$have" ]; then
    echo "$p: the captures differ from the plan:"; diff <(echo "$want") <(echo "$have"); fail=1
  fi
done
echo "plans: $(ls "$dir"/*/*.safetensors 2>/dev/null | wc -l) captures"

"$py" "$root/gpu/check_paths.py" "$dir" --strict > "$tmp/check.txt" 2>&1
rc=$?
echo "check_paths --strict: exit $rc ($(tail -1 "$tmp/check.txt"))"
[ "$rc" = 0 ] || { cat "$tmp/check.txt"; fail=1; }

# The checks must be able to fail.
mkdir -p "$tmp/neg1" "$tmp/neg2"
victim=$(ls "$dir"/math/*causal_br.safetensors | head -1)
"$py" - "$victim" "$tmp/neg1/relabelled.safetensors" "$tmp/neg2/unlabelled.safetensors" <<'EOF'
import json, struct, sys
src, relabelled, unlabelled = sys.argv[1:4]
data = open(src, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
def write(path, header):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + body)
h = json.loads(json.dumps(header)); h["__metadata__"]["causal_alignment"] = "top-left"; write(relabelled, h)
h = json.loads(json.dumps(header)); del h["__metadata__"]["stand_in"]; write(unlabelled, h)
EOF
for neg in neg1 neg2; do
  "$py" "$root/gpu/check_paths.py" "$tmp/$neg" --strict > "$tmp/$neg.txt" 2>&1
  rc=$?
  echo "negative control $neg ($(ls "$tmp/$neg")): check_paths --strict exit $rc (must be 1)"
  [ "$rc" = 1 ] || { cat "$tmp/$neg.txt"; fail=1; }
done

# flashbits reads and replays them.
replayed=0 refused=0 unmodelled=0
for t in "$dir"/*/*.safetensors; do
  model=$("$py" "$root/gpu/check_paths.py" --replay-model "$t")
  "$fb" replay "$t" --model "${model%% *}" > "$tmp/replay.txt" 2>&1
  rc=$?
  square=$("$py" -c "import json,struct,sys; d=open(sys.argv[1],'rb').read(1<<20); m=json.loads(d[8:8+struct.unpack('<Q',d[:8])[0]])['__metadata__']; print(int(m['seqlen_q']==m['seqlen_k']))" "$t")
  if [ "$rc" -le 1 ]; then
    replayed=$((replayed + 1))
  elif [ "$square" = 0 ] && grep -q "k and v of one shape, with q's batch, rows" "$tmp/replay.txt"; then
    refused=$((refused + 1))
  elif [ "$rc" = 2 ] && grep -q "does not model this shape: it " "$tmp/replay.txt"; then
    # A capture planned to settle an open question (a shape the model refuses, naming why).
    echo "replay ${t#"$dir"/} under ${model%% *}: refused, $(grep -o 'does not model this shape: .*' "$tmp/replay.txt" | cut -c1-110)"
    unmodelled=$((unmodelled + 1))
  else
    echo "replay ${t#"$dir"/} under $model: exit $rc"; head -3 "$tmp/replay.txt"; fail=1
  fi
done
echo "flashbits replay: $replayed captures replayed (exit 0/1), $refused with seqlen_q != seqlen_k refused by this flashbits, $unmodelled of shapes the model refuses"
exit $fail
