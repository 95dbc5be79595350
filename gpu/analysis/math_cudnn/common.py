"""Shared helpers for the MATH and cuDNN emulations: capture (safetensors) loading, exact fp32 FMA and
bf16/fp16 rounding through flashbits, the sequential-FMA GEMM, and the bitwise comparison."""
import json, os, struct, sys
import numpy as np

# gpu/analysis/math_cudnn/common.py -> repo root is three levels above this folder
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PATHS = os.path.join(REPO, 'traces', 'hw', 'h200', 'paths')   # captures: PATHS/{math,cudnn}/*.safetensors
try:
    import flashbits as fb
except ImportError:   # not on PYTHONPATH: use the module the build puts in build/python
    sys.path.insert(0, os.path.join(REPO, 'build', 'python'))
    import flashbits as fb

def load(path):
    """Returns ({tensor: (fmt, bits, fp32 values)}, metadata) for one capture file."""
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        h = json.loads(f.read(n)); base = 8 + n
        raw = f.read()
    meta = h.pop('__metadata__', {})
    out = {}
    for name, e in h.items():
        a, b = e['data_offsets']
        buf = raw[a:b]
        if e['dtype'] == 'BF16':
            u = np.frombuffer(buf, np.uint16).reshape(e['shape'])
            out[name] = ('bf16', u, (u.astype(np.uint32) << 16).view(np.float32))
        elif e['dtype'] == 'F16':
            u = np.frombuffer(buf, np.uint16).reshape(e['shape'])
            out[name] = ('fp16', u, u.view(np.float16).astype(np.float32))
        else:
            x = np.frombuffer(buf, np.float32).reshape(e['shape'])
            out[name] = ('fp32', x.view(np.uint32), x)
    return out, meta

def fma(a, b, c):
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32), np.asarray(c, np.float32))
    r = fb.fma(np.ascontiguousarray(a), np.ascontiguousarray(b), np.ascontiguousarray(c), 'fp32')
    return r.values.astype(np.float32).reshape(a.shape)

def to_fmt_bits(x32, fmt):
    """RNE fp32 -> bf16/fp16 bits (uint16)."""
    r = fb.round(np.ascontiguousarray(x32, np.float32), fmt)
    return np.asarray(r.bits, np.uint16).reshape(np.shape(x32))

def gemm_seq(A, B):
    """A[..., M, K] @ B[..., K, N], each output a sequential fp32 FMA chain over k = 0..K-1 from 0."""
    A = np.asarray(A, np.float32); B = np.asarray(B, np.float32)
    M, K = A.shape[-2:]; N = B.shape[-1]
    acc = np.zeros(A.shape[:-2] + (M, N), np.float32)
    for kk in range(K):
        acc = fma(A[..., :, kk:kk+1], B[..., kk:kk+1, :], acc)
    return acc

def cmp(name, cap_bits, emu_bits, fmt_bits=16):
    """Bitwise comparison: returns (printable line, matching, total)."""
    cap = np.asarray(cap_bits).ravel(); emu = np.asarray(emu_bits).ravel()
    m = int((cap == emu).sum())
    # ulp difference for same-sign finite values via monotone integer map
    def mono(b):
        b = b.astype(np.int64); sign = 1 << (fmt_bits - 1)
        return np.where(b & sign, -(b & (sign - 1)), b)
    d = np.abs(mono(cap) - mono(emu))
    return f"{name}: {m}/{cap.size} match ({cap.size-m} differ, max {int(d.max())} ulp)", m, cap.size
