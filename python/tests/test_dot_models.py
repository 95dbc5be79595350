# fb.dot over every dot-model family through the one lookup (emu/dot/dot_model.hpp): the NVIDIA
# fp6/fp4 inputs (e3m2, e2m3, e2m1), the AMD MFMA presets and the Blackwell block-scaled kinds.
# Each is checked against something other than the code path under test:
# - exact values worked out here with fractions.Fraction (exact_reference.py decodes the formats
#   from their bit layouts, no flashbits code), and the block-scaled rule's Fraction reference
#   of test_cli_block_scaled.py;
# - the CLI's `flashbits dot` on the same operands, bit for bit: the CLI runs the bit-level entry
#   point of each family, fb.dot the value-level batch one (NVIDIA: the blocked kernel).
import random
import zlib
from fractions import Fraction

import numpy as np
import pytest

import flashbits as fb
from exact_reference import FORMATS, decode
from test_cli_amd_dot import fp32_rne_bits
from test_cli_block_scaled import PRESETS as SCALED_PRESETS
from test_cli_block_scaled import random_c, random_element, random_scale, reference_dot


def hexbits(bits, fmt):
    digits = fb.format_info(fmt)["container_bits"] // 4
    return f"0x{int(bits):0{digits}x}"


def patterns(fmt, shape, rng):
    """Random finite bit patterns of fmt in its container dtype."""
    info = fb.format_info(fmt)
    dtype = f"uint{info['container_bits']}"
    out = np.zeros(int(np.prod(shape)), dtype=dtype)
    for i in range(out.size):
        while True:
            bits = rng.randrange(1 << info["width"])
            if not isinstance(decode(FORMATS[fmt], bits), str):
                break
        out[i] = bits << (info["container_bits"] - info["width"]) if fmt == "tf32" else bits
    return out.reshape(shape)


# ---- NVIDIA fp6 / fp4 inputs -------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["e3m2", "e2m3", "e2m1"])
def test_exact_rne_fp6_fp4_is_one_rounding_of_the_exact_sum(fmt):
    rng = random.Random(zlib.crc32(fmt.encode()))
    n, k = 40, 24
    a = patterns(fmt, (n, k), rng)
    b = patterns(fmt, (n, k), rng)
    c = np.array([rng.choice([0, 0x3F800000, 0xC2C80000, 0x33800001]) for _ in range(n)], dtype=np.uint32)
    d = fb.dot("exact-rne", a, b, c, fmt=fmt)
    assert d.format == "fp32"
    for i in range(n):
        exact = decode(FORMATS["fp32"], int(c[i])) + sum(
            decode(FORMATS[fmt], int(x)) * decode(FORMATS[fmt], int(y)) for x, y in zip(a[i], b[i]))
        want = 0 if exact == 0 else fp32_rne_bits(exact)  # an exact zero sum gives +0
        assert int(d.bits[i]) == want, (i, hex(int(d.bits[i])), hex(want))


def test_sm100_e2m1_small_sums_are_exact():
    # e2m1 values times e2m1 values sum to multiples of 1/4 well inside fp32: no step truncates
    # or rounds, so D is the exact sum whatever the step's alignment.
    a = np.array([[0.5, 1.5, -6.0, 3.0] * 8, [4.0, -0.5, 2.0, 1.0] * 8])
    b = np.array([[2.0, -1.0, 0.5, 6.0] * 8, [0.5, 0.5, -3.0, 1.5] * 8])
    c = np.array([1.0, -2.0])
    for model in ("sm100", "sm120"):
        d = fb.dot(model, a, b, c, fmt="e2m1")
        want = [float(Fraction(c[i]) + sum(Fraction(x) * Fraction(y) for x, y in zip(a[i], b[i]))) for i in range(2)]
        assert d.values.tolist() == want, model


@pytest.mark.parametrize("model,fmt", [("sm100", "e3m2"), ("sm100", "e2m3"), ("sm100", "e2m1"), ("sm120", "e3m2"),
                                       ("sm120", "e2m1"), ("exact-rne", "e2m3")])
def test_fp6_fp4_match_cli_batch(cli, model, fmt):
    rng = random.Random(zlib.crc32(f"{model}{fmt}".encode()))
    n, k = 60, 40
    a = patterns(fmt, (n, k), rng)
    b = patterns(fmt, (n, k), rng)
    c = patterns("fp32", (n,), rng)
    d = fb.dot(model, a, b, c, fmt=fmt)
    lines = "".join(f"{model} {fmt} {hexbits(c[i], 'fp32')} " + ",".join(hexbits(x, fmt) for x in a[i]) + " " +
                    ",".join(hexbits(x, fmt) for x in b[i]) + "\n" for i in range(n))
    rc, out, err = cli("dot", "--batch", "-", stdin=lines)
    assert rc == 0, err
    assert [hexbits(x, "fp32") for x in d.bits] == [f"0x{w}" for w in out.split()]


@pytest.mark.parametrize("c_form", ["0-d bits", "python float", "numpy scalar"])
def test_one_dot_takes_a_scalar_c(cli, c_form):
    # A single dot (a, b of shape [k]) has batch shape (): its c is 0-d. numpy's
    # ascontiguousarray made it shape (1,), which the batch check then refused. The CLI's
    # bit-level path gives the reference bits.
    rng = random.Random(7)
    a = patterns("bf16", (16,), rng)
    b = patterns("bf16", (16,), rng)
    c_bits = 0x3EAAAAAB  # fp32(1/3): not a sum of the products' grid
    c = {"0-d bits": np.array(c_bits, dtype=np.uint32), "python float": float(decode(FORMATS["fp32"], c_bits)),
         "numpy scalar": np.float64(decode(FORMATS["fp32"], c_bits))}[c_form]
    d = fb.dot("sm90-mma", a, b, c)
    assert d.bits.shape == ()
    rc, out, err = cli("dot", "sm90-mma", "bf16", hexbits(c_bits, "fp32"), ",".join(hexbits(x, "bf16") for x in a),
                       ",".join(hexbits(x, "bf16") for x in b))
    assert rc == 0, err
    assert hexbits(d.bits, "fp32") == "0x" + out.split()[0].lower().removeprefix("0x")


# ---- AMD MFMA ------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["cdna1", "cdna2", "cdna3"])
def test_amd_fp32_is_a_chain_of_fused_multiply_adds(model):
    rng = random.Random(zlib.crc32(model.encode()))
    n, k = 30, 12
    a = patterns("fp32", (n, k), rng) & np.uint32(0x8FFFFFFF) | np.uint32(0x3C000000)  # |x| in [2^-7, 2^2)
    b = patterns("fp32", (n, k), rng) & np.uint32(0x8FFFFFFF) | np.uint32(0x3C000000)
    c = patterns("fp32", (n,), rng) & np.uint32(0x8FFFFFFF) | np.uint32(0x3C000000)
    d = fb.dot(model, a, b, c, fmt="fp32")
    for i in range(n):
        acc = decode(FORMATS["fp32"], int(c[i]))
        for x, y in zip(a[i], b[i]):
            prod = decode(FORMATS["fp32"], int(x)) * decode(FORMATS["fp32"], int(y))
            acc = decode(FORMATS["fp32"], fp32_rne_bits(acc + prod))
        assert int(d.bits[i]) == fp32_rne_bits(acc), i


def test_amd_cdna3_bf16_truncates_products_at_24_bits():
    # Products 1 and 1.5*2^-24: truncated to 2^-24 units the second is 2^-24, so the total is the
    # tie 1 + 2^-24, which rounds to even: 1.0. The exact sum (0.75 ulp above 1) would round up.
    assert fp32_rne_bits(1 + Fraction(3, 2**25)) == 0x3F800001
    d = fb.dot("cdna3", np.array([[1.0, 1.5 * 2.0**-24]]), np.array([[1.0, 1.0]]), fmt="bf16")
    assert d.format == "fp32" and int(d.bits[0]) == 0x3F800000
    # The same operands through NVIDIA models keep their own rules: sm80 truncates too (F = 24
    # below the largest exponent, then RZ): 1.0; exact-rne rounds the exact sum once: up.
    a, b = np.array([[1.0, 1.5 * 2.0**-24]]), np.array([[1.0, 1.0]])
    assert int(fb.dot("sm80", a, b, fmt="bf16").bits[0]) == 0x3F800000
    assert int(fb.dot("exact-rne", a, b, fmt="bf16").bits[0]) == 0x3F800001


AMD_FORMS = [("cdna1", "fp16", None), ("cdna1", "bf16", None), ("cdna2", "fp16", None), ("cdna2", "bf16", None),
             ("cdna2-1k", "bf16", None), ("cdna3", "tf32", None), ("cdna3", "fp16", None), ("cdna3", "bf16", None),
             ("cdna3-k4", "fp16", None), ("cdna3", "e4m3fnuz", None), ("cdna3", "e4m3fnuz", "e5m2fnuz"),
             ("cdna3", "e5m2fnuz", "e4m3fnuz")]


@pytest.mark.parametrize("model,fa,fb_", AMD_FORMS)
def test_amd_matches_cli(cli, model, fa, fb_):
    rng = random.Random(zlib.crc32(f"{model}{fa}{fb_}".encode()))
    n, k = 6, 20
    a = patterns(fa, (n, k), rng)
    b = patterns(fb_ or fa, (n, k), rng)
    c = patterns("fp32", (n,), rng)
    d = fb.dot(model, a, b, c, fmt=fa, fmt_b=fb_)
    assert d.format == "fp32"
    for i in range(n):
        args = ["dot", model, fa, hexbits(c[i], "fp32"), ",".join(hexbits(x, fa) for x in a[i]),
                ",".join(hexbits(x, fb_ or fa) for x in b[i])] + (["--input-b", fb_] if fb_ else [])
        rc, out, err = cli(*args)
        assert rc == 0, err
        assert out.split()[0] == hexbits(d.bits[i], "fp32")[2:], (i, out)


# ---- block-scaled kinds ------------------------------------------------------------------


@pytest.mark.parametrize("key", list(SCALED_PRESETS), ids=lambda k: "-".join(map(str, k)))
def test_block_scaled_matches_the_exact_reference(key):
    model, kind, scale_format, block = key
    inputs, per_step, _, _, _ = SCALED_PRESETS[key]
    rng = random.Random(zlib.crc32(("py" + repr(key)).encode()))
    fa, fb_ = rng.choice(inputs), rng.choice(inputs)
    n, k = 8, 2 * per_step
    a = [[random_element(fa, rng) for _ in range(k)] for _ in range(n)]
    b = [[random_element(fb_, rng) for _ in range(k)] for _ in range(n)]
    sa = [[random_scale(scale_format, rng) for _ in range(k // block)] for _ in range(n)]
    sb = [[random_scale(scale_format, rng) for _ in range(k // block)] for _ in range(n)]
    c = [random_c(rng) for _ in range(n)]
    d = fb.dot(model, np.array(a, dtype=np.uint8), np.array(b, dtype=np.uint8), np.array(c, dtype=np.uint32), fmt=fa,
               fmt_b=None if fb_ == fa else fb_, kind=kind, scale_format=scale_format, block=block,
               scale_a=np.array(sa, dtype=np.uint8), scale_b=np.array(sb, dtype=np.uint8))
    assert d.format == "fp32"
    for i in range(n):
        want = reference_dot(key, fa, fb_, c[i], a[i], b[i], sa[i], sb[i])
        assert int(d.bits[i]) == want, (i, hex(int(d.bits[i])), hex(want))


def test_block_scaled_scales_multiply_each_block():
    # kind::mxf4 (ue8m0, block 32): the second block's scales 2^1 * 2^-2 halve its products.
    a = np.full((1, 64), 1.0)
    b = np.full((1, 64), 0.5)
    sa = np.array([[127, 128]], dtype=np.uint8)
    sb = np.array([[127, 125]], dtype=np.uint8)
    d = fb.dot("sm100", a, b, fmt="e2m1", kind="mxf4", scale_a=sa, scale_b=sb)
    assert d.values.tolist() == [32 * 0.5 + 32 * 0.5 * 2 * 0.25]


# ---- one lookup: details and errors ------------------------------------------------------


def test_dot_model_describes_every_family():
    assert {"sm80", "sm90-wgmma", "exact-rne", "cdna1", "cdna3", "sm100"} <= set(fb.dot_models())
    m = fb.dot_model("sm90-mma", "fp16")
    assert (m["accumulator"], m["k_step"], m["scale_block"], m["hardware_validated"]) == ("fp32", 16, 0, True)
    assert fb.dot_model("sm90-mma-f16acc", "fp16")["accumulator"] == "fp16"
    m = fb.dot_model("cdna3", "e4m3fnuz", fmt_b="e5m2fnuz")
    assert (m["a_format"], m["b_format"], m["k_step"], m["hardware_validated"]) == ("e4m3fnuz", "e5m2fnuz", 16, False)
    for (model, kind, scale_format, block), (_, per_step, _, _, _) in SCALED_PRESETS.items():
        m = fb.dot_model(model, "e2m1", kind=kind, scale_format=scale_format, block=block)
        assert (m["kind"], m["scale_format"], m["scale_block"], m["k_step"]) == (kind, scale_format, block, per_step)


@pytest.mark.parametrize("call,words", [
    (lambda: fb.dot("sm99", np.ones((1, 2)), np.ones((1, 2))), ["model", "unknown dot model 'sm99'"]),
    (lambda: fb.dot("cdna3", np.ones((1, 2)), np.ones((1, 2)), fmt="e4m3"),
     ["cdna3 has no e4m3 input form", "e4m3fnuz x e5m2fnuz (fmt_b)"]),
    (lambda: fb.dot("sm80", np.ones((1, 2)), np.ones((1, 2)), fmt_b="fp16"), ["sm80 has no bf16 x fp16"]),
    (lambda: fb.dot("cdna3", np.ones((1, 2)), np.ones((1, 2)), kind="mxf4"), ["'cdna3' has no block-scaled kinds"]),
    (lambda: fb.dot("sm100", np.ones((1, 64)), np.ones((1, 64)), fmt="e2m1", kind="mxf4nvf4"),
     ["ambiguous", "scale_format and block"]),
    (lambda: fb.dot("sm100", np.ones((1, 64)), np.ones((1, 64)), fmt="e2m1", kind="mxf4"), ["scale_a", "missing"]),
    (lambda: fb.dot("sm100", np.ones((1, 64)), np.ones((1, 64)), fmt="e2m1", kind="mxf4",
                    scale_a=np.ones((1, 3), np.uint8), scale_b=np.ones((1, 2), np.uint8)), ["scale_a", "shape"]),
    (lambda: fb.dot("sm100", np.ones((1, 48)), np.ones((1, 48)), fmt="e2m1", kind="mxf4",
                    scale_a=np.ones((1, 1), np.uint8), scale_b=np.ones((1, 1), np.uint8)), ["multiple of the block"]),
    (lambda: fb.dot("sm100", np.ones((1, 32)), np.ones((1, 32)), fmt="e4m3", kind="mxf4nvf4", scale_format="ue4m3",
                    block=16), ["fmt", "takes no e4m3"]),
    (lambda: fb.dot("sm80", np.ones((1, 2)), np.ones((1, 2)), scale_a=np.ones((1, 1), np.uint8)),
     ["takes no scales"]),
    (lambda: fb.dot("sm80", np.ones((1, 2)), np.ones((1, 2)), block=16), ["give kind"]),
    (lambda: fb.dot("sm80", np.ones((1, 2)), np.ones((1, 2)), block=0), ["block", "positive"]),
    (lambda: fb.dot("sm80", np.ones((1, 2)), np.ones((1, 2)), block=-1), ["block", "got -1"]),
], ids=lambda v: None)
def test_bad_arguments_name_the_problem(call, words):
    with pytest.raises(ValueError) as e:
        call()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_dot_trace_names_no_largest_exponent_when_every_term_is_zero(cli):
    # Found by the CLI audit: a step whose terms are all zero printed "largest exponent -126",
    # an exponent no term had (zero terms take no part in the alignment: docs/DESIGN.md §4).
    _, out, _ = cli("dot", "sm90-mma", "bf16", "0x00000000", "0x0000,0x8000", "0x3f80,0x3f80", "--trace")
    assert out.splitlines()[0] == "00000000"
    assert "largest exponent none (every term is zero)" in out, out
    # One nonzero term (2^3 * 1): its exponent is the largest.
    _, out, _ = cli("dot", "sm90-mma", "bf16", "0x00000000", "0x0000,0x4100", "0x3f80,0x3f80", "--trace")
    assert "largest exponent 3," in out, out
