# The module's own behaviour: attention against an independent numpy reference, shapes,
# __array__ inputs, traces of rounding events, the GIL released during long calls, Ctrl-C.
import copy
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import flashbits as fb
from conftest import BUILD_PYTHON, ROOT


def bf16(shape, seed, scale=1.0):
    return fb.round(np.random.default_rng(seed).standard_normal(shape) * scale, "bf16").values


def numpy_attention(q, k, v, scale, causal=False):
    """Float64 softmax attention in numpy (longdouble accumulation): independent of flashbits."""
    s = np.einsum("...nd,...md->...nm", q.astype(np.longdouble), k.astype(np.longdouble)) * scale
    if causal:
        n, m = s.shape[-2:]
        s = np.where(np.tril(np.ones((n, m), bool), m - n), s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    p = np.exp(s - mx)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("...nm,...md->...nd", p / l, v.astype(np.longdouble))
    return o.astype(np.float64), (mx[..., 0] + np.log(l[..., 0])).astype(np.float64)


@pytest.mark.parametrize("causal", [False, True])
def test_exact_attention_matches_numpy(causal):
    q, k, v = bf16((2, 3, 40, 16), 1), bf16((2, 3, 40, 16), 2), bf16((2, 3, 40, 16), 3)
    r = fb.exact_attention(q, k, v, causal=causal, scale=0.3)
    o, lse = numpy_attention(q, k, v, 0.3, causal)
    assert np.allclose(r.o, o, rtol=0, atol=1e-13) and np.allclose(r.lse, lse, rtol=0, atol=1e-13)
    assert r.row_max.shape == (2, 3, 40)


def test_models_err_by_about_an_ulp_and_the_reference_rounds_once():
    q, k, v, do = (bf16((1, 2, 128, 64), s) for s in range(4))
    exact = fb.exact_attention(q, k, v, do=do)
    cr = fb.attention(q, k, v, "correctly-rounded", do=do)
    assert np.array_equal(cr.o, fb.round(exact.o, "bf16").values)
    for model in ["fa2-sm80", "fa2-sm90", "triton-tutorial", "standard-bf16", "fa-bf16acc"]:
        r = fb.attention(q, k, v, model, do=do)
        assert r.o.shape == q.shape and r.lse.shape == q.shape[:-1] and r.delta.shape == q.shape[:-1]
        assert r.dq.shape == q.shape and r.dk.shape == k.shape and r.dv.shape == v.shape
        assert np.max(np.abs(r.o - exact.o)) < 2 ** -6, model  # |O| ~ 0.1 here; bf16's ulp there is 2^-11
        assert np.array_equal(fb.round(r.o, "bf16").values, r.o)  # O holds bf16 values


def test_shapes_dtypes_and_array_protocol():
    q, k, v = bf16((64, 32), 5), bf16((64, 32), 6), bf16((64, 32), 7)
    r2 = fb.attention(q, k, v, "fa2-sm80")
    assert r2.o.shape == (64, 32) and r2.lse.shape == (64,)
    r4 = fb.attention(q[None, None], k[None, None], v[None, None], "fa2-sm80")
    assert np.array_equal(r4.o[0, 0], r2.o)

    class Tensorish:  # what a CPU torch tensor offers
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None):
            return self.a if dtype is None else self.a.astype(dtype)

    r = fb.attention(Tensorish(q), Tensorish(k), Tensorish(v), "fa2-sm80")
    assert np.array_equal(r.o, r2.o)
    # float16 input means fp16 kernels.
    h = [x.astype(np.float16) for x in (bf16((32, 16), 8, 0.5), bf16((32, 16), 9, 0.5), bf16((32, 16), 10, 0.5))]
    rh = fb.attention(*h, "fa2-sm80")
    assert rh.dtype == "fp16" and rh.output_format == "fp16"
    assert r2.model == "fa2-sm80" and r2.scale == 1 / np.sqrt(32)
    with pytest.raises(ValueError, match=r"q\[0,0,0,0\]: 0.1 is not exactly representable in bf16") as e:
        fb.attention(np.full((4, 8), 0.1), k[:4, :8], v[:4, :8], "fa2-sm80")
    # Python's way out, not the CLI's hex literal: round first, or give uint16 bit patterns.
    assert "0x" not in str(e.value) and "hex" not in str(e.value)
    assert 'flashbits.round(q, "bf16").values' in str(e.value) and "uint16 array" in str(e.value)
    assert 'flashbits.round(q, "bf16").bits' in str(e.value)
    # Both pieces of advice work, and agree with each other (0.1 rounds to bf16 0x3dcd = 0.10009765625).
    q01 = np.full((4, 8), 0.1)
    assert (fb.round(q01, "bf16").bits == 0x3DCD).all() and (fb.round(q01, "bf16").values == 0.10009765625).all()
    by_values = fb.attention(fb.round(q01, "bf16").values, k[:4, :8], v[:4, :8], "fa2-sm80")
    by_bits = fb.attention(fb.round(q01, "bf16").bits, k[:4, :8], v[:4, :8], "fa2-sm80")
    assert np.array_equal(by_values.o, by_bits.o)
    # The container width is the format's (fp32: uint32), the name the argument's.
    with pytest.raises(ValueError, match=r'k\[0,0,0,0\]: 0.1 is not exactly representable in fp32 \(round first: '
                                         r'flashbits.round\(k, "fp32"\).values, or give bit patterns as a uint32 array'):
        fb.attention(np.zeros((4, 8)), np.full((4, 8), 0.1), np.zeros((4, 8)), "standard-fp32")
    with pytest.raises(ValueError, match="model nope"):
        fb.attention(q, k, v, "nope")
    with pytest.raises(ValueError, match=r"k, v: expected shape .*; got q \[1,1,64,32\], k \[1,1,64,16\], v \[1,1,64,32\]"):
        fb.attention(q, k[:, :16], v, "fa2-sm80")
    # Another kv length (cross-attention, decoding) runs; dK and dV have k's shape.
    r48 = fb.attention(q, k[:48], v[:48], "fa2-sm80")
    assert r48.o.shape == q.shape


def _same_bits(a, b):
    return a is None and b is None or (a.shape == b.shape and a.tobytes() == b.tobytes())


@pytest.mark.parametrize("model", ["fa2-sm80", "pytorch-fa2-sm90+o-fp32", "fa-bf16acc", "triton-tutorial",
                                   "standard-bf16", "fa3-fp8-sm90", "correctly-rounded"])
def test_backward_from_a_kept_forward_is_attention_with_do(model):
    # The one-call run (forward and backward together) is what the H200 captures replay; the
    # kept forward's backward must give every output of it, bit for bit. Shapes of every rank,
    # grouped heads, a causal decode (N < Nk), and dO as bf16 bit patterns.
    cases = [((24, 16), (24, 16), False),
             ((4, 20, 16), (2, 36, 16), True),
             ((2, 4, 33, 32), (2, 1, 33, 32), True)]
    for i, (q_shape, kv_shape, causal) in enumerate(cases):
        q, k, v = bf16(q_shape, 30 + i), bf16(kv_shape, 40 + i), bf16(kv_shape, 50 + i)
        do_bits = fb.round(np.random.default_rng(60 + i).standard_normal(q_shape), "bf16").bits
        one_call = fb.attention(q, k, v, model, do=do_bits, causal=causal, threads=2)
        forward = fb.attention(q, k, v, model, causal=causal, keep_forward=True, threads=1)
        assert _same_bits(forward.o, one_call.o) and forward.dq is None
        kept = forward.backward(do_bits, threads=2)
        for name in ("o", "lse", "delta", "dq", "dk", "dv"):
            assert _same_bits(getattr(kept, name), getattr(one_call, name)), (model, i, name)
        assert kept.model == one_call.model and (kept.dk is None or kept.dk.shape == k.shape)
        # Again from the same kept forward: nothing in it is used up.
        assert _same_bits(forward.backward(do_bits).dq, one_call.dq)
        # A run with dO keeps its forward too (without that dO).
        both = fb.attention(q, k, v, model, do=do_bits, causal=causal, keep_forward=True, threads=1)
        assert _same_bits(both.backward(do_bits).dv, one_call.dv)


def test_a_kept_forward_is_shared_by_deep_copies_and_left_behind_by_pickles():
    q, k, v, do = (bf16((1, 2, 20, 16), s) for s in range(4))
    r = fb.attention(q, k, v, "fa2-sm80", keep_forward=True)
    want = fb.attention(q, k, v, "fa2-sm80", do=do)
    copied = copy.deepcopy(r)
    assert copied.o is not r.o and np.array_equal(copied.o, r.o)
    assert copied.backward(do).dq.tobytes() == want.dq.tobytes()
    back = pickle.loads(pickle.dumps(r))
    assert back.o.tobytes() == r.o.tobytes()
    # It says why (it said "kept no forward; run attention(..., keep_forward=True)", the call
    # that had been made).
    with pytest.raises(ValueError, match="was unpickled, and its kept forward .* was left behind"):
        back.backward(do)
    assert r.backward(do).dv.tobytes() == want.dv.tobytes()  # the original still has it
    plain = pickle.loads(pickle.dumps(fb.attention(q, k, v, "fa2-sm80")))
    with pytest.raises(ValueError, match="kept no forward; run attention"):
        plain.backward(do)


def test_backward_needs_a_kept_forward_and_dos_of_qs_shape():
    q, k, v = bf16((2, 16, 8), 1), bf16((2, 16, 8), 2), bf16((2, 16, 8), 3)
    with pytest.raises(ValueError, match="keep_forward=True"):
        fb.attention(q, k, v, "fa2-sm80").backward(q)
    r = fb.attention(q, k, v, "fa2-sm80", keep_forward=True)
    with pytest.raises(ValueError, match=r"do: expected the shape of q \(2, 16, 8\)"):
        r.backward(q[:, :8])
    with pytest.raises(ValueError, match="threads=0"):
        r.backward(q, threads=0)
    with pytest.raises(ValueError, match="do"):
        r.backward(q + 2.0 ** -20)  # not bf16 values
    with pytest.raises(TypeError, match="keep_forward"):
        fb.attention(q, k, v, "fa2-sm80", keep_forward="yes")


def test_kept_backward_benchmark_runs_and_checks_its_outputs():
    # bench/kept_backward.py at a tiny size: it must run, and its bit-for-bit check must pass.
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kept_backward.py"), "--shape", "1,2,24,16",
                        "--reps", "1", "--models", "fa2-sm80,standard-bf16"],
                       env=dict(os.environ, PYTHONPATH=BUILD_PYTHON), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()[2:]] == ["fa2-sm80", "standard-bf16"]


def test_trace_returns_the_rounding_events_of_the_traced_rows():
    q, k, v, do = (bf16((1, 1, 256, 64), s) for s in range(10, 14))
    r = fb.attention(q, k, v, "fa-bf16acc", do=do, trace=[(0, 0, 3), 7])
    assert [(t["batch"], t["head"], t["row"]) for t in r.traces] == [(0, 0, 3), (0, 0, 7)]
    t = r.traces[0]
    assert len(t["o_cast"]) == 64 and len(t["tiles"]) >= 1
    assert t["o_cast"][0]["direction"] in ("exact", "away-from-zero", "toward-zero")
    s = t["summary"]
    assert s["o_cast_up"] + s["o_cast_down"] == sum(e["direction"] != "exact" for e in t["o_cast"])
    assert len(t["pv_buffer_events"]) == 2 * len(t["tiles"])  # bf16-accumulator model: 2 per tile
    untraced = fb.attention(q, k, v, "fa-bf16acc", do=do)
    assert np.array_equal(untraced.o, r.o) and untraced.traces is None
    mma = fb.attention(q, k, v, "fa2-sm80", trace=True)
    assert len(mma.traces) == 256 and len(mma.traces[0]["pv_dot_steps"]) > 0
    # A step's record (emu/dot/dot_step_json.hpp): the published fields, this project's, the event.
    step = mma.traces[0]["pv_dot_steps"][0]
    assert list(step) == ["largest_exponent", "terms", "truncated_value", "truncated_terms", "carry_out",
                          "normalisation_shift", "output_residue", "first_product", "fraction_bits", "aligned_sum",
                          "special", "every_term_zero", "error", "output_event"]
    assert step["fraction_bits"] == 24 and step["terms"] == 9  # sm80: F = 24, C and 8 products a step


def same_record(a, b):
    """Deep equality of two trace records (dicts, lists, numpy arrays by their bits)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same_record(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same_record, a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return isinstance(b, float) and np.float64(a).tobytes() == np.float64(b).tobytes()
    return type(a) is type(b) and a == b


def test_traced_rows_are_a_sequence_read_row_by_row():
    # Every row traced keeps the engine's records and builds a row's dicts when it is read; each
    # item must be that row's record, the same as tracing the row alone in another run.
    q, k, v = (bf16((2, 2, 48, 32), s) for s in range(20, 23))
    r = fb.attention(q, k, v, "fa2-sm80", causal=True, trace=True, threads=2)
    rows = [(b, h, i) for b in range(2) for h in range(2) for i in range(48)]
    assert isinstance(r.traces, fb.RowTraces) and len(r.traces) == len(rows) == 192
    assert [(t["batch"], t["head"], t["row"]) for t in r.traces] == rows
    for i in (0, 1, 47, 100, 191):
        alone = fb.attention(q, k, v, "fa2-sm80", causal=True, trace=[rows[i]]).traces
        assert len(alone) == 1 and same_record(r.traces[i], alone[0]), i
        assert same_record(r.traces[i - 192], alone[-1])
    # A record read twice is two equal dicts (the reader may change one freely).
    first = r.traces[5]
    first["tiles"].clear()
    assert len(r.traces[5]["tiles"]) > 0
    assert [t["row"] for t in r.traces[45:50]] == [45, 46, 47, 0, 1]
    assert same_record(r.traces[190:500:3], [r.traces[190]])
    assert [t["row"] for t in reversed(r.traces)][:2] == [47, 46] and r.traces[::-1][0]["row"] == 47
    for bad in (192, -193):
        with pytest.raises(IndexError, match="out of range: 192 traced rows"):
            r.traces[bad]
    with pytest.raises(TypeError):
        r.traces["0"]
    assert repr(r.traces) == "RowTraces(192 traced rows)"
    # A result crosses processes (pickle) and copies with its traced rows' records.
    back = pickle.loads(pickle.dumps(r))
    assert isinstance(back.traces, fb.RowTraces) and len(back.traces) == 192
    assert all(same_record(back.traces[i], r.traces[i]) for i in (0, 77, 191))
    copied = pickle.loads(pickle.dumps(back)).traces
    copied[3]["tiles"].clear()
    assert same_record(copied[3], r.traces[3]) and same_record(copy.deepcopy(r).traces[-1], r.traces[-1])


def test_ops_flags_and_bits_inputs():
    r = fb.add(np.array([1.0, 65504.0, 1.0]), np.array([2.0 ** -11, 65504.0, -1.0]), "fp16", flags=True)
    assert r.values.tolist() == [1.0, np.inf, 0.0]
    assert [fb.flags_string(f) for f in r.flags] == ["x", "xo", "-"]
    # A whole flags array at once (a 1 + 2^-11 that rounds, an overflow, an exact 0), its shape kept.
    assert fb.flags_string(r.flags).tolist() == ["x", "xo", "-"]
    assert fb.flags_string(r.flags.reshape(3, 1)).shape == (3, 1)
    with pytest.raises(TypeError, match="flags: expected an integer or an integer array"):
        fb.flags_string(np.array([1.5]))
    bits = np.array([0x3f80, 0x4000], dtype=np.uint16)  # bit patterns: 1.0 and 2.0
    assert fb.mul(bits, bits, "bf16").values.tolist() == [1.0, 4.0]
    assert fb.div(np.array([1.0]), np.array([0.0]), "bf16", flags=True).flags[0] == fb.DIVBYZERO
    assert np.isnan(fb.sqrt(np.array([-1.0]), "bf16").values[0])
    b, vals = fb.round(np.array([0.1, 1e6]), "e4m3", overflow="satfinite")
    assert b.dtype == np.uint8 and vals.tolist() == [0.1015625, 448.0]
    d = fb.dot("sm80", np.ones((3, 16)), np.full((3, 16), 0.5), c=np.array([0.0, 1.0, -8.0]))
    assert d.format == "fp32" and d.values.tolist() == [8.0, 9.0, 0.0]


def test_long_calls_release_the_gil():
    x = np.random.default_rng(0).standard_normal(16_000_000).astype(np.float32)
    # 2048 rows: at 1024 the faster forward (a block of rows per KV tile) ran in ~35 ms, too few
    # 1 ms ticks on a loaded machine.
    q, k, v = (bf16((1, 1, 2048, 64), s) for s in range(3))
    for call in (lambda: fb.round(x, "e4m3", flags=True), lambda: fb.attention(q, k, v, "fa2-sm90", threads=1)):
        done = threading.Event()
        worker = threading.Thread(target=lambda: (call(), done.set()))
        ticks = 0
        worker.start()
        while not done.is_set():
            ticks += 1  # Python runs here while the call is in C++
            time.sleep(0.001)
        worker.join()
        assert ticks > 20


# A shell that starts a job in the background (a CI runner may) leaves SIGINT ignored in its
# children, and Python then installs no KeyboardInterrupt handler: the snippet restores it.
SIGINT_PROLOGUE = "import signal as _signal; _signal.signal(_signal.SIGINT, _signal.default_int_handler)\n"


def run_snippet(code):
    env = dict(os.environ, PYTHONPATH=BUILD_PYTHON)
    return subprocess.Popen([sys.executable, "-c", SIGINT_PROLOGUE + textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("snippet", [
    "fb.bias_test('fa2-sm80', trials=100000, seqlen=128, headdim=32)",
    "fb.attention(*(fb.round(np.ones((1, 1, 16384, 64)), 'bf16').values for _ in range(3)), 'fa2-sm90', threads=1)",
])
def test_ctrl_c_interrupts_a_long_engine_call(snippet):
    p = run_snippet(f"""
        import sys, time, numpy as np, flashbits as fb
        print("start", flush=True)
        try:
            {snippet}
            print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), flush=True)
    """)
    try:
        assert p.stdout.readline().strip() == "start"
        time.sleep(1.5)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)  # never blocks past the timeout, unlike readline
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    line = out.split()
    assert line and line[0] == "interrupted", (out, err)
    assert float(line[1]) - sent < 1.5
    assert p.returncode == 0


def test_ctrl_c_interrupts_an_array_loop():
    # The same call is timed once, then interrupted a quarter of the way in: the
    # KeyboardInterrupt must come long before the call could have finished.
    p = run_snippet("""
        import os, signal, threading, time, numpy as np, flashbits as fb
        x = np.ones(30_000_000, np.float32)
        t0 = time.monotonic(); fb.round(x, 'e4m3', 'sr', flags=True); full = time.monotonic() - t0
        threading.Timer(full / 4, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            fb.round(x, 'e4m3', 'sr', flags=True)
            print("finished", full)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic() - t0, full)
    """)
    out, err = p.communicate(timeout=120)
    word, took, full = out.split()
    assert word == "interrupted", out + err
    assert float(took) < 0.25 * float(full) + 0.15


def test_signed_8_and_16_bit_arrays_are_refused_as_ambiguous():
    # torch's bf16 bits as int16 (.view(torch.int16)): read as values, 0x3f80 became 16256.0.
    bits = np.array([0x3F80, 0x3F00, 0x3E80, 0x4000], dtype=np.uint16)
    signed = bits.view(np.int16).reshape(1, 4)
    for call in (lambda: fb.round(signed, "bf16"), lambda: fb.attention(signed, signed, signed, "fa2-sm80"),
                 lambda: fb.add(signed, signed, "bf16")):
        with pytest.raises(ValueError, match=r"an int16 array is ambiguous.*view\(numpy.uint16\)"):
            call()
    with pytest.raises(ValueError, match="an int8 array is ambiguous"):
        fb.round(np.array([1, 2], dtype=np.int8), "e4m3")
    # The same bits unsigned are bit patterns (1, 0.5, 0.25, 2: RFC-free facts of bf16's
    # encoding), and wider signed integers are still values.
    assert list(fb.round(bits, "bf16").values) == [1.0, 0.5, 0.25, 2.0]
    assert list(fb.round(np.array([3, -5], dtype=np.int64), "bf16").values) == [3.0, -5.0]


def test_big_endian_bit_patterns_decode_as_every_function_reads_them():
    # decode read '>u2' memory as native integers: 0x3f80 (bf16 1.0) came back as -5.8e-39.
    be = np.array([0x3F80, 0x4000, 0xBF00], dtype=">u2")  # bf16 1, 2, -0.5 (the encoding's facts)
    assert fb.decode(be, "bf16").tolist() == [1.0, 2.0, -0.5]
    assert fb.decode(np.array([0x3F800000], dtype=">u4"), "fp32").tolist() == [1.0]
    assert fb.round(be, "bf16").values.tolist() == [1.0, 2.0, -0.5]
    assert fb.add(np.array([1.5], dtype=">f8"), be[:1], "bf16").values.tolist() == [2.5]


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="longdouble is float64 here")
def test_longdouble_input_that_float64_cannot_hold_is_refused_not_narrowed():
    L = np.longdouble
    # 1 + 2^-8 + 2^-60 lies just above the bf16 midpoint 1 + 2^-8: rounding it once gives
    # 1 + 2^-7; narrowed to float64 first it became the midpoint, then 1.0 (two roundings).
    with pytest.raises(ValueError, match=r"^x: the float\d+ value 1\.00390625000000000\d* is not exactly "
                                         r"representable in float64"):
        fb.round(np.array([L(1) + L(2) ** -8 + L(2) ** -60]), "bf16")
    # An operand must be a bf16 value; 1 + 2^-60 is not, yet narrowed it was 1.0.
    with pytest.raises(ValueError, match="^a: the float"):
        fb.add(np.array([L(1) + L(2) ** -60]), np.array([0.0]), "bf16")
    with pytest.raises(ValueError, match="^q: the float"):
        big = np.full((2, 4), L(1) + L(2) ** -60)
        fb.attention(big, big, big, "fa2-sm80")
    # Values float64 holds exactly (NaN and infinities included) are taken.
    assert fb.round(np.array([L(1.5), L(2) ** -1000, L("inf")]), "bf16").values.tolist() == [1.5, 0.0, math.inf]
    assert math.isnan(fb.round(np.array([L("nan")]), "bf16").values[0])


def test_plot_feature_outside_the_head_dim_is_refused_not_clamped():
    q = bf16((8, 4), 0)
    for bad in (4, 100, -5):
        with pytest.raises(ValueError, match=rf"^plot_feature={bad}: expected 0\.\.3"):
            fb.attention(q, q, q, "fa2-sm80", trace=[0], plot_feature=bad, threads=1)
    assert fb.attention(q, q, q, "fa2-sm80", trace=[0], plot_feature=3, threads=1).traces[0]["plot_feature"] == 3


def test_dot_of_no_terms_names_its_operands():
    with pytest.raises(ValueError, match=r"^a, b: k = 0 \(shape \(3, 0\)\)"):
        fb.dot("sm80", np.zeros((3, 0)), np.zeros((3, 0)))


def test_zero_dimensional_inputs_give_zero_dimensional_results():
    # add() gave bits of shape () but values of shape (1,); round() gave (1,) for everything.
    for r, want in ((fb.add(1.0, 2.0, "bf16", flags=True), 3.0),
                    (fb.round(np.float64(1.5), "bf16", flags=True), 1.5),
                    (fb.round(np.float32(0.5), "bf16", flags=True), 0.5),
                    (fb.round(np.uint16(0x3F80), "bf16", flags=True), 1.0),
                    (fb.dot("sm80", np.ones(4), np.ones(4)), 4.0)):
        assert r.bits.shape == () and r.values.shape == (), r
        assert r.flags is None or r.flags.shape == ()
        assert r.values == want
    assert fb.decode(np.uint16(0x4000), "bf16").shape == () and fb.decode(0x4000, "bf16") == 2.0
    assert fb.round(np.ones((2, 0)), "bf16").values.shape == (2, 0)  # other shapes as they were


@pytest.fixture(scope="module")
def one_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("bt") / "t0.safetensors"
    q, k, v, do = (bf16((1, 2, 32, 16), seed) for seed in range(4))
    r = fb.attention(q, k, v, "fa2-sm80", do=do, scale=0.25, threads=1)
    fb.save_trace(path, q=q, k=k, v=v, o=r.o, lse=r.lse, do=do, delta=r.delta, dq=r.dq, dk=r.dk, dv=r.dv,
                  metadata={"source": "emulated", "model": "fa2-sm80", "softmax_scale": 0.25})
    return path


@pytest.mark.parametrize("name, value", [("scenario", "sink"), ("trials", 32), ("seqlen", 256), ("headdim", 64),
                                         ("seed", 7)])
def test_bias_test_of_traces_refuses_what_it_would_ignore(one_trace, name, value):
    # The traces hold their inputs: these were ignored, even invalid ones (trials=-5), where
    # bias-test --traces refuses --scenario --trials --seqlen --headdim --seed.
    with pytest.raises(ValueError, match=rf"^{name}: the traces hold their inputs"):
        fb.bias_test(traces=str(one_trace), **{name: value})
    assert fb.bias_test(traces=[str(one_trace)])["verdict"] == "inconclusive"  # one sample a kv head


def test_bias_test_of_traces_takes_dtype_as_the_captures_format(one_trace):
    # As bias-test --traces --dtype: the format of a bare capture's bit patterns; a trace that
    # names its own keeps it, and a contradicting dtype is refused, naming the keyword.
    assert fb.bias_test(traces=[str(one_trace)], dtype="bf16")["verdict"] == "inconclusive"
    with pytest.raises(ValueError, match=r"dtype=fp16 contradicts tensor 'q', which is BF16 \(drop dtype="):
        fb.bias_test(traces=[str(one_trace)], dtype="fp16")


def test_load_trace_names_its_keywords_not_the_clis_options(tmp_path):
    q = bf16((1, 1, 8, 4), 0)
    path = tmp_path / "t.safetensors"
    fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"source": "unknown", "softmax_scale": 0.5})
    with pytest.raises(ValueError) as e:
        fb.load_trace(path, scale=0.3)
    assert str(e.value) == (f"{path}: scale=0.3 conflicts with the file's __metadata__ softmax_scale='0.5' "
                            f"(the file's own metadata wins; drop scale=)")
    np.savez(tmp_path / "bare.npz", q=q, k=q, v=q)  # [1, 1, 8, 4] reads as either layout
    with pytest.raises(ValueError, match=r"pass layout=bhsd or layout=bshd$"):
        fb.load_trace(tmp_path / "bare.npz", source="unknown")
    with pytest.raises(ValueError, match=r"does not say where it came from: pass source=cuda:<gpu> "):
        fb.load_trace(tmp_path / "bare.npz", layout="bhsd")


def test_an_approximate_model_warns_on_every_run():
    # cudnn-sdpa-sm90 is a black-box fit (not bit-exact): the CLI prints its note, and the module
    # issues it as an ApproximateModelWarning and keeps it on the result; a bit-exact model does not.
    import warnings
    q, k, v = bf16((1, 2, 64, 64), 31), bf16((1, 2, 64, 64), 32), bf16((1, 2, 64, 64), 33)
    with pytest.warns(fb.ApproximateModelWarning, match="black-box fit"):
        r = fb.attention(q, k, v, "cudnn-sdpa-sm90")
    assert "not bit-exact" in r.warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fb.attention(q, k, v, "fa2-sm90").warning is None


def test_notes_name_what_no_capture_measured_for_this_shape():
    # Shapes a model takes from its source but no hardware capture covered say so with the run
    # (replay prints the same lines); a shape the captures cover has no note.
    q, do = bf16((1, 2, 64, 64), 41), bf16((1, 2, 64, 64), 42)
    k, v = bf16((1, 1, 64, 64), 43), bf16((1, 1, 64, 64), 44)  # one kv head for two query heads
    flex = fb.attention(q, k, v, "flex-attention-sm90", do=do)
    assert any("flex-decoding kernel" in n for n in flex.notes), flex.notes
    assert any("grouped-query dK and dV" in n and "ASSUMED" in n for n in flex.notes), flex.notes
    assert fb.attention(q, k, v, "pytorch-fa2-sm90", do=do).notes == []  # FA2's own group reduction
    math_long = fb.attention(bf16((1, 1, 2, 16), 45), bf16((1, 1, 1100, 16), 46), bf16((1, 1, 1100, 16), 47),
                             "pytorch-math-sm90")
    assert any("over 1024 keys" in n and "UNMEASURED" in n for n in math_long.notes), math_long.notes


def test_a_forward_only_model_notes_no_group_reduction_it_does_not_run():
    # Found by the lengths audit: ck-fmha-cdna3 and fa3-fp8-sm90 have no backward (dK and dV are
    # None), yet a GQA run with dO noted how their kernels would reduce a group's dK and dV.
    rng = np.random.default_rng(1)
    q = fb.round(rng.standard_normal((1, 4, 16, 32)), "e4m3").values
    k = fb.round(rng.standard_normal((1, 2, 16, 32)), "e4m3").values
    for model in ("ck-fmha-cdna3", "fa3-fp8-sm90"):
        r = fb.attention(q, k, k, model, do=q)
        assert r.dk is None and r.dv is None and r.delta is not None
        assert not [n for n in r.notes if "grouped-query dK and dV" in n], (model, r.notes)
        # ... and says that its gradients are None, as replay notes gradients it does not compare.
        assert [n for n in r.notes if "forward and delta only" in n and "None" in n], (model, r.notes)
    # The note is the backward's: a forward-only call, or a model with a backward, has none.
    assert not [n for n in fb.attention(q, k, k, "fa3-fp8-sm90").notes if "delta only" in n]
    qb = fb.round(rng.standard_normal((1, 2, 16, 32)), "bf16").values
    for model in ("fa2-sm80", "correctly-rounded"):
        assert not [n for n in fb.attention(qb, qb, qb, model, do=qb).notes if "delta only" in n], model


def test_output_format_is_the_format_of_os_values():
    # golden-fp64-* keeps O unrounded in fp64 (its nominal output is fp32); output_format says
    # where O's values are, checked against the values themselves.
    q, k, v = bf16((1, 1, 16, 16), 51), bf16((1, 1, 16, 16), 52), bf16((1, 1, 16, 16), 53)
    g = fb.attention(q, k, v, "golden-fp64-flash")
    assert g.output_format == "fp64"
    assert not np.array_equal(g.o.astype(np.float32).astype(np.float64), g.o)  # not fp32 values
    b = fb.attention(q, k, v, "fa2-sm80")
    assert b.output_format == "bf16" and np.array_equal(fb.round(b.o, "bf16").values, b.o)


def test_a_seed_for_a_model_that_draws_none_is_refused():
    # A seed that no arithmetic of the model reads would be accepted and change nothing.
    q = bf16((8, 16), 71)
    with pytest.raises(ValueError, match="draws no random bits"):
        fb.attention(q, q, q, "fa2-sm80", seed=3)
    # A seeded model takes it; left out, it is 0.
    left_out = fb.attention(q, q, q, "fa2-sm80+o-sr")
    assert left_out.o.tobytes() == fb.attention(q, q, q, "fa2-sm80+o-sr", seed=0).o.tobytes()
    assert left_out.o.tobytes() != fb.attention(q, q, q, "fa2-sm80+o-sr", seed=5).o.tobytes()


def test_an_always_causal_backward_warns_only_where_it_is_wrong():
    # triton-tutorial-sm90's backward masks causally whatever its forward did: with causal off
    # its gradients are not those of its O (test_torch checks them against float64 autograd).
    # A run with causal on, or a forward alone, is the kernel's and right, and says nothing.
    import warnings
    rng = np.random.default_rng(7)
    q, k, v, do = (fb.round(rng.standard_normal((128, 32)), "fp16").values for _ in range(4))
    with pytest.warns(UserWarning, match="always masks causally"):
        fb.attention(q, k, v, "triton-tutorial-sm90", do=do, dtype="fp16")
    kept = fb.attention(q, k, v, "triton-tutorial-sm90", dtype="fp16", keep_forward=True)
    with pytest.warns(UserWarning, match="always masks causally"):
        kept.backward(do)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fb.attention(q, k, v, "triton-tutorial-sm90", do=do, dtype="fp16", causal=True)
        fb.attention(q, k, v, "triton-tutorial-sm90", dtype="fp16")
        fb.attention(q, k, v, "triton-tutorial-sm90", dtype="fp16", causal=True, keep_forward=True).backward(do)


def test_the_exact_reference_of_a_row_with_a_non_finite_input_is_nan():
    # A NaN or infinite q row has no exact attention. max() over NaN scores kept -inf, so such
    # a row read as one that sees no key: O = 0 and LSE = +inf, a finite answer where the
    # kernels (fa2-sm80 here) give NaN. The other rows are untouched: numpy's float64 softmax.
    rng = np.random.default_rng(0)
    q, k, v = (fb.round(rng.standard_normal((1, 1, 4, 8)), "bf16").values for _ in range(3))
    for poison in (np.nan, np.inf, -np.inf):
        bad = q.copy()
        bad[0, 0, 1, :] = poison
        r = fb.exact_attention(bad, k, v)
        assert np.isnan(r.o[0, 0, 1]).all() and np.isnan(r.lse[0, 0, 1]).all(), poison
        s = q[0, 0] @ k[0, 0].T / np.sqrt(8)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = (p / p.sum(axis=1, keepdims=True)) @ v[0, 0]
        for row in (0, 2, 3):
            assert np.allclose(r.o[0, 0, row], want[row], rtol=1e-12, atol=1e-14)
    # One NaN element is enough.
    bad = q.copy()
    bad[0, 0, 2, 3] = np.nan
    assert np.isnan(fb.exact_attention(bad, k, v).o[0, 0, 2]).all()


# Found by the bad-input audit: element i draws at stochastic position `position + i`, which
# wrapped past 2^64 - 1 back to position 0 and reused its draws.
def test_sr_positions_past_2_64_are_refused_not_wrapped():
    x = np.linspace(0.1, 1.0, 10, dtype=np.float32)
    top = 2**64 - 1
    ok = fb.round(x, "bf16", "sr", position=top - 9)  # the last element draws at 2^64 - 1
    assert ok.bits.shape == (10,)
    for call in (lambda: fb.round(x, "bf16", "sr", position=top - 8),
                 lambda: fb.round(x.astype(np.float64), "bf16", "sr", position=top - 8),
                 lambda: fb.add(ok.values, ok.values, "bf16", "sr", position=top - 8)):
        with pytest.raises(ValueError, match=r"position: .* exceeds 2\^64 - 1"):
            call()


# Found by the bad-input audit: block=2**70 reached pybind as no C++ int, which answered with
# "incompatible function arguments" and the whole signature.
def test_dot_block_beyond_int_is_named():
    with pytest.raises(ValueError, match=r"^block: .* larger than any block size"):
        fb.dot("sm100-mxf8f6f4", np.zeros((1, 32)), np.zeros((1, 32)), fmt="e4m3", block=2**70)


# Found by the bad-input audit: save_trace wrote a None metadata value as the string "None"
# (a model or a scale named None) and a list as its repr.
def test_save_trace_metadata_takes_strings_bools_and_numbers_only(tmp_path):
    q = np.full((1, 1, 2, 2), 0.5)
    for value, what in ((None, "None"), ([1, 2], "list")):
        with pytest.raises(TypeError, match=rf"metadata\['softmax_scale'\]: .*{what}"):
            fb.save_trace(tmp_path / "t.safetensors", q=q, k=q, v=q, o=q,
                          metadata={"source": "unknown", "softmax_scale": value})
    fb.save_trace(tmp_path / "t.safetensors", q=q, k=q, v=q, o=q,
                  metadata={"source": "unknown", "softmax_scale": np.float64(0.5), "causal": np.bool_(False)})
    t = fb.load_trace(tmp_path / "t.safetensors")
    assert t.metadata["softmax_scale"] == "0.5" and t.metadata["causal"] == "false"


# Found by the bad-input audit: bias_test on an .npz of uint16 bit patterns said to name their
# format "with --dtype", an option bias_test did not take. It takes dtype= for them now.
def test_bias_test_on_bit_patterns_says_how_to_name_their_format(tmp_path):
    q = np.full((1, 1, 8, 4), 0x3F80, dtype=np.uint16)
    np.savez(tmp_path / "bits.npz", q=q, k=q, v=q, o=q)
    statement = {"source": "unknown", "causal": False, "scale": 0.5, "layout": "bhsd"}
    with pytest.raises(ValueError, match=r"bits.npz.*name their format with dtype='bf16'") as e:
        fb.bias_test(traces=[tmp_path / "bits.npz"], **statement)
    assert "--" not in str(e.value)
    r = fb.bias_test(traces=[tmp_path / "bits.npz"], dtype="bf16", **statement)
    assert r.verdict == "inconclusive"  # one sample


# exact_attention(rounded_as=MODEL): the floor bias_test and the training study measure a kernel
# against. Checked against exact rationals (tests/exact_reference.py): O is the exact O rounded
# once to the model's output format; delta is sum(dO * that O), summed exactly and rounded once
# to fp32; under +o-fp32 (delta from O before its final cast) the exact delta rounded once.
def test_exact_attention_rounded_as_is_the_models_floor():
    from fractions import Fraction
    from exact_reference import FORMATS, round_exact

    def rounded(x, fmt):
        value, _ = round_exact(Fraction(x), FORMATS[fmt], "rne")
        return 0.0 if isinstance(value, tuple) else float(value)

    rng = np.random.default_rng(7)
    shape = (1, 2, 6, 4)
    q, k, v, do = (fb.round(rng.standard_normal(shape), "bf16").values for _ in range(4))
    exact = fb.exact_attention(q, k, v, do=do)
    floor = fb.exact_attention(q, k, v, do=do, rounded_as="fa2-sm80")
    want_o = np.vectorize(lambda x: rounded(x, "bf16"))(exact.o)
    assert np.array_equal(floor.o, want_o)
    assert not np.array_equal(floor.o, exact.o)  # the inputs are not all exactly representable outputs
    for h in range(shape[1]):
        for r in range(shape[2]):
            s = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(do[0, h, r], want_o[0, h, r]))
            assert floor.delta[0, h, r] == rounded(s, "fp32")
    kept = fb.exact_attention(q, k, v, do=do, rounded_as="fa2-sm80+o-fp32")
    assert np.array_equal(kept.delta, np.vectorize(lambda x: rounded(x, "fp32"))(exact.delta))
    with pytest.raises(ValueError, match=r"^recipe: needs rounded_as"):
        fb.exact_attention(q, k, v, recipe="docs/recipes/fp32-storage.json")


# Found by the fourth verdict audit: `biased` was False for "inconclusive", so `if not r.biased`
# passed a kernel the test could not judge (4 trials are fewer than a verdict needs).
def test_biased_is_only_a_decided_verdict():
    undecided = fb.bias_test("fa2-sm80", "sink", trials=4, seqlen=32, headdim=16)
    assert undecided.verdict == "inconclusive"
    with pytest.raises(ValueError, match=r"biased: the test decided nothing \(verdict: inconclusive\)"):
        undecided.biased
    assert fb.bias_test("fa-bf16acc", "sink", trials=24, seqlen=64, headdim=32).biased is True
    assert fb.bias_test("correctly-rounded", "sink", trials=8, seqlen=32, headdim=16).biased is False


# Found by the fifth verdict audit: against= a copy of itself, fa-bf16acc (O 32/32 trials
# negative, -0.098 ulp) was `biased` False: the verdict is relative to the other model.
def test_biased_refuses_a_verdict_relative_to_another_model():
    r = fb.bias_test("fa-bf16acc", "sink", against="fa-bf16acc+o-rne", trials=16, seqlen=64, headdim=32)
    assert r.relative_to == "fa-bf16acc" and r.verdict == "no detectable added bias"  # +o-rne is its default
    assert r.o.mean_ulps < -0.05  # the kernel's own O error: biased against exact
    with pytest.raises(ValueError, match=r"biased: this test compared with fa-bf16acc, which has a bias of its own"):
        r.biased


# Found by the fourth bad-input audit: a compressed capture that decompresses past the memory a
# process may use ended in "internal error: std::bad_alloc" (exit 3, which means a bug). It is
# bad input for this machine: exit 2, one line.
@pytest.mark.skipif(os.environ.get("FLASHBITS_TEST_SCALE") == "sanitizer",
                    reason="AddressSanitizer reserves more address space than the limit allows")
def test_a_capture_too_large_for_memory_is_bad_input_not_a_crash(tmp_path):
    from conftest import CLI
    zeros = np.zeros((1, 1, 1 << 20, 64), dtype=np.uint16)
    np.savez_compressed(tmp_path / "big.npz", q=zeros, k=zeros, v=zeros, o=zeros)  # a few hundred kB
    assert os.path.getsize(tmp_path / "big.npz") < 4 << 20
    out = tmp_path / "t.safetensors"
    p = subprocess.run(["bash", "-c", f"ulimit -v 600000; exec '{CLI}' import '{tmp_path / 'big.npz'}' --out '{out}' "
                        "--source unknown --dtype bf16 --layout bhsd"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: out of memory: ") and p.stderr.count("\n") == 1
    assert not out.exists()


# Found by the sixth bad-input audit: a 1 MB deflate member declaring a gigabyte (within deflate's
# 1032x limit) was refused as corrupt only after a gigabyte was zero-filled for it. The buffer
# now grows with what inflates: under a 300 MB limit it is the corrupt-data error, not memory.
@pytest.mark.skipif(os.environ.get("FLASHBITS_TEST_SCALE") == "sanitizer",
                    reason="AddressSanitizer reserves more address space than the limit allows")
def test_a_member_declaring_more_than_it_inflates_to_costs_what_it_inflates_to(tmp_path):
    import struct
    import zipfile
    from conftest import CLI
    bomb = tmp_path / "lying.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("q.npy", np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
    b = bytearray(bomb.read_bytes())
    at = b.find(b"PK\x01\x02")
    declared = struct.unpack("<I", b[at + 20:at + 24])[0] * 1000  # 1000x its compressed size, about 1 GB
    b[at + 24:at + 28] = struct.pack("<I", declared)  # central directory's uncompressed size
    b[22:26] = struct.pack("<I", declared)  # the local header's
    bomb.write_bytes(bytes(b))
    p = subprocess.run(["bash", "-c", f"ulimit -v 300000; exec '{CLI}' import '{bomb}' --out '{tmp_path / 't.st'}' "
                        "--source unknown"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "does not inflate to the declared " + str(declared) + " bytes" in p.stderr, p.stderr


# Found by the fourth bad-input audit: a NUL byte in a model name (a metadata string, or a
# Python str) cut the message at it: "unknown kernel model 'fa2-sm80" and nothing after.
def test_a_nul_in_a_model_name_is_named_not_cut():
    q = np.full((1, 1, 4, 4), 0.5)
    with pytest.raises(ValueError, match=r"kernel model name 'fa2-sm80\\x00zz': a NUL byte at position 8"):
        fb.attention(q, q, q, "fa2-sm80\x00zz")


# Found by the fourth bad-input audit: arguments that change nothing were taken silently.
def test_unused_or_impossible_arguments_are_refused():
    q = np.full((1, 1, 4, 4), 0.5)
    with pytest.raises(ValueError, match=r"^plot_feature=2: needs trace="):
        fb.attention(q, q, q, "fa2-sm80", plot_feature=2)
    assert fb.attention(q, q, q, "fa2-sm80", plot_feature=2, trace=[0]).traces is not None
    for bad in (-1, 32, 999):
        with pytest.raises(ValueError, match=rf"^flags: {bad} is no flag set"):
            fb.flags_string(bad)
    assert fb.flags_string(31) == "xuozv"


# Found by the fourth bad-input audit: save_trace wrote a model name replay refuses (and a
# non-string key as its text), and load_trace returned one; both are refused as import refuses them.
def test_save_and_load_trace_refuse_a_model_replay_cannot_run(tmp_path):
    q = np.full((1, 1, 2, 2), 0.5)
    path = tmp_path / "t.safetensors"
    with pytest.raises(ValueError, match=r"metadata model 'nope': unknown kernel model"):
        fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"source": "emulated", "model": "nope", "dtype": "bf16"})
    assert not path.exists()
    with pytest.raises(TypeError, match=r"metadata: keys are strings, got 5"):
        fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"source": "emulated", 5: "x"})
    fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"source": "emulated", "dtype": "bf16"})
    with pytest.raises(ValueError, match=r"metadata model 'nope': unknown kernel model"):
        fb.load_trace(path, model="nope")


def test_errors_give_their_advice_in_pythons_terms(tmp_path):
    # Found by the Python audit: an unknown dot model said "(see `flashbits models`)" and a
    # recipe's unknown format "(see flashbits formats, ...)", commands a Python user has no
    # use for; the catalogues named are the module's own, and each names what was looked up.
    with pytest.raises(ValueError, match=r"unknown dot model 'sm81' \(see flashbits\.dot_models\(\)\)") as e:
        fb.dot("sm81", np.ones(4), np.ones(4))
    assert "sm81" not in fb.dot_models() and "`" not in str(e.value)
    with pytest.raises(ValueError, match=r"\(see flashbits\.dot_models\(\)\)"):
        fb.matmul("sm81", np.ones((2, 4)), np.ones((4, 2)))
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"name": "r", "stages": {"p_cast": "bf17"}}))
    with pytest.raises(ValueError, match=r"unknown format 'bf17' \(a format flashbits\.format_info\(\) knows"):
        fb.attention(np.ones((4, 8)), np.ones((4, 8)), np.ones((4, 8)), "fa2-sm80", recipe=str(recipe))
    with pytest.raises(ValueError):
        fb.format_info("bf17")


def test_bias_test_sees_a_rounding_toward_zero_in_the_magnitude_of_outputs_of_either_sign():
    # On `random` the outputs have either sign: a final cast toward zero errs down on the
    # positive ones and up on the negative ones, which cancel in the signed mean. Truncation
    # never gives a larger magnitude than rounding to nearest, so the magnitude excess is
    # negative in every trial, and the run (alpha 1e-3 over its 4 comparisons) adds bias.
    r = fb.bias_test("correctly-rounded+o-rtz", "random", trials=10, seqlen=32)
    assert r["comparisons"] == 4
    assert r["alpha_per_comparison"] == r["alpha"] / 4
    for output in ("o", "delta"):
        m = r["magnitude_against_floor"][output]
        assert m["verdict"] == "adds bias", m
        assert m["kernel_mean_ulps"] < 0 and m["excess_mean_ulps"] < 0, m
        assert "magnitudes shrink toward zero" in m["reason"], m
    assert r["against_floor"]["o"]["verdict"] != "adds bias", r["against_floor"]["o"]
    assert r["verdict"] == "adds bias" and r.biased
    rne = fb.bias_test("correctly-rounded", "random", trials=10, seqlen=32)
    assert rne["magnitude_against_floor"]["o"]["excess_mean_ulps"] == 0.0
    assert rne["verdict"] == "no detectable added bias"


def test_import_without_numpy_names_the_remedy():
    # Found by the newcomer audit: `import flashbits` under an interpreter without numpy (the
    # pyenv python3 on PATH here) stopped at a bare "No module named 'numpy'". The message must
    # say flashbits needs numpy and how to get an interpreter that has it. numpy is hidden from
    # a child interpreter by the import system's documented rule: None in sys.modules makes
    # `import numpy` raise ModuleNotFoundError.
    code = "import sys; sys.modules['numpy'] = None; import flashbits"
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=BUILD_PYTHON),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: flashbits needs numpy"), p.stderr
    assert "python3-numpy" in last and "/usr/bin/python3" in last, p.stderr


def test_a_recipe_that_cannot_be_read_names_the_argument(tmp_path, cli):
    # Found by the training audit: recipe="/nonexistent.json" said only "/nonexistent.json:
    # cannot open", where every other refusal names its argument (the CLI's option likewise).
    q = fb.round(np.random.default_rng(3).standard_normal((8, 16)), "bf16").values
    missing = str(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"^recipe: .*missing\.json: cannot open"):
        fb.attention(q, q, q, "fa-bf16acc", recipe=missing)
    with pytest.raises(ValueError, match=r"^recipe: .*missing\.json: cannot open"):
        fb.bias_test("fa-bf16acc", "sink", trials=8, seqlen=16, recipe=missing)
    bad = tmp_path / "bad.json"
    bad.write_text('{"stages": 3')
    with pytest.raises(ValueError, match=r"^recipe: .*bad\.json"):
        fb.attention(q, q, q, "fa-bf16acc", recipe=str(bad))
    code, _, err = cli("bias-test", "--model", "fa-bf16acc", "--recipe", missing, check=False)
    assert code == 2 and err.startswith("error: --recipe: ") and "missing.json: cannot open" in err, err


def test_a_scale_beyond_fp32_is_refused_by_the_models_that_take_it_as_a_float(tmp_path, cli):
    # Found by the training audit: scale=1e300 is finite in Python, but FlashAttention-style
    # kernels take softmax_scale as a float, where it is inf: every output came back NaN with
    # nothing said. The largest fp32 value itself (numpy's, an independent reference) still runs.
    import torch
    import flashbits.torch as fbt
    q = fb.round(np.random.default_rng(4).standard_normal((1, 2, 128, 32)), "bf16").values
    for model in ("fa2-sm80", "pytorch-fa2-sm90", "triton-tutorial-sm90", "flex-attention-sm90", "fa3-fp8-sm90"):
        with pytest.raises(ValueError, match=r"softmax scale 1e300 is above fp32's largest value: " + model):
            fb.attention(q, q, q, model, scale=1e300)
        fb.attention(q, q, q, model, scale=float(np.finfo(np.float32).max))  # representable: runs
    t = torch.tensor(q, dtype=torch.float32)
    with pytest.raises(ValueError, match="above fp32's largest value"):
        fbt.scaled_dot_product_attention(t, t, t, scale=1e300, model="fa2-sm80")
    # Models that keep scores unrounded take any finite scale, and their outputs are finite.
    for model in ("correctly-rounded", "golden-fp64-flash"):
        assert np.isfinite(fb.attention(q, q, q, model, scale=1e300).o).all(), model
    # A trace whose softmax_scale is such a value: save_trace refuses to write it, and replay
    # refuses one written otherwise (the metadata edited in place), naming the file.
    o = fb.attention(q, q, q, "fa2-sm80").o
    path = str(tmp_path / "big_scale.safetensors")
    tensors = {"q": q, "k": q, "v": q, "o": o}
    with pytest.raises(ValueError, match=r"big_scale\.safetensors: softmax scale 1e300 is above fp32's largest value"):
        fb.save_trace(path, tensors,
                      metadata={"source": "emulated", "model": "fa2-sm80", "softmax_scale": 1e300, "causal": False})
    fb.save_trace(path, tensors,
                  metadata={"source": "emulated", "model": "fa2-sm80", "softmax_scale": 0.125, "causal": False})
    raw = open(path, "rb").read()
    assert raw.count(b'"softmax_scale":"0.125"') == 1
    open(path, "wb").write(raw.replace(b'"softmax_scale":"0.125"', b'"softmax_scale":"1e300"'))
    code, _, err = cli("replay", path, check=False)
    assert code == 2 and err.startswith(f"error: {path}: ") and "above fp32's largest value" in err, err
    # Found by the bad-input audit: import wrote that trace (exit 0), which replay then refused.
    again = tmp_path / "again.safetensors"
    code, _, err = cli("import", path, "--out", str(again), check=False)
    assert code == 2 and err.startswith(f"error: {path}: ") and "above fp32's largest value" in err, err
    assert not again.exists()
    # At the other end the float is 0 (every row a uniform average): half numpy's smallest fp32
    # subnormal and below are refused, the smallest subnormal itself runs.
    smallest = float(np.finfo(np.float32).smallest_subnormal)
    for scale in (smallest / 2, 1e-50):
        with pytest.raises(ValueError, match=r"softmax scale \S+ is below fp32's smallest value: fa2-sm80"):
            fb.attention(q, q, q, "fa2-sm80", scale=scale)
    assert np.isfinite(fb.attention(q, q, q, "fa2-sm80", scale=smallest).o).all()
    assert np.isfinite(fb.attention(q, q, q, "correctly-rounded", scale=1e-50).o).all()


@pytest.mark.parametrize("header", [
    b'{"__metadata__": {"source": "emul\xff"}}',  # a byte that is no UTF-8
    b'{"__metadata__": {"source": "' + "\u00e9".encode() * 120,  # unterminated: the message is cut
])
def test_a_broken_header_is_a_value_error_that_says_what_and_where(tmp_path, header):
    # Python decodes an error message as UTF-8: echoing the header's own bytes made the
    # ValueError's message empty (the fuzz audit of 2026-12-07). It names the file and the
    # byte, with non-UTF-8 bytes as \xNN and a cut message whole characters long.
    import struct
    path = tmp_path / "broken.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(ValueError) as info:
        fb.load_trace(path)
    message = str(info.value)
    assert message.startswith(str(path) + ": header is not valid JSON"), message
    assert "\\xff" in message if b"\xff" in header else message.endswith("\u00e9..."), message


def test_the_trace_docstrings_replay_recipe_is_bit_for_bit_and_fp16_values_name_their_dtype():
    # Found by the Python audit: Trace's docstring recipe had no dtype= and no sfu=: on an fp16
    # capture it raised "not exactly representable in bf16 (round first ...)", and following
    # that advice ran other inputs (15469 of 16384 O elements differed); on a bf16 capture it
    # ran the model's own SFUs and differed in O, LSE and the gradients without a word. The
    # reference is the capture itself (an H200's bits).
    for name in ("torch/torch_fp16_random_d64.safetensors", "fa2/fa2_random_d64.safetensors"):
        t = fb.load_trace(os.path.join(ROOT, "traces", "hw", "h200", name))
        assert t.hardware and t.metadata["compute_capability"] == "9.0"
        r = fb.attention(t["q"], t["k"], t["v"], t.model, do=t["do"] if "do" in t else None,
                         causal=t.causal_alignment, scale=t.scale, dtype=t.dtype, sfu="hw-sm90")
        for out in ("o", "lse", "dq", "dk", "dv"):
            if out in t:
                assert np.array_equal(getattr(r, out), t[out]), (name, out)
    t = fb.load_trace(os.path.join(ROOT, "traces", "hw", "h200", "torch", "torch_fp16_random_d64.safetensors"))
    with pytest.raises(ValueError, match=r"^q\[0,0,0,0\]: .* is not exactly representable in bf16 \(round first: .*\); "
                                         r"every value of q is an fp16 value: for fp16 inputs pass dtype='fp16' \(to a "
                                         r"model that reads fp16\)$"):
        fb.attention(t["q"], t["k"], t["v"], t.model, causal=t.causal_alignment, scale=t.scale)
    # Values of no other format keep the generic advice.
    with pytest.raises(ValueError, match=r"not exactly representable in bf16 \(round first"):
        fb.attention(np.full((1, 1, 2, 2), 0.1), np.full((1, 1, 2, 2), 0.1), np.full((1, 1, 2, 2), 0.1), "fa2-sm80")


def test_save_trace_refuses_a_tensor_given_twice(tmp_path):
    # Found by the Python audit: save_trace(path, {"q": q1}, q=q2, ...) wrote q2 without a word.
    q1, q2 = np.zeros((1, 1, 2, 4)), np.ones((1, 1, 2, 4))
    path = tmp_path / "t.safetensors"
    with pytest.raises(ValueError, match=r"^q: given both in tensors and as a keyword; give each tensor once$"):
        fb.save_trace(path, {"q": q1, "k": q1}, q=q2, v=q1, o=q1, metadata={"source": "emulated"})
    assert not path.exists()
    fb.save_trace(path, {"q": q1, "k": q1}, v=q2, o=q1, metadata={"source": "emulated"})
    t = fb.load_trace(path)
    assert np.array_equal(t["q"], q1) and np.array_equal(t["v"], q2)


def test_save_trace_refuses_a_numpy_file_name(tmp_path):
    # A trace saved as DIR/x.npy was safetensors under numpy's name: load_trace then read it as
    # a broken .npy, and inside a folder of .npy arrays it became one more tensor.
    q = np.zeros((1, 1, 2, 4))
    for name in ("t.npy", "t.npz"):
        path = tmp_path / name
        with pytest.raises(ValueError, match=r"flashbits writes no numpy file, and one named \.npz or \.npy is read"):
            fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"source": "emulated"})
        assert not path.exists()


# Found by the Python audit: decode read a signed array by its values, so bf16 bits carried as
# int16 (torch's way) decoded while their sign bit was clear and failed with "-16384 is not a
# bit pattern" once one was set; an int32 array decoded at any width where uint32 was refused.
# The encoding facts: bf16 0x3F80 is 1.0, 0x4000 is 2.0, 0xC000 is -2.0.
def test_decode_refuses_signed_arrays_by_dtype_whatever_their_values():
    positive = np.array([0x3F80, 0x4000], np.uint16).view(np.int16)
    with_sign_bit = np.array([0x3F80, 0xC000], np.uint16).view(np.int16)
    assert with_sign_bit[1] < 0 <= positive.min()
    for signed in (positive, with_sign_bit):
        with pytest.raises(ValueError, match=r"^bits: an int16 array is ambiguous.*\.view\(numpy\.uint16\)"):
            fb.decode(signed, "bf16")
    with pytest.raises(ValueError, match=r"^bits: an int8 array is ambiguous.*\.view\(numpy\.uint8\)"):
        fb.decode(np.array([0x38], np.int8), "e4m3")
    for wide in (np.int32, np.int64):
        with pytest.raises(TypeError, match=rf"^bits: an {np.dtype(wide).name} array holds values .*numpy\.uint16"):
            fb.decode(np.array([0x3F80], wide), "bf16")
    # Bit patterns: unsigned arrays of the container width, or Python ints (no width of their own).
    assert fb.decode(with_sign_bit.view(np.uint16), "bf16").tolist() == [1.0, -2.0]
    assert fb.decode([0x3F80, 0xC000], "bf16").tolist() == [1.0, -2.0]
    assert fb.decode([[0x3F80], [0x4000]], "bf16").tolist() == [[1.0], [2.0]]
    with pytest.raises(ValueError, match=r"^bits: -1 is not a bit pattern \(negative\)"):
        fb.decode([-1], "bf16")
    with pytest.raises(ValueError, match=r"uint32 array holds 32-bit patterns, but bf16 patterns are 16-bit"):
        fb.decode(np.array([0x3F80], np.uint32), "bf16")


# Found by the Python audit: metadata={"scale": 0.125} was written and never read (the schema's
# key is softmax_scale, traces/trace.hpp), so the trace replayed at 1/sqrt(D) without a word.
@pytest.mark.parametrize("key, schema_key", [
    ("scale", "softmax_scale"), ("sm_scale", "softmax_scale"), ("Softmax-Scale", "softmax_scale"),
    ("is_causal", "causal"), ("Causal", "causal"),
    ("causalAlignment", "causal_alignment"), ("causal-alignment", "causal_alignment"),
    ("alignment", "causal_alignment"),
    ("seqlen_kv", "seqlen_k"), ("torch_dtype", "dtype"), ("Source", "source"), ("blockM", "block_m"),
])
def test_save_trace_refuses_a_schema_key_spelled_another_way(tmp_path, key, schema_key):
    q = np.full((1, 1, 2, 2), 0.5)
    path = tmp_path / "t.safetensors"
    with pytest.raises(ValueError, match=rf"^metadata\['{key}'\]: the trace schema's key for this is '{schema_key}'"):
        fb.save_trace(path, q=q, k=q, v=q, o=q, metadata={"source": "unknown", key: "true"})
    assert not path.exists()


def test_save_trace_keeps_free_keys_and_reads_the_schemas_scale(tmp_path):
    q = np.full((1, 1, 2, 2), 0.5)
    path = tmp_path / "t.safetensors"
    fb.save_trace(path, q=q, k=q, v=q, o=q,
                  metadata={"source": "unknown", "softmax_scale": 0.125, "gpu_clock": "1980 MHz", "notes": "x"})
    t = fb.load_trace(path)
    assert t.scale == 0.125 and t.metadata["gpu_clock"] == "1980 MHz"


def test_save_trace_refuses_tensor_names_that_are_not_non_empty_strings(tmp_path):
    # Found by the Python audit: {5: q} was written as the tensor "5", {"": q} accepted.
    q = np.full((1, 1, 2, 2), 0.5)
    path = tmp_path / "t.safetensors"
    meta = {"source": "unknown"}
    with pytest.raises(TypeError, match=r"^tensors: names are strings .*got 5$"):
        fb.save_trace(path, {5: q, "q": q, "k": q, "v": q, "o": q}, metadata=meta)
    with pytest.raises(ValueError, match=r"^tensors: an empty name"):
        fb.save_trace(path, {"": q, "q": q, "k": q, "v": q, "o": q}, metadata=meta)
    assert not path.exists()


# Found by the Python audit: the CLI's advice "(flashbits import --model NAME records a
# capture's)" reached Python as "(flashbits import model=NAME ...)", neither a command nor a call.
def test_bias_test_of_two_models_traces_advises_in_pythons_terms(tmp_path):
    q, k, v = (bf16((1, 1, 16, 8), seed) for seed in range(3))
    for i, model in enumerate(("fa2-sm80", "fa-bf16acc")):
        r = fb.attention(q, k, v, model, scale=0.25)
        fb.save_trace(tmp_path / f"t{i}.safetensors", q=q, k=k, v=v, o=r.o, lse=r.lse,
                      metadata={"source": "emulated", "model": model, "softmax_scale": 0.25})
    with pytest.raises(ValueError, match=r"a verdict is about one kernel") as e:
        fb.bias_test(traces=str(tmp_path))
    message = str(e.value)
    assert "model=NAME" not in message and "flashbits import" not in message, message
    assert "save_trace(..., metadata={..., 'model': NAME}) records a capture's" in message, message


def test_exact_attention_names_rounded_as_in_its_errors():
    # Found by the Python audit: rounded_as="x" said "model x: unknown kernel model".
    q = bf16((1, 1, 4, 8), 0)
    with pytest.raises(ValueError, match=r"^rounded_as x: unknown kernel model 'x'"):
        fb.exact_attention(q, q, q, rounded_as="x")
    with pytest.raises(ValueError, match=r"^rounded_as: an empty model name"):  # was the exact values
        fb.exact_attention(q, q, q, rounded_as="")


def test_the_public_namespace_is_the_documented_api():
    # Found by the Python audit: `annotations` (from `from __future__ import annotations`) was
    # a public name of flashbits. Public: __all__ and the package's submodules.
    import pkgutil
    submodules = {m.name for m in pkgutil.iter_modules(fb.__path__)}
    public = {n for n in dir(fb) if not n.startswith("_")}
    assert "annotations" not in public
    assert public - submodules == set(fb.__all__), public.symmetric_difference(fb.__all__)
