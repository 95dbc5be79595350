"""Black-box emulation of the cuDNN 9.19 sm90 flash forward (SDPBackend.CUDNN_ATTENTION, kernel
cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x*) on H200, found from the
captures in traces/hw/h200/paths/cudnn and the kernel names in their logs (no source, no PTX):
64-row x 128-key tiles visited in ascending key order, S on the sm90-wgmma model, S' = fl(S * fl(scale*log2e))
as its own FMUL, P = ex2.approx.ftz(fl(S' - m')) with the H200 table, the tile row sum in the wgmma
accumulator layout, O = acc * (1/l). See FINDINGS.md, part B.

Variants (each raises the O mismatches on n256, which is what confirms the found form):
  python3 gpu/analysis/math_cudnn/cudnn_emu.py CAPTURE... [--order desc] [--exp fa3]"""
import os, sys, argparse
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fb, load, fma, to_fmt_bits, cmp
import sfu

LOG2E = np.float32(1.4426950408889634)

def dotm(a, b, c=None, fmt='bf16'):
    """Row-wise dot a[..., K] . b[..., K] (+ c) as chained k16 steps of the sm90-wgmma model."""
    r = fb.dot('sm90-wgmma', np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32),
               None if c is None else np.ascontiguousarray(c, np.float32), fmt=fmt)
    return np.asarray(r.values, np.float32).reshape(np.shape(a)[:-1])

def rnd(x, fmt):
    """RNE to bf16/fp16, returned as fp32 values."""
    return np.asarray(fb.round(np.ascontiguousarray(x, np.float32), fmt).values, np.float32).reshape(np.shape(x))

def quad_layout_sum(p, quad_order=(2, 1)):
    """Row sum of p [rows, n] (n a multiple of 8) in the wgmma accumulator layout: thread t (0..3) of a
    quad holds columns 8j+2t, 8j+2t+1 (j ascending) and sums them in that order from 0, then the quad
    reduces with xor shuffles in quad_order."""
    R, n = p.shape
    parts = []
    for t in range(4):
        s = np.zeros(R, np.float32)
        for c in [8*j + 2*t + e for j in range(n // 8) for e in (0, 1)]:
            s = (s + p[:, c]).astype(np.float32)
        parts.append(s)
    parts = np.stack(parts, -1)
    for off in quad_order:
        parts = (parts + parts[:, np.arange(4) ^ off]).astype(np.float32)
    return parts[:, 0]

def forward(T, meta, order='asc', expmode='sub', l_fma=False, quad_order=(2, 1), bc=128):
    """Returns O (fp32, before the bf16/fp16 store), m (running max of the unscaled S) and l, each per row.
    expmode 'sub' = ex2(fl(S*sl2) - fl(m*sl2)) (found); 'fa3' = ex2(fma(S, sl2, -fl(m*sl2))) (FA3's form).
    l_fma: l = fma(l, alpha, tile_sum) instead of fl(l*alpha) + tile_sum (O cannot tell; the LSE prefers it)."""
    fmt = T['q'][0]; q, k, v = (T[n][2] for n in ('q', 'k', 'v'))
    B, H, Nq, D = q.shape; Nk = k.shape[2]
    scale = np.float32(float(meta['softmax_scale']))
    sl2 = np.float32(scale * LOG2E)   # fp32 product, one rounding
    causal = meta['causal_alignment']
    O = np.zeros((B, H, Nq, D), np.float32)
    MM = np.zeros((B, H, Nq), np.float32); LL = np.zeros((B, H, Nq), np.float32)
    for b in range(B):
        for h in range(H):
            Q, K, V = q[b, h], k[b, h], v[b, h]
            S = dotm(np.broadcast_to(Q[:, None, :], (Nq, Nk, D)), np.broadcast_to(K[None, :, :], (Nq, Nk, D)), fmt=fmt)
            i = np.arange(Nq)[:, None]; j = np.arange(Nk)[None, :]
            if causal == 'top-left': S = np.where(j <= i, S, -np.inf)
            elif causal == 'bottom-right': S = np.where(j <= i + Nk - Nq, S, -np.inf)
            S = S.astype(np.float32)
            ntiles = (Nk + bc - 1) // bc
            tiles = list(range(ntiles)) if order == 'asc' else list(range(ntiles))[::-1]
            m = np.full(Nq, -np.inf, np.float32); l = np.zeros(Nq, np.float32)
            acc = np.zeros((Nq, D), np.float32)
            for t in tiles:
                St = S[:, t*bc:(t+1)*bc]
                w = St.shape[1]
                if w < bc:   # ragged last tile: padded keys contribute ex2(-inf) = 0
                    St = np.concatenate([St, np.full((Nq, bc - w), -np.inf, np.float32)], 1)
                Vt = np.zeros((bc, D), np.float32); Vt[:w] = V[t*bc:(t+1)*bc]
                m_new = np.maximum(m, St.max(1))   # max of S; same as max of fl(S*sl2) (monotone)
                with np.errstate(invalid='ignore', over='ignore'):
                    ms = np.where(np.isinf(m_new), 0, (m_new * sl2)).astype(np.float32)
                    if expmode == 'sub':
                        arg = ((St * sl2).astype(np.float32) - ms[:, None]).astype(np.float32)
                        am = ((m * sl2).astype(np.float32) - ms).astype(np.float32)
                    else:   # 'fa3'
                        arg = fma(St, sl2, -ms[:, None])
                        am = ((m - m_new) * sl2).astype(np.float32)
                    am = np.where(np.isnan(am), -np.inf, am).astype(np.float32)
                    arg = np.where(np.isnan(arg), -np.inf, arg).astype(np.float32)
                p = sfu.ex2_hw(arg)
                alpha = sfu.ex2_hw(am)
                ts = quad_layout_sum(p, quad_order)
                l = fma(l, alpha, ts) if l_fma else ((l * alpha).astype(np.float32) + ts).astype(np.float32)
                acc = (acc * alpha[:, None]).astype(np.float32)
                pb = rnd(p, fmt)
                acc = dotm(np.broadcast_to(pb[:, None, :], (Nq, D, bc)), np.broadcast_to(Vt.T[None], (Nq, D, bc)), acc, fmt=fmt)
                m = m_new
            inv = (np.float32(1) / l).astype(np.float32)   # division and rcp-multiply cannot be told apart here
            O[b, h] = (acc * inv[:, None]).astype(np.float32)
            MM[b, h] = m; LL[b, h] = l
    return O, MM, LL

if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('files', nargs='+')
    ap.add_argument('--order', default='asc', choices=['asc', 'desc'])
    ap.add_argument('--exp', default='sub', choices=['sub', 'fa3'])
    a = ap.parse_args()
    for f in a.files:
        T, meta = load(f)
        O, _, _ = forward(T, meta, a.order, a.exp)
        print('==', os.path.basename(f), 'order', a.order, 'exp', a.exp)
        print('  ' + cmp('o', T['o'][1], to_fmt_bits(O, T['q'][0]))[0])
