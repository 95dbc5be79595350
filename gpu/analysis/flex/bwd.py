"""Emulation of PyTorch 2.11 FlexAttention's backward: the delta kernel (triton_per_fused_flex_attention_
backward_mul_0) and the backward template (flex_backwards.py.jinja) as compiled for H200:
2 warpgroups, wgmma m64n64k16, BLOCK_M1=64, BLOCK_N1=128 (dK/dV programs), BLOCK_M2=128, BLOCK_N2=64 (dQ).
Found from the captures, the compiled PTX/SASS and flex_backwards.py.jinja; evidence in FINDINGS.md,
section Backward."""
import numpy as np
from common import *

def delta_tree64(o, do):
    """XBLOCK=1 config: one product per thread (64 threads), butterfly xor 16,8,4,2,1 per warp, then
    warp0 + warp1 through shared memory."""
    p = (o * do).astype(np.float32)
    def warp(x):
        for s in (16, 8, 4, 2, 1):
            x = (x[..., :s] + x[..., s:2 * s]).astype(np.float32)
        return x[..., 0]
    return (warp(p[..., :32]) + warp(p[..., 32:])).astype(np.float32)

def delta_chain8(o, do):
    """XBLOCK=8 / 32 configs: 8 threads per row, thread t holds elements 8t..8t+7: acc = o1*do1 (rounded),
    then fma with elements 0,2,3,4,5,6,7; then butterfly xor 4,2,1."""
    parts = []
    for t in range(8):
        e = lambda i: (o[..., 8 * t + i], do[..., 8 * t + i])
        a, b = e(1); acc = (a * b).astype(np.float32)
        for i in (0, 2, 3, 4, 5, 6, 7):
            a, b = e(i); acc = fma(a, b, acc)
        parts.append(acc)
    for s in (4, 2, 1):
        parts = [(parts[i] + parts[i ^ s]).astype(np.float32) for i in range(8)]
    return parts[0]

def finish_delta(d, grad_lse=0.0):
    """delta = fma(grad_lse * fp32(-ln 2), fp32(1/ln 2), sum): grad_lse is the zero-filled gradient of the
    unused lse output, so this returns d (the PTX's mul.f32 ..., 0fBF317218; fma.rn.f32 ..., 0f3FB8AA3B, d)."""
    g = (F(grad_lse) * F(-0.6931471805599453)).astype(np.float32)
    return fma(g, LOG2E, d)

def blocks(nq, nk, causal_off, qs=128, ks=128, nq_real=None):
    """Sparse (128x128) block classification: 'full', 'partial' or None. nq_real: the query rows before
    padding to nq; create_block_mask pads the dense mask with False (_convert_mask_to_block_mask), so a
    block holding padded rows is never full."""
    cls = {}
    nq_real = nq if nq_real is None else nq_real
    for i in range(nq // qs):
        for j in range(nk // ks):
            if causal_off is None: cls[i, j] = "partial"   # noop mask: one unmasked loop, mask folded away
            else:
                r = np.arange(i * qs, i * qs + qs); c = np.arange(j * ks, j * ks + ks)
                a = (r[:, None] + causal_off >= c[None, :]) & (r < nq_real)[:, None]
                cls[i, j] = "full" if a.all() else ("partial" if a.any() else None)
    return cls

def backward(q, k, v, do, L2, delta, scale, causal_off=None, BM1=64, BN1=128, BM2=128, BN2=64, divisible=True):
    """divisible=False (Q_LEN not a multiple of the tiles, the decode capture): rows are zero-padded to 128,
    the bounds tl.where sits between the RCP_LN2 multiply and the subtraction in every loop, so no FMA."""
    B, H, M0, D = q.shape; N = k.shape[2]
    if M0 % 128:
        pad = 128 - M0 % 128
        padf = lambda x, fill=0.0: np.concatenate([x, np.full(x.shape[:2] + (pad,) + x.shape[3:], fill, np.float32)], 2)
        q, do, L2, delta = padf(q), padf(do), padf(L2), padf(delta)
        divisible = False
    M = q.shape[2]
    SC = F(scale)
    L2 = np.where(L2 == -np.inf, F(0), L2).astype(np.float32)
    cls = blocks(M, N, causal_off, nq_real=M0)
    nqs, nks = M // 128, N // 128
    dq = np.zeros(q.shape, np.float32); dk = np.zeros(k.shape, np.float32); dv = np.zeros(v.shape, np.float32)
    def allowed(r, c):
        return np.ones((len(r), len(c)), bool) if causal_off is None else (r[:, None] + causal_off >= c[None, :])
    # ---- dQ programs
    for i in range(M // BM2):
        rs = np.arange(i * BM2, i * BM2 + BM2); si = (i * BM2) // 128
        order = [(j, True) for j in range(nks) if cls[si, j] == "partial"] + [(j, False) for j in range(nks) if cls[si, j] == "full"]
        acc = np.zeros((B, H, BM2, D), np.float32)
        qt, dot_, lse, Di = q[:, :, rs], do[:, :, rs], L2[:, :, rs][..., None], delta[:, :, rs][..., None]
        for (j, masked) in order:
            for sub in range(128 // BN2):
                cs = np.arange(j * 128 + sub * BN2, j * 128 + sub * BN2 + BN2)
                s = (dot(qt, np.swapaxes(k[:, :, cs], -1, -2)) * SC).astype(np.float32)
                if masked and causal_off is not None or not divisible:
                    al = allowed(rs, cs)
                    s2 = np.where(al, (s * LOG2E).astype(np.float32), F(-np.inf))
                    p = ex2((s2 - lse).astype(np.float32))
                else:
                    p = ex2(fma(s, LOG2E, -lse))
                dp = dot(dot_, np.swapaxes(v[:, :, cs], -1, -2))
                ds = (p * (dp - Di).astype(np.float32)).astype(np.float32)
                if masked and causal_off is not None or not divisible:
                    ds = np.where(al, ds, F(0))
                acc = dot(bf16(ds), k[:, :, cs], acc)
        dq[:, :, rs] = (acc * SC).astype(np.float32)
    # ---- dK/dV programs
    for j in range(N // BN1):
        cs = np.arange(j * BN1, j * BN1 + BN1); sj = (j * BN1) // 128
        order = [(i, True) for i in range(nqs) if cls[i, sj] == "partial"] + [(i, False) for i in range(nqs) if cls[i, sj] == "full"]
        accv = np.zeros((B, H, BN1, D), np.float32); acck = np.zeros((B, H, BN1, D), np.float32)
        kt, vt = k[:, :, cs], v[:, :, cs]
        for (i, masked) in order:
            for sub in range(128 // BM1):
                rs = np.arange(i * 128 + sub * BM1, i * 128 + sub * BM1 + BM1)
                lse = L2[:, :, rs][:, :, None, :]; Di = delta[:, :, rs][:, :, None, :]
                sT = (dot(kt, np.swapaxes(q[:, :, rs], -1, -2)) * SC).astype(np.float32)
                if masked and causal_off is not None or not divisible:
                    al = allowed(rs, cs).T & (rs < M0)[None, :]
                    s2 = np.where(al, (sT * LOG2E).astype(np.float32), F(-np.inf))
                    pT = ex2((s2 - lse).astype(np.float32))
                else:
                    pT = ex2(fma(sT, LOG2E, -lse))
                accv = dot(bf16(pT), do[:, :, rs], accv)
                dpT = dot(vt, np.swapaxes(do[:, :, rs], -1, -2))
                dsT = (pT * (dpT - Di).astype(np.float32)).astype(np.float32)
                if masked and causal_off is not None or not divisible:
                    dsT = np.where(al, dsT, F(0))
                acck = dot(bf16(dsT), q[:, :, rs], acck)
        dv[:, :, cs] = accv; dk[:, :, cs] = (acck * SC).astype(np.float32)
    return bf16(dq[:, :, :M0]), bf16(dk), bf16(dv)
