"""Emulation of the PyTorch 2.11 SDPA MATH backend on CUDA (H200), forward and backward, as found from
the captures, the kernel names in their logs and aten/src/ATen/native/transformers/attention.cpp
(_scaled_dot_product_attention_math): fp16/bf16 inputs upcast to fp32, q and k each pre-scaled by
fl32(sqrt(scale)), every GEMM a sequential fp32 FMA chain (cuBLAS SIMT FFMA kernels), the warp softmax
with CUDA's expf on the H200 ex2, and an FMA-contracted softmax backward. See FINDINGS.md, part A.

Variants (each breaks the match, which is what confirms the ingredient):
  python3 gpu/analysis/math_cudnn/math_emu.py CAPTURE... [--exp correct] [--mulrcp] [--nocontract]"""
import os, sys, math, argparse
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import load, fma, gemm_seq, to_fmt_bits, cmp
import sfu

def softmax_fwd(S, expf, div=True):
    """softmax_warp_forward<float,float,float,log2,..>: 32 lanes, element lane+32*it; per-lane
    sequential sum from 0, then xor-butterfly 16,8,4,2,1; out = e / sum."""
    R, N = S.shape[:-1], S.shape[-1]
    P2 = 1 << max(0, (N - 1).bit_length())
    W = min(32, P2); IT = P2 // W
    X = np.full(R + (P2,), -np.inf, np.float32); X[..., :N] = S
    X = X.reshape(R + (IT, W))                     # [.., it, lane]
    mx = X.max(axis=-2).max(axis=-1)               # max is exact
    with np.errstate(invalid='ignore'):
        E = expf((X - mx[..., None, None]).astype(np.float32))
    E = np.where(np.isnan(E), 0, E).astype(np.float32)
    s = np.zeros(R + (W,), np.float32)
    for it in range(IT):
        s = (s + E[..., it, :]).astype(np.float32)
    off = W // 2
    idx = np.arange(W)
    while off:
        s = (s + s[..., idx ^ off]).astype(np.float32); off //= 2
    tot = s[..., 0]
    if div:
        P = (E / tot[..., None, None]).astype(np.float32)
    else:
        P = (E * (np.float32(1) / tot)[..., None, None]).astype(np.float32)
    return P.reshape(R + (P2,))[..., :N], tot, mx

def softmax_bwd(dP, P, contract=True):
    """softmax_backward_cuda_out: tmp = dP*P (elementwise kernel); softmax_warp_backward:
    sum = sum(tmp) per lane then butterfly; dS = tmp - P*sum (FFMA when contracted)."""
    tmp = (dP * P).astype(np.float32)
    R, N = tmp.shape[:-1], tmp.shape[-1]
    P2 = 1 << max(0, (N - 1).bit_length()); W = min(32, P2); IT = P2 // W
    T = np.zeros(R + (P2,), np.float32); T[..., :N] = tmp
    T = T.reshape(R + (IT, W))
    s = np.zeros(R + (W,), np.float32)
    for it in range(IT):
        s = (s + T[..., it, :]).astype(np.float32)
    off = W // 2; idx = np.arange(W)
    while off:
        s = (s + s[..., idx ^ off]).astype(np.float32); off //= 2
    tot = s[..., 0][..., None]
    if contract:
        dS = fma(-P, np.broadcast_to(tot, P.shape), tmp)
    else:
        dS = (tmp - (P * tot).astype(np.float32)).astype(np.float32)
    return dS

def emulate(q, k, v, do, scale, causal='none', fmt='bf16', expf_name='cuda', div=True, contract=True,
            gemm=gemm_seq):
    """The MATH backend on fp32 arrays q [.., Nq, d], k, v [.., Nk, d], do [.., Nq, d] holding bf16/fp16
    values; causal 'none', 'top-left' or 'bottom-right'. Returns ({o, dq, dk, dv: bits of fmt},
    intermediates)."""
    sf = np.float32(math.sqrt(scale))                    # calculate_scale(...).sqrt() in double -> float opmath
    Nq, Nk = q.shape[-2], k.shape[-2]
    expf = sfu.cuda_expf if expf_name == 'cuda' else sfu.expf_correct
    qs = (q * sf).astype(np.float32)
    kTs = (np.swapaxes(k, -1, -2) * sf).astype(np.float32)   # [.., d, Nk]
    S = gemm(qs, kTs)
    if causal != 'none':
        i = np.arange(Nq)[:, None]; j = np.arange(Nk)[None, :]
        allowed = (j <= i) if causal == 'top-left' else (j <= i + Nk - Nq)
        S = np.where(allowed, S + np.float32(0), -np.inf).astype(np.float32)
    P, l, m = softmax_fwd(S, expf, div)
    Of = gemm(P, v)
    res = {'o': to_fmt_bits(Of, fmt)}
    dOf = do
    dV = gemm(np.swapaxes(P, -1, -2), dOf)
    dP = gemm(dOf, np.swapaxes(v, -1, -2))
    dS = softmax_bwd(dP, P, contract)
    dqs = gemm(dS, np.swapaxes(kTs, -1, -2))             # dS @ (k*s)
    dkTs = gemm(np.swapaxes(qs, -1, -2), dS)             # (q*s)^T @ dS  -> [d, Nk]
    dq = (dqs * sf).astype(np.float32)
    dk = (np.swapaxes(dkTs, -1, -2) * sf).astype(np.float32)
    res.update(dq=to_fmt_bits(dq, fmt), dk=to_fmt_bits(dk, fmt), dv=to_fmt_bits(dV, fmt))
    return res, dict(S=S, P=P, Of=Of, dP=dP, dS=dS, dV=dV, dq=dq, dk=dk)

def run(path, expf_name='cuda', div=True, contract=True, gemm=gemm_seq, verbose=True):
    T, meta = load(path)
    fmt = T['q'][0]
    q, k, v, do = (T[n][2] for n in ('q', 'k', 'v', 'do'))
    res, inner = emulate(q, k, v, do, float(meta['softmax_scale']), meta['causal_alignment'], fmt, expf_name, div,
                         contract, gemm)
    out = {}
    for n in ('o', 'dq', 'dk', 'dv'):
        line, mch, tot = cmp(n, T[n][1], res[n])
        out[n] = (mch, tot)
        if verbose: print('  ' + line)
    return out, inner

if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('files', nargs='+')
    ap.add_argument('--exp', default='cuda')
    ap.add_argument('--mulrcp', action='store_true')
    ap.add_argument('--nocontract', action='store_true')
    a = ap.parse_args()
    for f in a.files:
        print('==', f.split('/')[-1], 'exp', a.exp, 'div' if not a.mulrcp else 'mulrcp', 'contract' if not a.nocontract else 'nocontract')
        run(f, a.exp, not a.mulrcp, not a.nocontract)
