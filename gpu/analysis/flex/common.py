"""Shared fp32 helpers for the flex emulation: exact fp32 FMA, rounding and tensor-core dots through
flashbits, the H200 SFUs (sfu.py), libdevice __nv_log2f, and the wgmma row-sum order."""
import os, sys
import numpy as np

# gpu/analysis/flex/common.py -> repo root is three levels above this folder
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
try:
    import flashbits as fb
except ImportError:   # not on PYTHONPATH: use the module the build puts in build/python
    sys.path.insert(0, os.path.join(REPO, "build", "python"))
    import flashbits as fb
import sfu
F = np.float32
def f32(x): return np.asarray(x, dtype=np.float32)
def fma(a, b, c):
    a, b, c = np.broadcast_arrays(f32(a), f32(b), f32(c))
    return fb.fma(a.astype(np.float64), b.astype(np.float64), c.astype(np.float64), "fp32").values.astype(np.float32).reshape(a.shape)
def bf16(x):
    x = f32(x)
    return fb.round(x.astype(np.float64), "bf16").values.astype(np.float32).reshape(x.shape)
def dot(a, b, c=None, model="sm90-wgmma"):
    """a [..., M, K] @ b [..., K, N] (+ c [..., M, N]) as chained k16 tensor-core steps."""
    A = np.broadcast_to(a[..., :, None, :], a.shape[:-1] + (b.shape[-1], a.shape[-1]))
    B = np.broadcast_to(np.swapaxes(b, -1, -2)[..., None, :, :], a.shape[:-1] + (b.shape[-1], b.shape[-2]))
    cc = None if c is None else np.ascontiguousarray(c, dtype=np.float64)
    r = fb.dot(model, np.ascontiguousarray(A, dtype=np.float64), np.ascontiguousarray(B, dtype=np.float64), cc, fmt="bf16")
    return r.values.astype(np.float32).reshape(A.shape[:-1])
ex2 = sfu.ex2
rcp = sfu.rcp
def div_full(a, b):
    """PTX div.full.f32 as SASS lowers it for |b| in [2^-126, 2^126]: a * MUFU.RCP(b), one FMUL."""
    return (f32(a) * rcp(b)).astype(np.float32)
LOG2E = F(1.44269504)      # 0x3FB8AA3B
LN2 = F(0.6931471805599453)  # 0x3F317218
def log2f(x):
    """libdevice __nv_log2f (non-fast-math), step by step as in the PTX (fma.rn.ftz polynomial)."""
    x = f32(x).copy()
    small = x < F(1.17549435e-38)
    xs = np.where(small, x * F(8388608.0), x).astype(np.float32)
    c = np.where(small, F(-23.0), F(0.0)).astype(np.float32)
    xb = xs.view(np.int32)
    eb = (xb - np.int32(1060439283)) & np.int32(-8388608)
    m = (xb - eb).view(np.float32)
    e = fma(eb.astype(np.float32), F(1.1920929e-07), c)
    f = (m + F(-1.0)).astype(np.float32)
    C = [0x3DC6B27F, 0xBE2C7F30, 0x3E2FCF2A, 0xBE374E43, 0x3E520BF4, 0xBE763C8B, 0x3E93BF99, 0xBEB8AA49, 0x3EF6384A, 0xBF38AA3B]
    cf = [np.array([h], dtype=np.uint32).view(np.float32)[0] for h in C]
    r = fma(cf[0], f, cf[1])
    for h in cf[2:]:
        r = fma(r, f, h)
    t = (f * r).astype(np.float32); t = (f * t).astype(np.float32)
    r = fma(f, LOG2E, t)
    res = (e + r).astype(np.float32)
    res = np.where(xs.view(np.uint32) >= np.uint32(0x7F800000), fma(xs, F(np.inf), F(np.inf)), res)
    res = np.where(xs == 0, F(-np.inf), res)
    return res.astype(np.float32)
def rowsum_wgmma(p):
    """tl.sum(p, 1) over a [..., BLOCK_N] tile in the wgmma accumulator layout: each of the 4 lanes of a
    quad holds columns 8j+2t, 8j+2t+1 (j ascending) and sums them in that order (one chain), then
    butterfly shuffles xor 2 then xor 1."""
    n = p.shape[-1]
    s = []
    for t in range(4):
        cols = [8 * j + 2 * t + e for j in range(n // 8) for e in (0, 1)]
        acc = p[..., cols[0]]
        for cidx in cols[1:]:
            acc = (acc + p[..., cidx]).astype(np.float32)
        s.append(acc)
    a0 = (s[0] + s[2]).astype(np.float32); a1 = (s[1] + s[3]).astype(np.float32)
    return (a0 + a1).astype(np.float32)
def cmp(name, a, b):
    a = f32(a); b = f32(b)
    eq = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
    return f"{name}: {eq.sum()}/{eq.size} match" + ("" if eq.all() else f" (max |diff| {np.nanmax(np.abs(a.astype(np.float64)-b)):.3g})")
