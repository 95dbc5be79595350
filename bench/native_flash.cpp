// bench/native_flash.cpp: the native-float tiled forward bench_attention times against the
// emulator (contract in bench/native_flash.hpp).
#include "bench/native_flash.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <thread>
#include <vector>

#include "emu/ops.hpp"

namespace fb::bench {
namespace {

// One head's rows of t as float, [n][d], and (transposed) as [d][n].
void head_as_float(const attn::Tensor4& t, int b, int h, std::vector<float>& rows, std::vector<float>* columns) {
  const int n = t.rows, d = t.cols;
  rows.resize(static_cast<std::size_t>(n) * d);
  if (columns) columns->resize(static_cast<std::size_t>(n) * d);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < d; ++c) {
      const float x = static_cast<float>(t.at(b, h, r, c));
      rows[static_cast<std::size_t>(r) * d + c] = x;
      if (columns) (*columns)[static_cast<std::size_t>(c) * n + r] = x;
    }
}

// One head's forward, every row.
void forward_head(const attn::AttentionInputs& in, int b, int h, int block_n, double scale,
                  attn::AttentionOutputs& out) {
  const int N = in.q.rows, D = in.q.cols;
  const float scale_log2 = static_cast<float>(scale * std::numbers::log2e);
  std::vector<float> k, v, vt;
  head_as_float(in.k, b, h, k, nullptr);
  head_as_float(in.v, b, h, v, &vt);
  std::vector<float> q(static_cast<std::size_t>(D)), s(static_cast<std::size_t>(block_n)),
      acc(static_cast<std::size_t>(D));
  for (int r = 0; r < N; ++r) {
    for (int c = 0; c < D; ++c) q[c] = static_cast<float>(in.q.at(b, h, r, c));
    const int nk = in.causal ? r + 1 : N;
    float m = -std::numeric_limits<float>::infinity(), l = 0.f;
    std::fill(acc.begin(), acc.end(), 0.f);
    const int tiles = (nk + block_n - 1) / block_n;
    for (int t = tiles - 1; t >= 0; --t) {
      const int kb = t * block_n, len = std::min(nk, kb + block_n) - kb;
      float tm = m;
      for (int j = 0; j < len; ++j) {
        float dot = 0.f;
        const float* kr = k.data() + static_cast<std::size_t>(kb + j) * D;
        for (int c = 0; c < D; ++c) dot += q[c] * kr[c];
        s[j] = dot;
        tm = std::max(tm, dot);
      }
      const float alpha = std::exp2((m - tm) * scale_log2);
      l *= alpha;
      for (float& a : acc) a *= alpha;
      m = tm;
      for (int j = 0; j < len; ++j) {
        s[j] = std::exp2(s[j] * scale_log2 - m * scale_log2);
        l += s[j];
      }
      for (int c = 0; c < D; ++c) {
        const float* vc = vt.data() + static_cast<std::size_t>(c) * N + kb;
        float a = acc[c];
        for (int j = 0; j < len; ++j) a += s[j] * vc[j];
        acc[c] = a;
      }
    }
    for (int c = 0; c < D; ++c) {
      const float o = l > 0 ? acc[c] / l : 0.f;
      out.o.at(b, h, r, c) = to_double(in.dtype, round_double(in.dtype, o, RoundingSpec{}).bits);
    }
    out.lse.at(b, h, r, 0) = l > 0 ? m * scale + std::log(l) : std::numeric_limits<double>::infinity();
  }
}

}  // namespace

attn::AttentionOutputs native_flash_forward(const attn::AttentionInputs& in, int block_n, int threads) {
  const int B = in.q.batch, H = in.q.heads, N = in.q.rows, D = in.q.cols;
  auto same = [](const attn::Tensor4& a, const attn::Tensor4& b) {
    return a.batch == b.batch && a.heads == b.heads && a.rows == b.rows && a.cols == b.cols;
  };
  if (!same(in.q, in.k) || !same(in.q, in.v))
    throw std::invalid_argument("native_flash_forward: q, k, v must have the same shape");
  const double scale = in.softmax_scale > 0 ? in.softmax_scale : 1.0 / std::sqrt(static_cast<double>(std::max(D, 1)));
  block_n = std::max(1, block_n);
  attn::AttentionOutputs out;
  out.o = attn::Tensor4(B, H, N, D);
  out.lse = attn::Tensor4(B, H, N, 1);
  // Heads are independent; thread t takes heads t, t + threads, ... (each writes only its own).
  const int workers = std::max(1, std::min(threads, B * H));
  auto work = [&](int first) {
    for (int bh = first; bh < B * H; bh += workers) forward_head(in, bh / H, bh % H, block_n, scale, out);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < workers; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  return out;
}

}  // namespace fb::bench
