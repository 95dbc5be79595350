// studies/scenarios.cpp: seeded input scenarios (make_scenario).
//
// Contract: every element is a pure function of (scenario, seed, tensor, b, h, row, col)
// through a counter-based generator (SplitMix64 finaliser over the element's
// coordinates), so any element is reproducible alone and results never depend on
// thread count. Values are rounded to the dtype with RNE (round_double).
//
// Scenarios:
// - random: every entry N(0,1).
// - fa3-outliers: N(0,1) + N(0,100)·Bernoulli(0.001) (FlashAttention-3's test inputs).
// - sink: keys 0 and 1 are the same key vector (k_1 = k_0 = (8, 0, ..., 0) exactly), so
//   every row's two sink scores tie exactly in any arithmetic. Query r has
//   q_0 = s_r·sqrt(d)/8 with s_r ~ U[7, 9] (its scaled sink score; it varies by row so
//   that ℓ and P̄·V are not rounded identically in every row) and N(0, 1/16) elsewhere;
//   the other keys have 8 - k_j0 ~ U[9.2, 17.8] and N(0,1) elsewhere, which puts their
//   scaled scores 8-20 below the sink (plus a small jitter): their P̄ only sets sticky
//   bits. In the "sink features" (c % 4 in {0, 1}: half of them, 20 and 29 among them)
//   V is N(-1, 1/16) (mostly negative) and dO is N(-1, 1/16) as well, so the delta
//   error's sign is sign(dO)·sign(O error) (docs/DESIGN.md §7). FA2 then has P̄ = ex2(tiny
//   FFMA residual) at the sink, which its bf16 cast makes exactly 1 for P·V.
// - ties: as sink, but the other keys sit 150-200 below after scaling, so their P̄
//   underflows to exactly 0 in fp32: every tie in the P·V sums is exact, with no
//   residual (sticky) bits — the control case where RNE should show no bias.
// - wide-ties: ties beyond the sink's 49 values. Keys 0 and 1 are again one key vector
//   (k_0 = k_1 = (8, 0, ..., 0)); query r's scaled score on them is s_r ~ U[-11.5, 17]
//   (q_0 = s_r·sqrt(d)/8 in the dtype: hundreds of distinct values). Every other key j
//   has k_j0 = 8 as well and k_j1 = -g_j·sqrt(d) with q_1 = 1, which puts it g_j below the
//   pair: g_j ~ U[0, 8] for keys j >= 3, g_2 = 1. A row is tied with probability 0.59
//   (q_2 = 0: the pair is the max, every other key 0-8 below it). In an untied row q_2 =
//   1 + L_r, L_r ~ U[0.25, 1], and k_22 = sqrt(d) lift key 2 to s_r + L_r, the row's single
//   max, with the pair L_r and the other keys L_r + g_j below it. The other features are 0
//   in Q (no jitter: no key crosses the pair) and N(0, 1) in K. V and dO are N(-1, 1/16) in
//   every feature: every feature is a "sink feature" here. Needs head dim >= 3.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "studies/scenarios.hpp"
#include "emu/ops.hpp"

namespace fb::attn {
namespace {

enum TensorId : std::uint64_t { kQ = 1, kK = 2, kV = 3, kDO = 4 };

std::uint64_t element_key(std::uint64_t seed, std::uint64_t tensor, int b, int h, int r, int c, std::uint64_t draw) {
  std::uint64_t z = mix64(seed ^ 0x243f6a8885a308d3ull);
  z = mix64(z + tensor * 0x9e3779b97f4a7c15ull);
  z = mix64(z + static_cast<std::uint64_t>(b) * 0xbf58476d1ce4e5b9ull + static_cast<std::uint64_t>(h));
  z = mix64(z + static_cast<std::uint64_t>(r) * 0x94d049bb133111ebull + static_cast<std::uint64_t>(c));
  return mix64(z + draw);
}
// Uniform in (0, 1): 53 random bits, never 0.
double uniform(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

struct Draw {
  std::uint64_t seed, tensor;
  int b, h, r, c;
  double u(std::uint64_t k) const { return uniform(element_key(seed, tensor, b, h, r, c, k)); }
  double normal(std::uint64_t k) const {  // Box-Muller
    return std::sqrt(-2.0 * std::log(u(2 * k))) * std::cos(2.0 * std::numbers::pi * u(2 * k + 1));
  }
};

bool sink_feature(int c) { return c % 4 == 0 || c % 4 == 1; }

// wide-ties: whether query row r is a tied row (the same draw for every feature of the row).
bool wide_tied_row(const Draw& x) {
  const Draw rx{x.seed, x.tensor, x.b, x.h, x.r, 0};
  return rx.u(7) < 0.59;
}

double generate(std::string_view name, const Draw& x, int head_dim) {
  const bool sink = name == "sink", ties = name == "ties";
  if (name == "random") return x.normal(0);
  if (name == "wide-ties") {
    const double root_d = std::sqrt(static_cast<double>(head_dim));
    switch (x.tensor) {
      case kQ:
        if (x.c == 0) return (-11.5 + 28.5 * x.u(5)) * root_d / 8.0;
        if (x.c == 1) return 1.0;
        if (x.c == 2) return wide_tied_row(x) ? 0.0 : 1.0 + (0.25 + 0.75 * x.u(6));
        return 0.0;
      case kK: {
        const int key = x.r == 1 ? 0 : x.r;  // key 1 duplicates key 0 exactly
        const Draw kx{x.seed, x.tensor, x.b, x.h, key, x.c};
        if (x.c == 0) return 8.0;
        if (key == 0) return 0.0;
        if (x.c == 1) return -(key == 2 ? 1.0 : 8.0 * kx.u(3)) * root_d;
        if (x.c == 2) return key == 2 ? root_d : 0.0;
        return kx.normal(0);
      }
      case kV:
      case kDO:
        return -1.0 + 0.25 * x.normal(0);
    }
  }
  if (name == "fa3-outliers") return x.normal(0) + (x.u(10) < 0.001 ? 10.0 * x.normal(1) : 0.0);
  if (sink || ties) {
    switch (x.tensor) {
      case kQ:
        // q_0 sets this row's sink score (scaled): U[7, 9], different in every row so
        // that the roundings of ℓ and of P̄·V are not the same in every row.
        if (x.c == 0) return (7.0 + 2.0 * x.u(5)) * std::sqrt(static_cast<double>(head_dim)) / 8.0;
        return 0.25 * x.normal(0);
      case kK: {
        const int key = x.r == 1 ? 0 : x.r;  // key 1 duplicates key 0 exactly
        const Draw kx{x.seed, x.tensor, x.b, x.h, key, x.c};
        if (key == 0) return x.c == 0 ? 8.0 : 0.0;
        if (x.c == 0) {
          // 8 - k_j0 in [9.2, 17.8] puts the scaled gap below the sink in [8.05, 20]
          // for every row's sink score in [7, 9] (sink); ties: gaps of 150-250.
          return sink ? 8.0 - (9.2 + 8.6 * kx.u(3)) : 8.0 - (175.0 + 50.0 * kx.u(3));
        }
        return kx.normal(0);
      }
      case kV:
      case kDO:
        if (sink_feature(x.c)) return -1.0 + 0.25 * x.normal(0);
        return x.normal(0);
    }
  }
  throw std::invalid_argument("unknown scenario '" + std::string(name) + "'");
}

Tensor4 make_tensor(std::string_view name, std::uint64_t seed, std::uint64_t tensor, int batch, int heads, int n, int d,
                    const Format& dtype) {
  Tensor4 t(batch, heads, n, d);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < d; ++c) {
          const double v = generate(name, Draw{seed, tensor, b, h, r, c}, d);
          t.at(b, h, r, c) = to_double(dtype, round_double(dtype, v, RoundingSpec{}).bits);
        }
  return t;
}

}  // namespace

std::string scenario_list() {
  std::string list;
  for (const std::string& n : scenario_names()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

std::vector<std::string> scenario_names() { return {"random", "fa3-outliers", "sink", "ties", "wide-ties"}; }

bool known_scenario(std::string_view name) {
  const std::vector<std::string> names = scenario_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

namespace {

// The first head of each group: heads [0, G, 2G, ...] of t.
Tensor4 group_leaders(const Tensor4& t, int kv_heads) {
  const int group = t.heads / kv_heads;
  Tensor4 out(t.batch, kv_heads, t.rows, t.cols);
  for (int b = 0; b < t.batch; ++b)
    for (int hk = 0; hk < kv_heads; ++hk)
      for (int r = 0; r < t.rows; ++r)
        for (int c = 0; c < t.cols; ++c) out.at(b, hk, r, c) = t.at(b, hk * group, r, c);
  return out;
}

// Rows [first, first + count) of every (batch, head) slice of t.
Tensor4 row_range(const Tensor4& t, int first, int count) {
  Tensor4 out(t.batch, t.heads, count, t.cols);
  for (int b = 0; b < t.batch; ++b)
    for (int h = 0; h < t.heads; ++h)
      for (int r = 0; r < count; ++r)
        for (int c = 0; c < t.cols; ++c) out.at(b, h, r, c) = t.at(b, h, first + r, c);
  return out;
}

}  // namespace

AttentionInputs make_scenario(std::string_view name, std::uint64_t seed, int batch, int heads, int seqlen, int head_dim,
                              const Format& dtype, bool with_backward, int kv_heads, int seqlen_k) {
  if (!known_scenario(name))
    throw std::invalid_argument("unknown scenario '" + std::string(name) + "' (" + scenario_list() + ")");
  if (batch < 0 || heads < 0 || seqlen < 0 || head_dim < 0 || seqlen_k < 0)
    throw std::invalid_argument("scenario: negative shape");
  // wide-ties places its ties with features 0, 1 and 2 (the file comment): with fewer, every
  // row would be something else than the scenario says.
  if (name == "wide-ties" && head_dim > 0 && head_dim < 3)
    throw std::invalid_argument("scenario wide-ties: head dim " + std::to_string(head_dim) +
                                ": its ties are built from features 0, 1 and 2 (head dim 3 or more)");
  // sink, ties and wide-ties are built on the tie of keys 0 and 1 (wide-ties' untied rows on
  // key 2 as well): with fewer keys there is no tie to test, and a verdict on it would be
  // about another problem.
  const int keys = seqlen_k > 0 ? seqlen_k : seqlen;
  const int keys_needed = name == "wide-ties" ? 3 : name == "sink" || name == "ties" ? 2 : 0;
  if (keys > 0 && keys < keys_needed)
    throw std::invalid_argument("scenario " + std::string(name) + ": " + std::to_string(keys) + " key" +
                                (keys == 1 ? "" : "s") + ": its rows tie keys 0 and 1" +
                                (name == "wide-ties" ? " or lift key 2 above them" : "") + " (" +
                                std::to_string(keys_needed) + " keys or more)");
  // Another key length: the square problem of the longer length, q (and dO) its last seqlen
  // rows, k and v its first seqlen_k rows.
  const int nk = seqlen_k > 0 ? seqlen_k : seqlen, n = std::max(seqlen, nk);
  AttentionInputs in;
  in.dtype = dtype;
  in.q = make_tensor(name, seed, kQ, batch, heads, n, head_dim, dtype);
  in.k = make_tensor(name, seed, kK, batch, heads, n, head_dim, dtype);
  in.v = make_tensor(name, seed, kV, batch, heads, n, head_dim, dtype);
  if (with_backward) in.d_o = make_tensor(name, seed, kDO, batch, heads, n, head_dim, dtype);
  if (seqlen < n) {
    in.q = row_range(in.q, n - seqlen, seqlen);
    if (in.d_o) in.d_o = row_range(*in.d_o, n - seqlen, seqlen);
  }
  if (nk < n) {
    in.k = row_range(in.k, 0, nk);
    in.v = row_range(in.v, 0, nk);
  }
  if (kv_heads < 0 || (kv_heads > 0 && heads % kv_heads != 0))
    throw std::invalid_argument("scenario: kv heads " + std::to_string(kv_heads) + " do not divide heads " +
                                std::to_string(heads));
  if (kv_heads > 0 && kv_heads < heads) {
    in.k = group_leaders(in.k, kv_heads);
    in.v = group_leaders(in.v, kv_heads);
  }
  in.softmax_scale = head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
  return in;
}

}  // namespace fb::attn
