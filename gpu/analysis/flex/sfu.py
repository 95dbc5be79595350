"""H200 SFU models in numpy: ex2.approx.ftz.f32 (MUFU.EX2) and rcp.approx.ftz.f32 (MUFU.RCP), decoded
from flashbits' measured FBSFU1 tables emu/tables/{ex2,rcp}_h200.fbsfu (format: traces/sfu_table_file.cpp).
The tables store deltas against a correctly rounded base; decoding is slow, so the decoded arrays are
cached outside the repo, in <system temp dir>/flashbits_analysis_cache/flex."""
import os, struct, tempfile
import numpy as np
# gpu/analysis/flex/sfu.py -> repo root is three levels above this folder
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TAB = os.path.join(REPO, "emu", "tables")
CACHE = os.path.join(tempfile.gettempdir(), "flashbits_analysis_cache", "flex")

def _delta_stream(buf, pos, n):
    out = np.zeros(n, dtype=np.uint32); i = 0
    while i < n:
        length, width = struct.unpack_from("<IB", buf, pos); pos += 5
        if width:
            nbytes = (length * width + 7) // 8
            raw = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=pos); pos += nbytes
            bits = np.unpackbits(raw, bitorder="little")[: length * width].reshape(length, width).astype(np.uint64)
            v = (bits << np.arange(width, dtype=np.uint64)).sum(axis=1)
            v = np.where(v >= (1 << (width - 1)), v.astype(np.int64) - (1 << width), v.astype(np.int64))
            out[i:i + length] = (v & 0xFFFFFFFF).astype(np.uint32)
        i += length
    return out, pos

def _f32_round_ld(x):  # longdouble -> fp32 (RNE), near-correct rounding
    return x.astype(np.float32)

def _load(name):
    os.makedirs(CACHE, exist_ok=True)
    c = os.path.join(CACHE, name + ".npz")
    if os.path.exists(c):
        return dict(np.load(c))
    buf = open(os.path.join(TAB, name), "rb").read()
    assert buf[:6] == b"FBSFU1"
    func, form, measured = buf[6], buf[7], buf[8]
    slen = struct.unpack_from("<H", buf, 9)[0]; pos = 11 + slen
    if form == 4:
        N = buf[pos]; pos += 1; pos += 4
        n = 1 << N
        dp, pos = _delta_stream(buf, pos, n); dn, pos = _delta_stream(buf, pos, n)
        i = np.arange(n, dtype=np.longdouble) / np.longdouble(n)
        bp = _f32_round_ld(np.exp2(i)).view(np.uint32); bn = _f32_round_ld(np.exp2(-i)).view(np.uint32)
        r = dict(N=np.array(N), pos=(bp + dp).astype(np.uint32), neg=(bn + dn).astype(np.uint32))
    elif form == 2:
        pos += 4
        n = 1 << 23
        d, pos = _delta_stream(buf, pos, n)
        x = (np.arange(n, dtype=np.uint32) | np.uint32(127 << 23)).view(np.float32).astype(np.float64)
        b = (1.0 / x).astype(np.float32).view(np.uint32)
        r = dict(T=(b + d).astype(np.uint32))
    else:
        raise ValueError(form)
    np.savez(c, **r)
    return r

_EX2 = None; _RCP = None
def ex2(x):
    """ex2.approx.ftz.f32 of an fp32 array, as the H200 computes it."""
    global _EX2
    if _EX2 is None: _EX2 = _load("ex2_h200.fbsfu")
    x = np.asarray(x, dtype=np.float32)
    xb = x.view(np.uint32)
    sub = ((xb & 0x7F800000) == 0)
    x = np.where(sub, np.float32(0) * np.sign(x), x).astype(np.float32)  # ftz (sign kept enough: ex2(+-0)=1)
    N = int(_EX2["N"]); ax = np.abs(x.astype(np.float64))
    X = np.floor(np.ldexp(np.where(np.isfinite(ax) & (ax < 200), ax, 0.0), N)).astype(np.int64)
    k = X >> N; i = X & ((1 << N) - 1)
    neg = np.signbit(x)
    t = np.where(neg, _EX2["neg"][i], _EX2["pos"][i]).view(np.float32).astype(np.float64)
    v = np.ldexp(t, np.where(neg, -k, k).astype(np.int32))
    v = np.where(np.abs(v) >= 2.0 ** 128, np.inf, v)
    v = np.where(np.abs(v) < 2.0 ** -126, 0.0, v)
    v = np.where(x >= 128, np.inf, v); v = np.where(x < -160, 0.0, v)
    v = np.where(np.isnan(x), np.nan, v)
    return v.astype(np.float32)

def rcp(x):
    """rcp.approx.ftz.f32 (MUFU.RCP) of an fp32 array, as the H200 computes it."""
    global _RCP
    if _RCP is None: _RCP = _load("rcp_h200.fbsfu")
    x = np.asarray(x, dtype=np.float32); xb = x.view(np.uint32)
    e = ((xb >> 23) & 0xFF).astype(np.int32) - 127
    m = xb & 0x7FFFFF
    t = _RCP["T"][m].view(np.float32).astype(np.float64)
    v = np.ldexp(t, -e) * np.where(np.signbit(x), -1.0, 1.0)
    v = np.where(np.abs(v) < 2.0 ** -126, 0.0, v)
    return v.astype(np.float32)
