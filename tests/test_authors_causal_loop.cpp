// tests/test_authors_causal_loop.cpp: fa-bf16acc+visit-masked-tiles runs causal attention
// as Qiu & Yao's loop does (docs/DESIGN.md §7).
//
// Contract: the reference below is a transcription of FlashAttentionFunction.forward in their
// attention.py (ucker/why-low-precision-training-fails @30ef0216, lines 26-113) under bf16
// autocast, written from their code, not from the engine: every query tile against every key
// tile (line 68, no early exit), the causal mask built when q_start < k_start + bucket - 1 as
// triu(q_start - k_start + 1) and filled with max_neg_value = -finfo(bf16).max (lines 29,
// 76-78), amax, STABLE=1 (lines 84-89), exp(S - m_new), the clamped block sum, the l and O
// updates (lines 91-109), O / l and lse = log(l) + m (lines 111-113). Dtypes as in
// docs/DESIGN.md §7: S bf16, exp fp32, l and m bf16 with the l update in fp32, O bf16.
// Arithmetic primitives: bf16 RNE from tests/bf16_reference.hpp, fp32 by a cast from double,
// exp and log of the double then rounded to fp32 (the model's correctly rounded assumption),
// torch.sum's order as the model assumes it (pairwise, halving at n/2, written out here). The
// inputs keep every einsum exact in fp32 (checked), so no accumulation order can change them.
// O and LSE must agree bit for bit with run_attention for 1536 keys (three 512-key tiles),
// causal, with and without +dynmax; rows whose running max is negative and unique lose it to
// STABLE=1's max of 0 on a masked tile, so there the variant must differ from plain
// fa-bf16acc+dynmax (the check that fails if the variant were a no-op).
// Traced rows give the same bits, and a non-causal run is unchanged by the variant.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "formats/format.hpp"
#include "tests/bf16_reference.hpp"

namespace {

namespace fmt = fb::formats;

constexpr int kN = 1536, kD = 16, kBucket = 512;
constexpr double kScale = 0.25;  // 16 ** -0.5, exact

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// -torch.finfo(torch.bfloat16).max = -(2 - 2^-7) * 2^127, written from bf16's definition.
const double kMaxNegValue = -std::ldexp(2.0 - std::ldexp(1.0, -7), 127);

// A sum that must be an fp32 value whatever the order (long double holds it exactly here).
double exact_fp32_sum(const std::vector<double>& terms) {
  long double s = 0;
  for (double t : terms) s += t;
  if (static_cast<long double>(static_cast<float>(s)) != s) throw std::logic_error("einsum not exact in fp32");
  return static_cast<double>(s);
}

// torch.sum over the tile's columns in fp32, in the order the model assumes (pairwise).
double pairwise_fp32(const std::vector<double>& x, std::size_t first, std::size_t n) {
  if (n == 1) return x[first];
  const std::size_t half = n / 2;
  return f32(pairwise_fp32(x, first, half) + pairwise_fp32(x, first + half, n - half));
}

// Scores s_ij = 0.25 * bf16(-a_i + bonus + noise): a_i from -10 to 120 (so most rows' maxima
// are negative, some near -30 where the clamp's 1e-10 outweighs exp(m) * l); key 0 scores
// 0.5 above the rest of the row, and key 1 ties it on even rows, so odd rows have a unique
// max (STABLE=1 leaves it negative) and even rows a tie (STABLE=1 moves it to 0). Noise
// q_c * k_c <= 0 from a few bits; V in {-1, -0.5, 0, 0.5, 1}.
fb::attn::AttentionInputs sampled_inputs() {
  fb::attn::AttentionInputs in;
  in.dtype = fmt::bf16;
  in.softmax_scale = kScale;
  in.causal = true;
  in.q = fb::attn::Tensor4(1, 1, kN, kD);
  in.k = fb::attn::Tensor4(1, 1, kN, kD);
  in.v = fb::attn::Tensor4(1, 1, kN, kD);
  for (int i = 0; i < kN; ++i) {
    in.q.at(0, 0, i, 0) = (i * 37) % 131 - 10;
    in.q.at(0, 0, i, 1) = 1.0;
    in.q.at(0, 0, i, 2) = i % 2 == 0 ? 1.0 : 0.0;
    in.k.at(0, 0, i, 0) = -1.0;
    in.k.at(0, 0, i, 1) = i == 0 ? 0.5 : 0.0;
    in.k.at(0, 0, i, 2) = i == 1 ? 0.5 : 0.0;
    for (int c = 3; c < kD; ++c) {
      in.q.at(0, 0, i, c) = 0.25 * ((i * 7 + c * 3) % 3);
      in.k.at(0, 0, i, c) = i < 2 ? 0.0 : -0.25 * ((i * 11 + c * 5 + (i * c) % 7) % 3);
    }
    for (int c = 0; c < kD; ++c) in.v.at(0, 0, i, c) = 0.5 * ((i * 5 + c * 3 + (i * c) % 7) % 5 - 2);
  }
  return in;
}

struct Reference {
  std::vector<double> o, lse, m;
};

// Their forward for one head, tile by tile.
Reference authors_forward(const fb::attn::AttentionInputs& in, bool stable) {
  const int n = kN, d = kD;
  std::vector<double> o(n * d, 0.0), row_sums(n, 0.0), row_maxes(n, kMaxNegValue);
  const int tiles = (n + kBucket - 1) / kBucket;
  for (int qt = 0; qt < tiles; ++qt) {
    const int q_start = qt * kBucket;  // qk_len_diff = 0
    const int rows = std::min(kBucket, n - q_start);
    for (int kt = 0; kt < tiles; ++kt) {
      const int k_start = kt * kBucket;
      const int cols = std::min(kBucket, n - k_start);
      const bool causal_tile = in.causal && q_start < k_start + kBucket - 1;
      for (int il = 0; il < rows; ++il) {
        const int i = q_start + il;
        // attn_weights = einsum(qc, kc) * scale: bf16 einsum, then a bf16 op with the scalar.
        std::vector<double> s(static_cast<std::size_t>(cols));
        for (int jl = 0; jl < cols; ++jl) {
          std::vector<double> prods;
          for (int c = 0; c < d; ++c) prods.push_back(in.q.at(0, 0, i, c) * in.k.at(0, 0, k_start + jl, c));
          s[jl] = bf16_rne(f32(bf16_rne(exact_fp32_sum(prods)) * kScale));
          // causal_mask = ones(...).triu(q_start - k_start + 1); masked_fill_(causal_mask, max_neg_value)
          if (causal_tile && jl - il >= q_start - k_start + 1) s[jl] = kMaxNegValue;
        }
        double block_max = *std::max_element(s.begin(), s.end());
        if (stable) {
          // attn_weights >= (block_row_maxes - 1e-3): bf16 tensor minus a scalar, fp32 opmath.
          const double threshold = bf16_rne(f32(block_max - f32(1e-3)));
          const long close = std::count_if(s.begin(), s.end(), [&](double x) { return x >= threshold; });
          if (close > 1 && block_max > 0) block_max = bf16_rne(2.0 * block_max);
          if (close > 1 && block_max < 0) block_max = 0.0;
        }
        const double new_max = std::max(block_max, row_maxes[i]);
        // exp_weights = exp(attn_weights - new_row_maxes): bf16 subtraction, fp32 exp.
        std::vector<double> p(static_cast<std::size_t>(cols));
        for (int jl = 0; jl < cols; ++jl) p[jl] = f32(std::exp(bf16_rne(f32(s[jl] - new_max))));
        const double block_sum = std::max(pairwise_fp32(p, 0, static_cast<std::size_t>(cols)), f32(1e-10));
        const double alpha = f32(std::exp(bf16_rne(f32(row_maxes[i] - new_max))));
        row_sums[i] = bf16_rne(f32(f32(alpha * row_sums[i]) + block_sum));
        for (int c = 0; c < d; ++c) {
          // exp_values = einsum(exp_weights, vc): P-bar cast to bf16, bf16 result.
          std::vector<double> prods;
          for (int jl = 0; jl < cols; ++jl) prods.push_back(bf16_rne(p[jl]) * in.v.at(0, 0, k_start + jl, c));
          const double exp_values = bf16_rne(exact_fp32_sum(prods));
          double& oc = o[i * d + c];
          oc = bf16_rne(f32(bf16_rne(f32(oc * alpha)) + exp_values));  // oc.mul_(...).add_(...)
        }
        row_maxes[i] = new_max;
      }
    }
  }
  Reference r;
  r.o.resize(o.size());
  r.lse.resize(n);
  r.m = row_maxes;
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) r.o[i * d + c] = bf16_rne(f32(o[i * d + c] / row_sums[i]));  // oc.div_(row_sums)
    r.lse[i] = f32(f32(std::log(row_sums[i])) + row_maxes[i]);  // log autocast to fp32, + bf16 m
  }
  return r;
}

// Rows where O or LSE of `got` differs from the reference; the first five are CHECKed element by element.
int mismatches(const fb::attn::AttentionOutputs& got, const Reference& want) {
  int bad = 0;
  for (int i = 0; i < kN; ++i) {
    bool row_ok = got.lse.at(0, 0, i, 0) == want.lse[i];
    for (int c = 0; c < kD; ++c) row_ok = row_ok && got.o.at(0, 0, i, c) == want.o[i * kD + c];
    if (!row_ok) {
      ++bad;
      if (bad <= 5) {
        CAPTURE(i);
        CHECK(got.lse.at(0, 0, i, 0) == want.lse[i]);
        for (int c = 0; c < kD; ++c) {
          CAPTURE(c);
          CHECK(got.o.at(0, 0, i, c) == want.o[i * kD + c]);
        }
      }
    }
  }
  return bad;
}

// Rows that differ between two runs, in O or LSE.
int rows_differing(const fb::attn::AttentionOutputs& a, const fb::attn::AttentionOutputs& b, int first, int last) {
  int rows = 0;
  for (int i = first; i < last; ++i) {
    bool same = a.lse.at(0, 0, i, 0) == b.lse.at(0, 0, i, 0);
    for (int c = 0; c < kD; ++c) same = same && a.o.at(0, 0, i, c) == b.o.at(0, 0, i, c);
    rows += same ? 0 : 1;
  }
  return rows;
}

}  // namespace

TEST_CASE("+visit-masked-tiles with +dynmax is Qiu & Yao's causal loop with STABLE=1, bit for bit") {
  using namespace fb::attn;
  const AttentionInputs in = sampled_inputs();
  const Reference want = authors_forward(in, /*stable=*/true);
  const AttentionOutputs got =
      run_attention(parse_kernel_model("fa-bf16acc+dynmax+visit-masked-tiles", fmt::bf16), in, RunOptions{});
  CHECK(mismatches(got, want) == 0);

  // The inputs reach the case the variant exists for: odd rows of the first query tile have
  // a unique negative max on their diagonal tile, and the masked tile after it moves m to 0.
  int moved_to_zero = 0;
  for (int i = 1; i < kBucket; i += 2) {
    const double own_max = 0.25 * bf16_rne(-in.q.at(0, 0, i, 0) + 0.5);
    if (own_max < 0 && want.m[i] == 0.0) ++moved_to_zero;
  }
  MESSAGE("rows whose negative max became 0 on a masked tile: ", moved_to_zero);
  CHECK(moved_to_zero > 200);

  // Plain fa-bf16acc+dynmax skips the masked tiles: those rows keep their negative max and
  // differ. Where exp(m) * l falls below the clamp's 1e-10 (m near -30), their O collapses
  // towards 0 while the skipping model's O stays an average of V.
  const AttentionOutputs skipped = run_attention(parse_kernel_model("fa-bf16acc+dynmax", fmt::bf16), in, RunOptions{});
  const int differing = rows_differing(got, skipped, 0, kBucket);
  MESSAGE("rows of the first query tile that differ from fa-bf16acc+dynmax: ", differing);
  CHECK(differing > 200);
  int collapsed = 0;
  for (int i = 0; i < kBucket; ++i)
    for (int c = 0; c < kD; ++c)
      collapsed += std::fabs(got.o.at(0, 0, i, c)) < 0.5 * std::fabs(skipped.o.at(0, 0, i, c)) ? 1 : 0;
  MESSAGE("O entries shrunk by more than half by the clamp: ", collapsed);
  CHECK(collapsed > 50);
}

TEST_CASE("+visit-masked-tiles without +dynmax is Qiu & Yao's causal loop with STABLE=0, bit for bit") {
  using namespace fb::attn;
  const AttentionInputs in = sampled_inputs();
  const Reference want = authors_forward(in, /*stable=*/false);
  const AttentionOutputs got =
      run_attention(parse_kernel_model("fa-bf16acc+visit-masked-tiles", fmt::bf16), in, RunOptions{});
  CHECK(mismatches(got, want) == 0);
  // Without STABLE=1 a masked tile changes m by nothing and l by a 1e-10 below bf16's
  // resolution at l >= 1: the running max stays negative where it was.
  int negative = 0;
  for (int i = 0; i < kN; ++i) negative += want.m[i] < 0 ? 1 : 0;
  CHECK(negative > kN / 2);
  // What remains of the variant here: the diagonal tile's sum over all its keys, masked ones
  // as zeros (their tensor holds 512 columns), pairs the terms differently.
  const AttentionOutputs skipped = run_attention(parse_kernel_model("fa-bf16acc", fmt::bf16), in, RunOptions{});
  MESSAGE("rows that differ from fa-bf16acc (the sum order only; l in bf16 often absorbs it): ",
          rows_differing(got, skipped, 0, kN));
}

TEST_CASE("+visit-masked-tiles: the transcription has power against the engine's default loop") {
  // The reference with STABLE=1 differs from plain fa-bf16acc+dynmax (which skips the masked
  // tiles), so the bit-for-bit match above is not a match any model would pass.
  using namespace fb::attn;
  const AttentionInputs in = sampled_inputs();
  const Reference want = authors_forward(in, /*stable=*/true);
  const AttentionOutputs skipped = run_attention(parse_kernel_model("fa-bf16acc+dynmax", fmt::bf16), in, RunOptions{});
  int bad = 0;
  for (int i = 0; i < kN; ++i) {
    bool same = skipped.lse.at(0, 0, i, 0) == want.lse[i];
    for (int c = 0; c < kD; ++c) same = same && skipped.o.at(0, 0, i, c) == want.o[i * kD + c];
    bad += same ? 0 : 1;
  }
  MESSAGE("rows where the STABLE=1 reference differs from fa-bf16acc+dynmax: ", bad);
  CHECK(bad > 200);
}

TEST_CASE("+visit-masked-tiles is refused outside fa-bf16acc and named in the canonical name") {
  using namespace fb::attn;
  CHECK_THROWS_WITH_AS(parse_kernel_model("fa2-sm80+visit-masked-tiles", fmt::bf16),
                       doctest::Contains("applies to fa-bf16acc only"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_kernel_model("standard-bf16+visit-masked-tiles", fmt::bf16),
                       doctest::Contains("applies to fa-bf16acc only"), std::invalid_argument);
  CHECK_THROWS_AS(parse_kernel_model("fa-bf16acc+visit-masked-tiles:1", fmt::bf16), std::invalid_argument);
  CHECK_THROWS_AS(parse_kernel_model("fa-bf16acc+visit-masked-tiles+visit-masked-tiles", fmt::bf16),
                  std::invalid_argument);
  CHECK(parse_kernel_model("fa-bf16acc+dynmax+visit-masked-tiles", fmt::bf16).name.find("+visit-masked-tiles") !=
        std::string::npos);
}

TEST_CASE("+visit-masked-tiles: non-causal runs are unchanged, traced rows compute the same bits") {
  using namespace fb::attn;
  AttentionInputs in = sampled_inputs();
  const ModelHandle variant = parse_kernel_model("fa-bf16acc+dynmax+visit-masked-tiles", fmt::bf16);
  // Traced rows run the same loop over the trace sink: row 1 (odd, negative max, two masked
  // tiles after its diagonal tile) and a row of the last query tile.
  const AttentionOutputs untraced = run_attention(variant, in, RunOptions{});
  Tracer tracer;
  tracer.rows = {{0, 0, 1}, {0, 0, kN - 1}};
  RunOptions traced_opt;
  traced_opt.tracer = &tracer;
  const AttentionOutputs traced = run_attention(variant, in, traced_opt);
  REQUIRE(tracer.traces.size() == 2);
  CHECK(tracer.traces[0].tiles.size() == 3);  // every key tile, as their loop visits them
  CHECK(tracer.traces[0].tiles.back().running_max == 0.0);
  for (int row : {1, kN - 1}) {
    CAPTURE(row);
    CHECK(traced.lse.at(0, 0, row, 0) == untraced.lse.at(0, 0, row, 0));
    for (int c = 0; c < kD; ++c) CHECK(traced.o.at(0, 0, row, c) == untraced.o.at(0, 0, row, c));
  }
  // Without causal masking there is nothing above the diagonal: the variant changes nothing.
  in.causal = false;
  const AttentionOutputs a = run_attention(variant, in, RunOptions{});
  const AttentionOutputs b = run_attention(parse_kernel_model("fa-bf16acc+dynmax", fmt::bf16), in, RunOptions{});
  CHECK(rows_differing(a, b, 0, kN) == 0);
}
