"""Black-box emulation of the cuDNN 9.19 sm90 flash backward on H200 (compute_dot_do_o, then
flash_bprop_wgmma_f16_knob_26_64x64x*_1x4x1, then convert_dq_to_16bits), found from the captures in
traces/hw/h200/paths/cudnn and the kernel names in their logs. It starts from the captured LSE:
P = ex2(fl(fl(S*scale) - LSE) * log2e), delta = sum(dO*O) sequential in fp32,
dS = fl(fl(P * fl(dP - delta)) * scale) cast to bf16/fp16 (the scale goes on dS before the cast),
dV and dK chained over rows ascending, dQ summed in fp32 over 64-key blocks. See FINDINGS.md, part B.

Variants (each raises the mismatches, which is what confirms the found form):
  python3 gpu/analysis/math_cudnn/cudnn_bwd.py CAPTURE... [--p sub|fma] [--ds std] [--dq-order desc]"""
import os, sys, argparse
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import load, fma, cmp, to_fmt_bits
from cudnn_emu import dotm, rnd, LOG2E
import sfu

def delta_seq(dO, O):
    """compute_dot_do_o: sum over d of fl(dO*O), sequential from 0. (FMA-chained and 4/8/16-per-thread
    butterfly orders could not be told apart from this one on the d96 capture.)"""
    prod = (dO * O).astype(np.float32)
    s = np.zeros(prod.shape[0], np.float32)
    for d in range(prod.shape[1]):
        s = (s + prod[:, d]).astype(np.float32)
    return s

def backward(T, meta, lse, pmode='nat', dsmode='scaled', dq_order='asc', bc=64):
    """Returns {'dq','dk','dv'} as bf16/fp16 bits. pmode: how P is formed from the natural-log LSE
    ('nat' found; 'sub' and 'fma' are the forward-style log2 forms). dsmode: 'scaled' (found) or 'std'
    (scale dK and dQ after the GEMMs instead)."""
    fmt = T['q'][0]
    q, k, v, o, do = (T[n][2] for n in ('q', 'k', 'v', 'o', 'do'))
    B, H, Nq, D = q.shape; Nk = k.shape[2]
    scale = np.float32(float(meta['softmax_scale'])); sl2 = np.float32(scale * LOG2E)
    causal = meta['causal_alignment']
    dQ = np.zeros_like(q); dK = np.zeros_like(k); dV = np.zeros_like(v)
    for b in range(B):
        for h in range(H):
            Q, K, V, O, dO = q[b, h], k[b, h], v[b, h], o[b, h], do[b, h]
            S = dotm(np.broadcast_to(Q[:, None, :], (Nq, Nk, D)), np.broadcast_to(K[None], (Nq, Nk, D)), fmt=fmt)
            i = np.arange(Nq)[:, None]; j = np.arange(Nk)[None, :]
            allowed = np.ones((Nq, Nk), bool)
            if causal == 'top-left': allowed = j <= i
            elif causal == 'bottom-right': allowed = j <= i + Nk - Nq
            Lr = lse[b, h].astype(np.float32)
            with np.errstate(invalid='ignore', over='ignore'):
                if pmode == 'nat':   # exp(S*scale - LSE) as ex2(fl(fl(S*scale) - LSE) * log2e)
                    arg = (((S * scale).astype(np.float32) - Lr[:, None]).astype(np.float32) * LOG2E).astype(np.float32)
                elif pmode == 'sub':
                    arg = ((S * sl2).astype(np.float32) - (Lr * LOG2E).astype(np.float32)[:, None]).astype(np.float32)
                else:   # 'fma'
                    arg = fma(S, sl2, -(Lr * LOG2E).astype(np.float32)[:, None])
            arg = np.where(allowed, arg, -np.inf).astype(np.float32)
            P = sfu.ex2_hw(arg)
            Pb = rnd(P, fmt)
            dP = dotm(np.broadcast_to(dO[:, None, :], (Nq, Nk, D)), np.broadcast_to(V[None], (Nq, Nk, D)), fmt=fmt)
            delta = delta_seq(dO, O)
            dS = (P * (dP - delta[:, None]).astype(np.float32)).astype(np.float32)
            if dsmode == 'scaled':
                dS = (dS * scale).astype(np.float32)
            dS = np.where(allowed, dS, 0).astype(np.float32)
            dSb = rnd(dS, fmt)
            # dV[key, d] = sum over rows of P[row, key] dO[row, d], chained over rows ascending; dK likewise
            dV[b, h] = dotm(np.broadcast_to(Pb.T[:, None, :], (Nk, D, Nq)), np.broadcast_to(dO.T[None], (Nk, D, Nq)), fmt=fmt)
            dKa = dotm(np.broadcast_to(dSb.T[:, None, :], (Nk, D, Nq)), np.broadcast_to(Q.T[None], (Nk, D, Nq)), fmt=fmt)
            dK[b, h] = dKa if dsmode == 'scaled' else (dKa * scale).astype(np.float32)
            # dQ: one partial per 64-key block, added into an fp32 buffer (atomics on the device: the order
            # is not fixed; ascending is one of the possible orders)
            nb = (Nk + bc - 1) // bc
            blocks = list(range(nb)) if dq_order == 'asc' else list(range(nb))[::-1]
            acc = np.zeros((Nq, D), np.float32)
            for kb in blocks:
                sl = slice(kb*bc, min(Nk, (kb+1)*bc)); w = sl.stop - sl.start
                part = dotm(np.broadcast_to(dSb[:, None, sl], (Nq, D, w)), np.broadcast_to(K[sl].T[None], (Nq, D, w)), fmt=fmt)
                acc = (acc + part).astype(np.float32)
            dQ[b, h] = acc if dsmode == 'scaled' else (acc * scale).astype(np.float32)
    return {'dq': to_fmt_bits(dQ, fmt), 'dk': to_fmt_bits(dK, fmt), 'dv': to_fmt_bits(dV, fmt)}

def emulated_lse(T, meta):
    """For a capture without LSE (the bottom-right causal one): l with fma update, quad xor 2 then xor 1,
    LSE = m'*ln2 + __logf(l) (the formula of lse_best.py)."""
    import lse_best
    return lse_best.lse_best(T, meta, quad_order=(2, 1))

if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('files', nargs='+')
    ap.add_argument('--p', default='nat', choices=['nat', 'sub', 'fma'])
    ap.add_argument('--ds', default='scaled', choices=['scaled', 'std'])
    ap.add_argument('--dq-order', default='asc', choices=['asc', 'desc'])
    a = ap.parse_args()
    for f in a.files:
        T, meta = load(f)
        lse, src = (T['lse'][2], 'captured') if 'lse' in T else (emulated_lse(T, meta), 'emulated')
        r = backward(T, meta, lse, a.p, a.ds, a.dq_order)
        print('==', os.path.basename(f), 'lse', src, 'p', a.p, 'ds', a.ds, 'dq-order', a.dq_order)
        for n in ('dq', 'dk', 'dv'):
            print('  ' + cmp(n, T[n][1], r[n])[0])
