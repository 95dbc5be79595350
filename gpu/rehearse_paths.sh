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
# - flashbits replays each capture under its model or the nearest one: exit 0 or 1 (a
#   mismatch: stand-ins are not the kernels), never 2, except that a capture with seqlen_q !=
#   seqlen_k may be refused (exit 2) by a flashbits without Nq != Nk support (reported).
# Exit 0 when all holds; 77 (skip) when no python3 here has torch and numpy (CI); 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: gpu/rehearse_paths.sh BUILD_DIR [PATHS_DIR]}" && pwd)
given=${2:-}
fb=$build/tools/flashbits
[ -x "$fb" ] || { echo "missing $fb"; exit 1; }
py=""
for cand in ${FB_PYTHON:-} python3 /usr/bin/python3; do
  if "$cand" -c 'import torch, numpy' 2>/dev/null; then py=$cand; break; fi
done
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
replayed=0 refused=0
for t in "$dir"/*/*.safetensors; do
  model=$("$py" "$root/gpu/check_paths.py" --replay-model "$t")
  "$fb" replay "$t" --model "${model%% *}" > "$tmp/replay.txt" 2>&1
  rc=$?
  square=$("$py" -c "import json,struct,sys; d=open(sys.argv[1],'rb').read(1<<20); m=json.loads(d[8:8+struct.unpack('<Q',d[:8])[0]])['__metadata__']; print(int(m['seqlen_q']==m['seqlen_k']))" "$t")
  if [ "$rc" -le 1 ]; then
    replayed=$((replayed + 1))
  elif [ "$square" = 0 ] && grep -q "k and v of one shape, with q's batch, rows" "$tmp/replay.txt"; then
    refused=$((refused + 1))
  else
    echo "replay ${t#"$dir"/} under $model: exit $rc"; head -3 "$tmp/replay.txt"; fail=1
  fi
done
echo "flashbits replay: $replayed captures replayed (exit 0/1), $refused with seqlen_q != seqlen_k refused by this flashbits"
exit $fail
