// attention/backward.cpp: the backward passes: delta (from O and dO, or rowsum(dP∘P)) and
// the three backward kernels a recipe can name (BackwardKernel): FA2's
// compute_dq_dk_dv_seqk_parallel, the Triton tutorial's _attn_bwd, and PyTorch autograd
// through the recipe's tensor ops.
//
// Contract: attention/engine_detail.hpp (delta_from_o, delta_from_dpp, *_backward_head). Each
// kernel recomputes P from the forward's row statistics exactly as that kernel does, and
// reduces in a fixed order, so the result does not depend on threads. FA2's dQ: the per
// n_block partial (an MMA from C = 0) is atomically added to dq_accum in fp32; the hardware
// order is not deterministic, the model adds n_blocks in ascending order.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "attention/engine_detail.hpp"

namespace fb::attn::detail {

DeltaThreadLayout delta_thread_layout(DeltaFormula formula, int d) {
  const auto round_up = [](int x, int m) { return (x + m - 1) / m * m; };
  DeltaThreadLayout layout;
  switch (formula) {
    case DeltaFormula::fa2_threads:  // dot_do_o: kBlockKSmem = 64 if the padded d is a multiple of 64, else 32
      layout.padded_head_dim = round_up(d, 32);
      layout.chunk = layout.padded_head_dim % 64 == 0 ? 64 : 32;
      return layout;
    case DeltaFormula::fa3_threads:  // round_up_headdim (flash_api.cpp), then kBlockKGmem
      layout.padded_head_dim = d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : round_up(d, 64);
      break;
    case DeltaFormula::fa4_threads:  // head_dim_v_padded: a multiple of 32, then gmem_k_block_size
    default:
      layout.padded_head_dim = round_up(d, 32);
      break;
  }
  layout.chunk = layout.padded_head_dim % 128 == 0 ? 128 : layout.padded_head_dim % 64 == 0 ? 64 : 32;
  return layout;
}

// delta for one row from O (or O kept in fp32) and dO.
template <class A, class E>
double delta_from_o(const KernelModel& km, const A& ar, const E* d_o, const double* o, int d) {
  switch (km.delta) {
    case DeltaFormula::fa2_threads:
    case DeltaFormula::fa3_threads:
    case DeltaFormula::fa4_threads: {
      // Each of the row's threads loads 8 contiguous elements per chunk and sums its
      // products sequentially (chunk by chunk) in fp32: the first a multiply, the rest
      // FFMAs (products of bf16/fp16 are exact, so an FFMA equals add-of-product); padding
      // columns are zero. Then Allreduce<threads> (shfl_xor threads/2, ..., 1).
      const DeltaThreadLayout layout = delta_thread_layout(km.delta, d);
      const int threads = layout.chunk / 8;
      double part[16] = {};
      for (int t = 0; t < threads; ++t) {
        bool first = true;
        for (int base = 0; base < layout.padded_head_dim; base += layout.chunk) {
          for (int e = 0; e < 8; ++e) {
            const int col = base + 8 * t + e;
            const double x = col < d ? static_cast<double>(d_o[col]) : 0.0;
            const double y = col < d ? o[col] : 0.0;
            part[t] = first ? ar.f32(x * y) : ar.fma32(x, y, part[t]);
            first = false;
          }
        }
      }
      for (int off = threads / 2; off >= 1; off /= 2)
        for (int t = 0; t < off; ++t) part[t] = ar.f32(part[t] + part[t + off]);
      return part[0];
    }
    case DeltaFormula::row_fma_chain: {
      double sum = 0.0;  // fma(o, do, 0) is the rounded product
      for (int c = 0; c < d; ++c) sum = ar.fma32(static_cast<double>(d_o[c]), o[c], sum);
      return sum;
    }
    case DeltaFormula::rounded_products: {
      std::vector<double> prod(static_cast<std::size_t>(d));
      for (int c = 0; c < d; ++c) prod[c] = ar.op(km.delta_product_format, static_cast<double>(d_o[c]) * o[c]);
      const double s = pairwise_sum(prod.data(), d, [&](double a, double b) { return ar.f32(a + b); });
      return ar.to(km.delta_format, s);
    }
    case DeltaFormula::softmax_backward:
    default:
      return 0.0;  // computed from dP∘P by the caller
  }
}

namespace {
// P for one row and key in the FA2 backward: ex2(S*scale_log2 - LSE*log2e) (Scale_max=false:
// max_scaled = lse * float(M_LOG2E)).
template <class A>
double fa2_backward_lse_scaled(const A& ar, double lse_kernel) {
  double log2e = std::numbers::log2e;
  if constexpr (!A::exact) log2e = static_cast<float>(std::numbers::log2e);
  return lse_kernel == -kInf ? 0.0 : ar.f32(lse_kernel * log2e);
}
template <class A>
double fa2_backward_p(const KernelModel& km, const A& ar, const ScaleConstants& k, double s, double lse_kernel) {
  if (km.bwd_natural_lse_and_scaled_ds) {
    // cuDNN: exp(S·scale - LSE) as ex2 of the natural-unit difference times fp32(log2 e).
    if (lse_kernel == kInf) return 0.0;
    double log2e = std::numbers::log2e;
    if constexpr (!A::exact) log2e = static_cast<float>(std::numbers::log2e);
    return kernel_exp2(km, ar, ar.f32(ar.f32(ar.f32(s * k.scale_f) - lse_kernel) * log2e));
  }
  return kernel_exp2(km, ar, exponent_argument(km, ar, s, k.scale_log2, fa2_backward_lse_scaled(ar, lse_kernel)));
}

// One row's P and dS over a tile's klen keys, as mma_backward_head's per-key steps give them:
// for the first `visible` keys P = fa2_backward_p of S = ar.to(score_format, s_dot[j]) and
// dS = pointwise_mult p * (dp - delta), for the rest 0 (masked). Where kernel_exp2 is the
// SFU's ex2 (ex2_approx_ftz), the row's exponents go to the model's evaluate_array at once (the
// same bits as one evaluate() each), FFMA exponents through ffma_uniform_f32_array (std::fma
// on the same floats, flushed as ar.f32 flushes). args, values: fp32 scratch.
template <class A>
void fa2_backward_p_ds_row(const KernelModel& km, const A& ar, const ScaleConstants& k, const double* s_dot,
                           const double* dp, int visible, int klen, double lse_kernel, double delta, double* p,
                           double* ds, std::vector<float>& args, std::vector<float>& values) {
  bool done = false;
  if constexpr (!A::exact) {
    if (km.exp2_function == Exp2Function::ex2_approx_ftz && !km.bwd_natural_lse_and_scaled_ds) {
      const auto n = static_cast<std::size_t>(visible);
      args.resize(n);
      values.resize(n);
      const double lse_scaled = fa2_backward_lse_scaled(ar, lse_kernel);
      if (km.exponent_argument == ExponentArgument::ffma) {
        for (int j = 0; j < visible; ++j) args[j] = static_cast<float>(ar.to(km.score_format, s_dot[j]));
        ffma_uniform_f32_array(args.data(), static_cast<float>(k.scale_log2), static_cast<float>(-lse_scaled),
                               args.data(), n, km.ftz);
      } else {
        for (int j = 0; j < visible; ++j)
          args[j] =
              static_cast<float>(exponent_argument(km, ar, ar.to(km.score_format, s_dot[j]), k.scale_log2, lse_scaled));
      }
      ar.km->sfu.ex2->evaluate_array(args.data(), values.data(), n);
      for (int j = 0; j < visible; ++j) p[j] = values[j];
      done = true;
    }
  }
  if (!done)
    for (int j = 0; j < visible; ++j) p[j] = fa2_backward_p(km, ar, k, ar.to(km.score_format, s_dot[j]), lse_kernel);
  for (int j = 0; j < visible; ++j) ds[j] = ar.f32(p[j] * ar.f32(dp[j] - delta));  // pointwise_mult: p * (dp - d)
  if (km.bwd_natural_lse_and_scaled_ds)  // cuDNN: the softmax scale on dS, before its cast
    for (int j = 0; j < visible; ++j) ds[j] = ar.f32(ds[j] * k.scale_f);
  std::fill(p + visible, p + klen, 0.0);
  std::fill(ds + visible, ds + klen, 0.0);
}

}  // namespace

// The FlashAttention backward (FA2 compute_dq_dk_dv_seqk_parallel; FA3 and FA4 have the same
// numerics, see KernelModel::bwd_row_block_order) for one head: for each n_block, its
// m_blocks in the recipe's order; dV += P̄ᵀdO and dK += dSᵀQ through the MMA with the
// accumulators as C; dQ partial per (n_block, m_block) added to dq_accum in fp32.
template <class A, class E>
void mma_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                       const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                       double* dk_out, double* dv_out, double* dq_pre_out) {
  const int nq = g.nq, nk = g.nk, d = g.d;
  const int bm = g.tiles.bwd_block_m, bn = g.tiles.bwd_block_n;
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  // dK and dQ's scale at the end (times 1, exact, where dS carries it).
  const double dk_dq_scale = km.bwd_natural_lse_and_scaled_ds ? 1.0 : k.scale_f;
  std::vector<double> dq_acc(static_cast<std::size_t>(nq) * d, 0.0);
  std::vector<double> dk_acc(static_cast<std::size_t>(bn) * d), dv_acc(static_cast<std::size_t>(bn) * d);
  std::vector<E> pt(static_cast<std::size_t>(bn) * bm), dst(static_cast<std::size_t>(bn) * bm),
      ds_rows(static_cast<std::size_t>(bm) * bn);
  std::vector<double> s_row(static_cast<std::size_t>(bn)), dp_row(static_cast<std::size_t>(bn)),
      dq_part(static_cast<std::size_t>(d)), p_row(static_cast<std::size_t>(bn)), ds_row(static_cast<std::size_t>(bn)),
      out_row(static_cast<std::size_t>(d));
  std::vector<E> p_cast(static_cast<std::size_t>(bn));
  std::vector<float> lane_values, ex2_args, ex2_values;
  const int n_blocks = (nk + bn - 1) / bn, m_blocks = (nq + bm - 1) / bm;
  for (int nb = 0; nb < n_blocks; ++nb) {
    const int kb = nb * bn, ke = std::min(nk, kb + bn), klen = ke - kb;
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
    // The first row block that sees key kb: FA2 flash_bwd_kernel.h:320, m_block_min =
    // max(0, (n_block * kBlockN + seqlen_q - seqlen_k) / kBlockM) (the shifted diagonal).
    const int mb_min = g.causal ? std::max(0, kb - causal_offset(g)) / bm : 0;
    const bool ascending = km.bwd_row_block_order == RowBlockOrder::first_to_last;
    for (int step = 0; step < m_blocks - mb_min; ++step) {
      const int mb = ascending ? mb_min + step : m_blocks - 1 - step;
      const int rb = mb * bm, re = std::min(nq, rb + bm), rlen = re - rb;
      for (int r = rb; r < re; ++r) {
        // S and dP of the row's visible keys in the tile, each a dot per key.
        const int visible = std::clamp(visible_keys(g, r) - kb, 0, klen);
        std::fill(s_row.begin(), s_row.end(), 0.0);
        std::fill(dp_row.begin(), dp_row.end(), 0.0);
        dots_against_columns(
            ar, km.score_dot, hd, s_row.data(), hd.q_row(r), hd.kt_row(0) + kb, static_cast<std::size_t>(nk), d,
            visible, [&](int l) { return hd.k_row(kb + l); }, lane_values);
        dots_against_columns(
            ar, km.score_dot, hd, dp_row.data(), hd.do_row(r), hd.vt_row(0) + kb, static_cast<std::size_t>(nk), d,
            visible, [&](int l) { return hd.v_row(kb + l); }, lane_values);
        // P and dS of the row's keys in the tile (0 past the visible ones), cast for the MMAs.
        fa2_backward_p_ds_row(km, ar, k, s_row.data(), dp_row.data(), visible, klen, stats[r].lse_kernel, delta[r],
                              p_row.data(), ds_row.data(), ex2_args, ex2_values);
        E* ds_cast = ds_rows.data() + static_cast<std::size_t>(r - rb) * bn;
        to_row(ar, km.p_cast, p_row.data(), p_cast.data(), klen);
        to_row(ar, km.p_cast, ds_row.data(), ds_cast, klen);
        for (int j = 0; j < klen; ++j) {
          const std::size_t tj = static_cast<std::size_t>(j) * bm + (r - rb);
          pt[tj] = p_cast[static_cast<std::size_t>(j)];
          dst[tj] = ds_cast[j];
        }
      }
      // dV and dK: for key j, its d columns against the tile's dO and Q rows.
      for (int j = 0; j < klen; ++j) {
        const E* pcol = pt.data() + static_cast<std::size_t>(j) * bm;
        const E* dscol = dst.data() + static_cast<std::size_t>(j) * bm;
        dots_against_columns(
            ar, km.pv_dot, hd, dv_acc.data() + static_cast<std::size_t>(j) * d, pcol, hd.do_row(rb),
            static_cast<std::size_t>(d), rlen, d, [&](int c) { return hd.dot_row(c) + rb; }, lane_values);
        dots_against_columns(
            ar, km.pv_dot, hd, dk_acc.data() + static_cast<std::size_t>(j) * d, dscol, hd.q_row(rb),
            static_cast<std::size_t>(d), rlen, d, [&](int c) { return hd.qt_row(c) + rb; }, lane_values);
      }
      for (int r = rb; r < re; ++r) {
        const E* dsr = ds_rows.data() + static_cast<std::size_t>(r - rb) * bn;
        std::fill(dq_part.begin(), dq_part.end(), 0.0);
        dots_against_columns(
            ar, km.pv_dot, hd, dq_part.data(), dsr, hd.k_row(kb), static_cast<std::size_t>(d), klen, d,
            [&](int c) { return hd.kt_row(c) + kb; }, lane_values);
        for (int c = 0; c < d; ++c) {
          double& acc = dq_acc[static_cast<std::size_t>(r) * d + c];
          acc = ar.f32(acc + dq_part[static_cast<std::size_t>(c)]);
        }
      }
    }
    // dK (scaled in fp32) and dV cast into the output format, a key's d columns at once.
    for (int j = 0; j < klen; ++j) {
      const std::size_t i = static_cast<std::size_t>(j) * d, o = static_cast<std::size_t>(kb + j) * d;
      for (int c = 0; c < d; ++c) out_row[static_cast<std::size_t>(c)] = ar.f32(dk_acc[i + c] * dk_dq_scale);
      to_row(ar, km.output, out_row.data(), dk_out + o, d);
      to_row(ar, km.output, dv_acc.data() + i, dv_out + o, d);
    }
  }
  for (int r = 0; r < nq; ++r) {
    const std::size_t i = static_cast<std::size_t>(r) * d;
    for (int c = 0; c < d; ++c) {
      const double pre = ar.f32(dq_acc[i + c] * dk_dq_scale);  // convert_dq: dq_accum * scale, in fp32
      out_row[static_cast<std::size_t>(c)] = pre;
      if (dq_pre_out) dq_pre_out[i + c] = pre;
    }
    to_row(ar, km.output, out_row.data(), dq_out + i, d);
  }
}

// ---- the Triton tutorial's backward (BackwardKernel::triton_prescaled_k) ----------------
namespace {
// P for one row and key: qkT = tl.dot(k', qT) in fp32 (log2 units, K' pre-scaled), then
// pT = exp2(qkT - M) with M = m + log2(l) from the forward (a separate fp32 subtraction).
// Rows that saw nothing have M = +inf, so P = exp2(-inf) = 0.
template <class A, class E>
double triton_backward_p(const KernelModel& km, const A& ar, const HeadData<E>& hd, int row, int key, double m_log2) {
  const double s = ar.to(km.score_format, ar.dot(km.score_dot, 0.0, hd.q_row(row), hd.kp_row(key), hd.d));
  return kernel_exp2(km, ar, ar.f32(s - m_log2));
}

// A half-open range of rows or keys visited by one tl.dot step.
struct Span {
  int begin = 0, end = 0;
};

// The tutorial's visiting order along the inner index (n long: rows for _attn_bwd_dkdv, keys
// for _attn_bwd_dq) for one outer block whose diagonal starts at `block_begin` (a KV block's
// first row, or a row block's first key). Causal: the diagonal block [block_begin,
// block_begin + block) in steps of step / slice (MASK=True), then `rest` in steps of `step`
// (MASK=False). Non-causal: [0, n) in steps of `step` (ASSUMED: the tutorial's backward is
// written for causal attention only). The tutorial takes one N_CTX; with a key length other
// than the query length the diagonal is shifted by nk - nq (FA2's bottom-right alignment) and
// the diagonal block is clipped to [0, n) (ASSUMED: the tutorial has no such case).
void triton_steps(bool causal, int n, int block_begin, int block, int step, int slice, Span rest,
                  std::vector<Span>& out) {
  out.clear();
  auto cover = [&](int b, int e, int st) {
    for (int i = b; i < e; i += st) out.push_back(Span{i, std::min(e, i + st)});
  };
  if (!causal) {
    cover(0, n, step);
    return;
  }
  cover(std::max(0, block_begin), std::clamp(block_begin + block, 0, n), std::max(1, step / std::max(1, slice)));
  cover(rest.begin, rest.end, step);
}
}  // namespace

// _attn_bwd for one head. dK, dV: per key (its KV block of bwd_block_n keys fixes the
// diagonal block), dv += tl.dot(pT.to(F), do) and dk += tl.dot(dsT.to(F), qT) over the row
// steps with the fp32 accumulators as C; dsT = pT * (dpT - delta) in fp32; at the end
// dk *= sm_scale (fp32) and both are stored in F. dQ: per row (its row block of bwd_block_n
// rows), dq += tl.dot(ds.to(F), K') over the key steps (diagonal block first, then keys from
// 0), then dq *= fp32(ln 2) because K' carried sm_scale * log2(e). Masked entries
// (tl.where(mask, p, 0)) stay in their steps as zeros.
template <class A, class E>
void triton_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                          const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                          double* dk_out, double* dv_out) {
  const int nq = g.nq, nk = g.nk, d = g.d, offset = causal_offset(g);
  // The tutorial's _attn_bwd masks causally whatever its forward did (bwd_always_causal).
  Geometry mask_geometry = g;
  mask_geometry.causal = g.causal || km.bwd_always_causal;
  const bool causal = mask_geometry.causal;
  const int block = g.tiles.bwd_block_n, step = g.tiles.bwd_block_m;
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  const double ln2 = A::exact ? std::numbers::ln2 : static_cast<double>(static_cast<float>(std::numbers::ln2));
  std::vector<Span> spans;
  std::vector<E> p_col(static_cast<std::size_t>(nq)), ds_col(static_cast<std::size_t>(std::max(nq, nk)));
  std::vector<double> dv_row(static_cast<std::size_t>(d)), dk_row(static_cast<std::size_t>(d)),
      dq_row(static_cast<std::size_t>(d));
  std::vector<float> lane_values;
  auto p_and_ds = [&](int r, int j, E& p_out, E& ds_out) {
    if (j >= visible_keys(mask_geometry, r)) {  // tl.where(mask, pT, 0.0)
      p_out = ds_out = static_cast<E>(0);
      return;
    }
    const double p = triton_backward_p(km, ar, hd, r, j, stats[r].lse_kernel);
    const double dp = ar.dot(km.score_dot, 0.0, hd.do_row(r), hd.v_row(j), d);  // tl.dot(v, do^T), fp32
    p_out = static_cast<E>(ar.to(km.p_cast, p));
    ds_out = static_cast<E>(ar.to(km.p_cast, ar.f32(p * ar.f32(dp - delta[r]))));
  };
  // dK, dV: the rows of key j's KV block, from the block's diagonal row kb - offset.
  for (int j = 0; j < nk; ++j) {
    const int kb = j / block * block;
    triton_steps(causal, nq, kb - offset, block, step, km.bwd_mask_slice,
                 Span{std::clamp(kb - offset + block, 0, nq), nq}, spans);
    for (const Span& sp : spans)
      for (int r = sp.begin; r < sp.end; ++r) p_and_ds(r, j, p_col[r], ds_col[r]);
    // Each span is one tl.dot, its accumulator the next one's C.
    std::fill(dv_row.begin(), dv_row.end(), 0.0);
    std::fill(dk_row.begin(), dk_row.end(), 0.0);
    for (const Span& sp : spans) {
      const int len = sp.end - sp.begin;
      dots_against_columns(
          ar, km.pv_dot, hd, dv_row.data(), p_col.data() + sp.begin, hd.do_row(sp.begin), static_cast<std::size_t>(d),
          len, d, [&](int c) { return hd.dot_row(c) + sp.begin; }, lane_values);
      dots_against_columns(
          ar, km.pv_dot, hd, dk_row.data(), ds_col.data() + sp.begin, hd.q_row(sp.begin), static_cast<std::size_t>(d),
          len, d, [&](int c) { return hd.qt_row(c) + sp.begin; }, lane_values);
    }
    for (int c = 0; c < d; ++c) {
      const std::size_t o = static_cast<std::size_t>(j) * d + c;
      dv_out[o] = ar.to(km.output, dv_row[static_cast<std::size_t>(c)]);
      dk_out[o] = ar.to(km.output, ar.f32(dk_row[static_cast<std::size_t>(c)] * k.scale_f));
    }
  }
  // dQ (the kernel recomputes P and dS; the same arithmetic gives the same values).
  std::vector<E>& ds_row = ds_col;
  for (int r = 0; r < nq; ++r) {
    const int rb = r / block * block;
    triton_steps(causal, nk, rb + offset, block, step, km.bwd_mask_slice, Span{0, std::clamp(rb + offset, 0, nk)},
                 spans);
    for (const Span& sp : spans)
      for (int j = sp.begin; j < sp.end; ++j) {
        E p_unused;
        p_and_ds(r, j, p_unused, ds_row[j]);
      }
    std::fill(dq_row.begin(), dq_row.end(), 0.0);
    for (const Span& sp : spans)
      dots_against_columns(
          ar, km.pv_dot, hd, dq_row.data(), ds_row.data() + sp.begin, hd.kp_row(sp.begin), static_cast<std::size_t>(d),
          sp.end - sp.begin, d, [&](int c) { return hd.kpt_row(c) + sp.begin; }, lane_values);
    for (int c = 0; c < d; ++c)
      dq_out[static_cast<std::size_t>(r) * d + c] = ar.to(km.output, ar.f32(dq_row[static_cast<std::size_t>(c)] * ln2));
  }
}

// ---- FlexAttention's backward (BackwardKernel::flex_blocks) ------------------------------
namespace {
// P for one row and key as flex_backwards.py.jinja's bwd_dq_block_mn / bwd_dkdv_block_mn form
// it: the score as the forward forms it (score_of_dot: fp32(qk * SM_SCALE)), then exp2 of it
// times RCP_LN2 less the forward's log2-unit LSE (lse = where(lse == -inf, 0, lse)): one FFMA,
// or on a block behind a tl.where (flex_block_behind_where) the rounded product then a
// subtraction (exponent(), two_step). A row that saw nothing has LSE = +inf, so P = exp2(-inf) = 0.
template <class A, class E>
double flex_backward_p(const KernelModel& km, const A& ar, const ScaleConstants& k, const HeadData<E>& hd, int row,
                       int key, double lse_log2, bool masked) {
  const double s = score(km, ar, k, hd.q_row(row), hd.k_row(key), hd.d);
  return exponent(km, ar, k, s, lse_log2, masked && km.causal_band_two_step_exponent);
}
}  // namespace

// flex_backwards.py.jinja for one head. The block mask's blocks are the forward's tiles
// (g.tiles.block_m x block_n, flex_partial_block); each program walks its blocks partial first,
// then full, each group ascending (KvOrder::partial_then_full). dK, dV: per key (its KV block),
// over the visited row blocks in steps of bwd_block_m rows, dv += dot(P^T.to(F), dO) and
// dk += dot(dS^T.to(F), Q), the fp32 accumulators the next step's C. dQ: per row (its row
// block), over the visited KV blocks in steps of bwd_block_m keys, dq += dot(dS.to(F), K).
// dS = fp32(P * fp32(dP - delta)), dP = dot(dO, V^T) in fp32; masked entries (tl.where(mask,
// ., 0)) stay in their steps as zeros. At the end dq *= SM_SCALE and dk *= SM_SCALE in fp32.
// The dQ programs recompute P and dS as the dK/dV programs do: the same arithmetic gives the
// same values, so they are formed once.
template <class A, class E>
void flex_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                        const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                        double* dk_out, double* dv_out) {
  const int nq = g.nq, nk = g.nk, d = g.d, offset = causal_offset(g);
  const int bm = g.tiles.block_m, bn = g.tiles.block_n, step = g.tiles.bwd_block_m;
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  const std::size_t unk = static_cast<std::size_t>(nk), unq = static_cast<std::size_t>(nq);
  // P and dS of every (row, key), in the input format, row-major and transposed.
  std::vector<E> p_t(unq * unk), ds(unq * unk), ds_t(unq * unk);
  for (int r = 0; r < nq; ++r) {
    const int visible = visible_keys(g, r), row_begin = r / bm * bm;
    const double lse = stats[static_cast<std::size_t>(r)].lse_kernel;
    const double lse_log2 = lse == -kInf ? 0.0 : lse;
    for (int j = 0; j < nk; ++j) {
      E p_e = static_cast<E>(0), ds_e = static_cast<E>(0);
      if (j < visible) {
        const double p =
            flex_backward_p(km, ar, k, hd, r, j, lse_log2, flex_block_behind_where(g, row_begin, j / bn * bn));
        const double dp = ar.dot(km.score_dot, 0.0, hd.do_row(r), hd.v_row(j), d);
        p_e = static_cast<E>(ar.to(km.p_cast, p));
        ds_e = static_cast<E>(ar.to(km.p_cast, ar.f32(p * ar.f32(dp - delta[static_cast<std::size_t>(r)]))));
      }
      const std::size_t rj = static_cast<std::size_t>(r) * unk + static_cast<std::size_t>(j);
      const std::size_t jr = static_cast<std::size_t>(j) * unq + static_cast<std::size_t>(r);
      p_t[jr] = p_e;
      ds[rj] = ds_e;
      ds_t[jr] = ds_e;
    }
  }
  // The spans of `step` of the blocks [b, b + block) of `n` in the order partial then full.
  std::vector<Span> spans;
  auto blocks_in_order = [&](int n, int block, const auto& visited, const auto& partial) {
    spans.clear();
    for (int pass = 0; pass < 2; ++pass)
      for (int b = 0; b < n; b += block) {
        if (!visited(b) || partial(b) != (pass == 0)) continue;
        for (int i = b; i < std::min(n, b + block); i += step)
          spans.push_back(Span{i, std::min({n, b + block, i + step})});
      }
  };
  std::vector<double> dv_row(static_cast<std::size_t>(d)), dk_row(static_cast<std::size_t>(d)),
      dq_row(static_cast<std::size_t>(d));
  std::vector<float> lane_values;
  // dK, dV: the row blocks of key j's KV block that see one of its keys.
  for (int j = 0; j < nk; ++j) {
    const int kb = j / bn * bn;
    blocks_in_order(
        nq, bm, [&](int rb) { return !g.causal || kb <= rb + bm - 1 + offset; },
        [&](int rb) { return flex_partial_block(g, rb, kb); });
    std::fill(dv_row.begin(), dv_row.end(), 0.0);
    std::fill(dk_row.begin(), dk_row.end(), 0.0);
    const E* p_col = p_t.data() + static_cast<std::size_t>(j) * unq;
    const E* ds_col = ds_t.data() + static_cast<std::size_t>(j) * unq;
    for (const Span& sp : spans) {
      const int len = sp.end - sp.begin;
      dots_against_columns(
          ar, km.pv_dot, hd, dv_row.data(), p_col + sp.begin, hd.do_row(sp.begin), static_cast<std::size_t>(d), len, d,
          [&](int c) { return hd.dot_row(c) + sp.begin; }, lane_values);
      dots_against_columns(
          ar, km.pv_dot, hd, dk_row.data(), ds_col + sp.begin, hd.q_row(sp.begin), static_cast<std::size_t>(d), len, d,
          [&](int c) { return hd.qt_row(c) + sp.begin; }, lane_values);
    }
    for (int c = 0; c < d; ++c) {
      const std::size_t o = static_cast<std::size_t>(j) * d + c;
      dv_out[o] = ar.to(km.output, dv_row[static_cast<std::size_t>(c)]);
      dk_out[o] = ar.to(km.output, ar.f32(dk_row[static_cast<std::size_t>(c)] * k.scale_f));
    }
  }
  // dQ: the KV blocks that row r's row block sees a key of.
  for (int r = 0; r < nq; ++r) {
    const int rb = r / bm * bm;
    blocks_in_order(
        nk, bn, [&](int kb) { return !g.causal || kb <= rb + bm - 1 + offset; },
        [&](int kb) { return flex_partial_block(g, rb, kb); });
    std::fill(dq_row.begin(), dq_row.end(), 0.0);
    const E* ds_row = ds.data() + static_cast<std::size_t>(r) * unk;
    for (const Span& sp : spans)
      dots_against_columns(
          ar, km.pv_dot, hd, dq_row.data(), ds_row + sp.begin, hd.k_row(sp.begin), static_cast<std::size_t>(d),
          sp.end - sp.begin, d, [&](int c) { return hd.kt_row(c) + sp.begin; }, lane_values);
    for (int c = 0; c < d; ++c)
      dq_out[static_cast<std::size_t>(r) * d + c] =
          ar.to(km.output, ar.f32(dq_row[static_cast<std::size_t>(c)] * k.scale_f));
  }
}

// The tensor-op backward (PyTorch autograd through the recipe's forward): per KV tile
// and query tile, block matmuls fp32-accumulated and rounded to bwd_format, the tiles'
// results accumulated in bwd_format. Materialised models use one tile each way.
template <class A, class E>
void tensorop_backward_head(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g,
                            const std::vector<RowStats>& stats, const std::vector<double>& delta, double* dq_out,
                            double* dk_out, double* dv_out) {
  const int nq = g.nq, nkeys = g.nk, d = g.d;
  const bool materialised = km.structure == Structure::materialised;
  const int bm = materialised ? std::max(1, nq) : g.tiles.bwd_block_m,
            bn = materialised ? std::max(1, nkeys) : g.tiles.bwd_block_n;
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  std::fill(dq_out, dq_out + static_cast<std::size_t>(nq) * d, 0.0);
  std::fill(dk_out, dk_out + static_cast<std::size_t>(nkeys) * d, 0.0);
  std::fill(dv_out, dv_out + static_cast<std::size_t>(nkeys) * d, 0.0);
  std::vector<E> pt(static_cast<std::size_t>(bn) * bm), dst(static_cast<std::size_t>(bn) * bm),
      ds_rows(static_cast<std::size_t>(bm) * bn);
  std::vector<double> prow(static_cast<std::size_t>(nkeys));
  std::vector<double> dv_blk(static_cast<std::size_t>(d)), dk_blk(static_cast<std::size_t>(d)),
      dq_blk(static_cast<std::size_t>(d));
  std::vector<float> lane_values;
  const std::optional<Format> F = km.bwd_format;
  const int n_blocks = (nkeys + bn - 1) / bn, m_blocks = (nq + bm - 1) / bm;
  for (int nb = 0; nb < n_blocks; ++nb) {
    const int kb = nb * bn, ke = std::min(nkeys, kb + bn), klen = ke - kb;
    for (int mb = 0; mb < m_blocks; ++mb) {
      const int rb = mb * bm, re = std::min(nq, rb + bm), rlen = re - rb;
      for (int r = rb; r < re; ++r) {
        const int nk = visible_keys(g, r);
        if (materialised) materialised_p_row(km, ar, hd, g, r, stats[r], prow.data());
        for (int j = kb; j < ke; ++j) {
          double p = 0.0, ds = 0.0;
          if (j < nk) {
            if (materialised) {
              p = prow[j];
            } else {
              const double s = score(km, ar, k, hd.q_row(r), hd.k_row(j), d);
              // P = exp(S - LSE): S (FMT) minus LSE (lse_format) promotes to the wider.
              const std::optional<Format> sub =
                  km.lse_format && km.sub_format && *km.sub_format == formats::bf16 ? km.lse_format : km.sub_format;
              p = stats[r].lse == kInf ? 0.0 : ar.to(km.p_format, ar.opmath_exp(ar.op(sub, s - stats[r].lse)));
            }
            const double dp = ar.to(F, ar.dot(km.pv_dot, 0.0, hd.do_row(r), hd.v_row(j), d));
            if (km.delta == DeltaFormula::rounded_products && !km.delta_dpp) {
              // Qiu & Yao: dS = p * scale * (dp - D): fp32 * python float; dp (bwd_format) minus D
              // (delta_format) in PyTorch's promoted type: fp32 under autocast, where D is fp32.
              ds = ar.f32(ar.f32(p * k.scale_f) * ar.op(promoted(F, km.delta_format), dp - delta[r]));
            } else if (km.softmax_grad_fma) {
              // softmax_warp_backward: gI = gO*out (an fp32 tensor op) minus out * sum, one FFMA;
              // no scale (q' and k' carry it).
              ds = ar.fma32(-p, delta[r], ar.f32(dp * p));
            } else {
              // softmax backward (opmath inside, one rounding), then the scale as a tensor op.
              const double soft = ar.op(F, p * ar.opmath(dp - delta[r]));
              ds = ar.op(F, soft * k.scale_f);
            }
          }
          const std::size_t tj = static_cast<std::size_t>(j - kb) * bm + (r - rb);
          pt[tj] = static_cast<E>(ar.to(km.p_cast, p));
          dst[tj] = static_cast<E>(ar.to(F ? F : km.p_cast, ds));
          ds_rows[static_cast<std::size_t>(r - rb) * bn + (j - kb)] = dst[tj];
        }
      }
      for (int j = 0; j < klen; ++j) {
        std::fill(dv_blk.begin(), dv_blk.end(), 0.0);
        std::fill(dk_blk.begin(), dk_blk.end(), 0.0);
        dots_against_columns(
            ar, km.pv_dot, hd, dv_blk.data(), pt.data() + static_cast<std::size_t>(j) * bm, hd.do_row(rb),
            static_cast<std::size_t>(d), rlen, d, [&](int c) { return hd.dot_row(c) + rb; }, lane_values);
        dots_against_columns(
            ar, km.pv_dot, hd, dk_blk.data(), dst.data() + static_cast<std::size_t>(j) * bm, hd.q_row(rb),
            static_cast<std::size_t>(d), rlen, d, [&](int c) { return hd.qt_row(c) + rb; }, lane_values);
        for (int c = 0; c < d; ++c) {
          const std::size_t o = static_cast<std::size_t>(kb + j) * d + c;
          const double dv_c = ar.to(F, dv_blk[static_cast<std::size_t>(c)]);
          const double dk_c = ar.to(F, dk_blk[static_cast<std::size_t>(c)]);
          dv_out[o] = mb == 0 ? dv_c : ar.op(F, dv_out[o] + dv_c);
          dk_out[o] = mb == 0 ? dk_c : ar.op(F, dk_out[o] + dk_c);
        }
      }
      for (int r = rb; r < re; ++r) {
        std::fill(dq_blk.begin(), dq_blk.end(), 0.0);
        dots_against_columns(
            ar, km.pv_dot, hd, dq_blk.data(), ds_rows.data() + static_cast<std::size_t>(r - rb) * bn, hd.k_row(kb),
            static_cast<std::size_t>(d), klen, d, [&](int c) { return hd.kt_row(c) + kb; }, lane_values);
        for (int c = 0; c < d; ++c) {
          const std::size_t o = static_cast<std::size_t>(r) * d + c;
          const double blk = ar.to(F, dq_blk[static_cast<std::size_t>(c)]);
          dq_out[o] = nb == 0 ? blk : ar.op(F, dq_out[o] + blk);
        }
      }
    }
  }
  if (km.scale == ScaleHandling::sqrt_prescale_qk) {
    // The math backend's autograd: dq = dq'·fp32(√scale), dk = dk'·fp32(√scale) (the prescaling
    // multiplies' backward, fp32 tensor ops), then each gradient's cast to the input dtype (RNE).
    for (std::size_t i = 0; i < static_cast<std::size_t>(nq) * d; ++i)
      dq_out[i] = ar.to(km.output, ar.f32(dq_out[i] * k.qk_prescale));
    for (std::size_t i = 0; i < static_cast<std::size_t>(nkeys) * d; ++i) {
      dk_out[i] = ar.to(km.output, ar.f32(dk_out[i] * k.qk_prescale));
      dv_out[i] = ar.to(km.output, dv_out[i]);
    }
  }
}

// delta = rowsum(dP∘P) (the +delta-dpp variant, and PyTorch's softmax backward):
// P as the backward recomputes it, dP through the score dot model, products rounded
// to fp32 and summed pairwise in fp32.
template <class A, class E>
double delta_from_dpp(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                      const RowStats& st, std::vector<double>& scratch) {
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  const int nk = visible_keys(g, row);
  scratch.assign(static_cast<std::size_t>(nk), 0.0);
  std::vector<double> prow;
  if (km.structure == Structure::materialised) {
    prow.resize(static_cast<std::size_t>(g.nk));
    materialised_p_row(km, ar, hd, g, row, st, prow.data());
  }
  for (int j = 0; j < nk; ++j) {
    double p;
    double dp;
    if (km.backward == BackwardKernel::triton_prescaled_k) {
      p = triton_backward_p(km, ar, hd, row, j, st.lse_kernel);
      dp = ar.dot(km.score_dot, 0.0, hd.do_row(row), hd.v_row(j), g.d);
    } else if (km.backward == BackwardKernel::flex_blocks) {
      const bool masked =
          flex_block_behind_where(g, row / g.tiles.block_m * g.tiles.block_m, j / g.tiles.block_n * g.tiles.block_n);
      p = flex_backward_p(km, ar, k, hd, row, j, st.lse_kernel == -kInf ? 0.0 : st.lse_kernel, masked);
      dp = ar.dot(km.score_dot, 0.0, hd.do_row(row), hd.v_row(j), g.d);
    } else if (km.backward == BackwardKernel::fa2_seqk_parallel) {
      const double s = ar.to(km.score_format, ar.dot(km.score_dot, 0.0, hd.q_row(row), hd.k_row(j), g.d));
      p = fa2_backward_p(km, ar, k, s, st.lse_kernel);
      dp = ar.dot(km.score_dot, 0.0, hd.do_row(row), hd.v_row(j), g.d);
    } else {
      if (km.structure == Structure::materialised) {
        p = prow[j];
      } else {
        const double s = score(km, ar, k, hd.q_row(row), hd.k_row(j), g.d);
        p = st.lse == kInf ? 0.0 : ar.to(km.p_format, ar.opmath_exp(ar.op(km.lse_format, s - st.lse)));
      }
      dp = ar.to(km.bwd_format, ar.dot(km.pv_dot, 0.0, hd.do_row(row), hd.v_row(j), g.d));
    }
    scratch[j] = ar.opmath(p * dp);  // fp32 in the kernels' dP·P and PyTorch's opmath, fp64 on fp64
  }
  const std::int64_t flat_row = static_cast<std::int64_t>(hd.batch_head) * g.nq + row;
  return materialised_row_sum(km, scratch.data(), nk, g.nk, SoftmaxPass::backward, flat_row,
                              [&](double a, double b) { return ar.opmath(a + b); });
}

#define FB_ATTN_INSTANTIATE(A, E)                                                                                      \
  template double delta_from_o<A, E>(const KernelModel&, const A&, const E*, const double*, int);                      \
  template double delta_from_dpp<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&, int,         \
                                       const RowStats&, std::vector<double>&);                                         \
  template void mma_backward_head<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&,             \
                                        const std::vector<RowStats>&, const std::vector<double>&, double*, double*,    \
                                        double*, double*);                                                             \
  template void triton_backward_head<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&,          \
                                           const std::vector<RowStats>&, const std::vector<double>&, double*, double*, \
                                           double*);                                                                   \
  template void flex_backward_head<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&,            \
                                         const std::vector<RowStats>&, const std::vector<double>&, double*, double*,   \
                                         double*);                                                                     \
  template void tensorop_backward_head<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&,        \
                                             const std::vector<RowStats>&, const std::vector<double>&, double*,        \
                                             double*, double*);
FB_ATTN_FOR_EACH_ARITH(FB_ATTN_INSTANTIATE)
#undef FB_ATTN_INSTANTIATE

}  // namespace fb::attn::detail
