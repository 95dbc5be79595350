// attention/fp8_quant.cpp: incoherent processing and FP8 quantisation of Q, K, V (see
// fp8_quant.hpp for the contract and the sources of each step).
#include "attention/fp8_quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "emu/ops.hpp"
#include "emu/rounding.hpp"

namespace fb::attn {
namespace {

bool is_power_of_two(int d) { return d > 0 && (d & (d - 1)) == 0; }

// Quantises the rows [0, n) of every (batch, head) slice of `src` in blocks of
// `block_rows` rows into `dst`, writing one descale per block and head. The heads of
// `src` go in groups of `heads_per_scale` consecutive heads that share each block's scale
// (amax over the whole group): Q under grouped-query attention, whose descale FA3 takes
// per (batch, kv head). The shared scale is stored once per head of the group.
void quantise_tensor(const Format& format, const Tensor4& src, Tensor4& dst, int block_rows, int blocks,
                     int heads_per_scale, std::vector<double>& descale, bool exact) {
  dst = Tensor4(src.batch, src.heads, src.rows, src.cols);
  descale.assign(static_cast<std::size_t>(src.batch) * src.heads * blocks, 1.0);
  for (int b = 0; b < src.batch; ++b)
    for (int h0 = 0; h0 < src.heads; h0 += heads_per_scale)
      for (int blk = 0; blk < blocks; ++blk) {
        const int r0 = blk * block_rows, r1 = std::min(src.rows, r0 + block_rows);
        const int h1 = std::min(src.heads, h0 + heads_per_scale);
        double amax = 0.0;
        for (int h = h0; h < h1; ++h)
          for (int r = r0; r < r1; ++r)
            for (int c = 0; c < src.cols; ++c) amax = std::max(amax, std::fabs(src.at(b, h, r, c)));
        const double scale = fp8_scale(format, amax, exact);
        for (int h = h0; h < h1; ++h) {
          descale[(static_cast<std::size_t>(b) * src.heads + h) * blocks + blk] = scale;
          for (int r = r0; r < r1; ++r)
            for (int c = 0; c < src.cols; ++c)
              dst.at(b, h, r, c) = fp8_quantise(format, src.at(b, h, r, c), scale, exact);
        }
      }
}

// fp32(a / b) with one rounding: the fp64 quotient is made round-to-odd from its exact
// remainder (an FMA), then cast; by Boldo & Melquiond (2008) rounding to odd at 53 >= 24+2
// bits and then once to fp32 equals the direct rounding (a plain double quotient cast to
// float could double-round).
double div_to_fp32(double a, double b) {
  double q = a / b;
  if (q != 0.0 && std::isfinite(q)) {
    const double remainder = std::fma(-q, b, a);  // exact for a correctly rounded quotient
    std::uint64_t bits = 0;
    std::memcpy(&bits, &q, sizeof bits);
    if (remainder != 0.0 && (bits & 1u) == 0) {
      const bool exact_above = (remainder > 0.0) == (b > 0.0);
      q = std::nextafter(q, exact_above ? HUGE_VAL : -HUGE_VAL);
    }
  }
  return static_cast<double>(static_cast<float>(q));
}

}  // namespace

std::vector<int> sylvester_hadamard(int d) {
  if (!is_power_of_two(d)) throw std::invalid_argument("Hadamard matrix: order must be a power of two");
  std::vector<int> h(static_cast<std::size_t>(d) * d, 1);
  for (int size = 1; size < d; size *= 2)
    for (int r = 0; r < size; ++r)
      for (int c = 0; c < size; ++c) {
        const int v = h[static_cast<std::size_t>(r) * d + c];
        h[static_cast<std::size_t>(r) * d + c + size] = v;
        h[static_cast<std::size_t>(r + size) * d + c] = v;
        h[static_cast<std::size_t>(r + size) * d + c + size] = -v;
      }
  return h;
}

std::vector<int> incoherent_signs(int d, std::uint64_t seed) {
  std::vector<int> s(static_cast<std::size_t>(d));
  for (int i = 0; i < d; ++i)
    s[i] = (mix64(mix64(seed ^ 0x2545f4914f6cdd1dull) + static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ull) & 1u)
               ? -1
               : 1;
  return s;
}

void incoherent_transform(double* row, int d, const std::vector<int>& signs) {
  for (int i = 0; i < d; ++i) row[i] *= signs[i];
  // Fast Walsh-Hadamard transform: row·H for the Sylvester H (symmetric).
  for (int len = 1; len < d; len *= 2)
    for (int i = 0; i < d; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const double a = row[j], b = row[j + len];
        row[j] = a + b;
        row[j + len] = a - b;
      }
  const double norm = 1.0 / std::sqrt(static_cast<double>(d));
  for (int i = 0; i < d; ++i) row[i] *= norm;
}

double fp8_scale(const Format& format, double amax, bool exact) {
  if (!(amax > 0.0) || !std::isfinite(amax)) return 1.0;
  const double max_finite = to_double(format, format.max_finite_pattern());
  return exact ? amax / max_finite : div_to_fp32(amax, max_finite);
}

double fp8_quantise(const Format& format, double x, double scale, bool exact) {
  if (exact) return x / scale;
  const double ratio = div_to_fp32(x, scale);
  RoundingSpec spec;
  spec.overflow = OverflowPolicy::satfinite;
  return to_double(format, round_double(format, ratio, spec).bits);
}

Fp8Inputs quantise_fp8_inputs(const Fp8Quantisation& spec, const AttentionInputs& in, int block_m, int block_n,
                              std::uint64_t seed, bool exact) {
  // Q blocks over the query length, K/V blocks over the key length (they differ when decoding).
  const int nq = in.q.rows, nk = in.k.rows, d = in.q.cols;
  Fp8Inputs out;
  out.q_block_rows = spec.block ? std::max(1, block_m) : std::max(1, nq);
  out.kv_block_rows = spec.block ? std::max(1, block_n) : std::max(1, nk);
  out.q_blocks = std::max(1, (nq + out.q_block_rows - 1) / out.q_block_rows);
  out.kv_blocks = std::max(1, (nk + out.kv_block_rows - 1) / out.kv_block_rows);
  Tensor4 q = in.q, k = in.k;
  if (spec.hadamard) {
    if (!is_power_of_two(d)) {
      throw std::invalid_argument("+hadamard: the head dim must be a power of two, got " + std::to_string(d));
    }
    const std::vector<int> signs = incoherent_signs(d, seed);
    for (Tensor4* t : {&q, &k})
      for (int b = 0; b < t->batch; ++b)
        for (int h = 0; h < t->heads; ++h)
          for (int r = 0; r < t->rows; ++r) incoherent_transform(t->row(b, h, r), d, signs);
  }
  // Per-tensor scaling follows FA3's descale shape (batch, kv heads): under grouped-query
  // attention one q scale serves the q heads of a group. Block scales stay per q head.
  const int group = in.k.heads > 0 ? std::max(1, in.q.heads / in.k.heads) : 1;
  quantise_tensor(spec.format, q, out.q, out.q_block_rows, out.q_blocks, spec.block ? 1 : group, out.q_descale, exact);
  quantise_tensor(spec.format, k, out.k, out.kv_block_rows, out.kv_blocks, 1, out.k_descale, exact);
  quantise_tensor(spec.format, in.v, out.v, out.kv_block_rows, out.kv_blocks, 1, out.v_descale, exact);
  return out;
}

}  // namespace fb::attn
