// emu/sfu/sfu_table_models.cpp: the emulator's FBSFU1 table models of forms 1..5
// (emu/sfu/sfu_table_models.hpp), each a thin wrapper of its rule in emu/sfu/sfu_table_rules.hpp,
// the one statement of the rules that fb-sfu-probe's device code evaluates too. What each
// form hypothesises about the hardware (the file layout is in traces/sfu_table_file.cpp):
//
// ex2_fixed_point hypothesis: xf = round(x * 2^N) per argument_rounding (after input
//   ftz), k = floor(xf / 2^N), i = xf mod 2^N, result = T[i] * 2^k, with results of
//   2^128 or more giving +inf and results below 2^-126 flushed to +0. x >= 128 gives
//   +inf and x < -160 gives +0 without consulting T (an assumption, not measured),
//   +-inf and NaN follow the special values in the header (NaN gives nan_output).
// rcp_mantissa hypothesis: T[m] holds the hardware's output bits for the input 1.m (the
//   fp32 with exponent field 127 and mantissa field m, x in [1, 2)). After input ftz:
//   NaN gives nan_output, +-0 (subnormals included) give +-inf, +-inf give +-0; a normal
//   x = s * 2^e * 1.m (s = +-1, e in -126..127) gives the exact value v = s * T[m] * 2^-e
//   (for a normal T[m] and a normal v: T[m] with its exponent field decreased by e and its
//   sign bit XORed with x's), then |v| >= 2^128 gives inf and
//   |v| < 2^-126 gives zero, both with v's sign (ftz: no subnormal results); a NaN T[m]
//   is returned as is. For a table near 1 / 1.m (entries in (0.5, 1]) nothing overflows
//   and only e >= 126 can flush: e = 127 always, e = 126 unless T[m] >= 1.
// lg2_exponent_split hypothesis: T[m] holds the hardware's output bits for the input 1.m
//   (as for rcp_mantissa). After input ftz: NaN and x < 0 (-inf included) give nan_output
//   (the hardware's NaN; fb-sfu-probe measures it on a NaN input), +-0 (subnormals included)
//   give -inf, +inf gives +inf; a positive normal x = 2^e * 1.m (e in -126..127, powers of
//   two included: T[0] is the hardware's lg2(1)) gives e + T[m] as ONE fp32 addition with
//   round-to-nearest-even (fb::add: exact sum, then round_pack; e is exact in fp32), a
//   subnormal sum flushed to zero of its sign (only e = 0 with a subnormal T[m] gives one),
//   and a NaN T[m] returned as is. The sum is not the correctly rounded lg2(x) in general:
//   T[m] is already rounded, so e + T[m] can round differently from e + lg2(1.m).
// ex2_sign_magnitude hypothesis (what an H200's ex2.approx.ftz.f32 was found to do, N = 23):
//   after input ftz, NaN gives nan_output, x >= 128 gives +inf and x < -160 gives +0 (as form
//   1); otherwise X = floor(|x| * 2^N) (|x| truncated to N fraction bits, exact in double),
//   k = floor(X / 2^N), i = X mod 2^N, and x >= 0 (+0 included) gives T+[i] * 2^k, x < 0 (-0
//   included) gives T-[i] * 2^-k, with results of 2^128 or more giving +inf and results below
//   2^-126 flushed to +0. T+[i] holds the hardware's output for i * 2^-N, T-[i] for -i * 2^-N:
//   the negative side is NOT 2^(1 - frac) / 2 of the two's complement fraction.
// lg2_extended hypothesis: as lg2_exponent_split, but the hardware is taken to hold lg2(1.m)
//   more precisely than fp32 and to round e + L[m] once: L[m] = T[m] + R[m] * ulp(T[m]) *
//   2^-g exactly (T[m] the hardware's output for 1.m when the final rounding is its own, g
//   the guard bits, ulp(T) = 2^(max(biased exponent, 1) - 150)), and a positive normal x =
//   2^e * 1.m gives e + L[m] rounded once by final_rounding (lg2_extended_rule, i.e. emu/sfu/sfu_table_rules.hpp
//   lg2_extended_model: exact integer arithmetic; an exact zero gives +0, a result below 2^-126 flushes to zero of its
//   sign; a NaN or infinite T[m] is returned as is). Specials as lg2_exponent_split. With
//   g = 0, R = 0 and nearest-even it is the lg2_exponent_split rule. The loader refuses
//   g > 24, |R| >= 2^30 and entries with |L| >= 2.
#include "emu/sfu/sfu_table_models.hpp"

#include <bit>
#include <filesystem>
#include <utility>

#include "emu/ops.hpp"
#include "emu/sfu/sfu_table_rules.hpp"
#include "formats/format.hpp"

namespace fb {

// The shared rules number their roundings as the emulator's enums do.
static_assert(sfu_rules::kFloor == static_cast<int>(FixedPointRounding::floor) &&
              sfu_rules::kNearestEven == static_cast<int>(FixedPointRounding::nearest_even) &&
              sfu_rules::kTowardZero == static_cast<int>(FixedPointRounding::toward_zero));
static_assert(sfu_rules::kFinalNearestEven == static_cast<int>(FinalRounding::nearest_even) &&
              sfu_rules::kFinalTowardZero == static_cast<int>(FinalRounding::toward_zero) &&
              sfu_rules::kFinalDown == static_cast<int>(FinalRounding::down) &&
              sfu_rules::kFinalUp == static_cast<int>(FinalRounding::up));
static_assert(sfu_rules::kRcpMantissaTableEntries == kRcpMantissaEntries &&
              sfu_rules::kLg2MantissaTableEntries == kLg2MantissaEntries);

std::string TableModel::describe_rule(const std::string& rule) const {
  return std::string(to_string(f_)) + ": table " + provenance_.path +
         " (source: " + (provenance_.source.empty() ? "?" : provenance_.source) + "), " + rule + ", " +
         (provenance_.measured ? "measured on hardware" : "SYNTHETIC, not measured");
}

std::string TableModel::summary() const {
  const std::string name = std::filesystem::path(provenance_.path).filename().string();
  return std::string(to_string(f_)) + " table " + name +
         (hardware_measured() ? " (measured)"
          : measured()        ? " (measured, partial: other inputs UNMEASURED)"
                              : " (SYNTHETIC)");
}

std::uint32_t lg2_extended_rule(int e, std::uint32_t t_bits, std::int32_t r, int guard_bits, FinalRounding rounding) {
  return sfu_rules::lg2_extended_model(e, t_bits, r, guard_bits, static_cast<int>(rounding));
}

namespace {

// The lg2 forms' one fp32 addition done by the emulator's one rounding routine (fb::add:
// exact sum, then round_pack, round to nearest even, subnormal results kept).
struct RoundPackFp32Add {
  float operator()(float a, float b) const {
    const Rounded sum =
        add(formats::fp32, std::bit_cast<std::uint32_t>(a), std::bit_cast<std::uint32_t>(b), RoundingSpec{});
    return std::bit_cast<float>(sum.bits);
  }
};

class Ex2FixedPointModel final : public TableModel {
 public:
  Ex2FixedPointModel(TableProvenance provenance, int fraction_bits, FixedPointRounding rounding,
                     std::uint32_t nan_output, std::vector<std::uint32_t> table)
      : TableModel(SpecialFunction::ex2, std::move(provenance)),
        fraction_bits_(fraction_bits),
        rounding_(rounding),
        nan_output_(nan_output),
        table_(std::move(table)) {}
  std::string describe() const override {
    return describe_rule("2^k * T[frac] with " + std::to_string(fraction_bits_) + " fraction bits");
  }
  float evaluate(float x) const override {
    return std::bit_cast<float>(
        sfu_rules::ex2_table_model(x, fraction_bits_, static_cast<int>(rounding_), table_.data(), nan_output_));
  }

 private:
  int fraction_bits_;
  FixedPointRounding rounding_;
  std::uint32_t nan_output_;
  std::vector<std::uint32_t> table_;
};

class RcpMantissaModel final : public TableModel {
 public:
  RcpMantissaModel(TableProvenance provenance, std::uint32_t nan_output, std::vector<std::uint32_t> table)
      : TableModel(SpecialFunction::rcp, std::move(provenance)), nan_output_(nan_output), table_(std::move(table)) {}
  std::string describe() const override { return describe_rule("+-T[m] * 2^-e over the 2^23 mantissas"); }
  float evaluate(float x) const override {
    return std::bit_cast<float>(sfu_rules::rcp_table_model(x, table_.data(), nan_output_));
  }

 private:
  std::uint32_t nan_output_;
  std::vector<std::uint32_t> table_;
};

class Lg2ExponentSplitModel final : public TableModel {
 public:
  Lg2ExponentSplitModel(TableProvenance provenance, std::uint32_t nan_output, std::vector<std::uint32_t> table)
      : TableModel(SpecialFunction::lg2, std::move(provenance)), nan_output_(nan_output), table_(std::move(table)) {}
  std::string describe() const override { return describe_rule("RN(e + T[m]) over the 2^23 mantissas"); }
  float evaluate(float x) const override {
    return std::bit_cast<float>(sfu_rules::lg2_table_model(x, table_.data(), nan_output_, RoundPackFp32Add{}));
  }

 private:
  std::uint32_t nan_output_;
  std::vector<std::uint32_t> table_;
};

class Ex2SignMagnitudeModel final : public TableModel {
 public:
  // `table` is T+ followed by T- (2^(N+1) entries), the layout the shared rule indexes.
  Ex2SignMagnitudeModel(TableProvenance provenance, int fraction_bits, std::uint32_t nan_output,
                        std::vector<std::uint32_t> table)
      : TableModel(SpecialFunction::ex2, std::move(provenance)),
        fraction_bits_(fraction_bits),
        nan_output_(nan_output),
        table_(std::move(table)) {}
  std::string describe() const override {
    return describe_rule("|x| truncated to " + std::to_string(fraction_bits_) +
                         " fraction bits, T+[frac] * 2^k or T-[frac] * 2^-k by sign");
  }
  float evaluate(float x) const override {
    return std::bit_cast<float>(
        sfu_rules::ex2_sign_magnitude_table_model(x, fraction_bits_, table_.data(), nan_output_));
  }

 private:
  int fraction_bits_;
  std::uint32_t nan_output_;
  std::vector<std::uint32_t> table_;
};

class Lg2ExtendedModel final : public TableModel {
 public:
  Lg2ExtendedModel(TableProvenance provenance, std::uint32_t nan_output, int guard_bits, FinalRounding rounding,
                   std::vector<std::uint32_t> table, std::vector<std::int32_t> residuals)
      : TableModel(SpecialFunction::lg2, std::move(provenance)),
        nan_output_(nan_output),
        guard_bits_(guard_bits),
        rounding_(rounding),
        table_(std::move(table)),
        residuals_(std::move(residuals)) {}
  std::string describe() const override {
    return describe_rule("e + L[m] rounded once (" + std::string(to_string(rounding_)) + "), L = T + R ulp(T) 2^-" +
                         std::to_string(guard_bits_) + " over the 2^23 mantissas");
  }
  float evaluate(float x) const override {
    return std::bit_cast<float>(sfu_rules::lg2_extended_table_model(x, table_.data(), residuals_.data(), guard_bits_,
                                                                    static_cast<int>(rounding_), nan_output_));
  }

 private:
  std::uint32_t nan_output_;
  int guard_bits_;
  FinalRounding rounding_;
  std::vector<std::uint32_t> table_;
  std::vector<std::int32_t> residuals_;
};

}  // namespace

std::unique_ptr<SpecialFunctionModel> make_ex2_fixed_point_model(TableProvenance provenance, int fraction_bits,
                                                                 FixedPointRounding rounding, std::uint32_t nan_output,
                                                                 std::vector<std::uint32_t> table) {
  return std::make_unique<Ex2FixedPointModel>(std::move(provenance), fraction_bits, rounding, nan_output,
                                              std::move(table));
}

std::unique_ptr<SpecialFunctionModel> make_rcp_mantissa_model(TableProvenance provenance, std::uint32_t nan_output,
                                                              std::vector<std::uint32_t> table) {
  return std::make_unique<RcpMantissaModel>(std::move(provenance), nan_output, std::move(table));
}

std::unique_ptr<SpecialFunctionModel> make_lg2_exponent_split_model(TableProvenance provenance,
                                                                    std::uint32_t nan_output,
                                                                    std::vector<std::uint32_t> table) {
  return std::make_unique<Lg2ExponentSplitModel>(std::move(provenance), nan_output, std::move(table));
}

std::unique_ptr<SpecialFunctionModel> make_ex2_sign_magnitude_model(TableProvenance provenance, int fraction_bits,
                                                                    std::uint32_t nan_output,
                                                                    std::vector<std::uint32_t> positive,
                                                                    const std::vector<std::uint32_t>& negative) {
  positive.insert(positive.end(), negative.begin(), negative.end());
  return std::make_unique<Ex2SignMagnitudeModel>(std::move(provenance), fraction_bits, nan_output, std::move(positive));
}

std::unique_ptr<SpecialFunctionModel> make_lg2_extended_model(TableProvenance provenance, std::uint32_t nan_output,
                                                              int guard_bits, FinalRounding rounding,
                                                              std::vector<std::uint32_t> table,
                                                              std::vector<std::int32_t> residuals) {
  return std::make_unique<Lg2ExtendedModel>(std::move(provenance), nan_output, guard_bits, rounding, std::move(table),
                                            std::move(residuals));
}

}  // namespace fb
