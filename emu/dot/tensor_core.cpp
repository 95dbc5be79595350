// emu/dot/tensor_core.cpp: the fused dot-add (see the header); the preset table itself is in
// emu/dot/tensor_core_presets.cpp.
//
// How it stays fast and exact: every input value is a float with at most 24
// significant bits, so a product is an exact 48-bit integer times a power of two.
// Relative to the step's largest exponent E every truncated term is an integer
// number of units 2^(E-F) below 2^(F+2) <= 2^27, so 33 of them sum exactly in an
// int64. The output rounding of that exact sum is one round_pack call.
// The presets' step shapes (products per step, F, output) also have compiled copies
// (fixed_dot_body) that decode all products of up to 64 first and then run the steps;
// they give the same bits as fused_step_body (tests/test_tensor_core checks both
// against an exact reference) and fall back to it for NaN/inf and partial steps.
#include "emu/dot/tensor_core.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/power_of_two.hpp"
#include "emu/summation.hpp"

// The presets' step shapes (products per step, F, output), the one list both compiled
// copies are instantiated from (the traced steps and the whole-dot routines below): a
// preset whose shape is missing here still runs, through the run-time body.
#define FB_PRESET_STEP_SHAPES(X) \
  X(8, 24, fp32_rz)              \
  X(16, 25, fp32_rz)             \
  X(8, 25, fp32_rz)              \
  X(4, 23, fp32_rz)              \
  X(4, 24, fp32_rz)              \
  X(16, 13, fp32_e8m13)          \
  X(32, 13, fp32_e8m13)          \
  X(32, 25, fp32_rz)

namespace fb {
namespace {

// fp32's layout (the inputs and the fp32 accumulator), from the format table.
constexpr int kManBits = formats::fp32.man_bits;
constexpr int kBias = formats::fp32.bias;
constexpr std::uint32_t kManMask = formats::fp32.man_mask();
constexpr std::uint32_t kExpFieldMax = formats::fp32.exp_field_max();
constexpr int kSignShift = formats::fp32.width() - 1;

using enum DotOutput;

const Format& input_format_of(const TensorCoreModel& m) { return m.input; }

inline const Format& output_format_of(DotOutput output) { return dot_output_format(output); }

float accumulator_value(const TensorCoreModel& m, std::uint32_t bits) {
  if (m.output == fp16_rne) return static_cast<float>(to_double(formats::fp16, bits));
  return std::bit_cast<float>(bits);
}

// A float split into integer significand and exponent, without branches.
struct Parts {
  std::uint32_t significand;
  int exponent;  // of the leading bit position of a normal (emin for subnormals)
  bool negative;
  bool special;
};
inline Parts split(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t e = (u >> kManBits) & kExpFieldMax;
  const std::uint32_t normal = e != 0 ? 1u : 0u;
  return {(u & kManMask) | (normal << kManBits), static_cast<int>(e + (1u - normal)) - kBias, (u >> kSignShift) != 0,
          e == kExpFieldMax};
}

// The canonical NaN, or an infinity, for a step that holds NaN or inf terms.
std::uint32_t special_step(const TensorCoreModel& m, float c, const float* a, const float* b, int n) {
  SpecialTerms specials;
  specials.add_value(c);
  for (int i = 0; i < n; ++i) specials.add_product(a[i], b[i]);
  return specials.result(accumulator_format(m));
}

// The exact sum of a traced step's parts (each a signed integer below 2^63 in magnitude times a
// power of two: what truncation removed from each term, and the output residue), for the steps
// whose parts span too many binades for an exact fp64 sum (fused_step_body's fast case): a
// two's-complement integer of kLimbs 64-bit words in units of 2^base, base at or below every
// part's exponent. Range: parts lie in [2^-298, 2^(E+2)) (the smallest product of two fp32
// subnormals; E <= 256 for the fp32-range inputs) and the residue below 2^129, so at most
// 298 + 258 bits above base plus 7 bits of carries for 65 parts: 640 bits hold any step.
class ExactSum {
 public:
  explicit ExactSum(int base) : base_(base) {}
  // Adds value * 2^exponent (exponent >= base, the top of the part below 2^(base + 630)).
  void add(std::int64_t value, int exponent) {
    const int offset = exponent - base_;
    const int index = offset / 64, shift = offset % 64;
    const __int128 shifted = static_cast<__int128>(value) * (static_cast<__int128>(1) << shift);
    const std::uint64_t extension = shifted < 0 ? ~std::uint64_t{0} : 0;
    std::uint64_t words[2] = {static_cast<std::uint64_t>(shifted), static_cast<std::uint64_t>(shifted >> 64)};
    unsigned carry = 0;
    for (int i = index; i < kLimbs; ++i) {
      const std::uint64_t w = i - index < 2 ? words[i - index] : extension;
      const std::uint64_t partial = limb_[i] + w;
      const unsigned carried = partial < w ? 1u : 0u;
      limb_[i] = partial + carry;
      carry = carried | (limb_[i] < partial ? 1u : 0u);
    }
  }
  // The sum rounded once to the nearest double (ties to even); +0 for an exact zero.
  // Why correctly rounded: the magnitude's 63 leading bits (leading bit at bit 62) are taken
  // exactly, and every bit below them ORed into bit 0 (a sticky bit); the integer-to-double
  // conversion (IEEE 754, default rounding to nearest even, the only mode this program uses)
  // drops 10 bits, so bit 0 lies below its round bit and decides only what a sticky bit
  // decides: it rounds to nearest exactly as the full value would. The scaling by
  // 2^(base + lead - 62) is exact: the result lies within [2^-298, 2^640), far inside fp64's
  // normal range.
  double rounded() const {
    std::uint64_t magnitude[kLimbs];
    const bool negative = (limb_[kLimbs - 1] >> 63) != 0;
    unsigned carry = 1;
    for (int i = 0; i < kLimbs; ++i) {
      magnitude[i] = negative ? ~limb_[i] + carry : limb_[i];
      carry = negative && carry != 0 && magnitude[i] == 0 ? 1u : 0u;
    }
    int top = kLimbs - 1;
    while (top >= 0 && magnitude[top] == 0) --top;
    if (top < 0) return 0.0;
    const int lead = 64 * top + 63 - std::countl_zero(magnitude[top]);
    const int low = lead - 62;  // the lowest bit kept: bits [low, lead] go to the conversion
    std::uint64_t kept;
    bool sticky = false;
    if (low <= 0) {
      kept = magnitude[0] << -low;
    } else {
      const int index = low / 64, shift = low % 64;
      kept = magnitude[index] >> shift;
      if (shift != 0 && index + 1 < kLimbs) kept |= magnitude[index + 1] << (64 - shift);
      sticky = (magnitude[index] & ((std::uint64_t{1} << shift) - 1)) != 0;
      for (int i = 0; i < index; ++i) sticky = sticky || magnitude[i] != 0;
    }
    const double value =
        times_power_of_two(static_cast<double>(static_cast<std::int64_t>(kept | (sticky ? 1u : 0u))), base_ + low);
    return negative ? -value : value;
  }

 private:
  static constexpr int kLimbs = 10;
  int base_;
  std::uint64_t limb_[kLimbs] = {};
};

// The output rounding of a step's exact sum (sum * 2^unit) into the model's output.
// An exact zero sum is +0 whatever the terms' signs (measured on sm_90, every form: C = -0
// with every product -0 gives +0, where IEEE addition would keep -0).
// The hardware's rules on top of round_pack's rounding (emu/dot/tensor_core.hpp): overflow
// gives +-inf in every output (round_pack's RZ would give max finite; its overflow flag
// is exactly "the rounded value with unbounded exponent exceeds max finite"), and a
// non-zero sum whose magnitude rounds to zero gives +0.
template <Format F>
[[gnu::always_inline]] inline std::uint32_t hardware_output(const Rounded& r) {
  constexpr std::uint32_t sign = to_container(F, F.sign_mask());
  constexpr std::uint32_t inf = to_container(F, F.inf_pattern());
  const std::uint32_t overflowed = (r.bits & sign) | inf;
  const std::uint32_t bits = (r.flags & flag::overflow) != 0 ? overflowed : r.bits;
  return (bits & ~sign) == 0 ? 0u : bits;
}
[[gnu::always_inline]] inline std::uint32_t step_output(DotOutput output, std::int64_t sum, int unit,
                                                        RoundingEvent* event) {
  if (sum == 0) return pack_zero(output_format_of(output), false);
  const bool neg = sum < 0;
  const std::uint64_t mag = neg ? 0u - static_cast<std::uint64_t>(sum) : static_cast<std::uint64_t>(sum);
  // One round_pack call per output kind, each with constant arguments, so that the
  // inlined rounding folds to the path it needs.
  static constexpr RoundingSpec kRz{RoundingMode::rtz, OverflowPolicy::ieee, 24, 0};
  static constexpr RoundingSpec kRne{RoundingMode::rne, OverflowPolicy::ieee, 24, 0};
  switch (output) {
    case fp16_rne:
      return hardware_output<formats::fp16>(round_pack<formats::fp16>(neg, unit, mag, false, kRne, 0, event));
    case fp32_e8m13:
      return hardware_output<kE8m13InFp32Layout>(round_pack<kE8m13InFp32Layout>(neg, unit, mag, false, kRz, 0, event));
    default:
      return hardware_output<formats::fp32>(round_pack<formats::fp32>(neg, unit, mag, false, kRz, 0, event));
  }
}

// One fused step: D = C + sum of n products, as the model's hardware does it.
// kTrace is a template switch so that the untraced hot loop carries no trace code.
// kN, kF and kOut, when set (> 0, > 0, >= 0), fix the step's product count, F and
// output kind at compile time (they must equal n, m.fraction_bits and m.output): the
// same code, with its loops unrolled and its output rounding folded to one path.
template <bool kTrace, int kN = 0, int kF = 0, int kOut = -1>
[[gnu::always_inline]] inline std::uint32_t fused_step_body(const TensorCoreModel& m, int input_emin, float c,
                                                            const float* a, const float* b, int n_runtime,
                                                            int first_product, DotTrace* trace) {
  const int n = kN > 0 ? kN : n_runtime;
  const DotOutput output = kOut >= 0 ? static_cast<DotOutput>(kOut) : m.output;
  constexpr int kMaxTerms = kN > 0 ? kN + 1 : 65;
  [[maybe_unused]] std::int64_t alignment_of[kMaxTerms];                   // 64-bit lanes, as the loop below
  const Format& acc = output == fp16_rne ? formats::fp16 : formats::fp32;  // accumulator_format(m)
  const int c_emin = acc.emin();
  // A zero term takes part in the maximum only under as_min_exponent, with its
  // format's smallest exponent (kNone keeps it out).
  constexpr int kNone = std::numeric_limits<int>::min() / 4;
  const bool zero_terms_count = m.zero_terms == ZeroTermPolicy::as_min_exponent;
  const int zero_product_alignment = zero_terms_count ? 2 * input_emin : kNone;
  std::uint32_t special = 0;

  // Terms as sign mask and magnitude times 2^lsb, all in 64-bit lanes so that the
  // loops below vectorise where the target allows.
  std::uint64_t magnitude[kMaxTerms], sign_mask[kMaxTerms];
  std::int64_t lsb[kMaxTerms];
  const Parts pc = split(c);
  special |= pc.special;
  magnitude[0] = pc.significand;
  sign_mask[0] = pc.negative ? ~std::uint64_t{0} : 0;
  lsb[0] = pc.exponent - kManBits;
  int largest = pc.significand != 0 ? std::max(pc.exponent, c_emin) : (zero_terms_count ? c_emin : kNone);
  if constexpr (kTrace) alignment_of[0] = largest;
  const std::int64_t emin_biased = input_emin + kBias;
  std::int64_t largest_product = kNone;
  std::uint64_t special_products = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t ua = std::bit_cast<std::uint32_t>(a[i]), ub = std::bit_cast<std::uint32_t>(b[i]);
    const std::uint64_t ea = (ua >> kManBits) & kExpFieldMax, eb = (ub >> kManBits) & kExpFieldMax;
    special_products |= (ea == kExpFieldMax) | (eb == kExpFieldMax);
    // Biased exponents; a float subnormal reads as exponent field 1 without the implicit bit.
    const std::uint64_t normal_a = ea != 0, normal_b = eb != 0;
    const auto xa = static_cast<std::int64_t>(ea + (normal_a ^ 1u));
    const auto xb = static_cast<std::int64_t>(eb + (normal_b ^ 1u));
    const std::uint64_t mag = ((ua & kManMask) | (normal_a << kManBits)) * ((ub & kManMask) | (normal_b << kManBits));
    const std::uint64_t neg = (ua ^ ub) >> kSignShift;
    const std::int64_t alignment = mag != 0 ? std::max(xa, emin_biased) + std::max(xb, emin_biased) - 2 * kBias
                                            : static_cast<std::int64_t>(zero_product_alignment);
    magnitude[i + 1] = mag;
    sign_mask[i + 1] = 0 - neg;
    lsb[i + 1] = xa + xb - 2 * kBias - 2 * kManBits;
    if constexpr (kTrace) alignment_of[i + 1] = alignment;
    largest_product = std::max(largest_product, alignment);
  }
  largest = std::max(largest, static_cast<int>(largest_product));
  special |= static_cast<std::uint32_t>(special_products != 0);
  if (special) [[unlikely]] {
    const std::uint32_t r = special_step(m, c, a, b, n);
    if constexpr (kTrace) {
      if (!trace->tally_only) {  // (a tally does not count NaN/inf steps)
        DotStepEvent ev;
        ev.terms = n + 1;
        ev.first_product = first_product;
        ev.fraction_bits = m.fraction_bits;
        ev.special = true;
        trace->steps.push_back(ev);
      }
    }
    return r;
  }
  const bool every_term_zero = largest == kNone;
  if (every_term_zero) largest = c_emin;

  // Sign-magnitude truncation toward zero onto the grid 2^(largest - F), branch-free:
  // a term's bits above the grid are shifted left, those below shifted out.
  const int F = kF > 0 ? kF : m.fraction_bits;
  const int unit = largest - F;
  auto truncated_term = [&](int i) {
    const std::int64_t shift = lsb[i] - unit;
    // Non-zero terms need left < F + 2 and lose everything at right >= 48; zero terms
    // may carry any exponent, so both counts are clamped to keep the shifts defined.
    const std::int64_t left = std::min<std::int64_t>(std::max<std::int64_t>(shift, 0), 63);
    const std::int64_t right = std::min<std::int64_t>(std::max<std::int64_t>(-shift, 0), 63);
    const std::uint64_t kept = (magnitude[i] << left) >> right;  // left > 0 only when right == 0
    return (kept ^ sign_mask[i]) - sign_mask[i];
  };
  // C apart from the products: with a fixed step the product loop's trip count is a
  // multiple of the vector width, so it vectorises without a scalar tail.
  std::uint64_t sum_bits = truncated_term(0);  // two's complement sum
  for (int i = 1; i <= n; ++i) sum_bits += truncated_term(i);
  const auto sum = static_cast<std::int64_t>(sum_bits);
  [[maybe_unused]] int truncated_terms = 0;
  [[maybe_unused]] double truncated_value = 0.0;
  // kTrace: whether the removed parts' fp64 sum in term order (truncated_value) is exact.
  [[maybe_unused]] bool removed_sum_exact = true;
  [[maybe_unused]] std::uint64_t removed[kMaxTerms];
  [[maybe_unused]] std::int64_t lowest_removed = std::numeric_limits<std::int64_t>::max();
  if constexpr (kTrace) {
    // What the truncation removed from each term: an integer pass the compiler vectorises
    // (the same shifts as truncated_term), then, only for terms that lost bits, one exact
    // product each, summed in term order. Each removed part is below 2^unit in magnitude and a
    // multiple of 2^lsb[i]: where every lsb is at least unit - 46, every partial sum of the at
    // most 65 parts is an integer below 2^53 in units of 2^(unit - 46), so the fp64 sum is
    // exact. Otherwise (a term far below the step's largest: a tiny C, or a small product
    // beside a big one) it may have rounded: see `error` below.
    for (int i = 0; i <= n; ++i) {
      const std::int64_t right = std::min<std::int64_t>(std::max<std::int64_t>(unit - lsb[i], 0), 63);
      removed[i] = magnitude[i] & ((std::uint64_t{1} << right) - 1);
      truncated_terms += removed[i] != 0 ? 1 : 0;
      lowest_removed = std::min(lowest_removed, removed[i] != 0 ? lsb[i] : std::numeric_limits<std::int64_t>::max());
    }
    static_assert(kMaxTerms <= 65);
    removed_sum_exact = lowest_removed >= unit - 46;
    if (truncated_terms != 0) {
      for (int i = 0; i <= n; ++i) {
        if (removed[i] == 0) continue;
        const double r = times_power_of_two(static_cast<double>(static_cast<std::int64_t>(removed[i])), lsb[i]);
        truncated_value += sign_mask[i] != 0 ? -r : r;
      }
    }
    if (trace->record_terms && !trace->tally_only) {
      for (int i = 0; i <= n; ++i) {
        const bool negative = sign_mask[i] != 0;
        const double removed_value =
            removed[i] == 0 ? 0.0
                            : times_power_of_two(static_cast<double>(static_cast<std::int64_t>(removed[i])), lsb[i]);
        DotTermEvent te;
        te.step = static_cast<int>(trace->steps.size());
        te.product = i == 0 ? -1 : first_product + i - 1;
        te.alignment_exponent = static_cast<int>(alignment_of[i]);
        const double v = std::ldexp(static_cast<double>(magnitude[i]), static_cast<int>(lsb[i]));
        te.value = negative ? -v : v;
        te.truncated_value = negative ? -removed_value : removed_value;
        trace->terms.push_back(te);
      }
    }
  }

  const Format& out = output_format_of(output);
  std::uint32_t result;
  [[maybe_unused]] RoundingEvent ev_round;
  result = step_output(output, sum, unit, kTrace ? &ev_round : nullptr);
  if constexpr (kTrace) {
    bool carry_out = false;
    int normalisation_shift = 0;
    double output_residue = 0.0;
    if (sum != 0) {
      const std::uint64_t mag = sum < 0 ? 0u - static_cast<std::uint64_t>(sum) : static_cast<std::uint64_t>(sum);
      const int lead = 63 - std::countl_zero(mag);
      carry_out = lead > F;
      normalisation_shift = F - lead;
      const double exact = times_power_of_two(static_cast<double>(sum), unit);
      const double got = output == fp32_rz ? static_cast<double>(std::bit_cast<float>(result)) : to_double(out, result);
      // An overflow to an infinity rounded away from zero: its residue exact - (±inf) is ∓inf,
      // so the step's error -(truncated + residue) is that infinity, tallied "up".
      output_residue = exact - got;
    }
    // The step's error output - exact = -(removed parts + residue) (DotStepEvent::error). With an
    // exact truncated_value, v = -(truncated_value + residue) is one fp64 addition of two exact
    // values (the residue is exact: a multiple of 2^unit below 2^(unit + F + 8)): the exact error
    // rounded once. Otherwise truncated_value is within 2^(2b-54) * 2^unit of the exact sum (at
    // most 2^b - 1 additions, 2^b > the products per step, each rounding by at most 2^(b-54) *
    // 2^unit: the partial sums stay below 2^b * 2^unit), so v has the exact error's sign unless
    // |v| <= 2^(2b-53) * 2^unit; only there is the exact error formed (ExactSum) and rounded once.
    // fused_dot_columns' tallied kernel forms the same v and redoes the same near-zero steps here.
    double error = -(truncated_value + output_residue);
    const int term_bits = std::bit_width(static_cast<unsigned>(m.products_per_step > 0 ? m.products_per_step : n));
    const bool near_zero = !removed_sum_exact && std::fabs(error) <= times_power_of_two(1.0, 2 * term_bits - 53 + unit);
    if (!removed_sum_exact && (near_zero || !trace->tally_only)) {
      ExactSum parts(static_cast<int>(lowest_removed));
      for (int i = 0; i <= n; ++i) {
        if (removed[i] == 0) continue;
        const auto r = static_cast<std::int64_t>(removed[i]);
        parts.add(sign_mask[i] != 0 ? -r : r, static_cast<int>(lsb[i]));
      }
      if (!trace->tally_only) truncated_value = parts.rounded();  // the record's: exact, rounded once
      if (near_zero) {
        // The residue as an integer number of units 2^unit (it is one, below 2^53 in magnitude;
        // finite: an infinite error is not near zero).
        parts.add(static_cast<std::int64_t>(times_power_of_two(output_residue, -unit)), unit);
        error = -parts.rounded();
      }
    }
    if (trace->tally_only) {
      trace->tally_only->add(carry_out, ev_round.tie, error, sum >= 0);
      return result;
    }
    // Every field written once, from values held apart (building the record field by
    // field and then copying it in cost a third of the traced step).
    trace->steps.push_back(DotStepEvent{.largest_exponent = largest,
                                        .terms = n + 1,
                                        .truncated_value = truncated_value,
                                        .truncated_terms = truncated_terms,
                                        .carry_out = carry_out,
                                        .normalisation_shift = normalisation_shift,
                                        .output_residue = output_residue,
                                        .first_product = first_product,
                                        .fraction_bits = F,
                                        .aligned_sum = sum,
                                        .output_event = ev_round,
                                        .special = false,
                                        .every_term_zero = every_term_zero,
                                        .error = error});
  }
  return result;
}

std::uint32_t fused_step_traced(const TensorCoreModel& m, int input_emin, float c, const float* a, const float* b,
                                int n, int first_product, DotTrace* trace) {
  return fused_step_body<true>(m, input_emin, c, a, b, n, first_product, trace);
}
[[gnu::flatten]] std::uint32_t fused_step_plain(const TensorCoreModel& m, int input_emin, float c, const float* a,
                                                const float* b, int n, int first_product) {
  return fused_step_body<false>(m, input_emin, c, a, b, n, first_product, nullptr);
}
#if defined(__x86_64__) && defined(__GNUC__)
// The same code compiled for AVX2, whose variable 64-bit shifts let both term loops
// vectorise (~1.7x); integer arithmetic only, so the results are identical.
#define FLASHBITS_DOT_AVX2 1
[[gnu::target("avx2"), gnu::flatten]] std::uint32_t fused_step_avx2(const TensorCoreModel& m, int input_emin, float c,
                                                                    const float* a, const float* b, int n,
                                                                    int first_product) {
  return fused_step_body<false>(m, input_emin, c, a, b, n, first_product, nullptr);
}
// Traced steps of the presets' full step shapes (the attention tracer traces every P·V
// step of every traced row): the same body with the shape fixed at compile time.
template <int kN, int kF, int kOut>
[[gnu::target("avx2"), gnu::flatten]] std::uint32_t fused_step_traced_avx2(const TensorCoreModel& m, int input_emin,
                                                                           float c, const float* a, const float* b,
                                                                           int n, int first_product, DotTrace* trace) {
  return fused_step_body<true, kN, kF, kOut>(m, input_emin, c, a, b, n, first_product, trace);
}
using TracedStep = std::uint32_t (*)(const TensorCoreModel&, int, float, const float*, const float*, int, int,
                                     DotTrace*);
// The fixed-shape traced step for a preset's full steps, or nullptr.
TracedStep traced_step_for(const TensorCoreModel& m) {
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  if (!has_avx2) return nullptr;
#define FB_TRACED(N, F, O)                                               \
  if (m.products_per_step == N && m.fraction_bits == F && m.output == O) \
    return &fused_step_traced_avx2<N, F, static_cast<int>(O)>;
  FB_PRESET_STEP_SHAPES(FB_TRACED)
#undef FB_TRACED
  return nullptr;
}
#endif

// Whole dot products for the presets' step shapes: full steps of kN products with F
// and the output kind fixed at compile time (one call per dot, not per step), the
// last partial step through the run-time body.
using FixedDot = std::uint32_t (*)(const TensorCoreModel&, int, float, const float*, const float*, int);

// Two phases per chunk of whole steps: every product of the chunk is decoded and
// aligned first (independent of C, so this loop vectorises across steps); then each
// step only brings in C, takes the maximum, truncates and rounds. This is the step
// of fused_step_body for finite terms under ZeroTermPolicy::ignored (presets' policy)
// written with its products apart; products only ever shift right (a non-zero
// product's alignment exponent is at least its lsb + 46, so unit - lsb >= 46 - F > 0
// for F <= 25; zero products are clamped like the body does). A chunk holding an
// inf/NaN, a non-finite C, or another zero-term policy goes through fused_step_body.
template <int kN, int kF, int kOut>
[[gnu::always_inline]] inline std::uint32_t fixed_dot_body(const TensorCoreModel& m, int input_emin, float c,
                                                           const float* a, const float* b, int k) {
  static_assert(kF <= 25 && kN <= 64);
  constexpr auto kOutput = static_cast<DotOutput>(kOut);
  constexpr int kChunk = 64 / kN * kN;
  constexpr std::int32_t kNone = std::numeric_limits<int>::min() / 4;
  const int c_emin = (kOutput == fp16_rne ? formats::fp16 : formats::fp32).emin();
  std::uint32_t bits = 0;
  float acc = c;
  int i = 0;
  if (m.zero_terms == ZeroTermPolicy::ignored) {
    const std::int32_t emin_biased = input_emin + kBias;
    while (k - i >= kN) {
      const int len = std::min(kChunk, (k - i) / kN * kN);
      // Exponents in 32-bit lanes: AVX2 has 32-bit but no 64-bit max/min.
      std::uint64_t magnitude[kChunk], sign_mask[kChunk];
      std::int32_t lsb[kChunk], alignment[kChunk];
      std::uint32_t special_products = 0;
      for (int j = 0; j < len; ++j) {
        // Exponent work in 32-bit lanes, the exact product in 64.
        const std::uint32_t ua = std::bit_cast<std::uint32_t>(a[i + j]), ub = std::bit_cast<std::uint32_t>(b[i + j]);
        const std::uint32_t ea = (ua >> kManBits) & kExpFieldMax, eb = (ub >> kManBits) & kExpFieldMax;
        special_products |= (ea == kExpFieldMax) | (eb == kExpFieldMax);
        const std::uint32_t normal_a = ea != 0, normal_b = eb != 0;
        const auto xa = static_cast<std::int32_t>(ea + (normal_a ^ 1u));
        const auto xb = static_cast<std::int32_t>(eb + (normal_b ^ 1u));
        const std::uint32_t sa = (ua & kManMask) | (normal_a << kManBits),
                            sb = (ub & kManMask) | (normal_b << kManBits);
        magnitude[j] = static_cast<std::uint64_t>(sa) * sb;
        sign_mask[j] = 0 - static_cast<std::uint64_t>((ua ^ ub) >> kSignShift);
        lsb[j] = xa + xb - 2 * kBias - 2 * kManBits;
        alignment[j] =
            ((sa != 0) & (sb != 0)) ? std::max(xa, emin_biased) + std::max(xb, emin_biased) - 2 * kBias : kNone;
      }
      // Per step, what does not depend on C: off the chain from one step's C to the next.
      std::int32_t step_largest[kChunk / kN];
      for (int s = 0; s < len; s += kN) {
        std::int32_t largest = kNone;
        for (int j = s; j < s + kN; ++j) largest = std::max(largest, alignment[j]);
        step_largest[s / kN] = largest;
      }
      for (int s = 0; s < len; s += kN) {
        const Parts pc = split(acc);
        if (special_products != 0 || pc.special) [[unlikely]] {
          bits = fused_step_body<false, kN, kF, kOut>(m, input_emin, acc, a + i + s, b + i + s, kN, i + s, nullptr);
        } else {
          std::int32_t largest =
              std::max(pc.significand != 0 ? std::max(pc.exponent, c_emin) : kNone, step_largest[s / kN]);
          if (largest == kNone) largest = c_emin;  // every term is zero
          const std::int32_t unit = largest - kF;
          // C: as in fused_step_body (it may shift left by up to F - 23).
          const std::int64_t c_shift = pc.exponent - kManBits - unit;
          const std::int64_t c_left = std::min<std::int64_t>(std::max<std::int64_t>(c_shift, 0), 63);
          const std::int64_t c_right = std::min<std::int64_t>(std::max<std::int64_t>(-c_shift, 0), 63);
          const std::uint64_t c_mask = pc.negative ? ~std::uint64_t{0} : 0;
          std::uint64_t sum_bits = ((((std::uint64_t{pc.significand}) << c_left) >> c_right) ^ c_mask) - c_mask;
          for (int j = s; j < s + kN; ++j) {
            // Zero products may carry any exponent: the count is clamped to stay defined.
            const std::int32_t right = std::min(std::max(unit - lsb[j], 0), 63);
            sum_bits += ((magnitude[j] >> right) ^ sign_mask[j]) - sign_mask[j];
          }
          bits = step_output(kOutput, static_cast<std::int64_t>(sum_bits), static_cast<int>(unit), nullptr);
        }
        acc = kOutput == fp16_rne ? accumulator_value(m, bits) : std::bit_cast<float>(bits);
      }
      i += len;
    }
    if (i == k && k > 0) return bits;
  }
  do {
    if (k - i >= kN) {
      bits = fused_step_body<false, kN, kF, kOut>(m, input_emin, acc, a + i, b + i, kN, i, nullptr);
      i += kN;
    } else {
      bits = fused_step_body<false>(m, input_emin, acc, a + i, b + i, k - i, i, nullptr);
      i = k;
    }
    acc = static_cast<DotOutput>(kOut) == fp16_rne ? accumulator_value(m, bits) : std::bit_cast<float>(bits);
  } while (i < k);
  return bits;
}
template <int kN, int kF, int kOut>
[[gnu::flatten]] std::uint32_t fixed_dot_plain(const TensorCoreModel& m, int input_emin, float c, const float* a,
                                               const float* b, int k) {
  return fixed_dot_body<kN, kF, kOut>(m, input_emin, c, a, b, k);
}
#ifdef FLASHBITS_DOT_AVX2
template <int kN, int kF, int kOut>
[[gnu::target("avx2"), gnu::flatten]] std::uint32_t fixed_dot_avx2(const TensorCoreModel& m, int input_emin, float c,
                                                                   const float* a, const float* b, int k) {
  return fixed_dot_body<kN, kF, kOut>(m, input_emin, c, a, b, k);
}
#endif

// The fixed-shape routine for a preset's (products per step, F, output), or nullptr.
FixedDot fixed_dot_for(const TensorCoreModel& m) {
#ifdef FLASHBITS_DOT_AVX2
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
#define FB_FIXED(N, F, O)                                                \
  if (m.products_per_step == N && m.fraction_bits == F && m.output == O) \
    return has_avx2 ? &fixed_dot_avx2<N, F, static_cast<int>(O)> : &fixed_dot_plain<N, F, static_cast<int>(O)>;
#else
#define FB_FIXED(N, F, O)                                                \
  if (m.products_per_step == N && m.fraction_bits == F && m.output == O) \
    return &fixed_dot_plain<N, F, static_cast<int>(O)>;
#endif
  FB_PRESET_STEP_SHAPES(FB_FIXED)
#undef FB_FIXED
  return nullptr;
}

std::uint32_t exact_dot(const TensorCoreModel& m, float c, const float* a, const float* b, int k, DotTrace* trace) {
  ExactAccumulator acc;
  acc.add(c);
  int largest = std::numeric_limits<int>::min();
  for (int i = 0; i < k; ++i) acc.add_product(a[i], b[i]);
  RoundingSpec spec;  // rne, ieee overflow
  RoundingEvent ev_round;
  const Rounded r = acc.round(formats::fp32, spec, 0, trace ? &ev_round : nullptr);
  if (trace) {
    DotStepEvent ev;
    ev.terms = k + 1;
    ev.fraction_bits = m.fraction_bits;
    ev.special = acc.is_special();
    if (!acc.is_special() && !acc.is_zero()) {
      largest = acc.leading_exponent();
      ev.largest_exponent = largest;
      ev.output_event = ev_round;
      ev.output_residue = ev_round.error_ulps == 0.0
                              ? 0.0
                              : -std::ldexp(ev_round.error_ulps, ev_round.exponent - ev_round.kept_bits + 1);
    }
    ev.error = -(ev.truncated_value + ev.output_residue);  // (truncated_value is 0: one step, no truncation)
    if (trace->tally_only) {
      trace->tally_only->add(ev);
      return r.bits;
    }
    trace->steps.push_back(ev);
    if (trace->record_terms) {
      for (int i = -1; i < k; ++i) {
        DotTermEvent te;
        te.product = i;
        te.value = i < 0 ? static_cast<double>(c) : static_cast<double>(a[i]) * static_cast<double>(b[i]);
        trace->terms.push_back(te);
      }
    }
  }
  return r.bits;
}

std::uint32_t dot_bits_from_floats(const TensorCoreModel& m, float c, const float* a, const float* b, int k,
                                   DotTrace* trace) {
  if (m.output == exact_rne) return exact_dot(m, c, a, b, k, trace);
  const int input_emin = input_format_of(m).emin();
  if (!trace && m.products_per_step > 0) {
    if (const FixedDot fixed = fixed_dot_for(m)) return fixed(m, input_emin, c, a, b, k);
  }
  const int step = fused_step_size(m, k);
#ifdef FLASHBITS_DOT_AVX2
  const TracedStep traced_fixed = trace && m.products_per_step > 0 ? traced_step_for(m) : nullptr;
#endif
  std::uint32_t bits = 0;
  float acc = c;
  int i = 0;
  do {
    const int n = std::min(step, k - i);
    if (trace) {
#ifdef FLASHBITS_DOT_AVX2
      if (traced_fixed && n == m.products_per_step) {
        bits = traced_fixed(m, input_emin, acc, a + i, b + i, n, i, trace);
        acc = accumulator_value(m, bits);
        i += n;
        continue;
      }
#endif
      bits = fused_step_traced(m, input_emin, acc, a + i, b + i, n, i, trace);
    } else {
#ifdef FLASHBITS_DOT_AVX2
      static const bool has_avx2 = __builtin_cpu_supports("avx2");
      bits = has_avx2 ? fused_step_avx2(m, input_emin, acc, a + i, b + i, n, i)
                      : fused_step_plain(m, input_emin, acc, a + i, b + i, n, i);
#else
      bits = fused_step_plain(m, input_emin, acc, a + i, b + i, n, i);
#endif
    }
    acc = accumulator_value(m, bits);
    i += n;
  } while (i < k);
  return bits;
}

}  // namespace

std::uint32_t dot_step_output(DotOutput output, std::int64_t sum, int unit) {
  return step_output(output, sum, unit, nullptr);
}

const Format& accumulator_format(const TensorCoreModel& model) {
  return model.output == fp16_rne ? formats::fp16 : formats::fp32;
}

float fused_dot(const TensorCoreModel& model, float c, const float* a, const float* b, int k, DotTrace* trace) {
  return accumulator_value(model, dot_bits_from_floats(model, c, a, b, k, trace));
}

std::uint32_t fused_dot_bits(const TensorCoreModel& model, std::uint32_t c_bits, std::span<const std::uint32_t> a_bits,
                             std::span<const std::uint32_t> b_bits, DotTrace* trace) {
  const Format& in = input_format_of(model);
  const int k = static_cast<int>(std::min(a_bits.size(), b_bits.size()));
  std::vector<float> a(static_cast<std::size_t>(k)), b(static_cast<std::size_t>(k));
  for (int i = 0; i < k; ++i) {
    a[static_cast<std::size_t>(i)] = static_cast<float>(to_double(in, a_bits[static_cast<std::size_t>(i)]));
    b[static_cast<std::size_t>(i)] = static_cast<float>(to_double(in, b_bits[static_cast<std::size_t>(i)]));
  }
  const float c = static_cast<float>(to_double(accumulator_format(model), c_bits));
  return dot_bits_from_floats(model, c, a.data(), b.data(), k, trace);
}

}  // namespace fb
