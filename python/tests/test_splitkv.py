# +splitkv through the Python module (docs/DESIGN.md §6 "Split-KV"; H200 captures replay): the model name
# passes through fb.attention as any other; one split is the base model bit for bit; a decode
# that splits differs from it in some bits but stays within bf16 rounding of numpy's attention.
import numpy as np

import flashbits as fb


def bf16(shape, seed):
    return fb.round(np.random.default_rng(seed).standard_normal(shape), "bf16").values


def test_splitkv_decode_through_fb_attention():
    q, k, v = bf16((1, 2, 1, 64), 1), bf16((1, 2, 2000, 64), 2), bf16((1, 2, 2000, 64), 3)
    base = fb.attention(q, k, v, "pytorch-fa2-sm90", dtype="bf16")
    one = fb.attention(q, k, v, "pytorch-fa2-sm90+splitkv:1", dtype="bf16")
    auto = fb.attention(q, k, v, "pytorch-fa2-sm90+splitkv", dtype="bf16")
    assert np.array_equal(np.asarray(one.o), np.asarray(base.o))
    assert np.array_equal(np.asarray(one.lse), np.asarray(base.lse))
    assert "splitkv:auto,sms=132" in auto.model
    exact = fb.exact_attention(q, k, v)
    assert np.allclose(np.asarray(auto.o), np.asarray(exact.o), rtol=2**-7, atol=2**-9)
    assert not np.array_equal(np.asarray(auto.o), np.asarray(base.o))
