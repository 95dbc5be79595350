#!/usr/bin/env bash
# tools/fuzz.sh: bounded libFuzzer runs of every parser of untrusted input (fuzz/):
#   fuzz_safetensors  safetensors reader + trace validator          RUNS inputs
#   fuzz_numpy        .npy header parser + .npz (ZIP, ZIP64, deflate) RUNS/8
#   fuzz_sfu_table    FBSFU1 SFU table loader (load_table_model)     RUNS/8
#   fuzz_probe_file   probe file reader + probe-check                RUNS/8
#   fuzz_sfu_capture  FBSFUT1 capture reader (fb-sfu-table-convert)  RUNS/8
#   fuzz_sfu_values   FBSFUVAL1 reader (replay --sfu-values) and the
#                     FBSFUDUMP1 header check (replay --sfu-dump)      RUNS/8
#   fuzz_op           `flashbits op --batch` lines                   RUNS/8
#   fuzz_dot          `flashbits dot --batch` lines                  RUNS/8
#   fuzz_merge        `flashbits merge` shard (CSV and JSON)         RUNS/20 (slowest per input)
#   fuzz_recipe       `bias-test --recipe` recipe file (JSON)        RUNS/8
# The shares keep CI (tools/fuzz.sh 100000) near 50 s of fuzzing on 2 cores.
# Builds the targets with clang (-fsanitize=fuzzer,address,undefined; the libraries
# under test are instrumented with fuzzer-no-link), seeds each a corpus of valid and
# slightly broken inputs into a temp dir, and runs a fixed number of inputs per target.
# Exits non-zero on any crash, sanitizer report, leak, uncaught exception or timeout; a
# reproducer is left in $FUZZ_ARTIFACTS (default: the build dir), named after the target.
# The build is the project's one sanitizer build: tools/test.sh builds every target in it
# (tools/fuzz.sh --build-all), runs the test suites there, then fuzzes from it, so that CI
# compiles the libraries with sanitizers once, not twice. Debug keeps assert() on; -O1 is
# libFuzzer's recommended level and keeps the sanitized test suites fast enough for CI;
# -gline-tables-only gives every sanitizer report its file and line at a fraction of full
# debug information's compile and link time.
# Usage: tools/fuzz.sh [RUNS] [TARGET...]   (default 200000, all targets; CI: tools/fuzz.sh 100000)
#        tools/fuzz.sh --build-all           (configure and build every target, run nothing)
#   env: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_JOBS (default nproc), CXX_FUZZ (default clang++),
#        FUZZ_CORPUS (a corpus dir kept between runs, one subdir per target; default a temp dir),
#        FUZZ_SECONDS (also stop each target after this many seconds; for long local sessions)
set -euo pipefail
cd "$(dirname "$0")/.."
build_all=0
if [ "${1:-}" = --build-all ]; then build_all=1; shift; fi
runs="${1:-200000}"
shift $(( $# > 0 ? 1 : 0 ))
all_targets=(fuzz_safetensors fuzz_numpy fuzz_sfu_table fuzz_probe_file fuzz_sfu_capture fuzz_sfu_values fuzz_op fuzz_dot fuzz_merge fuzz_recipe)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${all_targets[@]}"); fi
build="${FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${FUZZ_JOBS:-$(nproc)}"
cxx="${CXX_FUZZ:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz.sh: $cxx not found; libFuzzer needs clang" >&2
  exit 2
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-gline-tables-only -O1" \
  -DCMAKE_CXX_COMPILER="$cxx" -DFLASHBITS_FUZZ=ON -DFLASHBITS_CUDA=OFF -DFLASHBITS_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null
if [ "$build_all" = 1 ]; then
  cmake --build "$build" -j "$jobs"
  exit 0
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

if [ -n "${FUZZ_CORPUS:-}" ]; then
  work="$FUZZ_CORPUS"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
artifacts="${FUZZ_ARTIFACTS:-$build}/"
mkdir -p "$artifacts"

mkdir -p "$work/fuzz_safetensors"
# Seed corpus: valid files in the layout Python's save_file writes, plus near misses.
seed() {  # seed NAME HEADER_JSON DATA_HEX  (plain bash: no python needed)
  local header="$2" n i
  while [ $(( ${#header} % 8 )) -ne 0 ]; do header+=" "; done
  n=${#header}
  {
    for i in 0 1 2 3 4 5 6 7; do printf "\\$(printf '%03o' $(( (n >> (8 * i)) & 255 )))"; done
    printf '%s' "$header"
    printf "$(printf '%s' "$3" | sed 's/../\\x&/g')"
  } > "$work/fuzz_safetensors/$1"
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

# .npy and .npz files as numpy's own writers make them (np.save, np.savez, savez_compressed);
# a first byte 00 asks for the .npy reader, 01 for the .npz reader. Without numpy, one
# hand-made .npy (NEP 1 layout) seeds the target.
d="$work/fuzz_numpy"; mkdir -p "$d"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
if "$py" -c 'import numpy' 2>/dev/null; then
  "$py" - "$d" <<'PYTHON'
import io, os, sys
import numpy as np
d = sys.argv[1]
arrays = {"q": np.arange(12, dtype="<f2").reshape(1, 2, 3, 2), "k": np.arange(6, dtype="<u2").reshape(1, 2, 3, 1),
          "lse": np.linspace(-1, 1, 6, dtype=">f4").reshape(1, 2, 3)}
for name, a in arrays.items():
    b = io.BytesIO(); np.save(b, a)
    open(os.path.join(d, "npy_" + name), "wb").write(b"\x00" + b.getvalue())
for name, save in (("stored", np.savez), ("deflate", np.savez_compressed)):
    b = io.BytesIO(); save(b, **arrays)
    open(os.path.join(d, "npz_" + name), "wb").write(b"\x01" + b.getvalue())
PYTHON
else
  { printf '\x00\x93NUMPY\x01\x00\x76\x00'
    printf "%-117s\n" "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }"
    printf '\x00\x3c\x00\x40'; } > "$d/npy_hand"
fi

# ---- seeds of the other targets ------------------------------------------------------
hex() { printf "$(printf '%s' "$1" | sed 's/../\\x&/g')"; }          # hex() HEX -> bytes
u32() { printf '%02x%02x%02x%02x' $(( $1 & 255 )) $(( ($1 >> 8) & 255 )) $(( ($1 >> 16) & 255 )) $(( ($1 >> 24) & 255 )); }
u16() { printf '%02x%02x' $(( $1 & 255 )) $(( ($1 >> 8) & 255 )); }
texthex() { printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n'; }

# FBSFU1 (emu/sfu/special_functions.cpp): a first byte 01 makes the harness append the CRC.
d="$work/fuzz_sfu_table"; mkdir -p "$d"
sfu_magic=$(texthex FBSFU1)
src=$(texthex "fuzz seed")
# ex2 delta segments: two segments, runs of width 0 and 3
hex "01${sfu_magic}000000$(u16 9)${src}$(u32 2)$(u32 0x3f800000)$(u32 4)$(u32 4)00$(u32 0x40000000)$(u32 4)$(u32 4)03$(u16 0x0fb1)" > "$d/ex2_segments"
# lg2 delta segments with a width-32 run (any output)
hex "01${sfu_magic}020001$(u16 0)$(u32 1)$(u32 0xbf800000)$(u32 2)$(u32 2)20$(u32 0x7fffffff)$(u32 0x00000001)" > "$d/lg2_width32"
# ex2 fixed point, N = 4, nearest-even argument rounding, width-2 deltas
hex "01${sfu_magic}000101$(u16 0)0401$(u32 0x7fffffff)$(u32 16)02$(u32 0x1b6c2d4e)" > "$d/ex2_fixed"
# a table with a wrong checksum (the harness appends none)
hex "00${sfu_magic}000000$(u16 0)$(u32 1)$(u32 0)$(u32 1)00deadbeef" > "$d/bad_crc"

# FBPROBE1 (traces/probe_file.hpp): one bf16 section with two cases, and a two-section file.
d="$work/fuzz_probe_file"; mkdir -p "$d"
probe_section() {  # probe_section K CASES_HEX HEADER_EXTRA
  local h="form=mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
k=$1
input=bf16
c_format=fp32
d_format=fp32
batches=random,special
models=sm80
$3cases=$(( ${#2} / 8 / (3 + 2 * $1) ))
"
  printf '%s%s%s' "$(u32 ${#h})" "$(texthex "$h")" "$2"
}
c1="$(u32 0)$(u32 0x3f800000)$(u32 0x3f80)$(u32 0x4000)$(u32 0x3f80)$(u32 0xc000)$(u32 0xbf800000)"
c2="$(u32 1)$(u32 0x7fc00000)$(u32 0x7f80)$(u32 0xff80)$(u32 0x0001)$(u32 0x8001)$(u32 0x7fc00000)"
hex "$(texthex FBPROBE1)$(u32 1)$(probe_section 2 "$c1$c2" "device=NVIDIA H100
")" > "$d/one"
hex "$(texthex FBPROBE1)$(u32 2)$(probe_section 2 "$c1" "")$(probe_section 1 "$(u32 1)$(u32 0)$(u32 0x3f80)$(u32 0x3f80)$(u32 0x3f800000)" "")" > "$d/two"
hex "$(texthex FBPROBE1)$(u32 0)" > "$d/empty"

# FBSFUT1 (gpu/README.md): ex2 N = 4 with one escaped entry, and an rcp header.
d="$work/fuzz_sfu_capture"; mkdir -p "$d"
sfut() {  # sfut FUNCTION KEY BITS ENTRIES SOURCE (cuda:<gpu> for a capture, rehearsal:... for a stand-in)
  texthex "FBSFUT1
function=$1
key=$2
key_bits=$3
entries=$4
table_model_mismatches=0
nan_output=2147483647
source=$5
compute_capability=9.0
driver=550.54
end
"
}
hex "$(sfut ex2 ex2_fixed_point_floor 4 16 'cuda:NVIDIA H100')0010f08001000000$(u32 1)$(u32 7)$(u32 0x3f9837f0)" > "$d/ex2_floor"
hex "$(sfut ex2 ex2_fixed_point_nearest_even 2 4 'rehearsal:stand-in')0000$(u32 0)" > "$d/ex2_even"
hex "$(sfut rcp rcp_mantissa 23 8388608 'cuda:NVIDIA H100')00" > "$d/rcp_short"

# FBSFUVAL1 files (a first byte 00) as `replay --sfu-record` writes them, and FBSFUDUMP1
# headers (a first byte 01: ex2 expected, 03: rcp, 05: lg2).
d="$work/fuzz_sfu_values"; mkdir -p "$d"
hex "00$(texthex "FBSFUVAL1
model=pytorch-fa2-sm90
program=flashbits replay --sfu-record
source=cuda:NVIDIA H200
trace=traces/hw/h200/fa2.safetensors
function=ex2 count=2
function=rcp count=1
end
")$(u32 0xbf800000)$(u32 0x3f000000)$(u32 0xc0000000)$(u32 0x3e800000)$(u32 0x40400000)$(u32 0x3eaaaaab)" > "$d/values"
hex "00$(texthex "FBSFUVAL1
source=rehearsal:stand-in
end
")" > "$d/not_hardware"
hex "01$(texthex "FBSFUDUMP1
function=ex2
instruction=ex2.approx.ftz.f32
source=cuda:NVIDIA H200
driver=580.65
")" > "$d/dump_ex2"
hex "05$(texthex "FBSFUDUMP1
function=rcp
source=cuda:NVIDIA H200
")" > "$d/dump_wrong_function"

# `op --batch` and `dot --batch` lines (docs/CLI.md).
d="$work/fuzz_op"; mkdir -p "$d"
printf '%s\n' "add bf16 rne 3f80 0x4000" "fma fp32 rtz 3f800000 0x40000000 0x40400000" "div fp16 sr 3c00 0x4200" \
  "sqrt e4m3 rup 0x38" "mul e5m2 rdn 3c 0x40 satfinite" "cvt e4m3 rne fp32:0x43e00000 satfinite" \
  "sub fp16 rna -1.5 +2" "add tf32 rto nan +inf" > "$d/lines"
printf 'add bf16 rne 3f80\n' > "$d/missing_operand"
d="$work/fuzz_dot"; mkdir -p "$d"
printf '%s\n' "sm80 bf16 3f800000 3f80,0x4000,c000 3f80,3f80,3f80" "sm89 e4m3 0 0x38,b8 0x38,0x38" \
  "sm90-mma fp16 7fc00000 3c00 7c00" "sm70-f16acc fp16 3c00 3c00,3c00,3c00,3c00 3c00,3c00,3c00,3c00" \
  "sm80 tf32 80000000 3f800000 bf800000" > "$d/lines"
printf 'sm80 bf16 0 3f80 3f80,3f80\n' > "$d/length_mismatch"

# `merge` shards: a first byte 01 asks for --json output, 00 for the table.
d="$work/fuzz_merge"; mkdir -p "$d"
# A shard as `sweep --csv` writes it (header, one row, the `# run` record merge checks).
csv_header="index,format,round,model,scenario,seqlen,headdim,trials,o_sum,o_sumsq,o_pos,o_neg,d_sum,d_sumsq,d_pos,d_neg,elements,sq_sum,max_abs,sig_overflows,ties,rounded_up,rounded_down,ref_trials,cr_o_sum,cr_o_sumsq,cr_o_pos,cr_o_neg,cr_d_sum,cr_d_sumsq,cr_d_pos,cr_d_neg,ex_o_sum,ex_o_sumsq,ex_o_pos,ex_o_neg,ex_d_sum,ex_d_sumsq,ex_d_pos,ex_d_neg,o_mean_ulps,o_p_t,o_cr_mean_ulps,o_excess_mean_ulps,o_excess_p_t,delta_mean_ulps,delta_p_t,delta_cr_mean_ulps,delta_excess_mean_ulps,delta_excess_p_t,rms_ulps,max_abs_ulps,verdict_from,verdict"
{ printf '\x00'; printf '%s\n' "$csv_header" \
  "0,bf16,rne,fa2-sm80,sink,16,16,2,-0.0080346070643873002,0.008250665006384144,1,1,0.013573628460602283,0.024191064667207784,1,1,512,53.201912794919295,0.50002576274277999,136,205,87,425,2,-0.0119408570643873,0.0077965043425816116,1,1,0.017083149944977283,0.023480537408050416,1,1,0.00390625,1.52587890625e-05,1,0,-0.003509521484375,1.2316741049289703e-05,0,1,-0.004017,0.9602,-0.00597,0.001953,0.5,0.006787,0.9607,0.008542,-0.001755,0.5,0.3224,0.5,excess,no detectable added bias" \
  '# run {"program":"flashbits sweep","seed":0,"shard":"1/1","configurations":1,"trials":2,"formats":"bf16","round":"rne","models":"fa2-sm80","scenarios":"sink","against":"","seqlen":16,"headdim":16,"sr_bits":24,"alpha":0.001}'; } > "$d/csv"
row='{"index":7,"format":"bf16","round":"rne","model":"fa2","scenario":"gaussian","seqlen":128,"headdim":64,"trials":4,"sufficient":{"o_sum":0.5,"o_sumsq":0.125,"o_pos":3,"o_neg":1,"d_sum":0,"d_sumsq":0,"d_pos":0,"d_neg":0,"elements":4096,"sq_sum":9.5,"max_abs":1.25,"sig_overflows":1,"ties":2,"rounded_up":30,"rounded_down":28}}'
{ printf '\x01'; printf '{"rows":[%s]}\n' "$row"; } > "$d/json"
{ printf '\x00'; printf '{"rows":[]}\n'; } > "$d/json_empty"

# `bias-test --recipe` files: a first byte picks the model (fuzz/fuzz_recipe.cpp).
d="$work/fuzz_recipe"; mkdir -p "$d"
{ printf '\x01'; printf '%s\n' '{"name": "fp32 storage", "stages": {"p_cast": "fp32", "o_buffer_format": "fp32", "row_sum_format": "fp32"}}'; } > "$d/stages"
{ printf '\x00'; printf '%s\n' '{"stages": {"score_format": "e5m2", "lse_format": "fp64"}, "sfu": {"ex2": "correct", "rcp": "correct", "lg2": "correct"}}'; } > "$d/sfu"
{ printf '\x02'; printf '%s\n' '{"stages": {"p_format": "fp16", "bwd_format": "e8m10", "max_format": "bf16"}, "sfu": {"ex2": "missing.fbsfu"}}'; } > "$d/refused"

# ---- runs ------------------------------------------------------------------------------------
# Each target gets a fixed share of RUNS, so CI time stays bounded (tools/test.sh).
runs_for() {
  case "$1" in
    fuzz_safetensors) echo "$runs" ;;
    fuzz_merge) echo $(( runs / 20 > 0 ? runs / 20 : 1 )) ;;
    *) echo $(( runs / 8 > 0 ? runs / 8 : 1 )) ;;
  esac
}
failed=()
for t in "${targets[@]}"; do
  n="$(runs_for "$t")"
  mkdir -p "$work/$t"
  status=0
  "$build/fuzz/$t" -runs="$n" -max_len=4096 -timeout=10 -rss_limit_mb=2048 ${FUZZ_SECONDS:+-max_total_time=$FUZZ_SECONDS} \
    -artifact_prefix="$artifacts$t-" -print_final_stats=1 "$work/$t" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "fuzz.sh: $t FAILED (exit $status); reproducer under $artifacts$t-*" >&2
    failed+=("$t")
  else
    echo "fuzz.sh: $t: $n runs, no crash"
  fi
done
if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s), no crash"
