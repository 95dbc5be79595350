// attention/exact.cpp: exact_attention(), the high-precision reference of the same
// mathematics (forward O, LSE; backward delta, dQ, dK, dV).
//
// Contract and why x87 long double is enough: every input is a value of a format of at most
// 24 significant bits, so products q_c*k_c are exact in long double (64-bit significand) and
// a dot over d <= 256 terms errs by at most d * 2^-64 ≈ 1.4e-17 of sum_c |q_c k_c|. Where the
// dot cancels to below 2^-20 of that sum it is summed again with compensation, so a score is
// never lost to cancellation (row_score_magnitude records the sum: exact_rounding.hpp's error
// bound is in terms of it). A weight e^(s - m) errs relatively by its score's absolute error,
// ~1e-16 for the scores attention meets (up to ~1e3); exp/log in long double are accurate to
// a few ulps of 2^-64; the softmax is computed with the exact max (two passes), so nothing
// else cancels catastrophically except where the true result is itself tiny. The reference
// is thus ~1e-16 relative, 13 orders below one bf16 ulp (2^-8) and 11 below one fp16 ulp
// (2^-11): far beyond what measuring those errors needs.
// All-masked rows give O = 0, LSE = +inf and zero gradients, as FA2 does. The key length Nk
// may differ from the query length N; causal masks align bottom-right as FA2 >= 2.1 does:
// row r sees keys j <= r + Nk - N (none for r < N - Nk); top-left aligned, j <= r.
// Memory O(N·d); work split over (batch, head); results do not depend on threads.
//
// round_exact_outputs(): the model `correctly-rounded` (attention.hpp), the exact outputs
// rounded once each; tests/test_attention_exact.cpp checks it bit for bit against MPFR.
// Rounding the double of a long-double value is a second rounding: it can only go wrong
// within that error of a rounding boundary, which constructed inputs (`ties`) hit on
// purpose, so every output's rounding is decided exactly there (exact_rounding.hpp), from
// the error bounds this file's arithmetic leaves (gradient_error_bound for dQ, dK, dV).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attention/attention.hpp"
#include "attention/exact_rounding.hpp"
#include "attention/kernel_models.hpp"
#include "attention/parallel_for.hpp"
#include "emu/ops.hpp"
#include "emu/summation.hpp"

namespace fb::attn {
namespace {

// Four times an argued error bound, as a double no smaller than it: the bound is summed in
// double (terms >= 0, fewer than 2^26: relative error below 2^-27), so 2^-20 covers that.
double four_times_rounded_up(double bound) { return 4.0 * bound * (1.0 + 0x1p-20); }

// sum_c a_c * b_c in long double with Neumaier's compensation: the products are exact (values
// of at most 24 bits) and the sum errs by one rounding of itself plus ~d^2 2^-128 of
// sum_c |a_c b_c|. The plain sum errs by ~d 2^-64 of that magnitude, which is all of the
// score when the dot cancels (products 2^40, 2^-25, -2^40 lose the 2^-25).
long double compensated_dot(const double* a, const double* b, int d) {
  long double sum = 0.0L, compensation = 0.0L;
  for (int c = 0; c < d; ++c) {
    const long double product = static_cast<long double>(a[c]) * b[c];
    const long double t = sum + product;
    compensation += std::fabs(sum) >= std::fabs(product) ? (sum - t) + product : (product - t) + sum;
    sum = t;
  }
  return sum + compensation;
}

}  // namespace

AttentionOutputs exact_attention(const AttentionInputs& in) {
  const int B = in.q.batch, H = in.q.heads, N = in.q.rows, D = in.q.cols;
  const int Hk = in.k.heads, Nk = in.k.rows;
  const int offset = in.causal_alignment == AttentionInputs::CausalAlignment::top_left ? 0 : Nk - N;
  // Grouped-query attention: q head h reads k/v head h / group (check_attention_inputs).
  check_attention_inputs(in);
  const int group = Hk > 0 ? H / Hk : 1;
  const long double scale = in.softmax_scale > 0 ? static_cast<long double>(in.softmax_scale)
                                                 : (D > 0 ? 1.0L / std::sqrt(static_cast<long double>(D)) : 1.0L);
  const bool backward = in.d_o.has_value();
  AttentionOutputs out;
  out.o = Tensor4(B, H, N, D);
  out.lse = Tensor4(B, H, N, 1);
  out.row_max = Tensor4(B, H, N, 1);
  out.row_score_magnitude = Tensor4(B, H, N, 1);
  if (backward) {
    out.delta = Tensor4(B, H, N, 1);
    out.dq = Tensor4(B, H, N, D);
    out.dk = Tensor4(B, Hk, Nk, D);
    out.dv = Tensor4(B, Hk, Nk, D);
    out.gradient_error_bound = AttentionOutputs::GradientErrorBounds{*out.dq, *out.dk, *out.dv};
  }
  // Each q head's dK and dV contributions (and their error bounds), summed over its group
  // once every head is done (heads run on several threads; the group sum is in long double,
  // in head order).
  const std::size_t head_slots = backward ? static_cast<std::size_t>(B) * H : 0;
  std::vector<std::vector<long double>> head_dk(head_slots), head_dv(head_slots);
  // The bounds in double: a bound need not be accurate, and these loops then vectorise.
  std::vector<std::vector<double>> head_dk_error(head_slots), head_dv_error(head_slots);
  auto head = [&](int b, int h) {
    const int hk = h / group;
    std::vector<long double> s(static_cast<std::size_t>(Nk)), o(static_cast<std::size_t>(D));
    std::vector<long double> forward_only;  // stands in for the gradients when there is no backward
    std::vector<double> forward_only_bounds;
    const std::size_t slot = static_cast<std::size_t>(b) * H + h;
    std::vector<long double>& dk = backward ? head_dk[slot] : forward_only;
    std::vector<long double>& dv = backward ? head_dv[slot] : forward_only;
    std::vector<double>& dk_error = backward ? head_dk_error[slot] : forward_only_bounds;
    std::vector<double>& dv_error = backward ? head_dv_error[slot] : forward_only_bounds;
    std::vector<double> v_abs_max(static_cast<std::size_t>(D), 0.0);  // per column, over the kv head's keys
    if (backward) {
      dk.assign(static_cast<std::size_t>(Nk) * D, 0.0L);
      dv.assign(static_cast<std::size_t>(Nk) * D, 0.0L);
      dk_error.assign(static_cast<std::size_t>(Nk) * D, 0.0);
      dv_error.assign(static_cast<std::size_t>(Nk) * D, 0.0);
      for (int j = 0; j < Nk; ++j)
        for (int c = 0; c < D; ++c)
          v_abs_max[static_cast<std::size_t>(c)] =
              std::max(v_abs_max[static_cast<std::size_t>(c)], std::fabs(in.v.at(b, hk, j, c)));
    }
    for (int r = 0; r < N; ++r) {
      const int nk = in.causal ? std::clamp(r + 1 + offset, 0, Nk) : Nk;
      const double* q = in.q.row(b, h, r);
      long double m = -std::numeric_limits<long double>::infinity(), magnitude = 0.0L;
      // A NaN or +inf score (from such an input) has no exact softmax; a -inf score is a key of
      // weight 0, the limit, as every kernel gives it.
      bool undefined_score = false;
      for (int j = 0; j < nk; ++j) {
        const double* k = in.k.row(b, hk, j);
        long double acc = 0.0L, acc_abs = 0.0L;
        for (int c = 0; c < D; ++c) {
          const long double product = static_cast<long double>(q[c]) * k[c];
          acc += product;
          acc_abs += std::fabs(product);
        }
        if (std::fabs(acc) < 0x1p-20L * acc_abs) acc = compensated_dot(q, k, D);
        s[j] = acc * scale;
        undefined_score = undefined_score || std::isnan(s[j]) || s[j] == std::numeric_limits<long double>::infinity();
        m = std::max(m, s[j]);
        magnitude = std::max(magnitude, acc_abs);
      }
      // max() skips NaN, so a row of NaN scores read as one that sees no key (O = 0, LSE = +inf):
      // a NaN max instead carries the NaN into every output of the row, as arithmetic would.
      if (undefined_score) m = std::numeric_limits<long double>::quiet_NaN();
      out.row_max->at(b, h, r, 0) = static_cast<double>(m);
      // Rounded up past the sum's and the conversions' errors (a bound, not a value).
      out.row_score_magnitude->at(b, h, r, 0) = static_cast<double>(magnitude * scale) * (1.0 + 0x1p-40);
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
        const double* v = in.v.row(b, hk, j);
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
      // The gradients' error bounds (gradient_error_bound), argued with u = 2^-64: p errs
      // relatively by at most weight_error_bound; dp = dO . V_j (exact products) by d u
      // sum_c |dO_c V_jc|; delta by each O_c's mean bound times max |V_c|, plus its sum's
      // (d + 1) ulps; ds = p (dp - delta) by p (|dp - delta| eps_p + those two) with two more
      // ulps; then every sum of ds * k, ds * q or p * dO adds at most (terms + 4) ulps of its
      // magnitude, with at most nk + N * group terms. The result is four times that.
      const double score_magnitude = out.row_score_magnitude->at(b, h, r, 0);
      const long double u = 0x1p-64L;
      const long double eps_p = weight_error_bound(D, nk, score_magnitude, static_cast<double>(lse));
      long double delta_error = 0.0L;
      for (int c = 0; c < D; ++c) delta_error += std::fabs(d_o[c]) * v_abs_max[static_cast<std::size_t>(c)];
      delta_error *= mean_error_bound(D, nk, score_magnitude) + 4.0L * (D + 1) * u;
      const long double sum_error = (static_cast<long double>(nk) + static_cast<long double>(N) * group + 8) * u;
      const bool bounded = std::isfinite(eps_p) && std::isfinite(delta_error);
      std::vector<long double> dq(static_cast<std::size_t>(D), 0.0L);
      std::vector<double> dq_error(static_cast<std::size_t>(D), 0.0);
      for (int j = 0; j < nk; ++j) {
        const long double p = std::exp(s[j] - lse);
        const double* v = in.v.row(b, hk, j);
        const double* k = in.k.row(b, hk, j);
        long double dp = 0.0L, dp_magnitude = 0.0L;
        for (int c = 0; c < D; ++c) {
          const long double product = static_cast<long double>(d_o[c]) * v[c];
          dp += product;
          dp_magnitude += std::fabs(product);
        }
        const long double ds = p * (dp - delta);
        // Rounded up into double (2^-20 over the conversion), as every bound below is.
        const double inf = std::numeric_limits<double>::infinity();
        const double ds_error = bounded ? static_cast<double>(p * (std::fabs(dp - delta) * (eps_p + sum_error) +
                                                                   D * u * dp_magnitude + delta_error)) *
                                              (1.0 + 0x1p-20)
                                        : inf;
        const double p_error = bounded ? static_cast<double>(p * (eps_p + sum_error)) * (1.0 + 0x1p-20) : inf;
        for (int c = 0; c < D; ++c) {
          const std::size_t at = static_cast<std::size_t>(j) * D + c;
          dq[c] += ds * k[c];
          dk[at] += ds * q[c];
          dv[at] += p * d_o[c];
        }
        for (int c = 0; c < D; ++c) {
          const std::size_t at = static_cast<std::size_t>(j) * D + c;
          dq_error[c] += ds_error * std::fabs(k[c]);
          dk_error[at] += ds_error * std::fabs(q[c]);
          dv_error[at] += p_error * std::fabs(d_o[c]);
        }
      }
      for (int c = 0; c < D; ++c) {
        out.dq->at(b, h, r, c) = static_cast<double>(dq[c] * scale);
        out.gradient_error_bound->dq.at(b, h, r, c) = four_times_rounded_up(dq_error[c] * static_cast<double>(scale));
      }
    }
  };
  parallel_for(B * H, static_cast<int>(std::thread::hardware_concurrency()), [&](int i) { head(i / H, i % H); });
  if (backward) {
    for (int b = 0; b < B; ++b)
      for (int hk = 0; hk < Hk; ++hk)
        for (int j = 0; j < Nk; ++j)
          for (int c = 0; c < D; ++c) {
            long double dk = 0.0L, dv = 0.0L;
            double dk_error = 0.0, dv_error = 0.0;
            const std::size_t at = static_cast<std::size_t>(j) * D + c;
            for (int h = hk * group; h < (hk + 1) * group; ++h) {
              const std::size_t slot = static_cast<std::size_t>(b) * H + h;
              dk += head_dk[slot][at];
              dv += head_dv[slot][at];
              dk_error += head_dk_error[slot][at];
              dv_error += head_dv_error[slot][at];
            }
            out.dk->at(b, hk, j, c) = static_cast<double>(dk * scale);
            out.dv->at(b, hk, j, c) = static_cast<double>(dv);
            out.gradient_error_bound->dk.at(b, hk, j, c) = four_times_rounded_up(dk_error * static_cast<double>(scale));
            out.gradient_error_bound->dv.at(b, hk, j, c) = four_times_rounded_up(dv_error);
          }
  }
  return out;
}

}  // namespace fb::attn

// ---- the correctly rounded reference ------------------------------------------------------

namespace fb::attn {
namespace {

enum ReferenceTensor : std::uint64_t { kO = 0, kLse = 1, kDelta = 2, kDq = 3, kDk = 4, kDv = 5 };

// The model's one rounding of tensor `tag`'s element at `position`: the final cast's mode
// (correctly-rounded+o-MODE rounds every output in MODE); sr draws from a stream per tensor
// (O's is the kernels' +o-sr stream: opt.seed itself).
RoundingSpec reference_spec(const KernelModel& km, std::uint64_t seed, std::uint64_t tag) {
  RoundingSpec spec;
  spec.mode = km.o_round;
  if (km.o_round == RoundingMode::sr) {
    spec.sr_bits = km.o_sr_bits;
    spec.seed = tag == kO ? seed : mix64(seed ^ (0x5bd1e9955bd1e995ull * tag));
  }
  return spec;
}

// One element rounded once into f: the value ExactRounding found in its place where it had
// to decide (exact_rounding.hpp), else exact_attention's double.
Rounded round_element(const Format& f, const std::optional<RoundPackInput>& decided, double approx,
                      const RoundingSpec& spec, std::uint64_t position, RoundingEvent* event = nullptr) {
  return decided ? round_pack_input(f, *decided, spec, position, event)
                 : round_double(f, approx, spec, position, event);
}

// A [b][h][n][d] output rounded once into f, element by element (round_element);
// decide_row(b, h, r, spec, first_position) is ExactRounding's o_row, dq_row, dk_row or dv_row
// (a per-row output, [b][h][n][1]: its lse or delta as a one-element row).
template <class DecideRow>
Tensor4 rounded_rows(const KernelModel& km, const Tensor4& exact, const Format& f, std::uint64_t seed,
                     std::uint64_t tag, DecideRow decide_row) {
  Tensor4 out = exact;
  const RoundingSpec spec = reference_spec(km, seed, tag);
  for (int b = 0; b < exact.batch; ++b)
    for (int h = 0; h < exact.heads; ++h)
      for (int r = 0; r < exact.rows; ++r) {
        const std::size_t first = exact.index(b, h, r, 0);
        const auto decided = decide_row(b, h, r, spec, first);
        for (int c = 0; c < exact.cols; ++c) {
          const std::size_t i = first + static_cast<std::size_t>(c);
          out.data[i] =
              to_double(f, round_element(f, decided[static_cast<std::size_t>(c)], exact.data[i], spec, i).bits);
        }
      }
  return out;
}

}  // namespace

double correctly_rounded_delta(const KernelModel& km, const double* d_o, const double* o, int d, std::uint64_t seed,
                               std::uint64_t position) {
  // dO and O are values of formats of at most 32 bits, so each is a float and the products
  // are exact in the accumulator; the sum is rounded once.
  ExactAccumulator acc;
  for (int c = 0; c < d; ++c) acc.add_product(static_cast<float>(d_o[c]), static_cast<float>(o[c]));
  return to_double(formats::fp32, acc.round(formats::fp32, reference_spec(km, seed, kDelta), position).bits);
}

AttentionOutputs round_exact_outputs(const KernelModel& km, const AttentionInputs& in, const AttentionOutputs& exact,
                                     const RunOptions& opt) {
  const Format& out_f = km.output;
  // Where the kernel this reference stands for keeps O (stored_o_format: the output dtype
  // unless correctly_rounded_reference() placed it elsewhere).
  const std::optional<Format> o_store = stored_o_format(km);
  AttentionOutputs out;
  const ExactRounding exact_rounding(in, exact);
  out.o = o_store ? rounded_rows(km, exact.o, *o_store, opt.seed, kO,
                                 [&](int b, int h, int r, const RoundingSpec& spec, std::size_t first) {
                                   return exact_rounding.o_row(b, h, r, *o_store, spec, first);
                                 })
                  : exact.o;
  out.lse = rounded_rows(km, exact.lse, formats::fp32, opt.seed, kLse,
                         [&](int b, int h, int r, const RoundingSpec& spec, std::size_t position) {
                           return std::vector{exact_rounding.lse(b, h, r, formats::fp32, spec, position)};
                         });
  const int d = in.q.cols;
  if (in.d_o && exact.delta) {
    out.delta = *exact.delta;
    if (km.reference_delta_exact || !o_store) {
      // delta of a kernel that never reads a rounded O: the exact delta, rounded once.
      out.delta = rounded_rows(km, *exact.delta, formats::fp32, opt.seed, kDelta,
                               [&](int b, int h, int r, const RoundingSpec& spec, std::size_t position) {
                                 return std::vector{exact_rounding.delta(b, h, r, formats::fp32, spec, position)};
                               });
    } else {
      for (std::size_t r = 0; r < out.delta->data.size(); ++r)
        out.delta->data[r] = correctly_rounded_delta(km, &in.d_o->data[r * static_cast<std::size_t>(d)],
                                                     &out.o.data[r * static_cast<std::size_t>(d)], d, opt.seed, r);
    }
    out.dq = rounded_rows(km, *exact.dq, out_f, opt.seed, kDq,
                          [&](int b, int h, int r, const RoundingSpec& spec, std::size_t first) {
                            return exact_rounding.dq_row(b, h, r, out_f, spec, first);
                          });
    out.dk = rounded_rows(km, *exact.dk, out_f, opt.seed, kDk,
                          [&](int b, int hk, int j, const RoundingSpec& spec, std::size_t first) {
                            return exact_rounding.dk_row(b, hk, j, out_f, spec, first);
                          });
    out.dv = rounded_rows(km, *exact.dv, out_f, opt.seed, kDv,
                          [&](int b, int hk, int j, const RoundingSpec& spec, std::size_t first) {
                            return exact_rounding.dv_row(b, hk, j, out_f, spec, first);
                          });
  }
  if (opt.progress)
    opt.progress->fetch_add(static_cast<std::uint64_t>(in.q.batch) * in.q.heads * in.q.rows * (in.d_o ? 2 : 1),
                            std::memory_order_relaxed);
  if (opt.tracer) {
    Tracer& tracer = *opt.tracer;
    tracer.traces.assign(tracer.rows.size(), RowTrace{});
    const RoundingSpec spec = reference_spec(km, opt.seed, kO);
    for (std::size_t i = 0; i < tracer.rows.size(); ++i) {
      const auto& [b, h, r] = tracer.rows[i];
      if (b < 0 || b >= in.q.batch || h < 0 || h >= in.q.heads || r < 0 || r >= in.q.rows)
        throw std::invalid_argument("tracer: row (" + std::to_string(b) + "," + std::to_string(h) + "," +
                                    std::to_string(r) + ") is outside the problem");
      RowTrace& t = tracer.traces[i];
      t.batch = b;
      t.head = h;
      t.row = r;
      t.plot_feature = std::clamp(tracer.plot_feature, 0, std::max(0, d - 1));
      const std::size_t first = exact.o.index(b, h, r, 0);
      const auto decided = exact_rounding.o_row(b, h, r, out_f, spec, first);
      for (int c = 0; c < d; ++c) {
        RoundingEvent ev;
        round_element(out_f, decided[static_cast<std::size_t>(c)], exact.o.data[first + c], spec, first + c, &ev);
        t.o_cast.push_back(ev);
      }
      if (out.delta) {
        long double with_exact = 0, with_cast = 0;
        for (int c = 0; c < d; ++c) {
          with_exact += static_cast<long double>(in.d_o->data[first + c]) * exact.o.data[first + c];
          with_cast += static_cast<long double>(in.d_o->data[first + c]) * out.o.data[first + c];
        }
        t.delta_error_from_o = static_cast<double>(with_cast - with_exact);
        t.delta_error_from_reduction =
            static_cast<double>(static_cast<long double>(out.delta->at(b, h, r, 0)) - with_cast);
      }
    }
  }
  return out;
}

ModelHandle correctly_rounded_reference(const KernelModel& like) {
  // The floor is the format's own correct rounding, to nearest even: the one rounding no
  // kernel can avoid. A final cast in another mode (+o-MODE) is the kernel's choice, and its
  // bias is part of what the kernel adds: a floor in the kernel's own mode would call an O
  // rounded toward zero (up to an ulp toward zero on every element) "no added bias".
  if (like.structure == Structure::correctly_rounded && like.o_round == RoundingMode::rne)
    return ModelHandle{like.base + " (the model itself)", std::make_shared<const KernelModel>(like)};
  KernelModel m = correctly_rounded_recipe(like.input, like.output);
  std::string name = m.base;
  // Rounded where the kernel's outputs actually are: its O buffer's format (an fp32-storage
  // recipe keeps O in fp32), and its delta's O (none when delta reads O before the cast).
  const std::optional<Format> store = stored_o_format(like);
  if (!store) {
    m.reference_o_exact = true;
    name += " (O kept exact)";
  } else if (!(*store == like.output)) {
    m.reference_o_store = store;
    name += std::string(" (O kept in ") + store->name + ")";
  }
  if (delta_reads_unrounded_o(like)) {
    m.reference_delta_exact = true;
    name += " (delta from the exact O)";
  }
  return ModelHandle{name, std::make_shared<const KernelModel>(std::move(m))};
}

}  // namespace fb::attn
