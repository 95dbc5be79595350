// tests/always_causal_reference.hpp: the exact gradients of a backward that masks causally
// whatever its forward did (KernelModel::bwd_always_causal, the Triton tutorial's _attn_bwd),
// for a non-causal forward.
//
// Contract: always_causal_gradients(in, ref) takes non-causal inputs with dO and the exact
// reference's outputs for them (LSE, delta) and returns dQ, dK, dV in long double, rounded once
// to double: with P_rj = exp(scale q_r.k_j - LSE_r) (the non-causal forward's softmax) and the
// mask j <= r + (Nk - Nq) (the diagonal aligned bottom-right, as the engine aligns it when the
// lengths differ), dV_j = sum_r P_rj dO_r, dS_rj = P_rj (dO_r.v_j - delta_r), dQ_r = scale
// sum_j dS_rj k_j, dK_j = scale sum_r dS_rj q_r over the unmasked (r, j). Written from that
// formula, not from the engine.
#pragma once

#include <cmath>

#include "attention/attention.hpp"

namespace fb::test {

struct Gradients {
  attn::Tensor4 dq, dk, dv;
};

inline Gradients always_causal_gradients(const attn::AttentionInputs& in, const attn::AttentionOutputs& ref) {
  const int batch = in.q.batch, heads = in.q.heads, nq = in.q.rows, nk = in.k.rows, d = in.q.cols;
  const int offset = nk - nq;
  const double scale = in.softmax_scale > 0 ? in.softmax_scale : 1.0 / std::sqrt(static_cast<double>(d));
  Gradients g{attn::Tensor4(batch, heads, nq, d), attn::Tensor4(batch, heads, nk, d),
              attn::Tensor4(batch, heads, nk, d)};
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int r = 0; r < nq; ++r)
        for (int j = 0; j < nk && j <= r + offset; ++j) {
          long double s = 0, dp = 0;
          for (int c = 0; c < d; ++c) {
            s += static_cast<long double>(in.q.at(b, h, r, c)) * in.k.at(b, h, j, c);
            dp += static_cast<long double>(in.d_o->at(b, h, r, c)) * in.v.at(b, h, j, c);
          }
          const long double p = std::exp(scale * s - ref.lse.at(b, h, r, 0));
          const long double ds = p * (dp - ref.delta->at(b, h, r, 0));
          for (int c = 0; c < d; ++c) {
            g.dv.at(b, h, j, c) += static_cast<double>(p * in.d_o->at(b, h, r, c));
            g.dq.at(b, h, r, c) += static_cast<double>(scale * ds * in.k.at(b, h, j, c));
            g.dk.at(b, h, j, c) += static_cast<double>(scale * ds * in.q.at(b, h, r, c));
          }
        }
  return g;
}

}  // namespace fb::test
