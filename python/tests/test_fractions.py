# flashbits.round and the elementwise ops against an exact-rational reference (exact_reference.py:
# Python's fractions, format parameters written from the specs, nothing from flashbits).
import json
import math
import random
from fractions import Fraction

import numpy as np
import pytest

import flashbits as fb
from exact_reference import FORMATS, INF, NAN, floor_log2, representable, round_exact, sqrt_exact_approx
from exact_reference import decode as exact_decode

MODES = ["rne", "rna", "rtz", "rup", "rdn"]
FLAG_LETTERS = {"x": fb.INEXACT, "u": fb.UNDERFLOW, "o": fb.OVERFLOW}


def check(got_value, got_flags, x, fmt, mode, overflow, what):
    want, want_flags = round_exact(x, fmt, mode, overflow)
    got_set = {c for c, bit in FLAG_LETTERS.items() if int(got_flags) & bit}
    ctx = f"{what}: {fmt.name} {mode} {overflow} x={x} ({float(x)!r}): got {got_value!r} {got_set}, want {want} {want_flags}"
    if want == NAN:
        assert math.isnan(got_value), ctx
    elif want in (INF, "-inf"):
        assert got_value == (math.inf if want == INF else -math.inf), ctx
    elif isinstance(want, tuple):
        assert got_value == 0 and math.copysign(1, got_value) == (-1 if want[1] else 1), ctx
    else:
        assert math.isfinite(got_value) and Fraction(got_value) == want, ctx
    assert got_set == want_flags, ctx


def random_reals(fmt, rng, count):
    """Values around fmt's range: random reals, exact ties between neighbours, values beyond max."""
    out = []
    emax = floor_log2(fmt.max_finite)
    for v in representable(fmt, rng, count):
        kind = rng.randrange(4)
        q = Fraction(2) ** (max(floor_log2(abs(v)), fmt.emin) - fmt.mbits)
        if kind == 0:
            out.append(v + q / 2 * (1 if v > 0 else -1))  # an exact tie
        elif kind == 1:
            out.append(v + q * Fraction(rng.randrange(1, 1 << 20), 1 << 20) * rng.choice((-1, 1)))
        elif kind == 2:
            out.append(v)
        else:
            e = rng.randint(fmt.emin - fmt.mbits - 3, emax + 2)
            out.append(Fraction(rng.randrange(1, 1 << 30), 1 << 29) * Fraction(2) ** e * rng.choice((-1, 1)))
    return out


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("overflow", ["ieee", "satfinite"])
def test_round_float64_against_fractions(name, overflow):
    fmt = FORMATS[name]
    rng = random.Random(f"f64-{name}-{overflow}")
    # Inputs must be float64 values: keep those that are exact in fp64.
    xs = [x for x in random_reals(fmt, rng, 400) if Fraction(float(x)) == x]
    arr = np.array([float(x) for x in xs])
    for mode in MODES:
        r = fb.round(arr, name, mode, overflow, flags=True)
        for i, x in enumerate(xs):
            check(r.values[i], r.flags[i], x, fmt, mode, overflow, "round f64")


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "e5m2", "e2m1", "e3m2", "tf32", "e4m3fnuz", "e3m4"])
def test_round_float32_array_path_against_fractions(name):
    fmt = FORMATS[name]
    rng = random.Random(f"f32-{name}")
    xs = [x for x in random_reals(fmt, rng, 600) if abs(x) < 2 ** 127 and Fraction(float(np.float32(x))) == x]
    arr = np.array([float(x) for x in xs], dtype=np.float32)
    assert len(arr) > 100
    for mode in MODES:
        with_flags = fb.round(arr, name, mode, flags=True)
        fast = fb.round(arr, name, mode)  # the vectorised array path, no per-element flags
        assert np.array_equal(fast.bits, with_flags.bits)
        for i, x in enumerate(xs):
            check(with_flags.values[i], with_flags.flags[i], x, fmt, mode, "ieee", "round f32")


def e8m0_reference(x: Fraction, mode: str, overflow: str):
    """e8m0 (MX scale, 2^(byte-127), bytes 0..254, 0xff NaN) from the OCP MX spec and the rules
    of docs/DESIGN.md section 2: no sign and no zero (NaN with invalid), one significand bit,
    so every rounding is between two powers of two; tininess after rounding, as for every
    format; a value below 2^-127 gives 2^-127. Returns (value or NAN, flag letters)."""
    if x <= 0:
        return NAN, {"v"}
    e = floor_log2(x)
    frac = x / Fraction(2) ** e - 1  # in [0, 1): the part a 1-bit significand drops
    up = frac != 0 and {"rne": frac >= Fraction(1, 2), "rna": frac >= Fraction(1, 2), "rtz": False,
                        "rup": True, "rdn": False}[mode]  # a tie goes up: the kept bit is 1, odd
    unbounded = Fraction(2) ** (e + 1 if up else e)
    flags = {"x"} if frac != 0 else set()
    if unbounded > Fraction(2) ** 127:
        to_max = overflow == "satfinite" or mode in ("rtz", "rdn")
        return (Fraction(2) ** 127 if to_max else NAN), {"x", "o"}
    if e < -127:
        return Fraction(2) ** -127, {"x", "u"} if unbounded < Fraction(2) ** -127 else {"x"}
    return unbounded, flags


@pytest.mark.parametrize("overflow", ["ieee", "satfinite"])
def test_e8m0_round_against_fractions(overflow):
    rng = random.Random(f"e8m0-{overflow}")
    xs = [Fraction(2) ** rng.randint(-140, 130) * (1 + Fraction(rng.randrange(1 << 20), 1 << 20)) for _ in range(300)]
    # Around 2^-127: a tie, either side of it, and exact powers of two below it (always tiny).
    xs += [Fraction(3, 2) * Fraction(2) ** -128, Fraction(5, 4) * Fraction(2) ** -128, Fraction(7, 4) * Fraction(2) ** -128,
           Fraction(2) ** -128, Fraction(2) ** -130, Fraction(3, 2) * Fraction(2) ** -127, Fraction(3, 2) * Fraction(2) ** 127,
           Fraction(5, 4) * Fraction(2) ** 127, Fraction(0), Fraction(-1), Fraction(3)]
    for dtype in (np.float64, np.float32):
        cases = [x for x in xs if abs(x) < 2 ** 127 * 1.9 and Fraction(float(dtype(float(x)))) == x]
        arr = np.array([float(x) for x in cases], dtype=dtype)
        assert len(arr) > 200
        for mode in MODES:
            r = fb.round(arr, "e8m0", mode, overflow, flags=True)
            for i, x in enumerate(cases):
                want, want_flags = e8m0_reference(x, mode, overflow)
                got = {c for c in "xuov" if int(r.flags[i]) & {"x": fb.INEXACT, "u": fb.UNDERFLOW,
                                                                 "o": fb.OVERFLOW, "v": fb.INVALID}[c]}
                ctx = f"e8m0 {dtype.__name__} {mode} {overflow} x={x}: got {r.values[i]!r} {got}, want {want} {want_flags}"
                if want == NAN:
                    assert math.isnan(r.values[i]), ctx
                else:
                    assert Fraction(r.values[i]) == want, ctx
                assert got == want_flags, ctx


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "e5m2", "e2m1", "e3m4", "e6m9", "fp32", "e5m2fnuz"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "fma", "sqrt"])
def test_ops_against_fractions(name, op):
    fmt = FORMATS[name]
    rng = random.Random(f"op-{name}-{op}")
    n = 300
    a, b, c = (representable(fmt, rng, n) for _ in range(3))
    if op == "sqrt":
        a = [abs(x) for x in a]
    if op in ("add", "sub"):
        a[:10] = [x for x in b[:10]]  # exact cancellations (x - x, x + -x)
        if op == "add":
            a[:10] = [-x for x in a[:10]]
    exact = {
        "add": lambda i: a[i] + b[i],
        "sub": lambda i: a[i] - b[i],
        "mul": lambda i: a[i] * b[i],
        "div": lambda i: a[i] / b[i],
        "fma": lambda i: a[i] * b[i] + c[i],
        "sqrt": lambda i: sqrt_exact_approx(a[i], fmt.mbits + 1),
    }[op]
    operands = {"add": (a, b), "sub": (a, b), "mul": (a, b), "div": (a, b), "fma": (a, b, c), "sqrt": (a,)}[op]
    arrays = [np.array([float(x) for x in o]) for o in operands]
    for mode in MODES:
        r = getattr(fb, op)(*arrays, name, mode, flags=True)
        plain = getattr(fb, op)(*arrays, name, mode)  # batched path where there is one
        assert np.array_equal(plain.bits, r.bits)
        for i in range(n):
            x = exact(i)
            if x == 0:  # an exact zero sum: +0, or -0 under rdn (IEEE 754 6.3)
                got = r.values[i]
                assert got == 0 and math.copysign(1, got) == (-1 if mode == "rdn" and fmt.has_negative_zero else 1)
                assert int(r.flags[i]) == 0
                continue
            check(r.values[i], r.flags[i], x, fmt, mode, "ieee", f"{op}({', '.join(str(o[i]) for o in operands)})")


def test_decode_is_the_inverse_of_round():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(5000) * 10.0 ** rng.integers(-8, 8, 5000)).astype(np.float32)
    for name in ["bf16", "fp16", "e4m3", "e5m2", "e2m1", "tf32", "fp32", "e5m10", "e3m4"]:
        r = fb.round(x, name, "rne", "satfinite")
        values = fb.decode(r.bits, name)
        assert np.array_equal(values, r.values, equal_nan=True)
        # Decoded values are exact in the format: rounding them again changes nothing.
        again = fb.round(values, name, "rne", "satfinite", flags=True)
        assert np.array_equal(again.bits, r.bits)
        assert not np.any(again.flags & fb.INEXACT)


def test_every_bf16_and_e4m3_pattern_decodes_as_the_spec_says():
    for name in ["bf16", "e4m3", "e5m2", "e2m1"]:
        fmt = FORMATS[name]
        width = 1 + fmt.ebits + fmt.mbits
        bits = np.arange(1 << width).astype(np.uint16 if width > 8 else np.uint8)  # the container
        values = fb.decode(bits, name)
        for b, v in zip(bits.tolist(), values.tolist()):
            sign = -1 if b >> (width - 1) else 1
            e = (b >> fmt.mbits) & ((1 << fmt.ebits) - 1)
            m = b & ((1 << fmt.mbits) - 1)
            top = (1 << fmt.ebits) - 1
            if fmt.kind == "ieee" and e == top:
                assert (math.isnan(v) if m else v == sign * math.inf), (name, hex(b))
                continue
            if fmt.kind == "fn" and e == top and m == (1 << fmt.mbits) - 1:
                assert math.isnan(v), (name, hex(b))
                continue
            want = sign * (Fraction(m, 1 << fmt.mbits) * Fraction(2) ** fmt.emin if e == 0 else
                           (1 + Fraction(m, 1 << fmt.mbits)) * Fraction(2) ** (e - fmt.bias))
            assert Fraction(v) == want and math.copysign(1, v) == sign, (name, hex(b), v, want)


def test_stochastic_rounding_is_keyed_by_position_and_unbiased():
    x = np.full(200000, 1 + 2 ** -9, dtype=np.float32)  # a quarter of a bf16 ulp above 1
    r = fb.round(x, "bf16", "sr", seed=3)
    up = np.mean(r.values > 1)
    assert abs(up - 0.25) < 0.01
    # Chunks with matching positions give the same bits as one call.
    first = fb.round(x[:1000], "bf16", "sr", seed=3)
    second = fb.round(x[1000:2000], "bf16", "sr", seed=3, position=1000)
    assert np.array_equal(np.concatenate([first.bits, second.bits]), r.bits[:2000])
    # sr_bits = 1: only the first discarded bit counts, which is 0 here: never up.
    assert not np.any(fb.round(x[:5000], "bf16", "sr", seed=3, sr_bits=1).values > 1)


def assert_carried_value(exact_record, compare_to_exact, ctx):
    """The event's `exact` record against the exact result (docs/CLI.md): its significand times
    2^(exponent - 63) is the exact magnitude itself where `sticky_below` is false, and lies below
    it within its last bit where true. `compare_to_exact(v)` is the sign of v - |exact|."""
    last_bit = Fraction(2) ** (exact_record["exponent"] - 63)
    carried = int(exact_record["significand_hex"], 16) * last_bit
    if exact_record["sticky_below"]:
        assert compare_to_exact(carried) < 0 < compare_to_exact(carried + last_bit), ctx
        assert exact_record["value"].endswith("+"), ctx
    else:
        assert compare_to_exact(carried) == 0, ctx


@pytest.mark.parametrize("mode", MODES)
def test_op_json_event_below_a_power_of_two_fills_64_bits(cli, mode):
    # A sum just below a power of two (1 - 2^-100): fp64's TwoSum gives hi = 1 and lo < 0, whose
    # subtraction took the carried significand's top bit, so its sticky part spanned two last
    # bits (0x...fe with sticky_below). Random operands hardly ever reach this case.
    fmt = FORMATS["fp32"]
    a, b = 0x3F800000, 0x8D800000  # 1 and -2^-100
    exact = exact_decode(fmt, a) + exact_decode(fmt, b)
    _, out, _ = cli("op", "add", "--format", "fp32", "--round", mode, "--json", hex(a), hex(b))
    record = json.loads(out)["event"]["exact"]
    assert_carried_value(record, lambda v: (v > exact) - (v < exact), record)


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32", "e4m3", "e5m2"])
def test_op_json_sqrt_event_carries_the_exact_root(cli, name):
    """sqrt's event: the carried root against the exact root, compared through squares (exact in
    fractions), so a root carried as fp64's 53 bits with a stand-in below them fails."""
    fmt = FORMATS[name]
    width = 1 + fmt.ebits + fmt.mbits
    rng = random.Random(f"sqrt-event-{name}")
    checked = 0
    while checked < 60:
        bits = rng.randrange(1 << (width - 1))  # positive patterns
        x = exact_decode(fmt, bits)
        if isinstance(x, str) or x == 0:
            continue
        mode = rng.choice(MODES)
        _, out, _ = cli("op", "sqrt", "--format", name, "--round", mode, "--json", hex(bits))
        record = json.loads(out)["event"]["exact"]
        ctx = f"sqrt {name} {mode} {hex(bits)}: {record}"
        assert_carried_value(record, lambda v: (v * v > x) - (v * v < x), ctx)
        checked += 1


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32", "e4m3", "e5m2"])
def test_op_json_event_against_fractions(cli, name):
    """`op --json`'s rounding event against the exact result: its exponent, the direction taken,
    a tie exactly at a midpoint, and error_ulps = (result - exact) / ulp within the bound the
    contract gives (docs/CLI.md: the exact value is carried in at least 53 bits)."""
    fmt = FORMATS[name]
    width = 1 + fmt.ebits + fmt.mbits
    rng = random.Random(f"event-{name}")
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "fma": lambda a, b, c: a * b + c}
    checked = 0
    while checked < 120:
        op = rng.choice(sorted(ops))
        count = 3 if op == "fma" else 2
        bits = [rng.randrange(1 << width) for _ in range(count)]
        vals = [exact_decode(fmt, b) for b in bits]
        if any(isinstance(v, str) for v in vals) or (op == "div" and vals[1] == 0):
            continue
        exact = ops[op](*vals)
        if exact == 0 or abs(exact) > fmt.max_finite:
            continue
        mode = rng.choice(MODES)
        _, out, _ = cli("op", op, "--format", name, "--round", mode, "--json", *[hex(b) for b in bits])
        j = json.loads(out)
        result = exact_decode(fmt, int(j["result"], 16))
        if isinstance(result, str):
            continue  # rounded past max finite: an overflow, not this test's subject
        ev = j["event"]
        ctx = f"{op} {name} {mode} {[hex(b) for b in bits]}: exact {exact} ({float(exact)!r}), {ev}"
        e = floor_log2(abs(exact))
        assert ev["exact"]["exponent"] == e, ctx
        assert ev["exact"]["negative"] == (exact < 0), ctx
        assert_carried_value(ev["exact"], lambda v: (v > abs(exact)) - (v < abs(exact)), ctx)
        ulp = Fraction(2) ** (e - ev["kept_bits"] + 1)
        want = (result - exact) / ulp
        bound = Fraction(2) ** (ev["kept_bits"] - 53) + Fraction(2) ** -53  # the bits carried; the double
        assert abs(Fraction(ev["error_ulps"]) - want) <= bound, ctx
        direction = "exact" if want == 0 else ("away-from-zero" if abs(result) > abs(exact) else "toward-zero")
        assert ev["direction"] == direction, ctx
        assert ev["tie"] == (abs(want) == Fraction(1, 2)), ctx
        checked += 1


# Found by the CLI audit: a result no rounding made (x/0, an invalid operation, a NaN or an
# infinite operand) was explained as "result 7f800000 is an exact zero; no rounding", its JSON
# event had flags "-" beside the result's "z", and an overflow's direction was "exact".
@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32", "e4m3", "e5m2", "e2m1"])
def test_op_event_of_special_results_and_overflows(cli, name):
    fmt = FORMATS[name]
    width = 1 + fmt.ebits + fmt.mbits
    rng = random.Random(f"special-{name}")
    kinds = set()
    for _ in range(400):
        op = rng.choice(["add", "mul", "div", "sqrt", "sub"])
        bits = [rng.randrange(1 << width) for _ in range(1 if op == "sqrt" else 2)]
        _, out, _ = cli("op", op, "--format", name, "--round", rng.choice(MODES), "--json", *[hex(b) for b in bits])
        j = json.loads(out)
        ev = j["event"]
        vals = [exact_decode(fmt, b) for b in bits]
        result = exact_decode(fmt, int(j["result"], 16))
        ctx = f"{op} {name} {[hex(b) for b in bits]}: {j}"
        special = ev.get("special")
        if special:
            kinds.add(special)
            assert ev["flags"] == j["flags"], ctx  # the result's flags, not an empty event's
            # No rounding made it: an empty exact and null rounding fields, never an "exact 0,
            # 0 ulp" event beside a result that is not 0 (found by the scalar audit: x/0 in e2m1).
            assert ev["exact"] == {} and "addition" not in ev, ctx
            assert all(ev[f] is None for f in ("kept_bits", "round_bit", "sticky_bit", "tie", "direction",
                                               "rounding_carry", "error_ulps")), ctx
            if special == "division_by_zero":
                assert op == "div" and vals[1] == 0 and "z" in j["flags"], ctx
            elif special == "invalid":
                assert "v" in j["flags"], ctx
            elif special == "nan_operand":
                assert NAN in vals and j["flags"] == "-", ctx
            else:
                assert special == "infinite_operand" and any(v in (INF, "-inf") for v in vals), ctx
            _, text, _ = cli("op", op, "--format", name, "--round", "rne", "--explain", *[hex(b) for b in bits])
            assert "exact zero" not in text and "nothing rounded" in text, text
            continue
        assert ev["flags"] == j["flags"], ctx
        if "o" in j["flags"] and not any(isinstance(v, str) for v in vals):
            kinds.add("overflow")
            # Past the largest finite value: up to inf (or NaN in its place), else down to it.
            want = "toward-zero" if result not in (INF, "-inf", NAN) else "away-from-zero"
            assert ev["direction"] == want, ctx
    assert "overflow" in kinds, kinds
    assert kinds & {"invalid", "nan_operand", "infinite_operand", "division_by_zero"}, kinds


# Found by the CLI audit (helper of 2026-12-06): an exact zero result of mul, div, sqrt, fma or
# cvt recorded "negative": false whatever its sign (add's did not), a negative e8m0 result was
# explained as a rounding ("no bits kept: below the smallest subnormal", error nan), and
# rounding_carry read false for a rounding up from far below the subnormal grid.
@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "e5m2"])
def test_op_event_records_an_exact_zeros_sign(cli, name):
    fmt = FORMATS[name]
    width = 1 + fmt.ebits + fmt.mbits
    sign_bit = 1 << (width - 1)
    rng = random.Random(f"zero-sign-{name}")
    checked = 0
    for _ in range(150):
        op = rng.choice(["mul", "div", "sqrt", "fma", "cvt"])
        zero = sign_bit if rng.random() < 0.5 else 0
        other = rng.randrange(1 << width)
        x = exact_decode(fmt, other)
        if isinstance(x, str) or x == 0:
            continue
        mode = rng.choice(MODES)
        # IEEE 754's signs of exact zeros, written out here: a product or quotient takes the
        # operands' signs' xor, sqrt(-0) is -0, a conversion keeps the sign, and an fma's 0*x +
        # (-0 or +0) keeps a common sign, else is -0 under rdn alone.
        if op == "mul":
            args, negative = [zero, other], bool(zero) != (x < 0)
        elif op == "div":
            args, negative = [zero, other], bool(zero) != (x < 0)
        elif op == "sqrt":
            args, negative = [zero], bool(zero)
        elif op == "cvt":
            args, negative = None, bool(zero)
        else:
            addend = sign_bit if rng.random() < 0.5 else 0
            product_negative = bool(zero) != (x < 0)
            negative = product_negative if product_negative == bool(addend) else mode == "rdn"
            args = [zero, other, addend]
        if op == "cvt":
            _, out, _ = cli("op", "cvt", name, mode, f"{name}:0x{zero:x}", "--json")
        else:
            _, out, _ = cli("op", op, "--format", name, "--round", mode, "--json", *[hex(b) for b in args])
        j = json.loads(out)
        ctx = f"{op} {name} {mode} {args}: {j}"
        assert (int(j["result"], 16) == sign_bit) == negative, ctx  # the result itself
        assert j["event"]["exact"]["negative"] == negative, ctx
        assert j["event"]["exact"]["value"] == ("-0" if negative else "0"), ctx
        checked += 1
    assert checked > 100


def test_op_event_of_a_negative_e8m0_result_is_an_invalid_special(cli):
    # e8m0 holds 2^-127 .. 2^127 and NaN (0xff): no zero, no negative (docs/DESIGN.md).
    rng = random.Random("e8m0-negative")
    for _ in range(40):
        a, b = sorted(rng.sample(range(0, 255), 2))  # 2^(a-127) < 2^(b-127): a - b < 0
        for op, args in (("sub", [a, b]), ("cvt", None)):
            if op == "cvt":
                words = ["op", "cvt", "e8m0", "rne", f"fp32:{0xbf800000 + (rng.randrange(1 << 23)):x}"]
            else:
                words = ["op", op, "--format", "e8m0", "--round", rng.choice(MODES), *[hex(x) for x in args]]
            _, out, _ = cli(*words, "--json")
            j = json.loads(out)
            ctx = f"{words}: {j}"
            assert j["result"] == "ff" and j["flags"] == "v", ctx
            ev = j["event"]
            assert ev["special"] == "invalid" and ev["flags"] == "v", ctx
            # Nothing was rounded: no exact value and no rounding fields (not an "exact 0").
            assert ev["exact"] == {} and ev["direction"] is None and ev["error_ulps"] is None, ctx
            _, text, _ = cli(*words, "--explain")
            lines = text.strip().splitlines()
            assert len(lines) == 2 and "nothing rounded" in lines[1] and "negative result" in lines[1], text


@pytest.mark.parametrize("name", ["e2m1", "e3m2", "e4m3", "bf16"])
def test_op_event_rounding_carry_is_a_rounding_into_a_higher_binade(cli, name):
    # rounding_carry: "rounding up carried into the next binade", read here as the result's
    # leading bit standing above the exact value's, the exact value and the result decoded
    # from the operands and the result bits with fractions.
    fmt = FORMATS[name]
    width = 1 + fmt.ebits + fmt.mbits
    rng = random.Random(f"carry-{name}")
    carries = below_grid = 0
    for _ in range(300):
        op = rng.choice(["mul", "div"])
        bits = [rng.randrange(1 << width) for _ in range(2)]
        vals = [exact_decode(fmt, b) for b in bits]
        if any(isinstance(v, str) or v == 0 for v in vals):
            continue
        exact = vals[0] * vals[1] if op == "mul" else vals[0] / vals[1]
        if abs(exact) > fmt.max_finite:
            continue
        mode = rng.choice(MODES + ["rto"])
        _, out, _ = cli("op", op, "--format", name, "--round", mode, "--json", *[hex(b) for b in bits])
        j = json.loads(out)
        result = exact_decode(fmt, int(j["result"], 16))
        if isinstance(result, str):
            continue
        want = result != 0 and floor_log2(abs(result)) > floor_log2(abs(exact))
        ctx = f"{op} {name} {mode} {[hex(b) for b in bits]}: exact {exact}, {j}"
        assert j["event"]["rounding_carry"] == want, ctx
        carries += want
        below_grid += want and j["event"]["kept_bits"] < 0
    assert carries > 5
    if name in ("e2m1", "e3m2"):
        assert below_grid > 0  # the case the audit found
