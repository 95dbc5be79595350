# fb.matmul: a tensor-core GEMM D = C + A·B, each element one chain of the model's k-steps
# over k in order. Checked element by element against exact references written with
# fractions.Fraction, not against flashbits:
# - the NVIDIA fused step, written here from the rule docs/DESIGN.md §4 states (after Fasi et
#   al. 2021 and Xie et al. 2025): C and the exact products, zero terms left out, align at the
#   largest exponent E (a product at ea + eb, each factor's exponent at least its format's
#   emin), each term is truncated toward zero to a multiple of 2^(E - F), the sum is exact and
#   is rounded once into the accumulator (fp32 toward zero, Hopper fp8's 13 fraction bits
#   toward zero, or fp16 to nearest even), which is the next step's C;
# - AMD's fp32 MFMA as a chain of fused multiply-adds (test_cli_amd_dot.py's reference);
# - the block-scaled kinds' rule (test_cli_block_scaled.py's reference).
# The shapes take partial steps (K not a multiple of the step), odd M and N, broadcast batch
# dimensions and non-contiguous views, since those are where a GEMM's indexing goes wrong.
import random
import zlib
from fractions import Fraction

import numpy as np
import pytest

import flashbits as fb
from exact_reference import FORMATS, decode, floor_log2
from test_cli_amd_dot import reference_fma_chain
from test_cli_block_scaled import PRESETS as SCALED_PRESETS
from test_cli_block_scaled import random_scale
from test_cli_block_scaled import reference_dot as reference_scaled_dot

# (model, input) -> (products per step, F, output): docs/DESIGN.md's tensor-core table.
NVIDIA = {
    ("sm70", "fp16"): (4, 23, "fp32_rz"),
    ("sm80", "tf32"): (4, 24, "fp32_rz"),
    ("sm80", "bf16"): (8, 24, "fp32_rz"),
    ("sm90-mma", "bf16"): (16, 25, "fp32_rz"),
    ("sm90-wgmma", "fp16"): (16, 25, "fp32_rz"),
    ("sm90-wgmma", "e4m3"): (32, 13, "e8m13_rz"),
    ("sm90-mma-f16acc", "fp16"): (16, 25, "fp16_rne"),
    ("sm100", "e2m1"): (32, 25, "fp32_rz"),
}
# output -> (accumulator format, significand bits, mode)
OUTPUTS = {"fp32_rz": ("fp32", 24, "rz"), "e8m13_rz": ("fp32", 14, "rz"), "fp16_rne": ("fp16", 11, "rne")}


def round_significand(x, fmt, bits, mode):
    """x != 0 rounded to `bits` significant bits (fewer below fmt's emin) toward zero or to
    nearest even; None past fmt's largest finite (the tensor core's overflow gives inf)."""
    f = FORMATS[fmt]
    quantum = Fraction(2) ** (max(floor_log2(abs(x)), f.emin) - (bits - 1))
    q = abs(x) / quantum
    n = q.numerator // q.denominator
    if mode == "rne" and (q - n > Fraction(1, 2) or (q - n == Fraction(1, 2) and n % 2)):
        n += 1
    r = (1 if x > 0 else -1) * n * quantum
    return None if abs(r) > f.max_finite else r


def nvidia_chain(key, c, a, b):
    """D of one chain (a, b: exact finite values; c: the accumulator's), or None on overflow."""
    per_step, frac_bits, output = NVIDIA[key]
    acc_fmt, bits, mode = OUTPUTS[output]
    emin_in, emin_acc = FORMATS[key[1]].emin, FORMATS[acc_fmt].emin

    def exponent(v, emin):
        return max(floor_log2(abs(v)), emin)

    for first in range(0, len(a), per_step):
        terms = [(c, exponent(c, emin_acc))] if c != 0 else []
        for x, y in zip(a[first:first + per_step], b[first:first + per_step]):
            if x * y != 0:
                terms.append((x * y, exponent(x, emin_in) + exponent(y, emin_in)))
        if not terms:
            c = Fraction(0)
            continue
        unit = Fraction(2) ** (max(e for _, e in terms) - frac_bits)
        total = Fraction(0)
        for v, _ in terms:
            q = abs(v) / unit
            total += (1 if v > 0 else -1) * (q.numerator // q.denominator) * unit
        c = Fraction(0) if total == 0 else round_significand(total, acc_fmt, bits, mode)
        if c is None:
            return None
    return c


def random_values(fmt, shape, rng, top=4):
    """Finite values of fmt: exponents from a little below emin (subnormals) to 2^top, a few
    zeros, random signs and significands."""
    f = FORMATS[fmt]
    out = np.empty(int(np.prod(shape)))
    for i in range(out.size):
        if rng.random() < 0.06:
            out[i] = 0.0
            continue
        e = rng.randint(max(f.emin - 1, -24), min(top, f.emin + (1 << f.ebits) - 3))
        m = Fraction(rng.randrange(1 << f.mbits), 1 << f.mbits)
        v = (m if e < f.emin else 1 + m) * Fraction(2) ** max(e, f.emin)
        out[i] = float(-v if rng.random() < 0.5 else v)
    return out.reshape(shape)


def fractions_of(arr):
    return np.vectorize(Fraction, otypes=[object])(arr)


@pytest.mark.parametrize("key", list(NVIDIA), ids=lambda k: "-".join(k))
def test_nvidia_matmul_is_the_exact_step_chain_per_element(key):
    model, fmt = key
    per_step = NVIDIA[key][0]
    acc_fmt = OUTPUTS[NVIDIA[key][2]][0]
    rng = random.Random(zlib.crc32(repr(key).encode()))
    m, n, k = 3, 5, 2 * per_step + 3  # two whole steps and a partial one
    # a broadcast against b: batch (2, 1) x (3,) -> (2, 3)
    a = random_values(fmt, (2, 1, m, k), rng)
    b = random_values(fmt, (3, k, n), rng)
    c = random_values(acc_fmt, (m, n), rng, top=6)  # not representable in the input format
    d = fb.matmul(model, a, b, c, fmt=fmt)
    assert d.format == acc_fmt and d.values.shape == (2, 3, m, n)
    fa, fb_, fc = fractions_of(a), fractions_of(b), fractions_of(c)
    checked = 0
    for i in range(2):
        for j in range(3):
            for r in range(m):
                for col in range(n):
                    want = nvidia_chain(key, fc[r, col], list(fa[i, 0, r, :]), list(fb_[j, :, col]))
                    got = d.values[i, j, r, col]
                    where = (i, j, r, col)
                    if want is None:
                        assert np.isinf(got), where
                    else:
                        assert Fraction(got) == want, (where, got, float(want))
                        # a zero result is +0
                        assert want != 0 or not np.signbit(got), where
                    checked += 1
    assert checked == 2 * 3 * m * n


def test_nvidia_matmul_chains_carry_c_through_the_steps():
    # One element, K = 17 on sm90-mma bf16 (16 products per step): step 1 sums 2^12 * 2^12 and
    # fifteen 1s exactly (unit 2^(24-25)) to 2^24 + 15, which fp32 toward zero keeps as 2^24 + 14;
    # step 2 adds the last 1 to that C: 2^24 + 15, again 2^24 + 14. One step over all 17 would
    # give 2^24 + 16, and the steps in reverse order (the partial one first) 2^24 + 16 too.
    a = np.ones((1, 17))
    a[0, 0] = 2.0 ** 12
    b = a.T.copy()
    d = fb.matmul("sm90-mma", a, b)
    assert d.values[0, 0] == 2.0 ** 24 + 14
    assert nvidia_chain(("sm90-mma", "bf16"), Fraction(0), [Fraction(x) for x in a[0]],
                        [Fraction(x) for x in b[:, 0]]) == 2 ** 24 + 14


def test_matmul_reads_views_as_their_values():
    # Transposed, strided and negatively strided views give the GEMM of the values they show.
    rng = random.Random(7)
    key = ("sm80", "bf16")
    base_a = random_values("bf16", (11, 6), rng)
    base_b = random_values("bf16", (9, 13), rng)
    a = base_a[::-2, :].T[:, :5]  # M = 6, K = 5: rows 10, 8, ..., 0 of base_a, transposed
    b = base_b[2:7, ::3]  # K = 5, N = 5: every third column
    d = fb.matmul("sm80", a, b, fmt="bf16")
    fa, fb_ = fractions_of(a), fractions_of(b)
    for r in range(a.shape[0]):
        for col in range(b.shape[1]):
            want = nvidia_chain(key, Fraction(0), list(fa[r, :]), list(fb_[:, col]))
            assert Fraction(d.values[r, col]) == want, (r, col)


def test_amd_fp32_matmul_is_a_chain_of_fused_multiply_adds():
    rng = random.Random(3)
    m, n, k = 4, 3, 9

    def fp32_bits(shape):
        return np.array([rng.getrandbits(1) << 31 | (127 + rng.randint(-30, 30)) << 23 | rng.getrandbits(23)
                         for _ in range(int(np.prod(shape)))], dtype=np.uint32).reshape(shape)

    a, b, c = fp32_bits((m, k)), fp32_bits((k, n)), fp32_bits((m, n))
    d = fb.matmul("cdna3", a, b, c, fmt="fp32")
    for r in range(m):
        for col in range(n):
            want = reference_fma_chain(int(c[r, col]), [int(x) for x in a[r, :]], [int(x) for x in b[:, col]])
            assert int(d.bits[r, col]) == want, (r, col)


@pytest.mark.parametrize("key", [("sm100", "mxf8f6f4", "ue8m0", 32), ("sm120", "mxf4nvf4", "ue4m3", 16)],
                         ids=lambda k: "-".join(map(str, k)))
def test_block_scaled_matmul_takes_scales_along_k(key):
    model, kind, scale_format, block = key
    inputs, per_step, _, _, _ = SCALED_PRESETS[key]
    rng = random.Random(zlib.crc32(("matmul" + repr(key)).encode()))
    fmt = inputs[0] if len(inputs) == 1 else "e2m3"
    m, n, k = 3, 4, 2 * per_step
    a = random_values(fmt, (m, k), rng)
    b = random_values(fmt, (k, n), rng)
    sa = np.array([[random_scale(scale_format, rng) for _ in range(k // block)] for _ in range(m)], dtype=np.uint8)
    sb = np.array([[random_scale(scale_format, rng) for _ in range(n)] for _ in range(k // block)], dtype=np.uint8)
    c = random_values("fp32", (m, n), rng, top=6)
    d = fb.matmul(model, a, b, c, fmt=fmt, kind=kind, scale_format=scale_format, block=block, scale_a=sa, scale_b=sb)
    a_bits = fb.round(a, fmt).bits
    b_bits = fb.round(b, fmt).bits
    for r in range(m):
        for col in range(n):
            c_bits = int(np.float32(c[r, col]).view(np.uint32))
            want = reference_scaled_dot(key, fmt, fmt, c_bits, [int(x) for x in a_bits[r, :]],
                                        [int(x) for x in b_bits[:, col]], [int(s) for s in sa[r, :]],
                                        [int(s) for s in sb[:, col]])
            assert int(d.bits[r, col]) == want, (r, col, hex(int(d.bits[r, col])), hex(want))


@pytest.mark.parametrize("call, words", [
    (lambda: fb.matmul("sm80", np.ones((2, 3)), np.ones((4, 2))), "K differs"),
    (lambda: fb.matmul("sm80", np.ones(3), np.ones((3, 2))), "at least two dimensions"),
    (lambda: fb.matmul("sm80", np.ones((2, 0)), np.ones((0, 2))), "K = 0"),
    (lambda: fb.matmul("sm80", np.ones((2, 2, 3)), np.ones((3, 3, 2))), "do not broadcast"),
    (lambda: fb.matmul("sm80", np.ones((2, 3)), np.ones((3, 2)), np.ones(3)), "c: shape"),
    (lambda: fb.matmul("sm80", np.full((2, 3), 0.1), np.ones((3, 2))), "a"),
    (lambda: fb.matmul("sm80", np.ones((2, 3)), np.ones((3, 2)), scale_a=np.ones((2, 1))), "takes no scales"),
    (lambda: fb.matmul("sm100", np.ones((2, 32)), np.ones((32, 2)), fmt="e2m1", kind="mxf4",
                       scale_a=np.full((2, 1), 127)), "scale_b: missing"),
    (lambda: fb.matmul("sm100", np.ones((2, 64)), np.ones((64, 2)), fmt="e2m1", kind="mxf4",
                       scale_a=np.full((2, 2), 127), scale_b=np.full((2, 3), 127)), "scale_b: expected shape"),
    (lambda: fb.matmul("sm100", np.ones((2, 48)), np.ones((48, 2)), fmt="e2m1", kind="mxf4"), "not a multiple"),
    (lambda: fb.matmul("sm99", np.ones((2, 3)), np.ones((3, 2))), "sm99"),
    # dot's k, as matmul's K, is the kernels' int: a longer row wrapped (found by the GEMM audit).
    # A stride-0 view: no memory behind its 2^31 elements.
    (lambda: fb.dot("sm90-mma", *[np.broadcast_to(np.uint16(0x3F80), (2**31,))] * 2), "k = 2147483648 is above 2^31-1"),
    # matmul's K too, refused before the operands are copied (the second GEMM audit: a 4 GiB copy
    # first, then ArrayMemoryError or the refusal after half a minute).
    (lambda: fb.matmul("sm90-mma", np.broadcast_to(np.uint16(0x3F80), (1, 2**31)),
                       np.broadcast_to(np.uint16(0x3F80), (2**31, 1))), "M, K and N must each be at most 2^31-1"),
])
def test_bad_arguments_name_the_problem(call, words):
    with pytest.raises((ValueError, TypeError)) as err:
        call()
    assert words in str(err.value)


def test_a_shared_weight_matrix_and_no_c_are_read_once():
    # A [batch, M, K] @ W [K, N] with c left out: W is passed once (not copied per batch) and
    # C is +0; every element is still the exact chain of its row and column.
    key = ("sm90-wgmma", "fp16")
    rng = random.Random(11)
    m, n, k = 3, 4, 2 * NVIDIA[key][0] + 5
    a = random_values("fp16", (2, 2, m, k), rng)
    w = random_values("fp16", (k, n), rng)
    d = fb.matmul("sm90-wgmma", a, w, fmt="fp16")
    assert d.values.shape == (2, 2, m, n)
    fa, fw = fractions_of(a), fractions_of(w)
    for index in np.ndindex(2, 2, m, n):
        i, j, r, col = index
        want = nvidia_chain(key, Fraction(0), list(fa[i, j, r, :]), list(fw[:, col]))
        assert Fraction(d.values[index]) == want, index
        assert not np.signbit(d.values[index]) or want != 0


@pytest.mark.parametrize("shape_a, shape_b", [((0, 4), (4, 3)), ((2, 4), (4, 0)), ((0, 2, 4), (4, 3))])
def test_an_empty_gemm_is_empty(shape_a, shape_b):
    d = fb.matmul("sm80", np.ones(shape_a), np.ones(shape_b))
    assert d.values.shape == shape_a[:-1] + shape_b[-1:] and d.format == "fp32"
    # a block-scaled kind too (its scales have no rows to give)
    e = fb.matmul("sm100", np.ones(shape_a[:-1] + (32,)), np.ones((32,) + shape_b[-1:]), fmt="e2m1", kind="mxf4",
                  scale_a=np.full(shape_a[:-1] + (1,), 127), scale_b=np.full((1,) + shape_b[-1:], 127))
    assert e.values.shape == shape_a[:-1] + shape_b[-1:]


# ---- found by the GEMM audit ------------------------------------------------------------------
def test_an_empty_result_still_checks_operands_and_scales():
    # matmul returned zeros of D's shape before any check when M, N or a batch dimension was 0
    # (dot checks an empty batch): scales missing, invalid patterns, values not in the format.
    e4m3 = np.zeros((3, 32), np.uint8)
    with pytest.raises(ValueError, match="scale_a: missing"):
        fb.matmul("sm100", e4m3, np.zeros((32, 0), np.uint8), None, "e4m3", kind="mxf8f6f4")
    with pytest.raises(ValueError, match="K = 48 is not a multiple of the block"):
        fb.matmul("sm100", np.zeros((3, 48), np.uint8), np.zeros((48, 0), np.uint8), None, "e4m3", kind="mxf8f6f4")
    with pytest.raises(ValueError, match=r"a\[0,0\]: 0xff is not a valid e2m1 bit pattern"):
        fb.matmul("sm100", np.full((2, 4), 0xFF, np.uint8), np.zeros((4, 0), np.uint8), None, "e2m1")
    with pytest.raises(ValueError, match=r"b\[0,0\]: 0.1 is not exactly representable in bf16"):
        fb.matmul("sm90-mma", np.zeros((0, 4)), np.full((4, 3), 0.1))
    # A batch dimension 0 reached by broadcasting: the operands as given are still checked.
    with pytest.raises(ValueError, match=r"a\[0,0,0\]: 0.1 is not exactly representable in bf16"):
        fb.matmul("sm90-mma", np.full((1, 2, 4), 0.1), np.ones((0, 4, 3)))
    with pytest.raises(ValueError, match=r"c\[0,0\]: 0.1 is not exactly representable in fp32"):
        fb.matmul("sm90-mma", np.ones((0, 2, 4)), np.ones((4, 3)), np.full((1, 1), 0.1))
    with pytest.raises(ValueError, match="scale_a: expected scale bytes"):
        fb.matmul("sm100", np.zeros((0, 3, 32), np.uint8), np.zeros((32, 2), np.uint8), None, "e4m3",
                  kind="mxf8f6f4", scale_a=np.full((1, 3, 1), 300), scale_b=np.full((1, 2), 127, np.uint8))
    # M or N 0 with a c broadcast from one row or column (the second GEMM audit: unchecked), and
    # dot's empty batch with a scalar c.
    with pytest.raises(ValueError, match=r"c\[0,0\]: 0.1 is not exactly representable in fp32"):
        fb.matmul("sm90-mma", np.ones((0, 4)), np.ones((4, 5)), np.full((1, 5), 0.1))
    with pytest.raises(ValueError, match=r"c\[0,0\]: 0.1 is not exactly representable in fp32"):
        fb.matmul("sm90-mma", np.ones((3, 4)), np.ones((4, 0)), np.full((3, 1), 0.1))
    with pytest.raises(ValueError, match="c: 0.1 is not exactly representable in fp32"):
        fb.dot("sm90-mma", np.ones((0, 3)), np.ones((0, 3)), 0.1)
    # Valid empty operands give an empty D of the accumulator's bit patterns.
    d = fb.matmul("sm90-mma", np.zeros((2, 0, 4)), np.ones((4, 3)))
    assert d.bits.shape == (2, 0, 3) and d.bits.dtype == np.uint32


@pytest.mark.parametrize("call, element", [
    # dot reshapes to [rows, k]: a 1-D a's third element was named a[0,2], a 3-D one's flat row.
    (lambda bad: fb.dot("sm90-mma", bad(np.ones(3), (2,)), np.ones(3)), "a[2]"),
    (lambda bad: fb.dot("sm90-mma", bad(np.ones((2, 3, 4)), (1, 2, 3)), np.ones((2, 3, 4))), "a[1,2,3]"),
    (lambda bad: fb.dot("sm90-mma", np.ones((2, 3)), bad(np.ones((2, 3)), (1, 0))), "b[1,0]"),
    # A 0-d c is one element, and a c broadcast by matmul is named in its own shape.
    (lambda bad: fb.dot("sm90-mma", np.ones(3), np.ones(3), np.float64(0.1)), "c"),
    (lambda bad: fb.matmul("sm90-mma", np.ones((3, 2, 4)), np.ones((4, 2)), bad(np.zeros((1, 2)), (0, 1))), "c[0,1]"),
    (lambda bad: fb.matmul("sm90-mma", bad(np.ones((1, 2, 4)), (0, 1, 3)), np.ones((5, 4, 2))), "a[0,1,3]"),
])
def test_an_operand_error_names_the_element_of_the_array_as_given(call, element):
    def bad(array, index):  # one value no format here holds: 1 + 2^-20 is not bf16, 0.1 not fp32
        array = array.copy()
        array[index] = 0.1 if array[index] == 0 else 1 + 2.0 ** -20
        return array
    with pytest.raises(ValueError) as e:
        call(bad)
    assert str(e.value).startswith(element + ": "), str(e.value)
