#!/usr/bin/env bash
# tools/fuzz.sh: a bounded libFuzzer run of the safetensors reader and trace validator.
# Builds fuzz/fuzz_safetensors with clang (-fsanitize=fuzzer,address,undefined; the libraries
# under test are instrumented with fuzzer-no-link), seeds a corpus of valid and slightly
# broken traces into a temp dir, and runs a fixed number of inputs. Exits non-zero on any
# crash, sanitizer report, leak, uncaught exception or timeout; a reproducer is left in
# $FUZZ_ARTIFACTS (default: the build dir).
# Usage: tools/fuzz.sh [RUNS]          (default 200000; CI: tools/fuzz.sh)
#   env: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_JOBS (default nproc), CXX_FUZZ (default clang++)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-200000}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${FUZZ_JOBS:-$(nproc)}"
cxx="${CXX_FUZZ:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz.sh: $cxx not found; libFuzzer needs clang" >&2
  exit 2
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  -DFLASHBITS_FUZZ=ON -DFLASHBITS_CUDA=OFF -DFLASHBITS_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null
cmake --build "$build" -j "$jobs" --target fuzz_safetensors

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
artifacts="${FUZZ_ARTIFACTS:-$build}/"
mkdir -p "$artifacts"

# Seed corpus: valid files in the layout Python's save_file writes, plus near misses.
seed() {  # seed NAME HEADER_JSON DATA_HEX  (plain bash: no python needed)
  local header="$2" n i
  while [ $(( ${#header} % 8 )) -ne 0 ]; do header+=" "; done
  n=${#header}
  {
    for i in 0 1 2 3 4 5 6 7; do printf "\\$(printf '%03o' $(( (n >> (8 * i)) & 255 )))"; done
    printf '%s' "$header"
    printf "$(printf '%s' "$3" | sed 's/../\\x&/g')"
  } > "$work/corpus/$1"
}
t4='"dtype":"BF16","shape":[1,1,2,2]'
seed trace '{"__metadata__":{"source":"emulated","softmax_scale":"0.5","causal":"false","dtype":"bf16","block_m":"64"},"k":{'"$t4"',"data_offsets":[0,8]},"o":{'"$t4"',"data_offsets":[8,16]},"q":{'"$t4"',"data_offsets":[16,24]},"v":{'"$t4"',"data_offsets":[24,32]},"lse":{"dtype":"F32","shape":[1,1,2],"data_offsets":[32,40]}}' \
  "803fa0c0cd3d00800100807f803f803f803f803f803f803f803f803f803f803f0000803f0000c0ff"
seed hw '{"__metadata__":{"source":"cuda:NVIDIA H100","dtype":"torch.bfloat16"},"q":{'"$t4"',"data_offsets":[0,8]},"k":{'"$t4"',"data_offsets":[8,16]},"v":{'"$t4"',"data_offsets":[16,24]},"o":{'"$t4"',"data_offsets":[24,32]},"s":{"dtype":"F8_E4M3","shape":[1,1,2,2],"data_offsets":[32,36]}}' \
  "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f207e7f80ff"
seed dtypes '{"a":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},"c":{"dtype":"U16","shape":[2,1],"data_offsets":[16,20]},"d":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[20,22]},"e":{"dtype":"BOOL","shape":[0,3],"data_offsets":[22,22]},"f":{"dtype":"I8","shape":[2],"data_offsets":[22,24]}}' \
  "000000000000f03fffffffffffffffff01020304057c0100"
seed empty '{}' ""
seed hole '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}' "000000000000000000000000"
seed dup '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"U32","shape":[1],"data_offsets":[0,4]}}' "00000000"

status=0
"$build/fuzz/fuzz_safetensors" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts" -print_final_stats=1 "$work/corpus" || status=$?
if [ "$status" -ne 0 ]; then
  echo "fuzz.sh: fuzz_safetensors FAILED (exit $status); reproducer under $artifacts" >&2
  exit 1
fi
echo "fuzz.sh: $runs runs, no crash"
