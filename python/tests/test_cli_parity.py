# The module holds to what the CLI holds to (issue 34 item 7): unsigned integer arrays are bit
# patterns of the named format in every function (of its container width, else a ValueError),
# the kv length the engine models, the CLI's size limits, TypeErrors naming the argument
# for a wrong kind of argument, and traces that never claim a provenance nobody stated.
# References: exact_reference.py (formats decoded from their layouts with fractions), numpy,
# the safetensors header read with json, and the CLI's own messages.
import json
import math
import random
import re
import struct
from fractions import Fraction

import numpy as np

import pytest

import flashbits as fb
from exact_reference import FORMATS, decode as exact_decode, round_exact

# Each format's container, from its width (1 + exponent + mantissa bits), not from flashbits.
CONTAINERS = {"bf16": np.uint16, "fp16": np.uint16, "e4m3": np.uint8, "e5m2": np.uint8, "e2m1": np.uint8,
              "e3m2": np.uint8, "fp32": np.uint32, "e3m4": np.uint8, "e6m9": np.uint16}


def finite_patterns(name, n, rng):
    """n random bit patterns of a finite, non-NaN value of `name` (decoded independently)."""
    fmt = FORMATS[name]
    width = 1 + fmt.ebits + fmt.mbits
    out = []
    while len(out) < n:
        b = rng.randrange(1 << width)
        if not isinstance(exact_decode(fmt, b), str):
            out.append(b)
    return np.array(out, dtype=CONTAINERS[name])


def bf16_bits(shape, seed):
    """bf16 bit patterns of moderate values (|x| in [2^-7, 2^4)), built from the layout."""
    rng = np.random.default_rng(seed)
    sign = rng.integers(0, 2, shape, dtype=np.uint16)
    exponent = rng.integers(127 - 7, 127 + 4, shape).astype(np.uint16)
    mantissa = rng.integers(0, 128, shape, dtype=np.uint16)
    return (sign << 15) | (exponent << 7) | mantissa


def bf16_values(bits):
    return np.vectorize(lambda b: float(exact_decode(FORMATS["bf16"], int(b))))(bits).astype(np.float64)


# ---- bit patterns -----------------------------------------------------------------------------
def test_round_reads_unsigned_arrays_as_bit_patterns():
    r = fb.round(np.array([0x3f80, 0xc040], np.uint16), "bf16")
    assert r.values.tolist() == [1.0, -3.0]  # not 16256.0 and 49216.0
    for name in CONTAINERS:
        bits = finite_patterns(name, 300, random.Random(name))
        r = fb.round(bits, name, flags=True)
        assert r.bits.dtype == CONTAINERS[name] and np.array_equal(r.bits, bits), name
        want = [exact_decode(FORMATS[name], int(b)) for b in bits]
        assert [Fraction(v) for v in r.values] == want, name
        width = 1 + FORMATS[name].ebits + FORMATS[name].mbits
        signs = [-1.0 if int(b) >> (width - 1) & 1 else 1.0 for b in bits]
        assert [math.copysign(1, v) for v in r.values] == signs, name  # -0 stays -0
        assert not np.any(r.flags), name  # a value of the format rounds exactly
    # NaN patterns stay NaN.
    assert math.isnan(fb.round(np.array([0x7fc1], np.uint16), "bf16").values[0])


def test_ops_dot_and_save_trace_read_bit_patterns_of_the_named_format(tmp_path):
    rng = random.Random(7)
    a, b = finite_patterns("e4m3", 200, rng), finite_patterns("e4m3", 200, rng)
    r = fb.mul(a, b, "e4m3", "rtz", overflow="satfinite")
    fmt = FORMATS["e4m3"]
    for i in range(200):
        product = exact_decode(fmt, int(a[i])) * exact_decode(fmt, int(b[i]))
        want, _ = round_exact(product, fmt, "rtz", "satfinite")
        if isinstance(want, tuple):
            # A zero: an exact zero product has the sign of the operands' signs (IEEE 754 6.3).
            negative = bool((int(a[i]) ^ int(b[i])) & 0x80) if product == 0 else want[1]
            assert r.values[i] == 0 and math.copysign(1, r.values[i]) == (-1 if negative else 1), i
        else:
            assert Fraction(r.values[i]) == want, i
    # Bits and values of the same numbers give the same bits (values decoded independently).
    va = np.array([float(exact_decode(fmt, int(x))) for x in a])
    vb = np.array([float(exact_decode(fmt, int(x))) for x in b])
    assert np.array_equal(fb.add(a, b, "e4m3").bits, fb.add(va, vb, "e4m3").bits)
    qa, qb = bf16_bits((5, 16), 1), bf16_bits((5, 16), 2)
    d = fb.dot("sm80", qa, qb)
    dv = fb.dot("sm80", bf16_values(qa), bf16_values(qb))
    assert np.array_equal(d.bits, dv.bits)
    # The exact sum of 16 products of bf16 values is within an fp32 ulp or two of D.
    for row in range(5):
        exact = sum(exact_decode(FORMATS["bf16"], int(x)) * exact_decode(FORMATS["bf16"], int(y))
                    for x, y in zip(qa[row], qb[row]))
        assert abs(Fraction(d.values[row]) - exact) <= abs(exact) * Fraction(1, 2 ** 20) + Fraction(1, 2 ** 40)
    # A trace written from bit patterns holds their values.
    q, k, v, o = (bf16_bits((1, 1, 8, 4), s) for s in range(4))
    path = tmp_path / "bits.safetensors"
    fb.save_trace(path, q=q, k=k, v=v, o=o, metadata={"source": "unknown", "softmax_scale": 0.5})
    t = fb.load_trace(path)
    for name, bits in (("q", q), ("k", k), ("v", v), ("o", o)):
        assert np.array_equal(t[name], bf16_values(bits)), name


def numpy_attention(q, k, v, scale):
    """Softmax attention in numpy (longdouble): independent of flashbits."""
    s = np.einsum("...nd,...md->...nm", q.astype(np.longdouble), k.astype(np.longdouble)) * scale
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("...nm,...md->...nd", p / p.sum(axis=-1, keepdims=True), v.astype(np.longdouble))


def test_attention_reads_bit_patterns():
    q, k, v = (bf16_bits((2, 48, 16), s) for s in (3, 4, 5))
    exact = fb.exact_attention(q, k, v, scale=0.25)
    want = numpy_attention(bf16_values(q), bf16_values(k), bf16_values(v), 0.25)
    assert np.allclose(exact.o, want.astype(np.float64), rtol=0, atol=1e-12)
    r = fb.attention(q, k, v, "fa2-sm80", scale=0.25)
    rv = fb.attention(bf16_values(q), bf16_values(k), bf16_values(v), "fa2-sm80", scale=0.25)
    assert np.array_equal(r.o, rv.o) and np.array_equal(r.lse, rv.lse)
    assert np.max(np.abs(r.o - want.astype(np.float64))) < 2 ** -5
    # fp16 bit patterns, said by dtype: 0x3c00 is 1.0 in fp16 (and 1.0078125 read as bf16).
    ones = np.full((4, 8), 0x3c00, np.uint16)
    assert np.all(fb.attention(ones, ones, ones, "fa2-sm80", dtype="fp16").o == 1.0)


@pytest.mark.parametrize("name, call", [
    ("x", lambda w: fb.round(np.array([0x3f80], w), "bf16")),
    ("bits", lambda w: fb.decode(np.array([0x3f80], w), "bf16")),
    ("a", lambda w: fb.add(np.array([0x3f80], w), np.array([0x3f80], w), "bf16")),
    ("a", lambda w: fb.dot("sm80", np.full((1, 4), 0x3f80, w), np.full((1, 4), 0x3f80, w))),
    ("q", lambda w: fb.attention(*(np.full((4, 8), 0x3f80, w) for _ in range(3)), "fa2-sm80")),
    ("q", lambda w: fb.exact_attention(*(np.full((4, 8), 0x3f80, w) for _ in range(3)))),
])
def test_bit_patterns_of_the_wrong_width_are_a_value_error(name, call, tmp_path):
    for wrong in (np.uint32, np.uint64):
        bits = 8 * np.dtype(wrong).itemsize
        with pytest.raises(ValueError, match=rf"^{name}: a uint{bits} array holds {bits}-bit patterns, but bf16 "
                                             r"patterns are 16-bit"):
            call(wrong)
    call(np.uint16)  # the container width is accepted
    with pytest.raises(ValueError, match="uint8 array holds 8-bit patterns, but bf16 patterns are 16-bit"):
        fb.save_trace(tmp_path / "t.safetensors", q=np.ones((1, 1, 2, 2), np.uint8), k=np.ones((1, 1, 2, 2)),
                      v=np.ones((1, 1, 2, 2)), o=np.ones((1, 1, 2, 2)), metadata={"source": "unknown"})


# ---- kv length --------------------------------------------------------------------------------
def test_kv_length_other_than_q_length_runs_bottom_right_causal():
    assert "bottom-right" in fb.attention.__doc__
    rng = np.random.default_rng(3)
    q, k, v, do = (rng.integers(-8, 9, shape) / 8.0 for shape in ((2, 5, 16), (1, 12, 16), (1, 12, 16), (2, 5, 16)))
    for causal in (False, True):
        r = fb.attention(q, k, v, "fa2-sm80", do=do, causal=causal)
        x = fb.exact_attention(q, k, v, do=do, causal=causal)
        assert r.o.shape == (2, 5, 16) and r.dk.shape == (1, 12, 16) and r.dq.shape == q.shape
        assert x.dk.shape == (1, 12, 16) and x.dq.shape == q.shape
        assert np.max(np.abs(r.o - x.o)) < 0.05 and np.max(np.abs(r.dk - x.dk)) < 0.05
    # Causal with more queries than keys: rows above the corner see nothing (O = 0, LSE = +inf).
    r = fb.attention(np.ones((8, 16)), np.ones((3, 16)), np.ones((3, 16)), "fa2-sm80", causal=True)
    assert np.all(r.o[:5] == 0) and np.all(np.isinf(r.lse[:5])) and np.all(r.o[5:] == 1.0)
    # Grouped-query k and v of another length run too.
    r = fb.attention(np.ones((4, 64, 16)), np.ones((2, 24, 16)), np.ones((2, 24, 16)), "fa2-sm80")
    assert r.o.shape == (4, 64, 16) and np.all(r.o == 1.0)


# ---- size limits ------------------------------------------------------------------------------
def cli_tail(cli, *args):
    rc, _, err = cli(*args, check=False)
    assert rc == 2, err
    line = err.strip().splitlines()[-1]
    return line.split(": ", 2)[2]  # after "error: --option value: "


def test_bias_test_holds_to_the_cli_size_limits(cli):
    trials = 2 ** 24 + 1
    with pytest.raises(ValueError) as e:
        fb.bias_test("fa2-sm80", trials=trials)
    assert str(e.value) == f"trials={trials}: expected 1..{2 ** 24}"
    # The CLI names the same range as it parses --trials.
    assert f"1..{2 ** 24}" in cli_tail(cli, "bias-test", "--model", "fa2-sm80", "--trials", str(trials))
    # The head-dim limit first, as the CLI checks --headdim when it parses it.
    with pytest.raises(ValueError) as e:
        fb.bias_test("fa2-sm80", headdim=10 ** 8)
    assert str(e.value) == f"headdim={10 ** 8}: expected 1..256 (the engine models head dims up to 256, as FlashAttention)"
    assert "1..256" in cli_tail(cli, "bias-test", "--model", "fa2-sm80", "--headdim", str(10 ** 8))
    elements = 2 ** 26 * 256
    with pytest.raises(ValueError) as e:
        fb.bias_test("fa2-sm80", seqlen=2 ** 26, headdim=256)
    assert str(e.value) == (f"seqlen={2 ** 26} headdim=256: {elements} elements per tensor, over the limit of 2^31 "
                            f"({2 ** 31}); give a smaller seqlen or headdim")
    # Under the element limit, over the memory one: 2^30 elements at 128 bytes each.
    with pytest.raises(ValueError, match=r"seqlen=8388608 headdim=128: needs about 128\.0 GiB, over the limit of "
                                         r"64 GiB"):
        fb.bias_test("fa2-sm80", seqlen=2 ** 23, headdim=128)
    # Beyond any C++ integer: a ValueError naming the argument, not a TypeError from the binding.
    with pytest.raises(ValueError, match=r"^trials=\d+: outside the range"):
        fb.bias_test("fa2-sm80", trials=2 ** 70)
    # 2^24 trials pass the trials check: the next check (seqlen) is what refuses.
    with pytest.raises(ValueError, match="expected positive sizes"):
        fb.bias_test("fa2-sm80", trials=2 ** 24, seqlen=0)


def test_attention_holds_to_the_cli_size_limits():
    # 2^31 + 2^16 elements would be allocated by the engine; the check needs no array that big:
    # a broadcast view of one element has the shape and costs nothing.
    q = np.broadcast_to(np.float64(1.0), (2 ** 15 + 1, 1, 256, 256))
    with pytest.raises(ValueError, match=rf"q \[{2 ** 15 + 1},1,256,256\]: {(2 ** 15 + 1) * 2 ** 16} elements per "
                                         r"tensor, over the limit of 2\^31"):
        fb.exact_attention(q, q, q)



def test_traced_rows_hold_to_the_memory_limit(cli, tmp_path):
    # Tiny tensors (head dim 1), but 2^16 traced rows of 2^16 keys: a traced row keeps at
    # least P-bar and the plotted error of every key (two doubles), 2^32 x 16 bytes = 64 GiB
    # before any tile or event, so every face refuses before it runs.
    n = 2 ** 16
    over = r"tracing 65536 rows keeps about (\d+)\.\d GiB of records \(about \d+ KiB a row\), over the limit of 64 GiB"
    q = np.zeros((1, 1, n, 1))
    with pytest.raises(ValueError, match=rf"^trace: {over}; pass a list of the rows to trace$") as e:
        fb.attention(q, q, q, "fa2-sm80", trace=True)
    assert int(re.search(over, str(e.value)).group(1)) >= 64
    with pytest.raises(ValueError, match=rf"^trace: {over}; trace fewer rows$"):
        fb.attention(q, q, q, "fa2-sm80", trace=list(range(n)))
    # The same rows named by a trace's trace_rows (fb-fa2's intermediates) in replay.
    bits = np.zeros((1, 1, n, 1), np.uint16)
    path = tmp_path / "rows.safetensors"
    fb.save_trace(path, q=bits, k=bits, v=bits, o=bits, trace_rows=np.arange(n, dtype=np.int32),
                  metadata={"source": "unknown", "softmax_scale": 1.0, "model": "fa2-sm80"})
    rc, _, err = cli("replay", str(path), check=False)
    assert rc == 2, err
    assert re.search(rf"^error: {re.escape(str(path))}: tensor trace_rows: {over}$", err.strip(), re.M), err


# ---- argument kinds ---------------------------------------------------------------------------
X = np.ones(3)
Q = np.ones((4, 8))


@pytest.mark.parametrize("name, call", [
    ("x", lambda: fb.round("x", "bf16")),
    ("x", lambda: fb.round(None, "bf16")),
    ("fmt", lambda: fb.round(X, 16)),
    ("mode", lambda: fb.round(X, "bf16", mode=None)),
    ("seed", lambda: fb.round(X, "bf16", seed="3")),
    ("seed", lambda: fb.round(X, "bf16", seed=1.5)),
    ("sr_bits", lambda: fb.round(X, "bf16", "sr", sr_bits="5")),
    ("position", lambda: fb.round(X, "bf16", position=[1])),
    ("flags", lambda: fb.round(X, "bf16", flags="yes")),
    ("fmt", lambda: fb.decode(np.ones(2, np.uint16), None)),
    ("b", lambda: fb.add(X, "1", "bf16")),
    ("fmt", lambda: fb.mul(X, X, fmt=None)),
    ("model", lambda: fb.dot(80, np.ones((1, 4)), np.ones((1, 4)))),
    ("q", lambda: fb.attention(None, Q, Q, "fa2-sm80")),
    ("model", lambda: fb.attention(Q, Q, Q, None)),
    ("causal", lambda: fb.attention(Q, Q, Q, "fa2-sm80", causal=1)),
    ("scale", lambda: fb.attention(Q, Q, Q, "fa2-sm80", scale="0.5")),
    ("threads", lambda: fb.attention(Q, Q, Q, "fa2-sm80", threads=2.0)),
    ("trace", lambda: fb.attention(Q, Q, Q, "fa2-sm80", trace=3)),
    ("trace", lambda: fb.attention(Q, Q, Q, "fa2-sm80", trace=[(0, "1")])),
    ("dtype", lambda: fb.exact_attention(Q, Q, Q, dtype=16)),
    ("trials", lambda: fb.bias_test("fa2-sm80", trials="3")),
    ("seqlen", lambda: fb.bias_test("fa2-sm80", seqlen=64.0)),
    ("alpha", lambda: fb.bias_test("fa2-sm80", alpha="0.01")),
    ("by_max", lambda: fb.bias_test("fa2-sm80", by_max=1)),
    ("model", lambda: fb.bias_test(3)),
    ("traces", lambda: fb.bias_test(traces=3)),
    ("path", lambda: fb.load_trace(None)),
    ("scale", lambda: fb.load_trace("x.npz", scale="1")),
    ("tensors", lambda: fb.save_trace("x.safetensors", [Q])),
    ("metadata", lambda: fb.save_trace("x.safetensors", q=Q, metadata="source=unknown")),
    ("fmt", lambda: fb.format_info(None)),
    ("flags", lambda: fb.flags_string("x")),
])
def test_a_wrong_kind_of_argument_is_a_type_error_naming_it(name, call):
    with pytest.raises(TypeError) as e:
        call()
    message = str(e.value)
    assert message.startswith(name + ":"), message
    assert "incompatible function arguments" not in message


@pytest.mark.parametrize("name, call", [
    ("seed", lambda: fb.round(X, "bf16", seed=-1)),
    ("position", lambda: fb.round(X, "bf16", position=2 ** 64)),
    ("seed", lambda: fb.attention(Q, Q, Q, "fa2-sm80", seed=2 ** 64)),
    ("threads", lambda: fb.attention(Q, Q, Q, "fa2-sm80", threads=0)),
    ("sr_bits", lambda: fb.round(X, "bf16", "sr", sr_bits=2 ** 80)),
])
def test_an_integer_out_of_range_is_a_value_error_naming_it(name, call):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value).startswith(name + "="), str(e.value)


def test_the_stochastic_stream_given_with_another_mode_is_refused_as_the_cli_refuses_it(cli):
    # It was ignored: round(x, "bf16", "rne", seed=5) gave rne's bits, while `op --seed 5`
    # with rne is exit 2. Each argument, each deterministic mode, both entry points.
    for mode in ["rne", "rna", "rtz", "rup", "rdn", "rto"]:
        for name, value in [("seed", 5), ("sr_bits", 3), ("position", 7), ("seed", 0)]:
            for call in (lambda kw: fb.round(X, "bf16", mode, **kw), lambda kw: fb.add(X, X, "bf16", mode, **kw)):
                with pytest.raises(ValueError) as e:
                    call({name: value})
                assert str(e.value) == f"{name}: applies to stochastic rounding only (the mode is {mode}, not sr)"
        rc, _, err = cli("op", "add", "bf16", mode, "3f80", "3f80", "--seed", "5", check=False)
        assert rc == 2 and "--seed applies to stochastic rounding only" in err, err
    # With sr they are the stream: a seed changes the draws of values between bf16 neighbours.
    x = np.linspace(1.0, 2.0, 4097)[1:-1]
    assert not np.array_equal(fb.round(x, "bf16", "sr", seed=1).bits, fb.round(x, "bf16", "sr", seed=2).bits)
    # An unknown mode is named as such, not as a stray seed.
    with pytest.raises(ValueError, match="unknown rounding mode 'rnz'"):
        fb.round(X, "bf16", "rnz", seed=5)


# ---- trace provenance -------------------------------------------------------------------------
def safetensors_metadata(path):
    """The __metadata__ of a safetensors file, read from its JSON header (the format's spec)."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(size)).get("__metadata__", {})


def test_save_trace_states_no_provenance_nobody_gave(tmp_path):
    q = fb.round(np.random.default_rng(0).standard_normal((1, 1, 8, 4)), "bf16").values
    path = tmp_path / "t.safetensors"
    with pytest.raises(ValueError, match="metadata: no source: .*cuda:<gpu>.*emulated.*unknown"):
        fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"softmax_scale": 0.5})
    assert not path.exists()
    for source in ("unknown", "emulated", "cuda:NVIDIA H200"):
        fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"source": source, "softmax_scale": 0.5})
        assert safetensors_metadata(path)["source"] == source
        assert fb.load_trace(path).hardware == source.startswith("cuda:")
    with pytest.raises(ValueError, match="source"):  # the trace schema's own check
        fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"source": "my laptop"})


def test_layout_auto_notes_a_reading_that_makes_q_and_k_differ(cli, tmp_path):
    # Found by the shapes audit: q [1,6,8,32] with k, v [1,4,8,32] does not fit bhsd (6 q heads
    # over 4 kv heads), so auto read it as bshd (8 heads, 6 queries over 4 keys) without a word:
    # a mis-shaped GQA capture imported as cross-attention. The reading is now noted.
    rng = np.random.default_rng(3)
    bits = lambda shape: (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    odd = tmp_path / "odd.npz"
    np.savez(odd, q=bits((1, 6, 8, 32)), k=bits((1, 4, 8, 32)), v=bits((1, 4, 8, 32)), o=bits((1, 6, 8, 32)))
    statement = ("--source", "unknown", "--dtype", "bf16", "--causal", "false", "--scale", "0.1")
    rc, out, err = cli("import", str(odd), *statement, "--out", str(tmp_path / "odd.safetensors"))
    assert rc == 0, err
    assert "--layout auto read q [1,6,8,32] and k [1,4,8,32] as bshd [batch, seq, heads, dim]: 8 q heads over 8 kv " \
           "heads, query length 6, key length 4 (the other layout does not fit)" in err, err
    with pytest.warns(UserWarning, match="read q .* as bshd"):
        fb.load_trace(odd, source="unknown", dtype="bf16", causal=False, scale=0.1)
    # Stated, nothing is noted; nor where the reading keeps q and k alike.
    rc, out, err = cli("import", str(odd), *statement, "--layout", "bshd", "--out", str(tmp_path / "b.safetensors"))
    assert rc == 0 and "layout auto" not in err, err
    plain = tmp_path / "plain.npz"
    # (an lse [batch, heads, seq] fits bhsd only)
    np.savez(plain, q=bits((1, 3, 8, 32)), k=bits((1, 3, 8, 32)), v=bits((1, 3, 8, 32)), o=bits((1, 3, 8, 32)),
             lse=np.zeros((1, 3, 8), np.float32))
    rc, out, err = cli("import", str(plain), *statement, "--out", str(tmp_path / "p.safetensors"))
    assert rc == 0 and "layout auto" not in err, err


# ---- audit: model names whose parameters hold commas, or a large number -----------------------
def test_model_names_with_parameter_commas_run_and_merge(cli, tmp_path):
    # Found by the CLI audit: sweep --model and deviation --models split every comma, so
    # +dynmax:beta=2,tol=0.01 and +sw-exp2:8,0 (the documented spellings) were refused; and the
    # sweep CSV wrote such a name unquoted, so merge refused sweep's own output (56 columns).
    models = ["fa2-sm80+dynmax:beta=2,tol=0.01", "fa2-sm80+sw-exp2:8,0"]
    run = ("--seqlen", "32", "--headdim", "16", "--trials", "4", "--seed", "3")
    rc, out, err = cli("sweep", "--model", ",".join(models), *run, "--json")
    swept = json.loads(out)
    assert [r["model"] for r in swept["rows"]] == models, out
    csv = tmp_path / "s.csv"
    rc, _, err = cli("sweep", "--model", ",".join(models), *run, "--csv", str(csv))
    assert rc in (0, 1, 4), err
    assert '"fa2-sm80+dynmax:beta=2,tol=0.01"' in csv.read_text()  # quoted as RFC 4180 says
    rc, out, err = cli("merge", str(csv), "--json")
    assert rc in (0, 1, 4), err
    assert json.loads(out)["rows"] == swept["rows"]
    rc, out, err = cli("deviation", "--models", ",".join(models + ["golden-bf16-flash"]), "--seqlen", "32",
                       "--headdim", "16", "--json")
    assert rc == 0, err
    assert [r["model"] for r in json.loads(out)["rows"]] == models + ["golden-bf16-flash"], out
    # A quote that does not close is one clear error naming the line.
    bad = tmp_path / "bad.csv"
    lines = csv.read_text().splitlines()
    lines[1] = lines[1].replace('"fa2', 'fa2', 1)
    bad.write_text("\n".join(lines) + "\n")
    rc, _, err = cli("merge", str(bad), check=False)
    assert rc == 2 and err.count("\n") == 1 and "bad.csv: line 2" in err, err


def test_a_canonical_name_with_a_large_parameter_reads_back(cli, tmp_path):
    # Found by the CLI audit: beta=1e40 was recorded as beta=1e+40, whose '+' split the name,
    # so replay, bias-test and demo refused the trace make-trace had just written.
    path = tmp_path / "t.safetensors"
    rc, out, err = cli("make-trace", "--model", "fa2-sm80+dynmax:beta=1e40", "--seqlen", "16", "--headdim", "16",
                       "--out", str(path))
    assert rc == 0, err
    model = fb.load_trace(path).model
    assert "+" not in model.split("beta=")[1].split(",")[0], model
    rc, out, err = cli("replay", str(path), "--json")
    assert rc == 0 and json.loads(out)["match"] is True, err


def test_deviation_refuses_huge_tiles_and_keeps_tiles_on_non_finite_rows(cli):
    # Found by the CLI audit: --tiles 64x1073741824 allocated 13 GB and more on a 64-key problem;
    # and a non-finite row's JSON had no "tiles", so two --tiles entries' rows looked alike.
    rc, out, err = cli("deviation", "--models", "golden-bf16-flash", "--seqlen", "64", "--headdim", "16", "--tiles",
                       "64x1073741824", check=False)
    assert rc == 2 and err.count("\n") == 1 and "--tiles 64x1073741824: a tile of 64x1073741824" in err, err
    model = "golden-bf16-flash+dynmax:beta=1e40"  # beta r_m overflows: O is NaN for the sink's rows
    rc, out, err = cli("deviation", "--models", model, "--inputs", "sink", "--seqlen", "64", "--headdim", "16",
                       "--tiles", "64x64,32x32", "--json")
    rows = json.loads(out)["rows"]
    assert [r["tiles"] for r in rows] == ["64x64", "32x32"], rows
    assert rc == 1 and any("non_finite_rows" in r for r in rows), rows


def test_deviation_rows_once_per_materialised_model_and_notes_in_json(cli):
    # Found by the CLI contract audit: a materialised model printed one identical row per --tiles
    # entry (its tiles "none" each time), and --json said nothing of unmeasured parts, which the
    # contract asks of every report (the text printed one unnamed note).
    rc, out, err = cli("deviation", "--models", "golden-bf16-flash,golden-bf16-baseline,pytorch-math-sm90",
                       "--seqlen", "64,1100", "--headdim", "16", "--tiles", "16x16,32x32", "--json")
    assert rc == 0, err
    d = json.loads(out)
    keys = [(r["model"], r["seqlen"], r["tiles"]) for r in d["rows"]]
    assert keys == [("golden-bf16-flash", 64, "16x16"), ("golden-bf16-flash", 64, "32x32"),
                    ("golden-bf16-flash", 1100, "16x16"), ("golden-bf16-flash", 1100, "32x32"),
                    ("golden-bf16-baseline", 64, "none"), ("golden-bf16-baseline", 1100, "none"),
                    ("pytorch-math-sm90", 64, "none"), ("pytorch-math-sm90", 1100, "none")], keys
    notes = d["notes"]
    assert any(n.startswith("pytorch-math-sm90: SFU ex2 correct (UNMEASURED)") for n in notes), notes
    assert any(n.startswith("pytorch-math-sm90: rows of 1100 keys") and "UNMEASURED" in n for n in notes), notes
    assert not any(n.startswith("pytorch-math-sm90: rows of 64 keys") for n in notes), notes
    # The text prints the same lines as notes.
    rc, text, _ = cli("deviation", "--models", "pytorch-math-sm90", "--seqlen", "1100", "--headdim", "16")
    assert rc == 0 and all(f"note: {n}\n" in text for n in notes if n.startswith("pytorch-math-sm90")), text
    # --tiles where no model is tiled would be ignored: refused.
    rc, _, err = cli("deviation", "--models", "golden-bf16-baseline", "--seqlen", "64", "--headdim", "16", "--tiles",
                     "16x16", check=False)
    assert rc == 2 and "none of --models golden-bf16-baseline is tiled" in err and err.count("\n") == 1, err


def test_a_sweep_row_without_a_finite_trial_has_no_statistics(cli, tmp_path):
    # Found by the CLI audit: such a row printed o_mean_ulps 0.0, o_ci [0, 0], o_p_t 1.0 and
    # rms 0 (read: no error), and lacked correctly_rounded and excess; the table showed '-'.
    model = "golden-bf16-flash+dynmax:beta=1e40"  # beta r_m overflows: every trial's O is NaN
    run = ("--model", model, "--seqlen", "160", "--trials", "2")
    rc, out, err = cli("sweep", *run, "--json")
    row = json.loads(out)["rows"][0]
    assert row["sufficient"]["non_finite"] == 2 and row["verdict"] == "no verdict (non-finite output)", row
    for key in ("o_mean_ulps", "o_ci", "o_p_t", "o_p_sign", "delta_mean_ulps", "delta_ci", "rms_ulps", "max_abs_ulps"):
        assert row[key] is None, (key, row)
    for part in ("correctly_rounded", "excess"):
        assert row[part]["o"]["mean_ulps"] is None and row[part]["delta"]["p_t"] is None, row
    assert row["against_floor"]["o"]["kernel_mean_ulps"] is None, row
    assert row["against_floor"]["o"]["verdict"] == "none (non-finite output)", row  # bias-test's words
    # Found by the verdict audit: the row said verdict_from "excess" and the reason "0 independent
    # samples", where bias-test says "none" and names the non-finite output.
    assert row["verdict_from"] == "none", row
    assert "NaN or infinite output" in row["against_floor"]["o"]["reason"], row
    rc_b, out_b, _ = cli("bias-test", *run[:4], "--trials", "8", "--json", check=False)
    report = json.loads(out_b)
    assert report["verdict_from"] == "none" and "NaN or infinite output" in report["against_floor"]["o"]["reason"]
    csv = tmp_path / "n.csv"
    cli("sweep", *run, "--csv", str(csv))
    header, line = csv.read_text().splitlines()[:2]
    fields = dict(zip(header.split(","), line.split(",")))
    assert fields["o_mean_ulps"] == "" and fields["rms_ulps"] == "", fields


def test_small_cli_contract_points_from_the_audit(cli, tmp_path):
    # e8m0 has no zero: a bare "0" was read silently as pattern 0x00, 2^-127 (docs: a word of
    # zeros is +0 "either way", which e8m0 cannot be).
    rc, out, err = cli("op", "add", "e8m0", "rne", "0", "0x7f", check=False)
    assert rc == 2 and "e8m0 has no zero" in err and "write 0x0" in err, err
    assert cli("op", "add", "e8m0", "rne", "0x0", "0x7f")[1].split()[0] == "7f"
    # A size error names the options given: --seqlen-k, not --seqlen; --heads among them.
    rc, _, err = cli("make-trace", "--model", "fa2-sm80", "--seqlen", "1", "--seqlen-k", "2147483647", "--headdim",
                     "1", "--out", str(tmp_path / "z.safetensors"), check=False)
    assert rc == 2 and err.startswith("error: --seqlen-k 2147483647 --headdim 1: ") and \
        err.rstrip().endswith("give a smaller --seqlen-k or --headdim"), err
    rc, _, err = cli("make-trace", "--model", "fa2-sm80", "--seqlen", "16", "--heads", "2147483647", "--headdim", "16",
                     "--out", str(tmp_path / "z.safetensors"), check=False)
    assert rc == 2 and "give a smaller --heads, --seqlen or --headdim" in err, err
    # An empty path: one line saying so, not ": cannot open".
    for args in (("replay", ""), ("import", "", "--out", str(tmp_path / "o.safetensors"), "--source", "unknown")):
        rc, _, err = cli(*args, check=False)
        assert rc == 2 and err == "error: an empty file name where a trace or capture was expected\n", err
    # import's notes go to stderr: stdout is its one line.
    q = np.zeros((1, 1, 8, 16), np.uint16)
    np.savez(tmp_path / "b.npz", q=q, k=q, v=q, o=q)
    rc, out, err = cli("import", str(tmp_path / "b.npz"), "--out", str(tmp_path / "o.safetensors"), "--source",
                       "unknown", "--dtype", "bf16", "--layout", "bhsd")
    assert out.count("\n") == 1 and out.startswith("wrote "), out
    assert "note: no softmax scale recorded" in err and "note: causality not recorded" in err, err


def test_bad_names_say_what_is_wrong(cli, tmp_path):
    # Found by the sixth bad-input audit, each message unhelpful though its exit code was right.
    # A row of trace_rows outside q was printed as 1000.000000.
    bits = np.zeros((1, 1, 8, 4), np.uint16)
    path = tmp_path / "rows.safetensors"
    meta = {"source": "unknown", "softmax_scale": 1.0, "model": "fa2-sm80"}
    # save_trace refuses such rows, as import does (replay refused a trace they had written).
    with pytest.raises(ValueError, match=r"tensor trace_rows: 1000 is not a row of q \(0\.\.7\)"):
        fb.save_trace(path, q=bits, k=bits, v=bits, o=bits, trace_rows=np.array([1000], dtype=np.int32), metadata=meta)
    with pytest.raises(ValueError, match="tensor trace_rows: row 2 is listed twice"):
        fb.save_trace(path, q=bits, k=bits, v=bits, o=bits, trace_rows=np.array([2, 5, 2], np.int32), metadata=meta)
    assert not path.exists()
    # A file written otherwise: valid rows edited in place.
    fb.save_trace(path, q=bits, k=bits, v=bits, o=bits, trace_rows=np.array([2, 5, 3], np.int32), metadata=meta)
    valid = path.read_bytes()
    header_size = int.from_bytes(valid[:8], "little")
    header = json.loads(valid[8:8 + header_size])
    begin, end = header["trace_rows"]["data_offsets"]
    row_type = {"I32": np.int32, "I64": np.int64, "F64": np.float64, "F32": np.float32}[header["trace_rows"]["dtype"]]

    def with_rows(rows):
        data = bytearray(valid)
        data[8 + header_size + begin:8 + header_size + end] = np.array(rows, row_type).tobytes()
        path.write_bytes(bytes(data))

    with_rows([1000, 5, 3])
    rc, _, err = cli("replay", str(path), check=False)
    assert rc == 2 and "tensor trace_rows: 1000 is not a row of q (0..7)" in err, err
    # A BOOL trace_rows read as rows 0 and 1, and a row listed twice was recomputed twice.
    with_rows([2, 5, 2])
    rc, _, err = cli("replay", str(path), check=False)
    assert rc == 2 and "tensor trace_rows: row 2 is listed twice" in err and err.count("\n") == 1, err
    # demo and import refuse it too (demo ran on it, import wrote it again).
    for args in (("demo", "--trace", str(path)), ("import", str(path), "--out", str(tmp_path / "again.safetensors"))):
        rc, _, err = cli(*args, check=False)
        assert rc == 2 and "tensor trace_rows: row 2 is listed twice" in err, (args, err)
    # save_trace writes bools as F64; a BOOL tensor is spliced into the file's header by hand.
    data = valid
    body = bytearray(data[8 + header_size:])
    body[begin:end] = bytes([1, 1]) + bytes(end - begin - 2)  # rows "true, true" then padding
    bool_header = dict(header)
    bool_header["trace_rows"] = {"dtype": "BOOL", "shape": [end - begin], "data_offsets": [begin, end]}
    text = json.dumps(bool_header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + bytes(body))
    rc, _, err = cli("replay", str(path), check=False)
    assert rc == 2 and "tensor trace_rows: dtype BOOL, expected row numbers" in err and err.count("\n") == 1, err
    path.write_bytes(valid)
    # beta=+2: the '+' starts the next variant, and the message said "bad number ''".
    rc, _, err = cli("make-trace", "--model", "fa2-sm80+dynmax:beta=+2", "--out", str(tmp_path / "t.st"), check=False)
    assert rc == 2 and "'+' starts the next variant, so write 2, not +2" in err, err
    # A recipe naming a table that does not exist: "is not a regular file".
    recipe = tmp_path / "r.json"
    recipe.write_text('{"sfu": {"ex2": "nope.fbsfu"}}')
    rc, _, err = cli("replay", str(path), "--recipe", str(recipe), check=False)
    assert rc == 2 and "nope.fbsfu: no such file" in err, err


def test_replay_text_counts_the_ulp_distance_of_every_mismatch(cli, tmp_path):
    # Found by the CLI contract audit ("prints ... the ulp distance of every mismatch"): the text
    # listed 20 per tensor and "... 363 more". It now counts every one in a line, checked here
    # against the --json list of each mismatch.
    from collections import Counter
    trace = tmp_path / "a.safetensors"
    cli("make-trace", "--model", "fa2-sm80", "--seqlen", "64", "--headdim", "32", "--backward", "--out", str(trace))
    rc, text, _ = cli("replay", str(trace), "--model", "standard-bf16", check=False)
    rc_json, out, _ = cli("replay", str(trace), "--model", "standard-bf16", "--json", check=False)
    assert rc == rc_json == 1
    lines = text.splitlines()
    checked = 0
    for t in json.loads(out)["tensors"]:
        ulps = [m["ulps"] for m in t["mismatches"]]
        at = next(i for i, line in enumerate(lines) if line.startswith(t["name"] + ": "))
        if len(ulps) <= 20:
            assert not lines[at + 1].startswith("  ulps of the"), lines[at:at + 2]
            continue
        line = lines[at + 1]
        assert line.startswith(f"  ulps of the {len(ulps)} mismatches"), line
        counts = Counter(ulps)
        if len(counts) <= 16:
            want = ", ".join(f"{'+' if u > 0 else ''}{u:g} x{n}" for u, n in sorted(counts.items()))
            assert line == f"  ulps of the {len(ulps)} mismatches: {want}", (line, want)
        else:
            binades = Counter(-1 if abs(u) < 1 else math.frexp(abs(u))[1] - 1 for u in ulps)
            want = ", ".join(("<1" if k < 0 else f"[{2**k},{2**(k + 1)})") + f" x{n}" for k, n in sorted(binades.items()))
            assert line == f"  ulps of the {len(ulps)} mismatches, by |ulps|: {want}", (line, want)
        checked += 1
    assert checked >= 3


def test_an_empty_sweep_shard_says_why_its_table_is_empty(cli):
    # Found by the bad-input audit: --shard 2/5 of a one-configuration grid printed an empty
    # table and exit 0 with no word; merge needs the shard, so it runs, and says so.
    rc, out, err = cli("sweep", "--model", "fa2-sm80", "--seqlen", "16", "--headdim", "8", "--trials", "2",
                       "--shard", "2/5", check=False)
    assert rc == 0 and out.splitlines()[0].startswith("configuration"), (rc, out)
    assert "note: shard 2/5 holds no configuration: the grid has 1" in err, err
    rc, _, err = cli("sweep", "--model", "fa2-sm80", "--seqlen", "16", "--headdim", "8", "--trials", "2",
                     "--shard", "1/5", check=False)
    assert rc == 0 and "holds no configuration" not in err, err
