"""H200 SFU models in numpy, decoded from flashbits' measured FBSFU1 tables (format:
traces/sfu_table_file.cpp): ex2.approx.ftz.f32 (emu/tables/ex2_h200.fbsfu, form 4: sign-magnitude,
N fraction bits), CUDA's non-fast-math expf built on it (as emu/sfu/cuda_expf.hpp), and
lg2.approx.ftz.f32 (lg2_h200.fbsfu, form 5). Decoding is slow, so the decoded tables are cached
outside the repo, in <system temp dir>/flashbits_analysis_cache/math_cudnn."""
import numpy as np, struct, os, tarfile, tempfile

# gpu/analysis/math_cudnn/sfu.py -> repo root is three levels above this folder
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CACHE_DIR = os.path.join(tempfile.gettempdir(), 'flashbits_analysis_cache', 'math_cudnn')
TABLE = os.path.join(REPO, 'emu', 'tables', 'ex2_h200.fbsfu')
CACHE = os.path.join(CACHE_DIR, 'ex2_tables.npz')

def _correct_ex2_f32(x64):
    # correctly rounded fp32 of 2^x (x exact in float64); double rounding risk ~2^-29 per entry
    return np.exp2(x64).astype(np.float32).view(np.uint32)

def _read_stream(buf, pos, n):
    out = np.zeros(n, np.uint32); done = 0
    while done < n:
        length, width = struct.unpack_from('<IB', buf, pos); pos += 5
        nbytes = (length * width + 7) // 8
        if width:
            bits = np.unpackbits(np.frombuffer(buf, np.uint8, nbytes, pos), bitorder='little')[:length*width]
            bits = bits.reshape(length, width).astype(np.uint64)
            v = (bits << np.arange(width, dtype=np.uint64)).sum(1)
            if width < 32:
                neg = (v >> np.uint64(width - 1)) & np.uint64(1)
                v = np.where(neg == 1, v | (~np.uint64((1 << width) - 1)), v)
            out[done:done+length] = (v & np.uint64(0xffffffff)).astype(np.uint32)
        pos += nbytes; done += length
    return out, pos

def load_ex2():
    if os.path.exists(CACHE):
        z = np.load(CACHE); return int(z['N']), z['tp'], z['tn']
    buf = open(TABLE, 'rb').read()
    assert buf[:6] == b'FBSFU1'
    func, form, measured = buf[6], buf[7], buf[8]
    slen = struct.unpack_from('<H', buf, 9)[0]; pos = 11 + slen
    assert func == 0 and form == 4, (func, form)
    N = buf[pos]; pos += 1
    nan_out = struct.unpack_from('<I', buf, pos)[0]; pos += 4
    dp, pos = _read_stream(buf, pos, 1 << N)
    dn, pos = _read_stream(buf, pos, 1 << N)
    i = np.arange(1 << N, dtype=np.float64) * 2.0 ** -N
    tp = (_correct_ex2_f32(i) + dp).astype(np.uint32)
    tn = (_correct_ex2_f32(-i) + dn).astype(np.uint32)
    os.makedirs(CACHE_DIR, exist_ok=True)
    np.savez(CACHE, N=N, tp=tp, tn=tn)
    return N, tp, tn

_T = None
def ex2_hw(x):
    """ex2.approx.ftz.f32 on the H200 (table model), x float32 array -> float32."""
    global _T
    if _T is None: _T = load_ex2()
    N, tp, tn = _T
    x = np.asarray(x, np.float32).copy()
    x[np.abs(x) < np.float32(2.0**-126)] = 0  # ftz input (keeps sign)
    out = np.zeros(x.shape, np.float32)
    neg = np.signbit(x)
    ax = np.abs(x.astype(np.float64))
    fixed = np.floor(np.ldexp(np.where(np.isfinite(ax) & (ax < 256), ax, 0), N)).astype(np.int64)
    k = fixed >> N; idx = fixed & ((1 << N) - 1)
    t = np.where(neg, tn[idx], tp[idx]).view(np.float32).astype(np.float64)
    v = np.ldexp(t, np.where(neg, -k, k))
    v = np.where(np.abs(v) >= 2.0**128, np.inf, v)
    v = np.where(np.abs(v) < 2.0**-126, 0.0, v)
    out = v.astype(np.float32)
    out[x >= 128] = np.inf
    out[x < -160] = 0
    out[np.isnan(x)] = np.nan
    return out

def _f(b): return np.uint32(b).view(np.float32)

def cuda_expf(x, ex2=ex2_hw):
    """CUDA 13 expf (no fast math), per emu/sfu/cuda_expf.hpp, with exact fp32 FMAs."""
    from common import fma, fb
    x = np.asarray(x, np.float32)
    t = fma(x, _f(0x3BBB989D), np.float32(0.5))
    u = np.clip(np.nan_to_num(t, nan=0.0), 0, 1).astype(np.float32)
    # j = fma.rm(u, 252, 1.5*2^23+1)
    j = np.asarray(fb.fma(np.ascontiguousarray(u), np.full(u.shape, 252, np.float32), np.full(u.shape, _f(0x4B400001), np.float32), 'fp32', mode='rdn').values, np.float32).reshape(u.shape)
    r = -(j + _f(0xCB40007F))
    a = fma(x, _f(0x3FB8AA3B), r)
    a = fma(x, _f(0x32A57060), a)
    s = (j.view(np.uint32) << np.uint32(23)).view(np.float32)
    with np.errstate(over='ignore', invalid='ignore'):
        return (ex2(a) * s).astype(np.float32)

def expf_correct(x):
    return np.exp(np.asarray(x, np.float64)).astype(np.float32)

LG2_CACHE = os.path.join(CACHE_DIR, 'lg2_tables.npz')
def lg2_table_path():
    """The lg2 table ships compressed (emu/tables/lg2_h200.fbsfu.tar.xz, 17 MB unpacked). The build
    unpacks it into build/emu/tables/; without a build, unpack it into the cache."""
    built = os.path.join(REPO, 'build', 'emu', 'tables', 'lg2_h200.fbsfu')
    if os.path.exists(built):
        return built
    out = os.path.join(CACHE_DIR, 'lg2_h200.fbsfu')
    if not os.path.exists(out):
        os.makedirs(CACHE_DIR, exist_ok=True)
        with tarfile.open(os.path.join(REPO, 'emu', 'tables', 'lg2_h200.fbsfu.tar.xz')) as tf:
            member = tf.getmember('lg2_h200.fbsfu')
            with tf.extractfile(member) as src, open(out + '.part', 'wb') as dst:
                dst.write(src.read())
        os.replace(out + '.part', out)
    return out

def load_lg2():
    if os.path.exists(LG2_CACHE):
        z = np.load(LG2_CACHE); return int(z['g']), int(z['rnd']), z['T'], z['R']
    buf = open(lg2_table_path(), 'rb').read()
    assert buf[:6] == b'FBSFU1' and buf[6] == 2 and buf[7] == 5, buf[:8]
    slen = struct.unpack_from('<H', buf, 9)[0]; pos = 11 + slen
    nan_out = struct.unpack_from('<I', buf, pos)[0]; pos += 4
    g = buf[pos]; rnd_ = buf[pos+1]; pos += 2
    dT, pos = _read_stream(buf, pos, 1 << 23)
    dR, pos = _read_stream(buf, pos, 1 << 23)
    m = np.arange(1 << 23, dtype=np.float64)
    base = np.log2(1.0 + m * 2.0**-23).astype(np.float32).view(np.uint32)
    T = (base + dT).astype(np.uint32); R = dR.view(np.int32)
    os.makedirs(CACHE_DIR, exist_ok=True)
    np.savez(LG2_CACHE, g=g, rnd=rnd_, T=T, R=R)
    return g, rnd_, T, R

_L = None
def lg2_hw(x):
    """lg2.approx.ftz.f32 on the H200 for positive normal x (table form 5); float64 evaluation of e + L."""
    global _L
    if _L is None: _L = load_lg2()
    g, rnd_, T, R = _L
    x = np.asarray(x, np.float32); b = x.view(np.uint32)
    e = ((b >> 23) & 0xff).astype(np.int64) - 127; mant = b & 0x7fffff
    t = T[mant].view(np.float32).astype(np.float64)
    te = np.frexp(t)[1] - 1  # t = f*2^(te+1), f in [0.5,1): ulp = 2^(te-23)
    ulp = np.where(np.abs(t) >= 2.0**-126, np.ldexp(1.0, te - 23), 2.0**-149)
    L = t + R[mant].astype(np.float64) * ulp * 2.0**-g
    v = e + L
    assert rnd_ == 1, rnd_   # toward zero
    f = v.astype(np.float32)
    # RN -> RZ correction
    over = np.abs(f.astype(np.float64)) > np.abs(v)
    f = np.where(over, np.nextafter(f, np.float32(0)), f).astype(np.float32)
    f = np.where(x == 1, np.float32(0), f)
    return f
