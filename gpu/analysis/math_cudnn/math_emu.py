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

# PyTorch 2.10's kernel choice for fp32 rows (aten/src/ATen/native/cuda/SoftMax.cu host_softmax and
# host_softmax_backward); beyond 1024 keys it is read from the source, not yet seen in a capture.
WARP_FWD_MAX, REG_FWD_MAX, WARP_BWD_MAX = 2048, 9 * 1024, 1024


def _butterfly(s):
    """xor butterfly over the last axis (a power of two wide); lane 0's value (shfl_down gives lane 0
    the same sums)."""
    W = s.shape[-1]; off = W // 2; idx = np.arange(W)
    while off:
        s = (s + s[..., idx ^ off]).astype(np.float32); off //= 2
    return s[..., 0]


def _warp_sum(X):
    """softmax_warp_forward/backward: W = min(32, next power of two) lanes; lane l sums elements
    l, l+W, ... sequentially from 0 (padding adds 0); then the xor butterfly."""
    R, N = X.shape[:-1], X.shape[-1]
    P2 = 1 << max(0, (N - 1).bit_length()); W = min(32, P2); IT = P2 // W
    T = np.zeros(R + (P2,), np.float32); T[..., :N] = X
    T = T.reshape(R + (IT, W))
    s = np.zeros(R + (W,), np.float32)
    for it in range(IT):
        s = (s + T[..., it, :]).astype(np.float32)
    return _butterfly(s)


def _block_reduce_warp(partials):
    """cuda_utils::BlockReduce: a shfl_down tree in each warp of the [.., threads] partials, the warp
    sums into shared memory, then warp 0's tree over them (lanes past the warp count read 0)."""
    R, B = partials.shape[:-1], partials.shape[-1]
    warps = _butterfly(partials.reshape(R + (B // 32, 32)))
    lanes = np.zeros(R + (32,), np.float32); lanes[..., :B // 32] = warps
    return _butterfly(lanes)


def _bwd_block(N):
    """SoftMax_getBlockSize(ILP=4, N)."""
    mb = min(N // 4, 1024) // 2; b = 1
    while b < mb: b *= 2
    return max(b, 32)


def _reg_sum(E):
    """cunn_SoftMaxForwardReg on 1024 threads: thread t sums E[t + 1024 r] over r from 0."""
    R, N = E.shape[:-1], E.shape[-1]
    regs = -(-N // 1024)
    T = np.zeros(R + (regs * 1024,), np.float32); T[..., :N] = E
    T = T.reshape(R + (regs, 1024))
    s = np.zeros(R + (1024,), np.float32)
    for r in range(regs):
        cols = min(1024, N - 1024 * r)          # keys past the row are skipped, not added
        s[..., :cols] = (s[..., :cols] + T[..., r, :cols]).astype(np.float32)
    return _block_reduce_warp(s)


def _smem_bwd_sum(X):
    """cunn_SoftMaxBackwardSmem: thread t of B sums the float4 vectors t, t+B, ... (each 4 values in
    order) from 0; then BlockReduce."""
    R, N = X.shape[:-1], X.shape[-1]
    B = _bwd_block(N); vecs = N // 4; rounds = -(-vecs // B)
    T = np.zeros(R + (rounds * B * 4,), np.float32); T[..., :N] = X
    T = T.reshape(R + (rounds, B, 4))
    s = np.zeros(R + (B,), np.float32)
    for r in range(rounds):
        for i in range(4):
            s = (s + T[..., r, :, i]).astype(np.float32)   # zero padding adds exactly 0
    return _block_reduce_warp(s)


def _plain_bwd_sum(X):
    """cunn_SoftMaxBackward: ilpReduce<4> with the row's alignment shift (row r of the contiguous
    [.., N] tensor starts (r*N) % 4 floats past a 16-byte boundary), then the shared-memory
    blockReduce (lane l of warp 0 sums threads 32l..32l+31 in order, thread 0 the warp sums)."""
    R, N = X.shape[:-1], X.shape[-1]
    rows = X.reshape(-1, N)
    B = _bwd_block(N)
    out = np.zeros(rows.shape[0], np.float32)
    for r in range(rows.shape[0]):
        x = rows[r]
        shift = (r * N) % 4
        th = np.zeros(B, np.float32)
        size, base = N, 0
        if shift:
            base, size = -shift, N + shift
            th[shift:] = x[base + np.arange(shift, B)]
            size -= B; base += B
        last = size % (4 * B)
        body = x[base:base + size - last].reshape(-1, B, 4) if size - last else np.zeros((0, B, 4), np.float32)
        for k in range(body.shape[0]):
            for i in range(4):
                th = (th + body[k, :, i]).astype(np.float32)
        tail = x[base + size - last:base + size]
        for j0 in range(0, len(tail), B):
            chunk = tail[j0:j0 + B]
            th[:len(chunk)] = (th[:len(chunk)] + chunk).astype(np.float32)
        warp = np.zeros(B // 32, np.float32)
        for w in range(B // 32):
            acc = np.float32(0)
            for i in range(32):
                acc = np.float32(acc + th[32 * w + i])
            warp[w] = acc
        tot = np.float32(0)
        for w in range(B // 32):
            tot = np.float32(tot + warp[w])
        out[r] = tot
    return out.reshape(R)


def softmax_fwd(S, expf, div=True):
    """host_softmax on the fp32 scores: softmax_warp_forward up to 2048 keys, cunn_SoftMaxForwardReg
    up to 9216; out = e / sum."""
    N = S.shape[-1]
    assert N <= REG_FWD_MAX, "rows over 9216 keys run another block kernel"
    mx = S.max(axis=-1)                               # max is exact
    with np.errstate(invalid='ignore'):
        E = expf((S - mx[..., None]).astype(np.float32))
    E = np.where(np.isnan(E), 0, E).astype(np.float32)
    tot = _warp_sum(E) if N <= WARP_FWD_MAX else _reg_sum(E)
    if div:
        P = (E / tot[..., None]).astype(np.float32)
    else:
        P = (E * (np.float32(1) / tot)[..., None]).astype(np.float32)
    return P, tot, mx

def softmax_bwd(dP, P, contract=True):
    """softmax_backward_cuda_out: tmp = dP*P (elementwise kernel); the row sum of tmp by
    softmax_warp_backward (up to 1024 keys), cunn_SoftMaxBackwardSmem (keys a multiple of 4) or
    cunn_SoftMaxBackward; dS = tmp - P*sum (FFMA when contracted). Returns dS and the row sums."""
    tmp = (dP * P).astype(np.float32)
    N = tmp.shape[-1]
    if N <= WARP_BWD_MAX:
        tot = _warp_sum(tmp)
    elif N % 4 == 0:
        tot = _smem_bwd_sum(tmp)
    else:
        tot = _plain_bwd_sum(tmp)
    tot = tot[..., None]
    if contract:
        dS = fma(-P, np.broadcast_to(tot, P.shape), tmp)
    else:
        dS = (tmp - (P * tot).astype(np.float32)).astype(np.float32)
    return dS, tot[..., 0]

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
    dS, delta = softmax_bwd(dP, P, contract)
    dqs = gemm(dS, np.swapaxes(kTs, -1, -2))             # dS @ (k*s)
    dkTs = gemm(np.swapaxes(qs, -1, -2), dS)             # (q*s)^T @ dS  -> [d, Nk]
    dq = (dqs * sf).astype(np.float32)
    dk = (np.swapaxes(dkTs, -1, -2) * sf).astype(np.float32)
    res.update(dq=to_fmt_bits(dq, fmt), dk=to_fmt_bits(dk, fmt), dv=to_fmt_bits(dV, fmt))
    return res, dict(S=S, P=P, Of=Of, dP=dP, dS=dS, delta=delta, dV=dV, dq=dq, dk=dk)

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
