// attention/materialised_forward.cpp: the materialised softmax forward of one row (standard-FMT,
// golden-FMT-baseline, standard-fp8): the whole score row S, P = F(p / l) and O = P·V, as
// PyTorch's tensor ops compute them; and P recomputed from the saved m, l for the backward.
//
// Contract: attention/engine_detail.hpp (materialised_forward_row, materialised_p_row). No KV
// tiles: a traced materialised row records only what the engine records for every row
// (delta's decomposition).
#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/engine_detail.hpp"

namespace fb::attn::detail {

namespace {
// A row with no visible key, or whose every score is -inf (a fully masked row): max -inf, P 0/0.
// Such a row gets the guards' O = 0 (SDPA's _safe_softmax zeroes it too); a row with a NaN
// score (max NaN) or a +inf one (l NaN) is no empty row: it propagates NaN, as softmax does.
bool materialised_row_is_empty(double m, double l) { return m == -kInf || l == 0.0; }
}  // namespace

template <class A, class E>
void materialised_forward_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                              double* o_out, double* o_pre_out, RowStats& st, std::vector<double>& s,
                              std::vector<E>& pc, std::uint64_t o_position, const RunOptions& opt) {
  const int d = g.d;
  const int nk = visible_keys(g, row);
  const ScaleConstants k = head_scale_constants(km, ar, g, hd);
  s.resize(static_cast<std::size_t>(g.nk));
  pc.resize(static_cast<std::size_t>(g.nk));
  std::vector<float> lane_values;
  tile_scores(km, ar, k, hd, hd.q_row(row), 0, nk, s.data(), lane_values);
  // The row's max, or +dynmax's over the whole row (one "tile"); the backward recomputes P
  // from this m.
  // reduce_max skips NaN, as the CUDA kernels' fmaxf does. Beside a finite score a NaN one makes
  // l NaN, and so P, O and the LSE, as softmax gives; a row of NaN (and -inf) scores would read
  // as fully masked (max -inf), so its max is NaN, as PyTorch's amax gives. Only that rare row
  // is scanned.
  double m = reduce_max(km, ar, k, s.data(), nk, -kInf, nullptr);
  if (m == -kInf && std::any_of(s.begin(), s.begin() + nk, [](double x) { return std::isnan(x); }))
    m = std::numeric_limits<double>::quiet_NaN();
  // softmax: p = exp(s - m), l = Σ p, P = F(p / l) (fp32 inside)
  std::vector<double> p(static_cast<std::size_t>(nk));
  for (int j = 0; j < nk; ++j) p[j] = exponent(km, ar, k, s[j], m);
  const double l = materialised_row_sum(km, p.data(), nk, g.nk, SoftmaxPass::forward, 0,
                                        [&](double a, double b) { return ar.op(km.row_sum_internal, a + b); });
  const bool empty = materialised_row_is_empty(m, l);
  for (int j = 0; j < nk; ++j) {
    double pj = empty ? 0.0 : ar.op(km.p_format, p[j] / l);
    // fp8 baseline: P kept in fp16, then e4m3(fp32(P * p_scale)).
    if (km.fp8.p_before_cast) pj = ar.f32(ar.op(km.fp8.p_before_cast, pj) * km.fp8.p_scale);
    pc[j] = static_cast<E>(empty ? 0.0 : ar.op(km.p_cast, pj));
  }
  const RoundingSpec out_spec = final_cast_spec(km, opt);
  // fp8 baseline: the P·V GEMM's descale, fp32(v_descale / p_scale), on its fp32 result.
  const double out_descale = km.fp8.enabled ? ar.f32(hd.v_descale[0] / km.fp8.p_scale) : 1.0;
  // P·V: P against V's columns, side by side where the dot allows it.
  std::vector<double> pv(static_cast<std::size_t>(d), 0.0);
  dots_against_columns(
      ar, km.pv_dot, hd, pv.data(), pc.data(), hd.v_row(0), static_cast<std::size_t>(d), nk, d,
      [&](int c) { return hd.vt_row(c); }, lane_values);
  for (int c = 0; c < d; ++c) {
    const double raw = pv[static_cast<std::size_t>(c)];
    const double dot = km.fp8.enabled ? ar.f32(raw * out_descale) : raw;
    o_pre_out[c] = dot;
    o_out[c] = km.o_round == RoundingMode::rne || A::exact ? ar.to(km.pv_result_format, dot)
                                                           : ar.to_traced(km.pv_result_format, dot, nullptr, out_spec,
                                                                          o_position + static_cast<std::uint64_t>(c));
  }
  st.m = m;
  st.l = l;
  st.lse = empty ? empty_row_lse(km.lse) : ar.op(km.lse_format, m + ar.opmath_log(l));
  st.lse_kernel = st.lse;
}

template <class A, class E>
void materialised_p_row(const KernelModel& km, const A& ar, const HeadData<E>& hd, const Geometry& g, int row,
                        const RowStats& st, double* p_out) {
  const ScaleConstants k = scale_constants(km, ar, g.scale);
  const int nk = visible_keys(g, row);
  const bool empty = materialised_row_is_empty(st.m, st.l);
  for (int j = 0; j < g.nk; ++j) {
    if (j >= nk || empty) {
      p_out[j] = 0.0;
      continue;
    }
    const double s = score(km, ar, k, hd.q_row(row), hd.k_row(j), g.d);
    const double p = exponent(km, ar, k, s, st.m);
    p_out[j] = ar.op(km.p_cast, ar.op(km.p_format, p / st.l));
  }
}

#define FB_ATTN_INSTANTIATE(A, E)                                                                                      \
  template void materialised_forward_row<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&, int, \
                                               double*, double*, RowStats&, std::vector<double>&, std::vector<E>&,     \
                                               std::uint64_t, const RunOptions&);                                      \
  template void materialised_p_row<A, E>(const KernelModel&, const A&, const HeadData<E>&, const Geometry&, int,       \
                                         const RowStats&, double*);
FB_ATTN_FOR_EACH_ARITH(FB_ATTN_INSTANTIATE)
#undef FB_ATTN_INSTANTIATE

}  // namespace fb::attn::detail
