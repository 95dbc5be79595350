"""flex-decoding-sm90 (Inductor's flex-decoding kernel) against an independent emulation.

The H200 decode capture (q16, k1024, d64) replays bit for bit in ctest (replay_hardware_flex).
These tests take other decode shapes (a query of 1 and 7 rows, 256 keys, two heads) and compare
every bit of O, the LSE, dQ, dK and dV with gpu/analysis/flex/: dec.py (the decoding forward
with its one non-empty split) and bwd.py (the backward template, every block bounds-masked), numpy
code written from the capture and the compiled PTX, with its own two-warp row sum, chained mma
steps and decoding of the H200 ex2 and rcp tables. It shares with flashbits only the scalar fp32
FMA, the final rounding and the tensor-core dot."""
import importlib
import os
import sys

import numpy as np
import pytest

import flashbits as fb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLEX_DIR = os.path.join(ROOT, "gpu", "analysis", "flex")
# gpu/analysis/flex and gpu/analysis/math_cudnn both have modules named common and sfu: load
# these under their own names without leaving them (or taking the others) in sys.modules.
_SHARED = ("common", "sfu", "cap", "dec", "bwd", "fwd")


def _flex_analysis():
    saved = {name: sys.modules.pop(name) for name in _SHARED if name in sys.modules}
    sys.path.insert(0, FLEX_DIR)
    try:
        return importlib.import_module("dec"), importlib.import_module("bwd")
    finally:
        sys.path.remove(FLEX_DIR)
        for name in _SHARED:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


@pytest.mark.parametrize("nq", [1, 7])
def test_flex_decoding_matches_independent_emulation(nq):
    dec, bwd = _flex_analysis()
    nk, d = 256, 64
    rng = np.random.default_rng(nq)

    def draw(shape):
        return fb.round(rng.standard_normal(shape).astype(np.float32), "bf16").values.astype(np.float32)

    q, k, v, do = draw((1, 2, nq, d)), draw((1, 2, nk, d)), draw((1, 2, nk, d)), draw((1, 2, nq, d))
    scale = 1.0 / np.sqrt(d)
    # One split holds every 64-key block (no block mask); the combine is then exact.
    (m, l, acc), = dec.split_partials(q, k, v, scale, [(0, nk // 64)])
    g_l = np.where(m == -np.inf, np.float32(1), l).astype(np.float32)
    o = dec.bf16(dec.div_full(acc, g_l[..., None]))
    m_log2 = (dec.log2f(g_l) + m).astype(np.float32)
    lse = (m_log2 * dec.LN2).astype(np.float32)
    delta = bwd.finish_delta(bwd.delta_chain8(o, do))
    dq, dk, dv = bwd.backward(q, k, v, do, m_log2, delta, scale, None)

    got = fb.attention(q, k, v, "flex-decoding-sm90", do=do, sfu="hw-sm90", threads=2)
    for name, want in (("o", o), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
        have = np.asarray(getattr(got, name), np.float32).reshape(want.shape)
        differ = int(np.count_nonzero(have.view(np.uint32) != np.asarray(want, np.float32).view(np.uint32)))
        assert differ == 0, f"{name}: {differ} of {want.size} elements differ"


def test_flex_decoding_refuses_what_it_does_not_model():
    rng = np.random.default_rng(2)
    q = fb.round(rng.standard_normal((1, 4, 64)).astype(np.float32), "bf16").values
    kv = fb.round(rng.standard_normal((1, 128, 64)).astype(np.float32), "bf16").values
    # One head: 264 splits, whose combine order is not read.
    with pytest.raises(ValueError, match="264 splits"):
        fb.attention(q, kv, kv, "flex-decoding-sm90", causal=True)
    q_long = fb.round(rng.standard_normal((1, 128, 64)).astype(np.float32), "bf16").values
    with pytest.raises(ValueError, match="flex-attention-sm90"):
        fb.attention(q_long, kv, kv, "flex-decoding-sm90")


@pytest.mark.parametrize("nq,nk", [(5, 1024), (16, 1024), (3, 8192)])
def test_flex_decoding_causal_splits_match_independent_emulation(nq, nk):
    """A causal decode (bottom-right mask, 2 heads: 132 splits): create_block_mask leaves no full
    block (the q block is padded), so each of splits 0..15 takes one 64-key block (1024 keys), or
    each of splits 0..127 (8192 keys: every lane and both halves of the combine); Inductor's
    combine joins them in the order read from its PTX. Compared with dec.py's decode_split_ranges,
    split_partials (the mask_mod on partial blocks) and combine_splits, and bwd.py's backward
    (padded rows never full), every bit of O, LSE, dQ, dK and dV. UNMEASURED: both follow the
    sources and the PTX of the unmasked decode; no masked capture has replayed yet."""
    dec, bwd = _flex_analysis()
    d = 64
    rng = np.random.default_rng(100 + nq)

    def draw(shape):
        return fb.round(rng.standard_normal(shape).astype(np.float32), "bf16").values.astype(np.float32)

    q, k, v, do = draw((1, 2, nq, d)), draw((1, 2, nk, d)), draw((1, 2, nk, d)), draw((1, 2, nq, d))
    scale = 1.0 / np.sqrt(d)
    offset = nk - nq
    blocks = nk // 128  # the last row sees every key: every sparse block is partial
    ranges = dec.decode_split_ranges(blocks, list(range(blocks)), 0, [0] * blocks, KV_LEN=nk, SPLIT_KV=132)
    used = nk // 64
    assert [len(r) for r in ranges[:used]] == [1] * used and not any(ranges[used:])
    partials = dec.split_partials(q, k, v, scale, ranges, allowed=lambda r, c: c <= r + offset)
    o, m_log2, lse = dec.combine_splits(partials)
    want = {"o": o, "lse": lse}
    if nk <= 1024:  # the backward (bwd.py) of 8192 keys takes over a minute; the forward is the question
        delta = bwd.finish_delta(bwd.delta_chain8(o, do))
        want["dq"], want["dk"], want["dv"] = bwd.backward(q, k, v, do, m_log2, delta, scale, offset)

    got = fb.attention(q, k, v, "flex-decoding-sm90", do=do if nk <= 1024 else None, causal=True, sfu="hw-sm90",
                       threads=2)
    for name, want in want.items():
        have = np.asarray(getattr(got, name), np.float32).reshape(want.shape)
        differ = int(np.count_nonzero(have.view(np.uint32) != np.asarray(want, np.float32).view(np.uint32)))
        assert differ == 0, f"{name}: {differ} of {want.size} elements differ"
