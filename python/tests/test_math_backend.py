"""pytorch-math-sm90 (PyTorch's SDPA math backend) against an independent emulation.

The four H200 captures of the math backend replay bit for bit in ctest (replay_hardware_math);
they are all 256 keys long, so every row there has 32 lanes of 8 elements in the warp softmax.
These tests take the shapes no capture has (rows shorter than 32 keys, lengths that are not
powers of two, cross-attention with a bottom-right mask, and the rows over 1024 keys where
PyTorch's softmax leaves its warp kernels: the forward's warp kernel up to 2048 keys and its
register block kernel beyond, the backward's shared-memory and plain block kernels, the latter
with each row's alignment shift) and compare every bit of O, dQ, dK and dV with
gpu/analysis/math_cudnn/math_emu.py: numpy code with its own sequential-FMA GEMM, softmax
orders and CUDA expf over its own decoding of the H200 ex2 table (sfu.py), which shares with
flashbits only the scalar fp32 FMA and the final rounding."""
import os
import sys

import numpy as np
import pytest

import flashbits as fb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu", "analysis", "math_cudnn"))
import math_emu  # noqa: E402


def _inputs(rng, shape_q, shape_kv, fmt):
    """q, k, v, do as fp32 arrays of values of fmt (normal draws, rounded)."""
    def draw(shape):
        return fb.round(rng.standard_normal(shape).astype(np.float32), fmt).values.astype(np.float32)
    return draw(shape_q), draw(shape_kv), draw(shape_kv), draw(shape_q)


@pytest.mark.parametrize("nq,nk,d,causal,fmt", [
    (5, 5, 16, False, "bf16"),      # 8 lanes (next power of two), one element each
    (19, 19, 32, True, "fp16"),     # 32 lanes, ragged
    (24, 70, 64, True, "bf16"),     # cross-attention, bottom-right diagonal; 70 keys: 4 per lane on 6 lanes
    (3, 1024, 64, False, "bf16"),   # the warp backward's longest row
    (3, 1502, 32, False, "bf16"),   # warp forward (64 per lane); plain block backward, shifts 0 and 2
    (2, 2048, 32, True, "fp16"),    # the warp forward's longest row; shared-memory backward, 256 threads
    (2, 3001, 16, False, "bf16"),   # register forward (3 per thread); plain backward, shifts 0..3, 512 threads
    (2, 4096, 16, True, "bf16"),    # register forward (4 per thread); shared-memory backward, 512 threads
])
def test_math_backend_matches_independent_emulation(nq, nk, d, causal, fmt):
    rng = np.random.default_rng(nq * 1000 + nk)
    q, k, v, do = _inputs(rng, (2, nq, d), (2, nk, d), fmt)
    scale = 1.0 / np.sqrt(d)
    want, inner = math_emu.emulate(q, k, v, do, scale, "bottom-right" if causal else "none", fmt)
    got = fb.attention(q, k, v, "pytorch-math-sm90", do=do, causal=causal, dtype=fmt, sfu="hw-sm90", threads=2)
    for name in ("o", "dq", "dk", "dv"):
        bits = fb.round(np.ascontiguousarray(getattr(got, name), np.float32), fmt).bits
        mismatched = int(np.count_nonzero(np.asarray(bits, np.uint16) != want[name]))
        assert mismatched == 0, f"{name}: {mismatched} of {want[name].size} elements differ"
    # The softmax backward's row sums (flashbits' delta) in fp32, before dS hides an ulp of them.
    delta = np.asarray(got.delta, np.float64).reshape(inner["delta"].shape).astype(np.float32)
    differ = int(np.count_nonzero(delta.view(np.uint32) != inner["delta"].view(np.uint32)))
    assert differ == 0, f"delta: {differ} of {delta.size} row sums differ"


def test_math_backend_refuses_rows_beyond_the_register_softmax():
    rng = np.random.default_rng(1)
    q, k, v, _ = _inputs(rng, (1, 2, 16), (1, 9217, 16), "bf16")
    with pytest.raises(ValueError, match="9216 keys"):
        fb.attention(q, k, v, "pytorch-math-sm90")
