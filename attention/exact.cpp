// attention/exact.cpp: exact_attention(), the high-precision reference of the same
// mathematics (forward O, LSE; backward delta, dQ, dK, dV).
//
// Contract and why x87 long double is enough: every input is a bf16/fp16 value, so
// products q_c*k_c are exact in long double (64-bit significand) and a dot over d <= 256
// terms has relative error below d * 2^-64 ≈ 1.4e-17; exp/log in long double are
// accurate to a few ulps of 2^-64; the softmax is computed with the exact max (two
// passes), so nothing cancels catastrophically except where the true result is itself
// tiny. The reference is thus ~1e-16 relative, 13 orders below one bf16 ulp (2^-8)
// and 11 below one fp16 ulp (2^-11): far beyond what measuring those errors needs.
// All-masked rows give O = 0, LSE = +inf and zero gradients, as FA2 does.
// Memory O(N·d); work split over (batch, head); results do not depend on threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "attention/attention.hpp"

namespace fb::attn {

AttentionOutputs exact_attention(const AttentionInputs& in) {
  const int B = in.q.batch, H = in.q.heads, N = in.q.rows, D = in.q.cols;
  const long double scale =
      in.softmax_scale > 0 ? static_cast<long double>(in.softmax_scale) : (D > 0 ? 1.0L / std::sqrt(static_cast<long double>(D)) : 1.0L);
  const bool backward = in.d_o.has_value();
  AttentionOutputs out;
  out.o = Tensor4(B, H, N, D);
  out.lse = Tensor4(B, H, N, 1);
  out.row_max = Tensor4(B, H, N, 1);
  if (backward) {
    out.delta = Tensor4(B, H, N, 1);
    out.dq = Tensor4(B, H, N, D);
    out.dk = Tensor4(B, H, N, D);
    out.dv = Tensor4(B, H, N, D);
  }
  auto head = [&](int b, int h) {
    std::vector<long double> s(static_cast<std::size_t>(N)), o(static_cast<std::size_t>(D));
    std::vector<long double> dk, dv;
    if (backward) {
      dk.assign(static_cast<std::size_t>(N) * D, 0.0L);
      dv.assign(static_cast<std::size_t>(N) * D, 0.0L);
    }
    for (int r = 0; r < N; ++r) {
      const int nk = in.causal ? std::min(N, r + 1) : N;
      const double* q = in.q.row(b, h, r);
      long double m = -std::numeric_limits<long double>::infinity();
      for (int j = 0; j < nk; ++j) {
        const double* k = in.k.row(b, h, j);
        long double acc = 0.0L;
        for (int c = 0; c < D; ++c) acc += static_cast<long double>(q[c]) * k[c];
        s[j] = acc * scale;
        m = std::max(m, s[j]);
      }
      out.row_max->at(b, h, r, 0) = static_cast<double>(m);
      if (nk == 0 || m == -std::numeric_limits<long double>::infinity()) {  // nothing visible, or every score -inf
        out.lse.at(b, h, r, 0) = std::numeric_limits<double>::infinity();
        if (backward) out.delta->at(b, h, r, 0) = 0.0;
        continue;  // O, dQ stay zero
      }
      long double l = 0.0L;
      std::fill(o.begin(), o.end(), 0.0L);
      for (int j = 0; j < nk; ++j) {
        const long double p = std::exp(s[j] - m);
        l += p;
        const double* v = in.v.row(b, h, j);
        for (int c = 0; c < D; ++c) o[c] += p * v[c];
      }
      const long double lse = m + std::log(l);
      out.lse.at(b, h, r, 0) = static_cast<double>(lse);
      for (int c = 0; c < D; ++c) {
        o[c] /= l;
        out.o.at(b, h, r, c) = static_cast<double>(o[c]);
      }
      if (!backward) continue;
      const double* d_o = in.d_o->row(b, h, r);
      long double delta = 0.0L;
      for (int c = 0; c < D; ++c) delta += static_cast<long double>(d_o[c]) * o[c];
      out.delta->at(b, h, r, 0) = static_cast<double>(delta);
      std::vector<long double> dq(static_cast<std::size_t>(D), 0.0L);
      for (int j = 0; j < nk; ++j) {
        const long double p = std::exp(s[j] - lse);
        const double* v = in.v.row(b, h, j);
        const double* k = in.k.row(b, h, j);
        long double dp = 0.0L;
        for (int c = 0; c < D; ++c) dp += static_cast<long double>(d_o[c]) * v[c];
        const long double ds = p * (dp - delta);
        for (int c = 0; c < D; ++c) {
          dq[c] += ds * k[c];
          dk[static_cast<std::size_t>(j) * D + c] += ds * q[c];
          dv[static_cast<std::size_t>(j) * D + c] += p * d_o[c];
        }
      }
      for (int c = 0; c < D; ++c) out.dq->at(b, h, r, c) = static_cast<double>(dq[c] * scale);
    }
    if (backward) {
      for (int j = 0; j < N; ++j)
        for (int c = 0; c < D; ++c) {
          out.dk->at(b, h, j, c) = static_cast<double>(dk[static_cast<std::size_t>(j) * D + c] * scale);
          out.dv->at(b, h, j, c) = static_cast<double>(dv[static_cast<std::size_t>(j) * D + c]);
        }
    }
  };
  const int items = B * H;
  const int threads = std::max(1, std::min(items, static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = t; i < items; i += threads) head(i / H, i % H);
    });
  }
  for (auto& th : pool) th.join();
  return out;
}

}  // namespace fb::attn
