"""Flex-decoding forward (flex_decode.py.jinja + common.py.jinja forward_block_mn, H200: BLOCK_M=16,
BLOCK_N=64, 2 warps, mma.sync m16n8k16) and the split-KV combine Inductor lowers from
flex_decoding.py (max over splits, exp2, fma-sums over two halves of 66, log2, div).
Found from the decode capture, its PTX and flex_decoding.py; evidence in FINDINGS.md, section Decode."""
import numpy as np
from common import *

def rowsum_mma_2warps(p):
    """[.., 64] tile in the mma.sync layout with warpsPerCTA [1,2]: warp w, lane quad t holds columns 16j+8w+2t,+1 (j=0..3):
    in-thread chain, quad butterfly xor 2 then xor 1, then warp0 + warp1 through shared memory."""
    ws = []
    for w in range(2):
        s = []
        for t in range(4):
            cols = [16 * j + 8 * w + 2 * t + e for j in range(4) for e in (0, 1)]
            acc = p[..., cols[0]]
            for c in cols[1:]:
                acc = (acc + p[..., c]).astype(np.float32)
            s.append(acc)
        ws.append(((s[0] + s[2]).astype(np.float32) + (s[1] + s[3]).astype(np.float32)).astype(np.float32))
    return (ws[0] + ws[1]).astype(np.float32)

def split_partials(q, k, v, scale, blocks_per_split, BN=64):
    """One split over KV blocks [b0, b1): returns m (log2 units), l, acc (unnormalised) like buf_M/L/ACC."""
    B, H, M, D = q.shape; N = k.shape[2]; SC = F(scale)
    out = []
    for (b0, b1) in blocks_per_split:
        m = np.full((B, H, M), -np.inf, np.float32); l = np.zeros((B, H, M), np.float32)
        acc = np.zeros((B, H, M, D), np.float32)
        for j in range(b0, b1):
            cs = slice(j * BN, j * BN + BN)
            s = (dot(q, np.swapaxes(k[:, :, cs], -1, -2), model="sm90-mma") * SC).astype(np.float32)
            s2 = (s * LOG2E).astype(np.float32)                      # rounded (select in between: no FMA)
            mij = np.maximum(m, s2.max(-1))
            mm = np.where(mij == -np.inf, F(0), mij).astype(np.float32)
            alpha = ex2((m - mm).astype(np.float32))
            p = ex2((s2 - mm[..., None]).astype(np.float32))
            l = fma(l, alpha, rowsum_mma_2warps(p))
            acc = (acc * alpha[..., None]).astype(np.float32)
            acc = dot(bf16(p), v[:, :, cs], acc, model="sm90-mma")
            m = mij
        out.append((m, l, acc))
    return out
