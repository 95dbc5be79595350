# `flashbits dot` with an AMD MFMA model (cdna1, cdna2, cdna2-1k, cdna3, cdna3-k4) and its
# `flashbits models` section, checked against exact values worked out here with
# fractions.Fraction from the rules docs/CLI.md and emu/dot/tensor_core_amd.hpp state (MMA-Sim's
# model, not measured on hardware):
# - fma_chain (fp32, every CDNA): one IEEE fp32 fma per product, round to nearest even, in order;
# - exact_step (CDNA1 fp16/bf16): per step C + products summed exactly, one RNE rounding;
# - ftz_pairwise (CDNA2 fp16/bf16): subnormal inputs read as +0, fp32 RNE products and sums;
# - two_stage (CDNA3 fp16/bf16): products truncated toward zero to F = 24 fraction bits at the
#   largest product exponent and summed; then normalised and rounded to nearest even into fp32.
# The formats are decoded from their bit layouts by exact_reference.py (no flashbits code), so
# a disagreement is a bug in one of the two. Only the CLI is needed, not the Python module.
import json
import random
from fractions import Fraction

import pytest
from exact_reference import FORMATS, INF, floor_log2
from exact_reference import decode as decode_value

NAN32 = 0x7FC00000
UNMEASURED_WORDS = ("UNMEASURED", "emulation", "not validated on hardware")

# (name, a format, b format) -> (arithmetic, products per step, F, F2): the presets as
# MMA-Sim (Xie et al. 2025) gives them (docs/DESIGN.md §4).
PRESETS = {
    ("cdna1", "fp32", "fp32"): ("fma_chain", 1, 0, 0),
    ("cdna1", "fp16", "fp16"): ("exact_step", 4, 0, 0),
    ("cdna1", "bf16", "bf16"): ("exact_step", 2, 0, 0),
    ("cdna2", "fp32", "fp32"): ("fma_chain", 1, 0, 0),
    ("cdna2", "fp16", "fp16"): ("ftz_pairwise", 4, 0, 0),
    ("cdna2", "bf16", "bf16"): ("ftz_pairwise", 2, 0, 0),
    ("cdna2-1k", "bf16", "bf16"): ("ftz_pairwise", 4, 0, 0),
    ("cdna3", "fp32", "fp32"): ("fma_chain", 1, 0, 0),
    ("cdna3", "tf32", "tf32"): ("two_stage", 4, 24, 31),
    ("cdna3", "fp16", "fp16"): ("two_stage", 8, 24, 31),
    ("cdna3", "bf16", "bf16"): ("two_stage", 8, 24, 31),
    ("cdna3-k4", "fp16", "fp16"): ("two_stage", 4, 24, 31),
    ("cdna3-k4", "bf16", "bf16"): ("two_stage", 4, 24, 31),
    ("cdna3", "e4m3fnuz", "e4m3fnuz"): ("grouped_two_stage", 16, 24, 31),
    ("cdna3", "e5m2fnuz", "e5m2fnuz"): ("grouped_two_stage", 16, 24, 31),
    ("cdna3", "e4m3fnuz", "e5m2fnuz"): ("grouped_two_stage", 16, 24, 31),
    ("cdna3", "e5m2fnuz", "e4m3fnuz"): ("grouped_two_stage", 16, 24, 31),
}

def decode(fmt, bits):
    """Exact value (Fraction) of a finite element, or 'nan' (exact_reference's decoder)."""
    value = decode_value(FORMATS[fmt], bits)
    assert value not in (INF, "-inf"), "no inf in these hand cases"
    return value


def fp32_rne_bits(x):
    """x (a non-zero Fraction) rounded to nearest even into fp32; +-inf on overflow."""
    assert x != 0
    sign = 0x80000000 if x < 0 else 0
    m = abs(x)
    e = max(floor_log2(m), -126)
    q = m / Fraction(2) ** (e - 23)  # significand in units of the last place
    n = q.numerator // q.denominator
    rest = q - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n & 1):
        n += 1
    if n == 1 << 24:  # carried into the next binade
        n, e = n >> 1, e + 1
    if e > 127:
        return sign | 0x7F800000
    if n < 1 << 23:  # subnormal
        return sign | n
    return sign | (e + 127) << 23 | (n - (1 << 23))


def fp32_bits_of_value(x):
    bits = fp32_rne_bits(x)
    assert decode("fp32", bits) == x, "not exactly an fp32 value"
    return bits


def hexlist(bits, width):
    return ",".join(f"0x{b:0{width}x}" for b in bits)


def run_amd(cli, model, fa, c_bits, a_bits, b_bits, fb=None):
    width = 8 if fa == "fp32" else 4 if fa in ("fp16", "bf16") else 2
    wb = 8 if (fb or fa) == "fp32" else 4 if (fb or fa) in ("fp16", "bf16") else 2
    args = ["dot", model, fa, f"0x{c_bits:08x}", hexlist(a_bits, width), hexlist(b_bits, wb)]
    if fb:
        args += ["--input-b", fb]
    rc, out, err = cli(*args, check=False)
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 1, out
    for w in UNMEASURED_WORDS:
        assert w in lines[0], lines[0]
    assert f"emulation of {model} {fa} x {fb or fa} " in lines[0], lines[0]
    return int(lines[0].split()[0], 16), lines[0]


# ---- fma_chain: sequential fp32 fmas -------------------------------------------------------


def reference_fma_chain(c_bits, a_bits, b_bits):
    acc = decode("fp32", c_bits)
    for x, y in zip(a_bits, b_bits):
        acc = decode("fp32", fp32_rne_bits(acc + decode("fp32", x) * decode("fp32", y)))
    return fp32_rne_bits(acc)


@pytest.mark.parametrize("model", ["cdna1", "cdna2", "cdna3"])
def test_fp32_is_a_chain_of_fused_multiply_adds(cli, model):
    # a = b = 1 + 2^-12, C = -(1 + 2^-11): the exact a*b + C is 2^-24, which one fma keeps;
    # a rounded product (1 + 2^-11 in fp32) would give 0. Then + 3 * (1/3 in fp32) rounds.
    one_p = fp32_bits_of_value(1 + Fraction(1, 2**12))
    c = fp32_bits_of_value(-(1 + Fraction(1, 2**11)))
    d, line = run_amd(cli, model, "fp32", c, [one_p], [one_p])
    assert d == 0x33800000, line  # 2^-24
    third = fp32_rne_bits(Fraction(1, 3))
    three = fp32_bits_of_value(Fraction(3))
    d, line = run_amd(cli, model, "fp32", 0x3F800000, [one_p, third], [one_p, three])
    assert d == reference_fma_chain(0x3F800000, [one_p, third], [one_p, three]), line
    # Random fp32 values of moderate exponent: every fma rounds.
    rng = random.Random(20261127)
    for _ in range(20):
        k = rng.randint(1, 9)
        a = [rng.getrandbits(1) << 31 | rng.randint(120, 134) << 23 | rng.getrandbits(23) for _ in range(k)]
        b = [rng.getrandbits(1) << 31 | rng.randint(120, 134) << 23 | rng.getrandbits(23) for _ in range(k)]
        c = rng.getrandbits(1) << 31 | rng.randint(120, 134) << 23 | rng.getrandbits(23)
        d, line = run_amd(cli, model, "fp32", c, a, b)
        assert d == reference_fma_chain(c, a, b), (a, b, c, line)


# ---- exact_step: one rounding per step of 4 (fp16) ------------------------------------------


def test_cdna1_fp16_rounds_once_per_step_of_four(cli):
    # C = 1 and four products 2^-12 * 2^-13 = 2^-25: their exact sum is 2^-23, so the one
    # rounding gives 1 + 2^-23 (0x3f800001), while rounding after each product would keep 1
    # (each 2^-25 is below half an ulp of 1).
    two_m12, two_m13 = 0x0C00, 0x0800  # fp16 2^-12, 2^-13
    assert decode("fp16", two_m12) == Fraction(1, 2**12) and decode("fp16", two_m13) == Fraction(1, 2**13)
    d, line = run_amd(cli, "cdna1", "fp16", 0x3F800000, [two_m12] * 4, [two_m13] * 4)
    assert d == 0x3F800001, line
    # k = 8 random fp16: two steps, each C + 4 products rounded once (RNE).
    rng = random.Random(7)
    for _ in range(20):
        a = [rng.getrandbits(1) << 15 | rng.randint(8, 22) << 10 | rng.getrandbits(10) for _ in range(8)]
        b = [rng.getrandbits(1) << 15 | rng.randint(8, 22) << 10 | rng.getrandbits(10) for _ in range(8)]
        c = rng.getrandbits(1) << 31 | rng.randint(120, 134) << 23 | rng.getrandbits(23)
        acc = c
        for s in (0, 4):
            exact = decode("fp32", acc) + sum(decode("fp16", a[i]) * decode("fp16", b[i]) for i in range(s, s + 4))
            acc = fp32_rne_bits(exact)
        d, line = run_amd(cli, "cdna1", "fp16", c, a, b)
        assert d == acc, (a, b, c, line)


# ---- ftz_pairwise: subnormal inputs read as zero --------------------------------------------


def test_cdna2_fp16_flushes_subnormal_inputs(cli):
    # a = 2^-24 (fp16 subnormal 0x0001), b = 1, C = +0: exact D would be 2^-24 (0x33800000);
    # CDNA2 reads the subnormal as +0, and +0 + (+0 * 1) is +0.
    d, line = run_amd(cli, "cdna2", "fp16", 0, [0x0001], [0x3C00])
    assert d == 0x00000000, line
    # A normal input is kept: a = 2^-14 (0x0400), b = 1 -> 2^-14 = 0x38800000.
    d, line = run_amd(cli, "cdna2", "fp16", 0, [0x0400], [0x3C00])
    assert d == 0x38800000, line


# ---- two_stage: products truncated to F = 24 bits at the largest product exponent -----------


def bf16(x):
    bits = fp32_bits_of_value(Fraction(x))
    assert bits & 0xFFFF == 0, "not a bf16 value"
    return bits >> 16


@pytest.mark.parametrize("model", ["cdna3", "cdna3-k4"])
def test_cdna3_bf16_truncates_products_to_24_bits_of_the_largest(cli, model):
    one = bf16(1)
    # (1) products 1 and 2^-24, 2^-24: F = 24 keeps 2^-24 (one unit below 2^0), so the sum is
    #     1 + 2^-23 exactly: D = 0x3f800001 (F = 23 would drop both: 1.0).
    d, line = run_amd(cli, model, "bf16", 0, [one, bf16(Fraction(1, 2**24)), bf16(Fraction(1, 2**24))],
                      [one, one, one])
    assert d == 0x3F800001, line
    # (2) products 1 and 1.5*2^-24: truncated to 2^-24 units it is 2^-24, so the total 1 + 2^-24
    #     is a tie that rounds to even, 1.0 = 0x3f800000. The exact sum 1 + 1.5*2^-24 (0.75 ulp)
    #     would round to 0x3f800001: the truncation is visible.
    a = [one, bf16(Fraction(3, 2**25))]
    d, line = run_amd(cli, model, "bf16", 0, a, [one, one])
    assert fp32_rne_bits(1 + Fraction(3, 2**25)) == 0x3F800001
    assert d == 0x3F800000, line
    # (3) products 1, 1.5*2^-25, 1.5*2^-25: each truncates to 0 (below 2^-24), D = 1.0, while
    #     their exact sum 1.5*2^-24 would round up to 0x3f800001.
    a = [one, bf16(Fraction(3, 2**26)), bf16(Fraction(3, 2**26))]
    d, line = run_amd(cli, model, "bf16", 0, a, [one, one, one])
    assert fp32_rne_bits(1 + Fraction(3, 2**25)) == 0x3F800001
    assert d == 0x3F800000, line
    # (4) C does not take part in the product truncation: C = 1, one product 1.5*2^-24 (its own
    #     largest exponent is -24, so it is kept whole); C and the sum align at 2^0 with 24 and
    #     32 bits, the total 1 + 1.5*2^-24 keeps 31 fraction bits and rounds to 0x3f800001.
    d, line = run_amd(cli, model, "bf16", 0x3F800000, [bf16(Fraction(3, 2**25))], [one])
    assert d == 0x3F800001, line


# ---- CDNA3 fp8: mixed e4m3fnuz / e5m2fnuz pairs ---------------------------------------------


@pytest.mark.parametrize("fa,fb", [("e4m3fnuz", "e5m2fnuz"), ("e5m2fnuz", "e4m3fnuz"), ("e4m3fnuz", "e4m3fnuz")])
def test_cdna3_fp8_pairs_decode_each_operand_in_its_own_format(cli, fa, fb):
    # Small exact sums (well within 24 bits): D = C + sum a_i*b_i exactly under any alignment,
    # so the value checks that a is read as fa and b as fb (the same byte differs between them).
    rng = random.Random(fa + fb)
    for _ in range(10):
        k = rng.randint(1, 20)  # beyond 16: two steps
        a = [rng.choice([0x38, 0x40, 0x44, 0x48, 0xC0, 0xC4, 0x3C]) for _ in range(k)]
        b = [rng.choice([0x38, 0x40, 0x44, 0x48, 0xC0, 0xBC]) for _ in range(k)]
        exact = Fraction(1, 4) + sum(decode(fa, x) * decode(fb, y) for x, y in zip(a, b))
        d, line = run_amd(cli, "cdna3", fa, 0x3E800000, a, b, fb=None if fa == fb else fb)
        assert d == (0 if exact == 0 else fp32_bits_of_value(exact)), (a, b, line)
    # 0x80 is fnuz NaN: D is the canonical NaN.
    d, line = run_amd(cli, "cdna3", fa, 0, [0x80], [0x40], fb=None if fa == fb else fb)
    assert d == NAN32 and "(nan)" in line, line


# ---- errors ---------------------------------------------------------------------------------

BF16_ARGS = ["dot", "cdna3", "bf16", "0", "0x3f80", "0x3f80"]


@pytest.mark.parametrize("args,words", [
    (["dot", "cdna1", "e4m3fnuz", "0", "0x40", "0x40"], ["cdna1", "e4m3fnuz", "fp32", "fp16", "bf16"]),
    (["dot", "cdna2-1k", "fp16", "0", "0x3c00", "0x3c00"], ["cdna2-1k", "fp16", "bf16"]),
    (["dot", "cdna3", "e4m3fnuz", "0", "0x40", "0x3c00", "--input-b", "fp16"],
     ["e4m3fnuz x fp16", "e5m2fnuz (--input-b)", "tf32"]),
    (["dot", "cdna3", "e9m9", "0", "0x40", "0x40"], ["INFMT", "e9m9"]),
    (BF16_ARGS + ["--trace"], ["--trace"]),
    (BF16_ARGS + ["--kind", "mxf8f6f4"], ["--kind", "cdna3"]),
    (BF16_ARGS + ["--scale-a", "0x7f"], ["--scale-a", "cdna3"]),
    (BF16_ARGS + ["--batch", "-"], ["--batch"]),
    (["dot", "--batch", "-"], ["line 1", "cdna3", "--batch"]),
    (["dot", "cdna3", "bf16", "0", "0x3f80,0x3f80", "0x3f80"], ["A has 2", "B has 1"]),
    (BF16_ARGS + ["--model", "cdna1"], ["differs from --model cdna1"]),
], ids=lambda v: None)
def test_bad_input_exits_2_naming_the_problem(cli, args, words):
    rc, out, err = cli(*args, stdin="cdna3 bf16 0 0x3f80 0x3f80\n", check=False)
    assert rc == 2, (args, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert out == ""


# ---- `flashbits models` ---------------------------------------------------------------------


def test_models_lists_every_amd_preset_as_unmeasured(cli):
    rc, out, err = cli("models")
    assert rc == 0, err
    start = out.index("AMD MFMA dot models")
    # After the block-scaled section, before the special-function one.
    assert out.index("Block-scaled dot models") < start < out.index("Special-function (SFU)")
    section = out[start:out.index("\n\n", start)]
    rows = [ln.split() for ln in section.splitlines() if ln.startswith("cdna")]
    listed = {(r[0], r[1], r[2]): r for r in rows}
    assert len(rows) == len(PRESETS) and set(listed) == set(PRESETS)
    for key, r in listed.items():
        arithmetic, per_step, f, f2 = PRESETS[key]
        assert r[3] == arithmetic and int(r[4]) == per_step
        assert r[5:7] == ([str(f), str(f2)] if f else ["-", "-"]), r
    assert section.count("status: UNMEASURED (emulation; not validated on hardware)") == len(PRESETS)
    assert section.count("    instructions: v_mfma_") == len(PRESETS)

    rc, out, err = cli("models", "--json")
    assert rc == 0, err
    j = json.loads(out)
    presets = j["amd_dot_models"]
    assert len(presets) == len(PRESETS)
    assert {(m["name"], m["a_input"], m["b_input"]) for m in presets} == set(PRESETS)
    for m in presets:
        assert (m["arithmetic"], m["products_per_step"], m["fraction_bits"], m["sum_fraction_bits"]) == \
            PRESETS[(m["name"], m["a_input"], m["b_input"])]
        assert m["hardware_validated"] is False and m["status"] == "UNMEASURED"
        assert m["accumulator_format"] == "fp32" and m["source"] and m["instructions"].startswith("v_mfma_")
    assert {"dot_models", "block_scaled_dot_models", "special_function_models", "kernel_models"} <= set(j)
