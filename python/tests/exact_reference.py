# An exact-rational rounding reference written for these tests, independent of the C++ core:
# Python's fractions.Fraction, and format parameters written down here from the specs (IEEE 754,
# OCP 8-bit FP and MX: E4M3 has no inf and one NaN per sign, FNUZ formats have bias + 1 and no
# -0, FP6/FP4 have no inf/NaN and saturate).
from dataclasses import dataclass
from fractions import Fraction
from math import isqrt


@dataclass(frozen=True)
class Fmt:
    name: str
    ebits: int
    mbits: int
    bias: int
    kind: str  # "ieee" (inf and NaN), "fn" (no inf, S.1111.111 NaN), "fnuz" (no inf, no -0), "finite"

    @property
    def emin(self):
        return 1 - self.bias

    @property
    def max_finite(self):
        top = (1 << self.ebits) - (2 if self.kind == "ieee" else 1) - self.bias
        man = (1 << self.mbits) - (2 if self.kind == "fn" else 1)
        return (1 + Fraction(man, 1 << self.mbits)) * Fraction(2) ** top

    @property
    def has_inf(self):
        return self.kind == "ieee"

    @property
    def has_nan(self):
        return self.kind != "finite"

    @property
    def has_negative_zero(self):
        return self.kind != "fnuz"


FORMATS = {
    "fp32": Fmt("fp32", 8, 23, 127, "ieee"),
    "bf16": Fmt("bf16", 8, 7, 127, "ieee"),
    "fp16": Fmt("fp16", 5, 10, 15, "ieee"),
    "tf32": Fmt("tf32", 8, 10, 127, "ieee"),
    "e4m3": Fmt("e4m3", 4, 3, 7, "fn"),
    "e5m2": Fmt("e5m2", 5, 2, 15, "ieee"),
    "e4m3fnuz": Fmt("e4m3fnuz", 4, 3, 8, "fnuz"),
    "e5m2fnuz": Fmt("e5m2fnuz", 5, 2, 16, "fnuz"),
    "e3m2": Fmt("e3m2", 3, 2, 3, "finite"),
    "e2m3": Fmt("e2m3", 2, 3, 1, "finite"),
    "e2m1": Fmt("e2m1", 2, 1, 1, "finite"),
    "e3m4": Fmt("e3m4", 3, 4, 3, "ieee"),  # custom eXmY: bias 2^(X-1)-1
    "e6m9": Fmt("e6m9", 6, 9, 31, "ieee"),
}

INF, NAN = "inf", "nan"


def floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    return e


def decode(fmt: Fmt, bits: int):
    """Exact value of the encoding `bits` of fmt, from its layout: a Fraction (zeros as 0),
    or NAN, INF, "-inf"."""
    sign = -1 if bits >> (fmt.ebits + fmt.mbits) & 1 else 1
    e, m = bits >> fmt.mbits & ((1 << fmt.ebits) - 1), bits & ((1 << fmt.mbits) - 1)
    top = (1 << fmt.ebits) - 1
    if fmt.kind == "ieee" and e == top:
        return NAN if m else (INF if sign > 0 else "-inf")
    if fmt.kind == "fn" and e == top and m == (1 << fmt.mbits) - 1:
        return NAN
    if fmt.kind == "fnuz" and sign < 0 and e == 0 and m == 0:
        return NAN  # the sign bit alone: fnuz formats' only NaN
    if e == 0:
        return sign * Fraction(m, 1 << fmt.mbits) * Fraction(2) ** fmt.emin
    return sign * Fraction((1 << fmt.mbits) + m, 1 << fmt.mbits) * Fraction(2) ** (e - fmt.bias)


def _round_to_quantum(a: Fraction, q: int, negative: bool, mode: str):
    """|x| = a > 0 rounded to a multiple of 2^q; returns (rounded magnitude, inexact)."""
    n = a / Fraction(2) ** q
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem == 0:
        up = False
    elif mode == "rne":
        up = rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1)
    elif mode == "rna":
        up = rem >= Fraction(1, 2)
    elif mode == "rtz":
        up = False
    elif mode == "rup":
        up = not negative
    elif mode == "rdn":
        up = negative
    else:
        raise ValueError(mode)
    return (fl + up) * Fraction(2) ** q, rem != 0


def round_exact(x: Fraction, fmt: Fmt, mode: str, overflow: str = "ieee"):
    """Rounds the exact value x once into fmt. Returns (value, flags): value is a Fraction
    (a zero result as the pair ("zero", negative)), or "inf"/"-inf"/"nan"; flags a set of
    "x" (inexact), "u" (underflow: tiny after rounding and inexact), "o" (overflow)."""
    if x == 0:
        return ("zero", False), set()
    negative = x < 0
    a = -x if negative else x
    e = floor_log2(a)
    r, inexact = _round_to_quantum(a, max(e, fmt.emin) - fmt.mbits, negative, mode)
    unbounded, _ = _round_to_quantum(a, e - fmt.mbits, negative, mode)
    flags = set()
    if inexact:
        flags.add("x")
        if unbounded < Fraction(2) ** fmt.emin:
            flags.add("u")
    sign = -1 if negative else 1
    if unbounded > fmt.max_finite:
        flags |= {"o", "x"}
        flags.discard("u")
        to_max = overflow == "satfinite" or fmt.kind == "finite" or mode == "rtz" or \
            (mode == "rup" and negative) or (mode == "rdn" and not negative)
        if to_max:
            return sign * fmt.max_finite, flags
        if not fmt.has_inf:
            return NAN, flags
        return ("-inf" if negative else INF), flags
    if r == 0:
        return ("zero", negative and fmt.has_negative_zero), flags
    return sign * r, flags


def sqrt_exact_approx(x: Fraction, p: int) -> Fraction:
    """A stand-in for sqrt(x) (x > 0) that rounds like it at precision <= p in every mode:
    m + 1/2 units (m = floor(sqrt), at least p + 3 bits) when the root is inexact, else exact."""
    t = p + 6 - floor_log2(x) // 2
    scaled = x * Fraction(4) ** t
    n = scaled.numerator // scaled.denominator
    m = isqrt(n)
    sticky = m * m != scaled
    return (m + (Fraction(1, 2) if sticky else 0)) / Fraction(2) ** t


def representable(fmt: Fmt, rng, count):
    """`count` random finite non-zero values of fmt (as Fractions), normals and subnormals."""
    out = []
    emax = floor_log2(fmt.max_finite)
    for _ in range(count):
        e = rng.randint(fmt.emin - 1, emax)  # emin - 1: subnormal
        man = rng.randrange(1, 1 << fmt.mbits) if e < fmt.emin else rng.randrange(0, 1 << fmt.mbits)
        if e < fmt.emin:
            v = Fraction(man, 1 << fmt.mbits) * Fraction(2) ** fmt.emin
        else:
            v = (1 + Fraction(man, 1 << fmt.mbits)) * Fraction(2) ** e
        if v > fmt.max_finite:
            v = fmt.max_finite
        v = -v if rng.random() < 0.5 else v
        out.append(v)
    return out
