# `flashbits dot --kind ...` (the Blackwell block-scaled kinds) and their `flashbits models`
# section, checked against an exact reference written here with fractions.Fraction.
#
# The reference implements the rule as docs/CLI.md and emu/dot/tensor_core_block_scaled.hpp state
# it (MMA-Sim's model, not measured on hardware): per step of k/step products, C and the terms
# (kind::mxf8f6f4: each a*b*sa*sb, aligned at ea+eb+esa+esb with subnormals at their format's
# emin; kind::mxf4/mxf4nvf4: the exact sum of each run of 16 products times both scales,
# aligned at esa+esb) align to the largest exponent E (zero terms at the preset's e_zero), are
# truncated toward zero to F fraction bits below E, summed exactly and rounded once to fp32
# toward zero. Every format is decoded from its bit layout by exact_reference.py (no flashbits
# code), so a disagreement is a bug in one of the two. Only the CLI is needed, not the Python module.
import random
import zlib
from fractions import Fraction

import pytest
from exact_reference import FORMATS as EXACT_FORMATS
from exact_reference import decode as decode_value
from exact_reference import floor_log2

NAN32 = 0x7FC00000

# (model, kind, scale format, block) -> (inputs, k per step, group, F, e_zero): the preset
# table as docs/DESIGN.md and MMA-Sim give it (F = 25 for k = 32, 35 for k = 64).
MX = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")
PRESETS = {
    ("sm100", "mxf8f6f4", "ue8m0", 32): (MX, 32, 0, 25, -133),
    ("sm100", "mxf4", "ue8m0", 32): (("e2m1",), 64, 16, 35, -139),
    ("sm100", "mxf4nvf4", "ue8m0", 32): (("e2m1",), 64, 16, 35, -139),
    ("sm100", "mxf4nvf4", "ue8m0", 16): (("e2m1",), 64, 16, 35, -139),
    ("sm100", "mxf4nvf4", "ue4m3", 16): (("e2m1",), 64, 16, 35, -139),
    ("sm120", "mxf8f6f4", "ue8m0", 32): (MX, 32, 0, 25, -133),
    ("sm120", "mxf4", "ue8m0", 32): (("e2m1",), 64, 16, 35, -139),
    ("sm120", "mxf4nvf4", "ue8m0", 32): (("e2m1",), 64, 16, 35, -139),
    ("sm120", "mxf4nvf4", "ue8m0", 16): (("e2m1",), 64, 16, 35, -139),
    ("sm120", "mxf4nvf4", "ue4m3", 32): (("e2m1",), 64, 16, 35, -139),
    ("sm120", "mxf4nvf4", "ue4m3", 16): (("e2m1",), 64, 16, 35, -139),
}


def decode(fmt, bits):
    """(value Fraction or 'nan' / 'inf' / '-inf', alignment exponent of a finite value: its
    exponent, at least its format's emin)."""
    f = EXACT_FORMATS[fmt]
    value = decode_value(f, bits)
    if isinstance(value, str):
        return value, None
    return value, f.emin if value == 0 else max(floor_log2(abs(value)), f.emin)


def decode_scale(scale_format, byte):
    """(value Fraction, alignment exponent) of a scale byte, or None for NaN."""
    if scale_format == "ue8m0":  # 2^(byte - 127), 0xff NaN
        return None if byte == 0xFF else (Fraction(2) ** (byte - 127), byte - 127)
    b = byte & 0x7F  # ue4m3: e4m3 with the sign bit ignored
    if b == 0x7F:
        return None
    e, m = b >> 3, b & 7
    if e == 0:
        return Fraction(m, 8) * Fraction(2) ** -6, -6
    return Fraction(8 + m, 8) * Fraction(2) ** (e - 7), e - 7


def fp32_value(bits):
    return decode_value(EXACT_FORMATS["fp32"], bits)


def fp32_rz_bits(x):
    """x rounded toward zero into fp32; +-inf past the largest finite (the model's overflow)."""
    if x == 0:
        return 0  # a zero result is +0
    sign = 0x80000000 if x < 0 else 0
    m = abs(x)
    e = floor_log2(m)
    if e >= 128:
        return sign | 0x7F800000
    if e < -126:
        return sign | int(m / Fraction(2) ** -149)
    q = int(m / Fraction(2) ** (e - 23))  # 24-bit significand, truncated
    return sign | (e + 127) << 23 | (q - 0x800000)


def trunc_to(x, unit):
    q = abs(x) / unit
    return (1 if x >= 0 else -1) * (q.numerator // q.denominator) * unit


def reference_dot(preset_key, fa, fb, c_bits, a_bits, b_bits, sa, sb):
    """D bits of the block-scaled dot-add rule (see the file comment)."""
    _, _, scale_format, block = preset_key
    _, per_step, group, frac_bits, e_zero = PRESETS[preset_key]
    k = len(a_bits)
    a = [decode(fa, x) for x in a_bits]
    b = [decode(fb, x) for x in b_bits]
    acc = c_bits
    first = 0
    while True:
        n = min(per_step, k - first)
        acc = reference_step(scale_format, block, group, frac_bits, e_zero, acc, a, b, first, n, sa, sb)
        first += n
        if first >= k:
            return acc


def reference_step(scale_format, block, group, frac_bits, e_zero, c_bits, a, b, first, n, sa, sb):
    c = fp32_value(c_bits)
    blocks = range(first // block, (first + n + block - 1) // block)
    # Specials: NaN C, NaN input or scale in the step, inf*0, +inf with -inf; else inf wins.
    infs = set()
    if c == "nan" or any(decode_scale(scale_format, s[j]) is None for s in (sa, sb) for j in blocks):
        return NAN32
    if isinstance(c, str):
        infs.add(c)
    for i in range(first, first + n):
        (x, _), (y, _) = a[i], b[i]
        if "nan" in (x, y):
            return NAN32
        if isinstance(x, str) or isinstance(y, str):
            other = y if isinstance(x, str) else x
            if not isinstance(other, str) and other == 0:
                return NAN32
            def negative(v):
                return v == "-inf" or (not isinstance(v, str) and v < 0)

            infs.add("-inf" if negative(x) != negative(y) else "+inf")
    if len(infs) == 2:
        return NAN32
    if infs:
        return 0xFF800000 if infs.pop() == "-inf" else 0x7F800000

    terms = []  # (value, alignment exponent or None for a zero term)
    terms.append((c, None if c == 0 else max(floor_log2(abs(c)), -126)))
    if group == 0:
        for i in range(first, first + n):
            va, ea = decode_scale(scale_format, sa[i // block])
            vb, eb = decode_scale(scale_format, sb[i // block])
            (x, ex), (y, ey) = a[i], b[i]
            v = x * y * va * vb
            terms.append((v, None if v == 0 else ex + ey + ea + eb))
    else:
        for s in range(first, first + n, group):
            va, ea = decode_scale(scale_format, sa[s // block])
            vb, eb = decode_scale(scale_format, sb[s // block])
            products = [a[i][0] * b[i][0] for i in range(s, min(first + n, s + group))]
            zero = all(p == 0 for p in products) or va == 0 or vb == 0
            terms.append((sum(products) * va * vb, None if zero else ea + eb))
    largest = max(e_zero if e is None else e for _, e in terms)
    unit = Fraction(2) ** (largest - frac_bits)
    return fp32_rz_bits(sum(trunc_to(v, unit) for v, _ in terms))


def hexlist(bits):
    return ",".join(f"0x{x:02x}" for x in bits)


def run_scaled(cli, preset_key, fa, fb, c_bits, a_bits, b_bits, sa, sb, scale_words=None):
    model, kind, scale_format, block = preset_key
    args = ["dot", model, fa, f"0x{c_bits:08x}", hexlist(a_bits), hexlist(b_bits), "--kind", kind,
            "--scale-format", scale_format, "--block", str(block)]
    sa_word, sb_word = scale_words or (hexlist(sa), hexlist(sb))
    args += ["--scale-a", sa_word, "--scale-b", sb_word]
    if fb != fa:
        args += ["--input-b", fb]
    rc, out, err = cli(*args, check=False)
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 1, out
    # Every block-scaled result says it is an unmeasured emulation.
    assert "UNMEASURED" in lines[0] and "emulation" in lines[0] and "not validated on hardware" in lines[0]
    return int(lines[0].split()[0], 16), lines[0]


# ---- hand-worked cases ----------------------------------------------------------------


def test_terms_truncated_to_f_bits_below_the_largest_exponent(cli):
    # sm100 mxf8f6f4, e4m3, k = 32: C = 1 (0x3f800000, aligns at 2^0); a_i = 1.0 (0x38),
    # b_i = 1.5 (0x3c), scale_a = 2^-25 (0x66 = 102 = 127 - 25), scale_b = 1 (0x7f).
    # Each product is 1.5*2^-25 aligned at 0+0-25+0 = -25 < 0, so E = 0 and the unit is 2^-25:
    # each term truncates to 2^-25; 32 of them add 2^-20: D = 1 + 2^-20 = 0x3f800008.
    # (The exact sum 1 + 48*2^-25 = 1 + 12*2^-23 would be 0x3f80000c.)
    key = ("sm100", "mxf8f6f4", "ue8m0", 32)
    a, b = [0x38] * 32, [0x3C] * 32
    d, line = run_scaled(cli, key, "e4m3", "e4m3", 0x3F800000, a, b, [0x66], [0x7F])
    assert d == 0x3F800008
    assert reference_dot(key, "e4m3", "e4m3", 0x3F800000, a, b, [0x66], [0x7F]) == 0x3F800008
    assert line.startswith("3f800008 (1.000001) UNMEASURED")
    # The same scales written as 2^E and as a value give the same D.
    d2, _ = run_scaled(cli, key, "e4m3", "e4m3", 0x3F800000, a, b, [0x66], [0x7F], scale_words=("2^-25", "1.0"))
    assert d2 == 0x3F800008
    # scale_a = 2^-26 (0x65): each term 0.75*2^-25 truncates to 0: D = C = 1.
    d3, _ = run_scaled(cli, key, "e4m3", "e4m3", 0x3F800000, a, b, [0x65], [0x7F])
    assert d3 == 0x3F800000


def test_subnormal_input_aligns_at_its_format_emin_mixed_formats(cli):
    # sm120 mxf8f6f4, a e4m3, b e2m1, k = 32: C = 1 + 2^-23 (0x3f800001, aligns at 0);
    # a_0 = 0x01 (e4m3 subnormal 2^-9, aligns at emin -6), b_0 = 0xa (e2m1 -1.0, exponent 0),
    # scale_a = 2^9 (0x88 = 136), scale_b = 1: the product is -2^-9*2^9 = -1, aligned at
    # -6+0+9+0 = 3 (not 0, its true exponent). E = 3, unit 2^-22: C truncates to 1, and
    # 1 - 1 = 0: D = +0. (Aligned at its true exponent, C would keep 2^-23: 0x34000000.)
    key = ("sm120", "mxf8f6f4", "ue8m0", 32)
    a, b = [0x01] + [0] * 31, [0x0A] + [0] * 31
    d, _ = run_scaled(cli, key, "e4m3", "e2m1", 0x3F800001, a, b, [0x88], [0x7F])
    assert d == 0x00000000
    assert reference_dot(key, "e4m3", "e2m1", 0x3F800001, a, b, [0x88], [0x7F]) == 0


def test_cancelled_group_keeps_its_scale_exponent(cli):
    # sm100 mxf4nvf4 ue4m3 block 16, k = 64 (4 groups of 16, one scale each), C = 0.
    # Group 0: 1*1 + 1*(-1) = 0 (e2m1 1.0 = 0x2, -1.0 = 0xa), scales 256 (ue4m3 0x78: exponent
    # field 15, 2^(15-7)) on both: the products cancel, yet the group aligns at 8+8 = 16.
    # Group 1: 3 products 0.5*0.5 (0x1) = 0.75, scales 2^-9 (0x01, subnormal: aligns at -6)
    # on both: the term is 0.75*2^-18 = 1.5*2^-19, aligned at -12. Groups 2, 3: zero.
    # E = 16, unit 2^(16-35) = 2^-19: group 1 truncates to 2^-19: D = 2^-19 = 0x36000000.
    # (Exact: 1.5*2^-19 = 0x36400000.)
    key = ("sm100", "mxf4nvf4", "ue4m3", 16)
    a = [0x2, 0x2] + [0] * 14 + [0x1] * 3 + [0] * 45
    b = [0x2, 0xA] + [0] * 14 + [0x1] * 3 + [0] * 45
    sa = sb = [0x78, 0x01, 0x38, 0x38]
    d, _ = run_scaled(cli, key, "e2m1", "e2m1", 0, a, b, sa, sb)
    assert d == 0x36000000
    assert reference_dot(key, "e2m1", "e2m1", 0, a, b, sa, sb) == 0x36000000
    # ue4m3's sign bit is ignored: 0xf8 is 256 as 0x78 is.
    d2, _ = run_scaled(cli, key, "e2m1", "e2m1", 0, a, b, [0xF8, 0x81, 0x38, 0xB8], sb)
    assert d2 == 0x36000000


def test_nan_scale_gives_nan_even_for_zero_products(cli):
    # ue8m0 0xff is NaN; a NaN scale in the step gives the canonical NaN though a, b are 0.
    key = ("sm100", "mxf8f6f4", "ue8m0", 32)
    d, line = run_scaled(cli, key, "e4m3", "e4m3", 0x3F800000, [0] * 32, [0] * 32, [0xFF], [0x7F])
    assert d == NAN32 and "UNMEASURED" in line
    # ue4m3 0x7f (and 0xff: sign ignored) is NaN; it sits in the second block of the step.
    key = ("sm120", "mxf4nvf4", "ue4m3", 32)
    d, _ = run_scaled(cli, key, "e2m1", "e2m1", 0x3F800000, [0x2] * 64, [0x2] * 64, [0x38, 0xFF], [0x38, 0x38])
    assert d == NAN32


# ---- random cases against the reference -------------------------------------------------


def random_element(fmt, rng):
    eb, mb = EXACT_FORMATS[fmt].ebits, EXACT_FORMATS[fmt].mbits
    while True:
        bits = 0 if rng.random() < 0.25 else rng.randrange(1 << (1 + eb + mb))
        if not isinstance(decode(fmt, bits)[0], str):
            return bits


def random_scale(scale_format, rng):
    if scale_format == "ue8m0":
        spread = rng.choice([4, 24, 48])
        return 127 + rng.randint(-spread, spread)
    byte = 0 if rng.random() < 0.1 else rng.randrange(0x7F)  # 0x7f is NaN
    return byte | (0x80 if rng.random() < 0.3 else 0)


def random_c(rng):
    r = rng.random()
    if r < 0.2:
        return 0
    if r < 0.25:
        return rng.randrange(1, 1 << 23) | (rng.getrandbits(1) << 31)  # subnormal
    return rng.getrandbits(1) << 31 | (127 + rng.randint(-60, 60)) << 23 | rng.getrandbits(23)


@pytest.mark.parametrize("key", list(PRESETS), ids=lambda k: "-".join(map(str, k)))
def test_random_cases_match_the_exact_reference(cli, key):
    rng = random.Random(zlib.crc32(repr(key).encode()))
    inputs, per_step, _, _, _ = PRESETS[key]
    block = key[3]
    for trial in range(20):
        fa, fb = rng.choice(inputs), rng.choice(inputs)
        k = rng.choice(sorted({block, per_step, 2 * per_step}))
        a = [random_element(fa, rng) for _ in range(k)]
        b = [random_element(fb, rng) for _ in range(k)]
        if rng.random() < 0.3:  # pairs that cancel: a group sum of 0 still aligns at its scales
            for i in range(0, k - 1, 2):
                sign_bit = {"e4m3": 0x80, "e5m2": 0x80, "e3m2": 0x20, "e2m3": 0x20, "e2m1": 0x8}[fb]
                a[i + 1], b[i + 1] = a[i], b[i] ^ sign_bit
        sa = [random_scale(key[2], rng) for _ in range(k // block)]
        sb = [random_scale(key[2], rng) for _ in range(k // block)]
        c = random_c(rng)
        d, _ = run_scaled(cli, key, fa, fb, c, a, b, sa, sb)
        want = reference_dot(key, fa, fb, c, a, b, sa, sb)
        assert d == want, (trial, fa, fb, hex(c), a, b, sa, sb, hex(d), hex(want))


# ---- bad input: exit 2, one error line naming the problem -------------------------------

E4M3_32 = ",".join(["0x38"] * 32)
E2M1_64 = ",".join(["0x2"] * 64)
MX_ARGS = ["dot", "sm100", "e4m3", "0x3f800000", E4M3_32, E4M3_32, "--kind", "mxf8f6f4"]


@pytest.mark.parametrize("args, words", [
    (MX_ARGS + ["--scale-a", "0x7f,0x7f", "--scale-b", "0x7f"], ["--scale-a", "2 scale(s)", "needs 1"]),
    (MX_ARGS + ["--scale-a", "0x7f"], ["--scale-b", "missing"]),
    (["dot", "sm100", "e4m3", "0", ",".join(["0x38"] * 31), ",".join(["0x38"] * 31), "--kind", "mxf8f6f4",
      "--scale-a", "0x7f", "--scale-b", "0x7f"], ["k = 31", "multiple of the block (32)"]),
    (["dot", "sm100", "e4m3", "0", E4M3_32, ",".join(["0x38"] * 31), "--kind", "mxf8f6f4",
      "--scale-a", "0x7f", "--scale-b", "0x7f"], ["A has 32", "B has 31"]),
    (["dot", "sm100", "e4m3", "0", E2M1_64, E2M1_64, "--kind", "mxf4nvf4", "--scale-format", "ue4m3", "--block",
      "16", "--scale-a", "1.0,1.0,1.0,1.0", "--scale-b", "1.0,1.0,1.0,1.0"], ["takes no e4m3", "e2m1"]),
    (MX_ARGS + ["--input-b", "bf16", "--scale-a", "0x7f", "--scale-b", "0x7f"], ["--input-b", "takes no bf16"]),
    (MX_ARGS[:-1] + ["mxf9", "--scale-a", "0x7f", "--scale-b", "0x7f"],
     ["--kind mxf9", "mxf8f6f4 ue8m0 32", "mxf4nvf4 ue4m3 16"]),
    (MX_ARGS + ["--block", "16", "--scale-a", "0x7f", "--scale-b", "0x7f"], ["--block 16", "mxf8f6f4 ue8m0 32"]),
    (["dot", "sm100", "e2m1", "0", E2M1_64, E2M1_64, "--kind", "mxf4nvf4", "--scale-a", "0x7f", "--scale-b", "0x7f"],
     ["ambiguous", "--scale-format and --block"]),
    (MX_ARGS + ["--scale-format", "ue5m2", "--scale-a", "0x7f", "--scale-b", "0x7f"], ["--scale-format", "ue5m2"]),
    (["dot", "sm80", "bf16", "0", "0x3f80", "0x3f80", "--kind", "mxf4", "--scale-a", "0x7f", "--scale-b", "0x7f"],
     ["sm80", "no block-scaled kinds", "sm100", "sm120"]),
    (["dot", "sm100", "e4m3", "0", "0x38", "0x38", "--scale-a", "0x7f"], ["--kind"]),
    (MX_ARGS + ["--scale-a", "0x7f", "--scale-b", "0x7f", "--trace"], ["--trace"]),
    (["dot", "--batch", "-", "--kind", "mxf8f6f4"], ["--batch"]),
    (MX_ARGS + ["--scale-a", "0x100", "--scale-b", "0x7f"], ["--scale-a[1]", "0x100"]),
    (MX_ARGS + ["--scale-a", "2^200", "--scale-b", "0x7f"], ["--scale-a[1]", "2^200", "ue8m0"]),
    (MX_ARGS + ["--scale-a", "127", "--scale-b", "0x7f"], ["--scale-a[1]", "ambiguous"]),
    (MX_ARGS + ["--scale-a", "0", "--scale-b", "0x7f"], ["--scale-a[1]", "ambiguous"]),  # ue8m0 byte 0 is 2^-127
    (MX_ARGS + ["--scale-a", "0x7f", "--scale-b", "+3"], ["--scale-b[1]", "not exactly representable"]),
    (MX_ARGS + ["--scale-a", "0x7f", "--scale-b", "2^x"], ["--scale-b[1]", "2^x"]),
], ids=lambda v: None)
def test_bad_input_exits_2_naming_the_problem(cli, args, words):
    rc, out, err = cli(*args, stdin="", check=False)
    assert rc == 2, (args, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert out == ""


# ---- `flashbits models` -------------------------------------------------------------------


def test_models_lists_every_block_scaled_preset_as_unmeasured(cli):
    import json

    rc, out, err = cli("models")
    assert rc == 0, err
    start = out.index("Block-scaled dot models")
    # After the dot models section, before the special-function one.
    assert out.index("Dot (tensor-core accumulation) models") < start < out.index("Special-function (SFU)")
    section = out[start:out.index("\n\n", start)]  # up to the next section (AMD MFMA)
    rows = [ln.split() for ln in section.splitlines() if ln.startswith("sm1")]
    listed = {(r[0], r[1], r[3], int(r[4])): r for r in rows}
    assert set(listed) == set(PRESETS)
    for key, r in listed.items():
        inputs, per_step, group, frac_bits, e_zero = PRESETS[key]
        assert r[2] == ",".join(inputs) and int(r[5]) == per_step and int(r[6]) == frac_bits
        assert r[7] == (str(group) if group else "-") and r[8:10] == ["at", f"2^{e_zero}"]
    assert section.count("status: UNMEASURED") == len(PRESETS)

    rc, out, err = cli("models", "--json")
    assert rc == 0, err
    j = json.loads(out)
    presets = j["block_scaled_dot_models"]
    assert {(m["name"], m["kind"], m["scale_format"], m["block"]) for m in presets} == set(PRESETS)
    for m in presets:
        inputs, per_step, group, frac_bits, e_zero = PRESETS[(m["name"], m["kind"], m["scale_format"], m["block"])]
        assert (tuple(m["inputs"]), m["products_per_step"], m["group"], m["fraction_bits"], m["zero_exponent"]) == \
            (inputs, per_step, group, frac_bits, e_zero)
        assert m["hardware_validated"] is False and m["status"] == "UNMEASURED"
        assert m["accumulator_format"] == "fp32" and m["source"] and "UNMEASURED" in m["note"]
    assert {"dot_models", "special_function_models", "kernel_models"} <= set(j)
