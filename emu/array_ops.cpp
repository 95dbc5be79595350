// emu/array_ops.cpp: the batched add, mul, fma over arrays (add_array, mul_array,
// fma_array; contract in emu/array_rounding.hpp): lane loops around round_pack_lane,
// and the scalar operations for what those do not cover. A translation unit of its
// own, apart from round_array (emu/array_rounding.cpp), only to halve the build's
// longest compile; the ISA choice they share is emu/array_lanes.hpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "emu/array_lanes.hpp"
#include "emu/array_rounding.hpp"
#include "emu/ops.hpp"

namespace fb {
namespace {

using array_lanes::for_each_key_span;
#ifdef FLASHBITS_LANES_MULTIVERSION
using array_lanes::lane_isa;
using array_lanes::LaneIsa;
#endif

// mul over 32-bit lanes. Each operand's significand is first normalised to p
// bits (subnormals shifted up, leading bit found by the float conversion, as in
// round_pack_lane), so the product has 2p - 1 or 2p bits (<= 24 for p <= 12) and
// its leading bit is far enough above its LSB for round_pack_lane's precondition.
// Zeros are exact lane values (significand 0, see kZeroOperandExponent); inf and
// NaN operands mark the element for the scalar operation.
// A zero operand's exponent in the lanes: below every non-zero operand's (>= -149
// - 23) by more than any alignment window, and far enough below emin that a zero
// product or sum packs as a zero (round_pack_lane's precondition); small enough
// in magnitude that sums of three stay far from int32's limits.
inline constexpr std::int32_t kZeroOperandExponent = -1000;

template <Format F>
[[gnu::always_inline]] inline void decode_lane(std::uint32_t stored, std::uint32_t& negative, std::int32_t& exponent,
                                               std::uint32_t& significand, std::uint32_t& ordinary) {
  static_assert(F.storage_shift() == 0 && F.is_signed &&
                (F.special == SpecialEncoding::ieee || F.special == SpecialEncoding::fn));
  constexpr int p = F.precision();
  const std::uint32_t bits = stored & F.width_mask();
  negative = (bits >> (F.exp_bits + F.man_bits)) & 1u;
  const std::uint32_t exp_field = (bits >> F.man_bits) & F.exp_field_max();
  const std::uint32_t fraction = bits & F.man_mask();
  // Written without selects on exp_field: GCC's vectoriser mis-types those here.
  const std::uint32_t sig = fraction | (std::min(exp_field, 1u) << F.man_bits);
  const std::int32_t q = static_cast<std::int32_t>(std::max(exp_field, 1u)) - F.bias - F.man_bits;
  const std::int32_t lead =
      static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(sig))) >>
                                23) -
      127;
  const std::int32_t up = (p - 1) - lead;  // 0 for normals; garbage for zero (not ordinary)
  const std::int32_t up_clamped = up < 0 ? 0 : (up > 23 ? 23 : up);
  const std::uint32_t nonzero = std::min(bits & ~F.sign_mask(), 1u);
  // A zero is significand 0 at kZeroOperandExponent, far below every non-zero
  // value, so that the lanes compute exactly with it (see add_lane).
  significand = (sig << up_clamped) & (0u - nonzero);
  exponent = static_cast<std::int32_t>(select_u32_bit(nonzero, static_cast<std::uint32_t>(q - up_clamped),
                                                      static_cast<std::uint32_t>(kZeroOperandExponent)));
  const bool special = F.special == SpecialEncoding::ieee ? exp_field == F.exp_field_max()
                                                          : (bits & ~F.sign_mask()) == F.quiet_nan_pattern();
  ordinary = static_cast<std::uint32_t>(!special);  // 0 or 1
}

enum class BinaryKind { add, mul, fma };  // fma: a*b + c (a third operand array)

// add over 32-bit lanes (p <= 12, modes other than sr): the operands (p-bit
// significands from decode_lane) are aligned in a window of W = 22 - p bits below
// the larger exponent's LSB; what falls out of the window becomes a sticky bit,
// and the exact sum S (+ a fraction when sticky) is handed on as the stand-in
// 2S + sticky: the same round-to-odd argument as in ops.hpp (the sticky bit lies
// at least 3 bits below any rounding boundary, since bits are lost only when the
// exponents differ by more than W, and then at most one leading bit cancels), so
// every deterministic mode rounds it to the same value with the same flags. sr
// reads the discarded bits themselves, so add_array runs fb::add for sr.
// Returns the significand normalised to bit 23 (what round_pack_lane needs
// whatever the cancellation). A zero addend (significand 0 at kZeroOperandExponent)
// adds nothing and loses nothing. An exact zero sum comes back as a zero
// significand with fb::add's sign (two zeros of one sign: that sign; otherwise +0,
// or -0 under rdn: ZeroSumNegative) and an exponent far below the format's, which
// round_pack_lane packs as that zero with no flag.
// fma uses the same routine on the exact product (normalised to 2p bits) and c
// (shifted up to 2p bits): K is the operands' significand width, W = 22 - K >= 0.
// Why the stand-in rounds like the exact sum, for every K <= 22: with exponents
// differing by d <= 1 nothing is lost (d = 1 loses one bit, which the stand-in's
// extra bit holds exactly); with d >= 2 the smaller operand is below 2^(K+W-2) in
// window units, so even after cancellation the sum keeps at least K + W = 22
// significant bits above the sticky bit, and the format keeps p <= 12 of them:
// the sticky bit lies at least 3 bits below any rounding boundary (round to odd
// at precision >= p + 2, Boldo & Melquiond), the same for tininess and overflow.
// So fp16's fma, whose 22-bit products leave W = 0, runs here too.
template <int K, bool ZeroSumNegative, int ZeroExponent>
[[gnu::always_inline]] inline std::uint32_t add_lane(std::uint32_t na, std::int32_t ea, std::uint32_t sa,
                                                     std::uint32_t nb, std::int32_t eb, std::uint32_t sb,
                                                     std::uint32_t& negative, std::int32_t& exponent) {
  constexpr int W = 22 - K;
  static_assert(W >= 0);  // the window fits the 24-bit lane; precision: see above
  const bool b_larger = eb > ea;
  const std::uint32_t big_s = select_u32(b_larger, sb, sa), small_s = select_u32(b_larger, sa, sb);
  const std::uint32_t big_n = select_u32(b_larger, nb, na);
  const std::int32_t big_e = b_larger ? eb : ea;
  const std::int32_t d = b_larger ? eb - ea : ea - eb;
  const std::int32_t shift = d < 31 ? d : 31;
  const std::uint32_t big = big_s << W, small_full = small_s << W;
  const std::uint32_t small = small_full >> shift;
  const std::uint32_t lost = std::min(small_full & ((1u << shift) - 1u), 1u);
  const std::uint32_t same_sign = (na ^ nb) ^ 1u;
  // Opposite signs: big - (small + fraction) = (big - small - 1) + (1 - fraction).
  const std::uint32_t sum = select_u32_bit(same_sign, big + small, big - small - lost);
  // Equal exponents can leave the smaller magnitude first: the sum is then negative.
  const std::uint32_t flip = sum >> 31;
  const std::uint32_t magnitude = select_u32_bit(flip, 0u - sum, sum);
  const std::uint32_t stand_in = (magnitude << 1) | lost;  // < 2^24
  const std::uint32_t zero = 1u - std::min(stand_in, 1u);
  // A zero sum: of two zeros of the same sign, that sign; otherwise fb::add's rule.
  const std::uint32_t zero_sum_negative = select_u32_bit(same_sign, na, ZeroSumNegative ? 1u : 0u);
  negative = select_u32_bit(zero, zero_sum_negative, big_n ^ flip);
  const std::uint32_t safe = stand_in | zero;
  const std::int32_t lead =
      static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(safe))) >>
                                23) -
      127;
  exponent = zero != 0 ? ZeroExponent : big_e - W - 1 - (23 - lead);
  return (safe << (23 - lead)) & (zero - 1u);
}

template <Format F, RoundingMode Mode, BinaryKind Kind>
[[gnu::always_inline]] inline void binary_lanes_body(const std::uint32_t* a, const std::uint32_t* b,
                                                     const std::uint32_t* c, std::uint32_t* out, std::size_t n,
                                                     const RoundingSpec& spec_in, std::uint64_t first_position,
                                                     Flags* flags_out) {
  static_assert(2 * F.precision() <= 22 && F.precision() + 2 <= 22);  // add_lane's window
  // Exact zero sums (add_lane): fb::add's sign rule, and an exponent that leaves
  // nothing kept (round_pack_lane's precondition for a zero significand).
  constexpr bool kZeroSumNegative = Mode == RoundingMode::rdn;
  constexpr int kZeroExponent = F.emin() - 40;
  const RoundingSpec spec{Mode, spec_in.overflow, spec_in.sr_bits, spec_in.seed};
  const StochasticKey key = stochastic_key(spec.seed, static_cast<std::uint32_t>(first_position >> 32));
  const std::uint32_t position_low = static_cast<std::uint32_t>(first_position);
  std::uint32_t all_flags = 0;
  constexpr std::size_t kChunk = 256;
  std::uint32_t redo[kChunk];  // 32-bit like every other lane value: mixed widths defeat the vectoriser
  [[maybe_unused]] std::uint32_t operand_negative[2][kChunk], operand_significand[2][kChunk];
  [[maybe_unused]] std::int32_t operand_exponent[2][kChunk];
  std::uint32_t exact_negative[kChunk], exact_significand[kChunk];
  std::int32_t exact_exponent[kChunk];
  constexpr int p = F.precision();
  // Where the exact significands' leading bit is (round_pack_lane's Lead): add_lane
  // normalises sums to bit 23; products are normalised to 2p bits.
  constexpr int kLead = Kind == BinaryKind::mul ? 2 * p - 1 : 23;
  for (std::size_t start = 0; start < n; start += kChunk) {
    const std::uint32_t m = static_cast<std::uint32_t>(n - start < kChunk ? n - start : kChunk);
    const std::uint32_t chunk_position = position_low + static_cast<std::uint32_t>(start);
    const std::uint32_t* ca = a + start;
    const std::uint32_t* cb = b + start;
    const std::uint32_t* cc = Kind == BinaryKind::fma ? c + start : nullptr;
    std::uint32_t* co = out + start;
    // Several loops over the chunk: for add, each operand decoded into chunk-local
    // arrays; the exact result of each element (sign, exponent, significand) into
    // chunk-local arrays; then round_pack_lane over those. One fused loop keeps
    // more values and constants live than AVX2's 16 registers hold, and GCC then
    // spends a third of its instructions rebuilding and spilling them; the arrays
    // stay in L1. (Decoding in loops of their own was measured to help add, with
    // AVX2 and AVX-512, and to slow mul and fma down.)
    constexpr bool kSplitDecode = Kind == BinaryKind::add;
    if constexpr (kSplitDecode) {
      for (int k = 0; k < 2; ++k) {
        const std::uint32_t* operand = k == 0 ? ca : cb;
        for (std::uint32_t i = 0; i < m; ++i) {  // 32-bit: see round_array_lanes_body
          std::uint32_t ordinary;
          decode_lane<F>(operand[i], operand_negative[k][i], operand_exponent[k][i], operand_significand[k][i],
                         ordinary);
          redo[i] = (k == 0 ? 0u : redo[i]) | (ordinary ^ 1u);
        }
      }
    }
    std::uint32_t any_redo = 0;
    for (std::uint32_t i = 0; i < m; ++i) {
      std::uint32_t na, nb, sa, sb;
      std::int32_t ea, eb;
      if constexpr (kSplitDecode) {
        na = operand_negative[0][i], nb = operand_negative[1][i];
        sa = operand_significand[0][i], sb = operand_significand[1][i];
        ea = operand_exponent[0][i], eb = operand_exponent[1][i];
      } else {
        std::uint32_t oa, ob;
        decode_lane<F>(ca[i], na, ea, sa, oa);
        decode_lane<F>(cb[i], nb, eb, sb, ob);
        redo[i] = (oa & ob) ^ 1u;
      }
      // Lanes with an inf or NaN operand still run on stand-in values (see decode_lane).
      if constexpr (Kind == BinaryKind::mul) {
        // The product of two p-bit significands, normalised to 2p bits (leading
        // bit at 2p - 1: kLead), so that round_pack_lane need not look for it.
        const std::uint32_t product = sa * sb;
        const std::uint32_t short_product = (product >> (2 * p - 1)) ^ 1u;  // 1 when it has 2p - 1 bits
        exact_negative[i] = na ^ nb;
        exact_exponent[i] = ea + eb - static_cast<std::int32_t>(short_product);
        exact_significand[i] = product << short_product;
      } else if constexpr (Kind == BinaryKind::add) {
        std::uint32_t negative;
        std::int32_t exponent;
        exact_significand[i] = add_lane<p, kZeroSumNegative, kZeroExponent>(na, ea, sa, nb, eb, sb, negative, exponent);
        exact_negative[i] = negative;
        exact_exponent[i] = exponent;
      } else {
        std::uint32_t nc, sc, oc;
        std::int32_t ec;
        decode_lane<F>(cc[i], nc, ec, sc, oc);
        redo[i] |= oc ^ 1u;
        // The exact product, normalised to 2p bits; c shifted up to 2p bits.
        const std::uint32_t product = sa * sb;
        const std::uint32_t product_high = product >> (2 * p - 1);  // 1 when it already has 2p bits
        const std::uint32_t ps = product << (product_high ^ 1u);
        const std::int32_t pe = ea + eb - static_cast<std::int32_t>(product_high ^ 1u);
        std::uint32_t negative;
        std::int32_t exponent;
        exact_significand[i] =
            add_lane<2 * p, kZeroSumNegative, kZeroExponent>(na ^ nb, pe, ps, nc, ec - p, sc << p, negative, exponent);
        exact_negative[i] = negative;
        exact_exponent[i] = exponent;
      }
      any_redo |= redo[i];
    }
    std::uint32_t chunk_flags = 0;
    for (std::uint32_t i = 0; i < m; ++i) {
      std::uint32_t random32 = 0;
      if constexpr (Mode == RoundingMode::sr) random32 = stochastic_bits_keyed(key, chunk_position + i);
      std::uint32_t flags;
      co[i] = round_pack_lane<F, Mode, kLead>(exact_negative[i], exact_exponent[i], exact_significand[i], spec,
                                              random32, flags);
      chunk_flags |= flags & (redo[i] - 1u);
    }
    if (any_redo) {
      // Few elements need it (e4m3 data: a zero operand in ~0.5% of them), so
      // groups of 8 with none are skipped with one vector test instead of 8 branches.
      for (std::uint32_t i = m; i < ((m + 7u) & ~7u); ++i) redo[i] = 0;  // the last group's tail
      for (std::uint32_t group = 0; group < m; group += 8) {
        std::uint32_t group_redo = 0;
        for (std::uint32_t k = 0; k < 8; ++k) group_redo |= redo[group + k];
        if (group_redo == 0) continue;
        for (std::uint32_t i = group; i < group + 8 && i < m; ++i) {
          if (redo[i]) {
            const std::uint64_t position = first_position + start + i;
            const Rounded r = Kind == BinaryKind::mul   ? mul(F, ca[i], cb[i], spec_in, position)
                              : Kind == BinaryKind::add ? add(F, ca[i], cb[i], spec_in, position)
                                                        : fma(F, ca[i], cb[i], cc[i], spec_in, position);
            co[i] = r.bits;
            chunk_flags |= r.flags;
          }
        }
      }
    }
    all_flags |= chunk_flags;
  }
  if (flags_out) *flags_out = static_cast<Flags>(all_flags);
}

#ifdef FLASHBITS_LANES_MULTIVERSION
template <Format F, RoundingMode Mode, BinaryKind Kind>
[[FLASHBITS_TARGET_AVX2]] void binary_lanes_avx2(const std::uint32_t* a, const std::uint32_t* b, const std::uint32_t* c,
                                                 std::uint32_t* out, std::size_t n, const RoundingSpec& spec,
                                                 std::uint64_t first_position, Flags* flags_out) {
  binary_lanes_body<F, Mode, Kind>(a, b, c, out, n, spec, first_position, flags_out);
}
template <Format F, RoundingMode Mode, BinaryKind Kind>
[[FLASHBITS_TARGET_AVX512]] void binary_lanes_avx512(const std::uint32_t* a, const std::uint32_t* b,
                                                     const std::uint32_t* c, std::uint32_t* out, std::size_t n,
                                                     const RoundingSpec& spec, std::uint64_t first_position,
                                                     Flags* flags_out) {
  binary_lanes_body<F, Mode, Kind>(a, b, c, out, n, spec, first_position, flags_out);
}
#endif
template <Format F, RoundingMode Mode, BinaryKind Kind>
void binary_lanes(const std::uint32_t* a, const std::uint32_t* b, const std::uint32_t* c, std::uint32_t* out,
                  std::size_t n, const RoundingSpec& spec, std::uint64_t first_position, Flags* flags_out) {
  for_each_key_span(n, first_position, flags_out,
                    [&](std::size_t offset, std::size_t count, std::uint64_t position, Flags* span_flags) {
                      const std::uint32_t* c_span = c ? c + offset : nullptr;
#ifdef FLASHBITS_LANES_MULTIVERSION
                      switch (lane_isa()) {
                        case LaneIsa::avx512:
                          return binary_lanes_avx512<F, Mode, Kind>(a + offset, b + offset, c_span, out + offset, count,
                                                                    spec, position, span_flags);
                        case LaneIsa::avx2:
                          return binary_lanes_avx2<F, Mode, Kind>(a + offset, b + offset, c_span, out + offset, count,
                                                                  spec, position, span_flags);
                        case LaneIsa::baseline:
                          break;
                      }
#endif
                      binary_lanes_body<F, Mode, Kind>(a + offset, b + offset, c_span, out + offset, count, spec,
                                                       position, span_flags);
                    });
}

template <Format F, BinaryKind Kind>
void dispatch_binary_lanes(const std::uint32_t* a, const std::uint32_t* b, const std::uint32_t* c, std::uint32_t* out,
                           std::size_t n, const RoundingSpec& spec, std::uint64_t first_position, Flags* flags_out) {
  switch (spec.mode) {
#define FB_MODE_CASE(m) \
  case RoundingMode::m: \
    return binary_lanes<F, RoundingMode::m, Kind>(a, b, c, out, n, spec, first_position, flags_out);
    FB_MODE_CASE(rne)
    FB_MODE_CASE(rna)
    FB_MODE_CASE(rtz)
    FB_MODE_CASE(rup)
    FB_MODE_CASE(rdn)
    FB_MODE_CASE(rto)
#undef FB_MODE_CASE
    case RoundingMode::sr:
      if constexpr (Kind == BinaryKind::mul) {
        return binary_lanes<F, RoundingMode::sr, Kind>(a, b, c, out, n, spec, first_position, flags_out);
      } else {
        Flags all_flags = 0;  // sr needs the discarded bits add_lane folds into a sticky bit
        for (std::size_t i = 0; i < n; ++i) {
          const Rounded r = Kind == BinaryKind::add ? add(F, a[i], b[i], spec, first_position + i)
                                                    : fma(F, a[i], b[i], c[i], spec, first_position + i);
          out[i] = r.bits;
          all_flags |= r.flags;
        }
        if (flags_out) *flags_out = all_flags;
        return;
      }
  }
}

// The per-element loop: the scalar operation, called with the same arguments.
template <class Op>
void per_element(std::size_t n, std::uint64_t first_position, Flags* flags_out, std::uint32_t* out, Op&& op) {
  Flags all_flags = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Rounded r = op(i, first_position + i);
    out[i] = r.bits;
    all_flags |= r.flags;
  }
  if (flags_out) *flags_out = all_flags;
}

}  // namespace

void add_array(const Format& f, const std::uint32_t* a, const std::uint32_t* b, std::uint32_t* out, std::size_t n,
               const RoundingSpec& spec, std::uint64_t first_position, Flags* flags_out) {
  constexpr auto kAdd = BinaryKind::add;
  if (f == formats::bf16)
    return dispatch_binary_lanes<formats::bf16, kAdd>(a, b, nullptr, out, n, spec, first_position, flags_out);
  if (f == formats::fp16)
    return dispatch_binary_lanes<formats::fp16, kAdd>(a, b, nullptr, out, n, spec, first_position, flags_out);
  if (f == formats::e4m3)
    return dispatch_binary_lanes<formats::e4m3, kAdd>(a, b, nullptr, out, n, spec, first_position, flags_out);
  if (f == formats::e5m2)
    return dispatch_binary_lanes<formats::e5m2, kAdd>(a, b, nullptr, out, n, spec, first_position, flags_out);
  per_element(n, first_position, flags_out, out,
              [&](std::size_t i, std::uint64_t pos) { return add(f, a[i], b[i], spec, pos); });
}

void mul_array(const Format& f, const std::uint32_t* a, const std::uint32_t* b, std::uint32_t* out, std::size_t n,
               const RoundingSpec& spec, std::uint64_t first_position, Flags* flags_out) {
  constexpr auto kMul = BinaryKind::mul;
  if (f == formats::bf16)
    return dispatch_binary_lanes<formats::bf16, kMul>(a, b, nullptr, out, n, spec, first_position, flags_out);
  if (f == formats::fp16)
    return dispatch_binary_lanes<formats::fp16, kMul>(a, b, nullptr, out, n, spec, first_position, flags_out);
  if (f == formats::e4m3)
    return dispatch_binary_lanes<formats::e4m3, kMul>(a, b, nullptr, out, n, spec, first_position, flags_out);
  if (f == formats::e5m2)
    return dispatch_binary_lanes<formats::e5m2, kMul>(a, b, nullptr, out, n, spec, first_position, flags_out);
  per_element(n, first_position, flags_out, out,
              [&](std::size_t i, std::uint64_t pos) { return mul(f, a[i], b[i], spec, pos); });
}

void fma_array(const Format& f, const std::uint32_t* a, const std::uint32_t* b, const std::uint32_t* c,
               std::uint32_t* out, std::size_t n, const RoundingSpec& spec, std::uint64_t first_position,
               Flags* flags_out) {
  // 2p <= 22 fits add_lane's window (see there): bf16, fp16, e4m3, e5m2.
  constexpr auto kFma = BinaryKind::fma;
  if (f == formats::bf16)
    return dispatch_binary_lanes<formats::bf16, kFma>(a, b, c, out, n, spec, first_position, flags_out);
  if (f == formats::fp16)
    return dispatch_binary_lanes<formats::fp16, kFma>(a, b, c, out, n, spec, first_position, flags_out);
  if (f == formats::e4m3)
    return dispatch_binary_lanes<formats::e4m3, kFma>(a, b, c, out, n, spec, first_position, flags_out);
  if (f == formats::e5m2)
    return dispatch_binary_lanes<formats::e5m2, kFma>(a, b, c, out, n, spec, first_position, flags_out);
  per_element(n, first_position, flags_out, out,
              [&](std::size_t i, std::uint64_t pos) { return fma(f, a[i], b[i], c[i], spec, pos); });
}

namespace {
[[gnu::always_inline]] inline void ffma_uniform_f32_body(const float* x, float b, float c, float* out, std::size_t n,
                                                         bool ftz) {
  // The flush as a mask on the encoding (exponent field 0: zero or subnormal, kept as its
  // sign), so that the loop has no branch.
  const std::uint32_t keep_subnormal = ftz ? 0u : 0x7fffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t r = std::bit_cast<std::uint32_t>(std::fma(x[i], b, c));
    const std::uint32_t mask = (r & 0x7f800000u) == 0 ? 0x80000000u | keep_subnormal : 0xffffffffu;
    out[i] = std::bit_cast<float>(r & mask);
  }
}
#ifdef FLASHBITS_LANES_MULTIVERSION
// The ISA sets of emu/array_lanes.hpp with FMA, which std::fma needs to be an instruction.
[[gnu::target("avx2,fma")]] void ffma_uniform_f32_avx2(const float* x, float b, float c, float* out, std::size_t n,
                                                       bool ftz) {
  ffma_uniform_f32_body(x, b, c, out, n, ftz);
}
[[gnu::target("avx2,fma,avx512f,avx512vl,avx512bw,avx512dq")]] void ffma_uniform_f32_avx512(const float* x, float b,
                                                                                            float c, float* out,
                                                                                            std::size_t n, bool ftz) {
  ffma_uniform_f32_body(x, b, c, out, n, ftz);
}
bool cpu_has_fma() {
  static const bool fma = __builtin_cpu_supports("fma");
  return fma;
}
#endif
}  // namespace

void ffma_uniform_f32_array(const float* x, float b, float c, float* out, std::size_t n, bool ftz) {
#ifdef FLASHBITS_LANES_MULTIVERSION
  if (cpu_has_fma()) {
    switch (lane_isa()) {
      case LaneIsa::avx512:
        return ffma_uniform_f32_avx512(x, b, c, out, n, ftz);
      case LaneIsa::avx2:
        return ffma_uniform_f32_avx2(x, b, c, out, n, ftz);
      case LaneIsa::baseline:
        break;
    }
  }
#endif
  ffma_uniform_f32_body(x, b, c, out, n, ftz);
}

}  // namespace fb
