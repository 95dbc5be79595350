# The module's results do not depend on the caller's floating-point environment
# (emu/float_environment.hpp): a thread with subnormals flushed (FTZ) and read as zero (DAZ), as
# torch.set_flush_denormal(True) or a -ffast-math library leaves it, or with another rounding
# mode (fesetround), gets the bits the default environment gives, and keeps its own
# environment after the call.
#
# The reference for each result is the same call in the default environment, and for dot the
# CLI in a process of its own (default environment): what is tested is the independence, the
# arithmetic itself is tested against exact references elsewhere (test_matmul.py,
# test_fractions.py, test_dot_models.py).
import ctypes
import ctypes.util
import contextlib

import numpy as np
import pytest

import flashbits as fb

torch = pytest.importorskip("torch")
libm = ctypes.CDLL(ctypes.util.find_library("m"))
FE_TONEAREST, FE_DOWNWARD, FE_UPWARD, FE_TOWARDZERO = 0x000, 0x400, 0x800, 0xC00  # x86 <fenv.h>
SMALLEST_SUBNORMAL_F32 = np.float32(2.0**-149)


def flushes_subnormals() -> bool:
    """Whether this thread's float32 arithmetic flushes or zeroes subnormals (FTZ or DAZ)."""
    with np.errstate(all="ignore"):
        return bool(np.array([SMALLEST_SUBNORMAL_F32]) * np.float32(1.0) == 0)


@contextlib.contextmanager
def flush_denormals():
    assert torch.set_flush_denormal(True), "this CPU cannot set FTZ/DAZ"
    try:
        assert flushes_subnormals()
        yield
    finally:
        torch.set_flush_denormal(False)


@contextlib.contextmanager
def rounding(mode):
    assert libm.fesetround(mode) == 0
    try:
        yield
    finally:
        libm.fesetround(FE_TONEAREST)


ENVIRONMENTS = {
    "ftz+daz": flush_denormals,
    "upward": lambda: rounding(FE_UPWARD),
    "downward": lambda: rounding(FE_DOWNWARD),
    "toward zero": lambda: rounding(FE_TOWARDZERO),
}


def bf16_bits(rng, shape, low_exponents=False):
    """bf16 bit patterns, finite; with low_exponents, many subnormals and tiny normals."""
    bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint32).astype(np.uint16)
    if low_exponents:
        bits = (bits & 0x807F) | (rng.integers(0, 4, size=shape, dtype=np.uint32) << 7).astype(np.uint16)
    exponent = (bits >> 7) & 0xFF
    return np.where(exponent == 0xFF, bits & 0x807F, bits).astype(np.uint16)


def inputs():
    """The operands, made once in the default environment (numpy's own arithmetic, astype
    included, follows the caller's environment)."""
    rng = np.random.default_rng(7)
    d = {"tiny": bf16_bits(rng, (4, 64), low_exponents=True), "ones": np.full((64, 3), 0x3F80, np.uint16),
         "some": bf16_bits(rng, (64, 3)), "rows": bf16_bits(rng, (4, 64)),
         "fp32 bits": rng.integers(0, 1 << 23, size=(4, 64), dtype=np.uint32),
         "fp32 ones": np.full((64, 3), 0x3F800000, np.uint32)}
    x = rng.standard_normal(4000) * 2.0 ** rng.integers(-140, 20, 4000)
    d["x"], d["x32"] = x, x.astype(np.float32)
    d["abc"] = [fb.round(x[i::3][:1000], "fp32").values for i in range(3)]
    d["qkv"] = [fb.round(rng.standard_normal((1, 2, 24, 16)), "bf16").values for _ in range(4)]
    return d


def results(d):
    """One of each kind of call, each sensitive to FTZ, DAZ or the rounding mode if computed
    with the caller's environment: subnormal operands and results, ties, stochastic rounding."""
    out = {}
    for model in ("sm90-mma", "sm80", "sm100", "exact-rne", "cdna3", "cdna1"):
        fmt = "fp32" if model == "cdna1" else "bf16"
        a, b = (d["tiny"], d["ones"]) if fmt == "bf16" else (d["fp32 bits"], d["fp32 ones"])
        out[f"matmul {model} tiny"] = fb.matmul(model, a, b, fmt=fmt).bits
        if fmt == "bf16":
            out[f"matmul {model}"] = fb.matmul(model, d["rows"], d["some"], fmt=fmt).bits
        out[f"dot {model} subnormal c"] = fb.dot(model, a[0], b[:, 0], np.array(1, np.uint32), fmt=fmt).bits
    # cdna3's two-stage sum ends in a tie for the final fp32 rounding: 1 + 2^-24.
    out["dot cdna3 tie"] = fb.dot("cdna3", np.array([0x3F80, 0x3380], np.uint16), np.array([0x3F80, 0x3F80], np.uint16)).bits
    for fmt in ("fp32", "bf16", "fp16", "e4m3"):
        for mode in ("rne", "rtz", "rup", "sr"):
            r = fb.round(d["x"], fmt, mode, flags=True)
            out[f"round f64 {fmt} {mode}"] = (r.bits, r.flags)
            r = fb.round(d["x32"], fmt, mode, flags=True)
            out[f"round f32 {fmt} {mode}"] = (r.bits, r.flags)
    a, b, c = d["abc"]
    for name in ("add", "sub", "mul", "div", "fma", "sqrt"):
        args = {"add": (a, b), "sub": (a, b), "mul": (a, b), "div": (a, b), "fma": (a, b, c), "sqrt": (np.abs(a),)}[name]
        r = getattr(fb, name)(*args, "fp32", "rne", flags=True)
        out[f"{name} fp32"] = (r.bits, r.flags)
    q, k, v, do = d["qkv"]
    for model in ("pytorch-fa2-sm90", "fa3-sm90", "standard-fp32"):
        r = fb.attention(q, k, v, model, do=do, causal=True)
        out[f"attention {model}"] = (r.o, r.lse, r.delta, r.dq, r.dk, r.dv)
    e = fb.exact_attention(q, k, v, do=do)
    out["exact attention"] = (e.o, e.lse, e.dq)
    return out


def assert_same(got, want, what):
    if isinstance(want, tuple):
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{what}[{i}]")
        return
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind == "f":  # bitwise, NaNs and signed zeros included
        got, want = got.view(np.uint64 if want.itemsize == 8 else np.uint32), want.view(
            np.uint64 if want.itemsize == 8 else np.uint32)
    assert np.array_equal(got, want), f"{what}: differs from the default environment's result"


@pytest.fixture(scope="module")
def operands():
    assert libm.fegetround() == FE_TONEAREST and not flushes_subnormals()
    return inputs()


@pytest.fixture(scope="module")
def default_results(operands):
    return results(operands)


@pytest.mark.parametrize("environment", sorted(ENVIRONMENTS))
def test_results_do_not_depend_on_the_callers_environment(environment, operands, default_results):
    with ENVIRONMENTS[environment]():
        before = (libm.fegetround(), flushes_subnormals())
        got = results(operands)
        # The caller's environment is its own again after every call.
        assert (libm.fegetround(), flushes_subnormals()) == before
    for what, want in default_results.items():
        assert_same(got[what], want, f"{environment}: {what}")


def test_dot_under_flushed_subnormals_agrees_with_the_cli(cli):
    """A subnormal fp32 C and subnormal bf16 products (DESIGN.md: not flushed) with FTZ and DAZ
    set in this thread, against the CLI's bits, computed in a process of its own."""
    cases = [("sm90-mma", "0x00000001", "0x0000", "0x3f80"), ("sm90-mma", "0x00000000", "0x0001", "0x3f80"),
             ("exact-rne", "0x00000000", "0x0001", "0x3f80"), ("cdna3", "0x00000000", "0x3f80,0x3380", "0x3f80,0x3f80")]
    with flush_denormals():
        got = [int(fb.dot(model, np.array([int(x, 16) for x in a.split(",")], np.uint16),
                          np.array([int(x, 16) for x in b.split(",")], np.uint16), np.array(int(c, 16), np.uint32)).bits)
               for model, c, a, b in cases]
    for (model, c, a, b), bits in zip(cases, got):
        _, out, _ = cli("dot", model, "bf16", c, a, b)
        assert int(out.split()[0], 16) == bits, (model, c, a, b, hex(bits), out)
