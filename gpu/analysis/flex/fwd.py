"""Emulation of PyTorch 2.11 FlexAttention's forward Triton template (flex_attention.py.jinja +
common.py.jinja forward_block_mn) on H200 as compiled (wgmma, BLOCK_M=128, BLOCK_N=128).
Found from the captures, the compiled PTX/SASS (traces/hw/h200/paths/flex/sass) and the templates;
evidence in FINDINGS.md, section Forward."""
import numpy as np
from common import *

def kv_schedule(nq, nk, BM, BN, causal_off, SPARSE=128):
    """Per Q tile: list of (kv tile, masked?) in the order the kernel visits them:
    partial (mask_mod) blocks first (KV_IDX order), then full blocks (FULL_KV_IDX order)."""
    sched = []
    for qb in range(nq // BM):
        if causal_off is None:
            sched.append([(j, False, False) for j in range(nk // BN)])  # noop mask, one loop, mask folded away
            continue
        rows = np.arange(qb * BM, qb * BM + BM)
        partial, full = [], []
        for j in range(nk // BN):
            cols = np.arange(j * BN, j * BN + BN)
            allowed = rows[:, None] + causal_off >= cols[None, :]
            if allowed.all(): full.append((j, False, True))
            elif allowed.any(): partial.append((j, True, False))
        sched.append(partial + full)
    return sched

def forward(q, k, v, scale, causal_off=None, BM=128, BN=128):
    """q [B,H,M,D], k,v [B,H,N,D] (bf16 values as fp32). Returns O (bf16 values), lse2 (log2 units, fp32),
    lse_flex (= fl(lse2 * fp32(ln 2)))."""
    B, H, M, D = q.shape; N = k.shape[2]
    O = np.zeros((B, H, M, D), np.float32); L2 = np.zeros((B, H, M), np.float32)
    SC = F(scale)
    for qb, tiles in enumerate(kv_schedule(M, N, BM, BN, causal_off)):
        rs = slice(qb * BM, qb * BM + BM)
        qt = q[:, :, rs]
        m = np.full((B, H, BM), -np.inf, np.float32); l = np.zeros((B, H, BM), np.float32)
        acc = np.zeros((B, H, BM, D), np.float32)
        for (j, masked, full) in tiles:
            cs = slice(j * BN, j * BN + BN)
            s = dot(qt, np.swapaxes(k[:, :, cs], -1, -2))          # wgmma m64n128k16 x4, fp32
            s = (s * SC).astype(np.float32)                         # qk *= SM_SCALE
            s2 = (s * LOG2E).astype(np.float32)                     # post_mod_scores *= RCP_LN2 (rounded, used by the max)
            if masked:
                rows = np.arange(qb * BM, qb * BM + BM); cols = np.arange(j * BN, j * BN + BN)
                allowed = rows[:, None] + causal_off >= cols[None, :]
                s2 = np.where(allowed, s2, F(-np.inf)).astype(np.float32)
            mij = np.maximum(m, s2.max(-1))
            mm = np.where(mij == -np.inf, F(0), mij).astype(np.float32)
            alpha = ex2((m - mm).astype(np.float32))
            if masked:   # partial blocks: the product is rounded, then subtracted (no FMA: select in between)
                p = ex2((s2 - mm[..., None]).astype(np.float32))
            else:        # full / unmasked blocks: LLVM contracts into fma(s, RCP_LN2, -m)
                p = ex2(fma(s, LOG2E, -mm[..., None]))
            l = fma(l, alpha, rowsum_wgmma(p))
            acc = (acc * alpha[..., None]).astype(np.float32)
            acc = dot(bf16(p), v[:, :, cs], acc)                    # wgmma m64n64k16 x8, C = acc
            m = mij
        l = np.where(l == 0, F(1), l).astype(np.float32)
        O[:, :, rs] = bf16(div_full(acc, l[..., None]))
        L2[:, :, rs] = (m + log2f(l)).astype(np.float32)
    return O, L2, (L2 * LN2).astype(np.float32)
