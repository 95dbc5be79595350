"""Flex-decoding forward (flex_decode.py.jinja + common.py.jinja forward_block_mn, H200: BLOCK_M=16,
BLOCK_N=64, 2 warps, mma.sync m16n8k16) and the split-KV combine Inductor lowers from
flex_decoding.py (max over splits, exp2, fma-sums over two halves of 66, log2, div).
Found from the decode capture, its PTX and flex_decoding.py; evidence in FINDINGS.md, section Decode
(the combine: subsection "Split combine order (read from the PTX)")."""
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

def _cdiv(a, b):
    return -(-a // b)

def decode_split_ranges(kv_num_blocks, kv_indices, full_kv_num_blocks=None, full_kv_indices=None,
                        KV_LEN=1024, SPLIT_KV=132, SPARSE_KV_BLOCK_SIZE=128, BLOCK_N=64):
    """Which 64-key blocks each split (program_id(2) = off_t) of the flex-decoding template visits, for
    one (batch, kv head, sparse q row) of a block mask: kv_num_blocks / kv_indices describe the partial
    (mask_mod) blocks, full_kv_num_blocks / full_kv_indices the full ones (None: no full blocks, i.e.
    HAS_FULL_BLOCKS=False). Indices are sparse-block numbers (SPARSE_KV_BLOCK_SIZE keys each).

    Returns a list of SPLIT_KV lists of (block, is_full), block = key offset // BLOCK_N, in the order the
    split visits them: its partial blocks first (forward_inner IS_FULL_BLOCKS=False), then its full
    blocks. Follows flex_decode.py.jinja (facts, not its code):
    - TILE_KV_OG = cdiv(KV_LEN, SPLIT_KV) with full blocks, else cdiv(kv_num_blocks*SPARSE, SPLIT_KV);
      a split covers TILE_KV_MULTIPLE = cdiv(TILE_KV_OG, BLOCK_N) consecutive BLOCK_N positions.
    - partial loop: positions [off_t*TILE_KV_MULTIPLE, +TILE_KV_MULTIPLE);
      full loop: positions [(SPLIT_KV-off_t-1)*TILE_KV_MULTIPLE, +TILE_KV_MULTIPLE) (reverse assignment);
      both cut at block_n_last_valid = min(num_blocks*SPARSE/BLOCK_N, max(cdiv(KV_LEN, BLOCK_N), 1)).
    - position n is key offset indices[n // MULT]*SPARSE + (n % MULT)*BLOCK_N (MULT = SPARSE/BLOCK_N):
      the first one is loaded directly, later ones by get_offset_for_next_block (+BLOCK_N inside a
      sparse block, jump to the next index at its end), which lands on the same offsets.
    The no-mask default block mask is kv_num_blocks=1, kv_indices=[0], SPARSE_KV_BLOCK_SIZE=1<<30."""
    mult = SPARSE_KV_BLOCK_SIZE // BLOCK_N
    assert mult * BLOCK_N == SPARSE_KV_BLOCK_SIZE
    has_full = full_kv_num_blocks is not None
    n_cap = max(_cdiv(KV_LEN, BLOCK_N), 1)
    tile_og = _cdiv(KV_LEN, SPLIT_KV) if has_full else _cdiv(int(kv_num_blocks) * SPARSE_KV_BLOCK_SIZE, SPLIT_KV)
    tile_mult = _cdiv(tile_og, BLOCK_N)

    def run(indices, num_blocks, start, is_full):
        last_valid = min(int(num_blocks) * mult, n_cap)
        end = min(start + tile_mult, last_valid)   # `block_n_end if block_n_end <= last_valid else last_valid`
        return [(int(indices[n // mult]) * mult + n % mult, is_full) for n in range(start, end)]

    out = []
    for t in range(SPLIT_KV):
        blocks = run(kv_indices, kv_num_blocks, t * tile_mult, False)
        if has_full:
            blocks += run(full_kv_indices, full_kv_num_blocks, (SPLIT_KV - t - 1) * tile_mult, True)
        out.append(blocks)
    return out

def split_partials(q, k, v, scale, blocks_per_split, BN=64, allowed=None):
    """Per split, the template's stored m (log2 units), l and unnormalised acc (buf_M/L/ACC).
    blocks_per_split: per split either (b0, b1), the 64-key blocks b0..b1-1 in order, or a list of
    (block, is_full) as decode_split_ranges returns. Empty splits keep the initial m=-inf, l=0, acc=0.
    allowed(rows, cols) -> bool [M, BN] is the mask_mod, applied on the partial (is_full False) blocks
    only; None is the no-mask case. (Every block uses the rounded, no-FMA exponent of the bounds-masked
    loop; a masked capture has not checked the mask_mod path yet.)"""
    B, H, M, D = q.shape; N = k.shape[2]; SC = F(scale)
    out = []
    for spec in blocks_per_split:
        if isinstance(spec, tuple) and len(spec) == 2 and not isinstance(spec[0], tuple):
            spec = [(j, False) for j in range(spec[0], spec[1])]
        m = np.full((B, H, M), -np.inf, np.float32); l = np.zeros((B, H, M), np.float32)
        acc = np.zeros((B, H, M, D), np.float32)
        for (j, is_full) in spec:
            cs = slice(j * BN, j * BN + BN)
            s = (dot(q, np.swapaxes(k[:, :, cs], -1, -2), model="sm90-mma") * SC).astype(np.float32)
            s2 = (s * LOG2E).astype(np.float32)                      # rounded (select in between: no FMA)
            if allowed is not None and not is_full:
                s2 = np.where(allowed(np.arange(M)[:, None], np.arange(j * BN, j * BN + BN)[None, :]),
                              s2, F(-np.inf)).astype(np.float32)
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

# ---- split-KV combine: Inductor's kernels red_5, per_6 (g_M), red_7, per_mul_8 (g_L, lse), red_9,
# per_10 (O), as compiled for SPLIT_KV = 132 (B*H = 2). FINDINGS.md, "Split combine order". ----

HALF = 66   # the 132 splits are reduced as two halves (splits 0..65, 66..131), then the halves are added

def _bfly(lanes, offsets):
    """In-warp shfl.bfly tree: at each offset, lane i becomes fl(lane i + lane i^offset) (an fp32 add is
    commutative, so both lanes of a pair hold the same value). Returns lane 0."""
    for off in offsets:
        lanes = [(lanes[i] + lanes[i ^ off]).astype(np.float32) for i in range(len(lanes))]
    return lanes[0]

def _alpha(m_s, g_m):
    """alpha_s = ex2.approx.ftz(g_M == -inf ? 0 : fl(M_s - g_M)): the select tests g_M, not M_s (red_7
    :102-109, red_9 :174-187). An empty split (M_s = -inf) under a finite g_M gives ex2(-inf) = +0."""
    with np.errstate(invalid="ignore"):
        d = (m_s - g_m).astype(np.float32)
    return ex2(np.where(g_m == -np.inf, F(0), d).astype(np.float32))

def combine_splits(partials):
    """partials: SPLIT_KV = 132 tuples (m [..., M], l [..., M], acc [..., M, D]) as the template stores
    them (split_partials). Returns O (bf16 values), lse2 (log2 units) and lse_flex = fl(lse2 * ln2),
    evaluated in the order of the compiled combine kernels."""
    S = len(partials)
    assert S == 2 * HALF, "the order below is the one compiled for SPLIT_KV = 132"
    Ms = [f32(p[0]) for p in partials]; Ls = [f32(p[1]) for p in partials]; As = [f32(p[2]) for p in partials]

    # g_M (red_5 then per_6): a max, exact in any order (only NaN handling and the sign of a zero max
    # depend on order, and neither reaches an output here).
    g_m = np.max(np.stack(Ms), axis=0).astype(np.float32)
    alpha = [_alpha(m, g_m) for m in Ms]

    # g_L (red_7): per half, thread r = 0..63 takes split 66h+r, then 66h+r+64 if r+64 < 66, as
    # fma(alpha, L, acc) from acc = +0; warp w holds r = 32w..32w+31 and reduces by xor 16,8,4,2,1;
    # then warp0 + warp1. per_mul_8 then adds half0 + half1.
    halves = []
    for h in range(2):
        v = []
        for r in range(64):
            s = HALF * h + r
            a = fma(alpha[s], Ls[s], F(0))
            if r + 64 < HALF:
                a = fma(alpha[s + 64], Ls[s + 64], a)
            v.append(a)
        w = [_bfly(v[32 * i:32 * i + 32], (16, 8, 4, 2, 1)) for i in range(2)]
        halves.append((w[0] + w[1]).astype(np.float32))
    g_l = (halves[0] + halves[1]).astype(np.float32)

    # lse (per_mul_8): fully masked rows (g_M == -inf) take g_L = 1 before __nv_log2f; lse2 = log2 + g_M.
    g_l1 = np.where(g_m == -np.inf, F(1), g_l).astype(np.float32)
    lse2 = (log2f(g_l1) + g_m).astype(np.float32)
    lse_flex = (lse2 * LN2).astype(np.float32)

    # O (red_9): per half and element (row, d), r-thread k = 0..31 chains fma(alpha, ACC, acc) from +0
    # over splits 66h+k, 66h+k+32, then 66h+k+64 if k < 2; warp w holds k = 8w..8w+7 (k = 8w + lane//4)
    # and reduces by xor 16,8,4 (k^4, k^2, k^1); the four warp sums meet as (W0+W2) + (W1+W3).
    # per_10 then adds half0 + half1 and divides by (g_M == -inf ? 1 : g_L) with div.full.
    parts = []
    for h in range(2):
        v = []
        for kk in range(32):
            acc = np.zeros_like(As[0])
            for s in (HALF * h + kk, HALF * h + kk + 32, HALF * h + kk + 64):
                if s < HALF * (h + 1):
                    acc = fma(alpha[s][..., None], As[s], acc)
            v.append(acc)
        w = [_bfly(v[8 * i:8 * i + 8], (4, 2, 1)) for i in range(4)]
        parts.append((((w[0] + w[2]).astype(np.float32)) + ((w[1] + w[3]).astype(np.float32))).astype(np.float32))
    o = bf16(div_full((parts[0] + parts[1]).astype(np.float32), g_l1[..., None]))
    return o, lse2, lse_flex
