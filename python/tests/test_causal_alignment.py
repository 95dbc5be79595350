# Audit F4: a bare capture of a causal kernel with query length N != key length Nk states its
# mask's alignment (--causal top-left|bottom-right, load_trace(causal="top-left")); a plain
# true is bottom-right and says so; the alignment is written to causal_alignment; an option
# contradicting the file's own metadata is one error.
#
# Independent reference: the capture's O is PyTorch's is_causal attention (top-left: row i
# sees keys j <= i) computed here in mpmath at 300 bits from the exact bf16 inputs, rounded
# once to bf16 by exact_reference.round_exact (Fractions). `correctly-rounded` must replay it
# bit for bit under top-left, and must not under bottom-right (another mask).
import json
import warnings
from fractions import Fraction

import numpy as np
import pytest

import flashbits as fb
from exact_reference import FORMATS, decode, round_exact

mpmath = pytest.importorskip("mpmath")

N, NK, D, SCALE = 6, 20, 8, 0.25
BF16 = FORMATS["bf16"]


def _bf16_bits(rng, shape):
    # Random normal values truncated to bf16 bit patterns: exact bf16 inputs, not all simple.
    return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _bits_of(value: Fraction) -> int:
    # A bf16 value is a float32 value exactly: its float32 encoding's top half.
    return int(np.array([float(value)], dtype=np.float32).view(np.uint32)[0] >> 16)


def _top_left_o(q, k, v):
    mpmath.mp.prec = 300
    qv = [[decode(BF16, int(b)) for b in row] for row in q[0, 0]]
    kv = [[decode(BF16, int(b)) for b in row] for row in k[0, 0]]
    vv = [[decode(BF16, int(b)) for b in row] for row in v[0, 0]]
    o = np.zeros((1, 1, N, D), dtype=np.uint16)
    for i in range(N):
        visible = i + 1  # top-left: j <= i
        s = [Fraction(SCALE) * sum(a * b for a, b in zip(qv[i], kv[j])) for j in range(visible)]
        m = max(s)
        w = [mpmath.exp(mpmath.mpf(x.numerator) / x.denominator - mpmath.mpf(m.numerator) / m.denominator)
             for x in s]
        total = mpmath.fsum(w)
        for c in range(D):
            exact = mpmath.fsum(w[j] * mpmath.mpf(vv[j][c].numerator) / vv[j][c].denominator
                                for j in range(visible)) / total
            sign, man, exp, _ = exact._mpf_  # man_exp drops the sign
            value, _ = round_exact((-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp), BF16, "rne")
            assert isinstance(value, Fraction) and value != 0
            o[0, 0, i, c] = _bits_of(value)
    return o


@pytest.fixture(scope="module")
def bare_capture(tmp_path_factory):
    rng = np.random.default_rng(2026)
    q, k, v = _bf16_bits(rng, (1, 1, N, D)), _bf16_bits(rng, (1, 1, NK, D)), _bf16_bits(rng, (1, 1, NK, D))
    path = tmp_path_factory.mktemp("f4") / "bare.npz"
    np.savez(path, query=q, key=k, value=v, out=_top_left_o(q, k, v))
    return path


STATEMENT = ("--source", "unknown", "--scale", str(SCALE), "--dtype", "bf16", "--layout", "bhsd")


def test_cli_top_left_replays_bit_for_bit_and_plain_true_notes_bottom_right(cli, bare_capture, tmp_path):
    tl = tmp_path / "tl.safetensors"
    rc, out, err = cli("import", str(bare_capture), *STATEMENT, "--causal", "top-left", "--model", "correctly-rounded",
                       "--out", str(tl))
    assert rc == 0 and err == "", err
    assert "causal, aligned top-left" in out
    assert fb.load_trace(tl).metadata["causal_alignment"] == "top-left"
    rc, out, err = cli("replay", str(tl), "--json")
    assert rc == 0 and json.loads(out)["match"] is True, out + err

    br = tmp_path / "br.safetensors"
    rc, out, err = cli("import", str(bare_capture), *STATEMENT, "--causal", "true", "--model", "correctly-rounded",
                       "--out", str(br))
    assert rc == 0, err
    assert "causal, aligned bottom-right" in out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("note: "), err
    assert "bottom-right" in lines[0] and "--causal top-left" in lines[0]
    assert fb.load_trace(br).metadata["causal_alignment"] == "bottom-right"
    rc, out, err = cli("replay", str(br), "--json")
    assert rc == 1 and json.loads(out)["match"] is False, out + err

    # The file states top-left: a contradicting --causal is exit 2, one error line.
    rc, out, err = cli("replay", str(tl), "--causal", "bottom-right", check=False)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert "--causal bottom-right conflicts" in err and "causal_alignment='top-left'" in err


def test_load_trace_takes_the_alignment_and_warns_for_a_plain_true(bare_capture, tmp_path):
    kw = dict(source="unknown", scale=SCALE, dtype="bf16", layout="bhsd")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = fb.load_trace(bare_capture, causal="top-left", **kw)
    assert t.metadata["causal_alignment"] == "top-left" and t.causal
    with pytest.warns(UserWarning, match=r"bottom-right.*causal='top-left'"):
        t = fb.load_trace(bare_capture, causal=True, **kw)
    assert t.metadata["causal_alignment"] == "bottom-right" and t.causal
    t = fb.load_trace(bare_capture, causal=False, **kw)
    assert t.metadata["causal_alignment"] == "none" and not t.causal
    with pytest.raises(TypeError, match="top-left"):
        fb.load_trace(bare_capture, causal="top_left", **kw)

    # The written trace's own metadata wins; a contradiction is a ValueError naming causal=.
    path = tmp_path / "tl.safetensors"
    t = fb.load_trace(bare_capture, causal="top-left", **kw)
    fb.save_trace(path, {n: t[n] for n in t.tensors}, metadata=t.metadata, formats=t.formats)
    with pytest.raises(ValueError, match="causal=bottom-right conflicts.*causal_alignment='top-left'"):
        fb.load_trace(path, causal="bottom-right")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file names its alignment: nothing is assumed
        assert fb.load_trace(path, causal=True).metadata["causal_alignment"] == "top-left"
