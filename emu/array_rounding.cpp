// emu/array_rounding.cpp: fp32 array rounding (round_array, see array_rounding.hpp):
// array loops around round_pack_lane / round_pack. The batched add, mul, fma are in
// emu/array_ops.cpp; what both share (ISA choice, key spans) in emu/array_lanes.hpp.
#include "emu/array_rounding.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "emu/array_lanes.hpp"
#include "emu/ops.hpp"

namespace fb {
namespace {

// One element: the fp32 decode from the format table, then the one rounding routine.
// FormatSource is FixedFormat<F> (facts folded) or RuntimeFormat.
// flatten: inline the whole routine (format facts included) into the loop, so the
// compiler folds the compile-time format; GCC's size heuristics stop short otherwise.
// Used for formats without a compiled-in lane loop; it stays scalar (round_pack
// normalises with countl_zero and 64-bit shifts): about 3-5 ns per element.
template <class FormatSource, RoundingMode Mode>
[[gnu::flatten]] void round_array_loop(const FormatSource& source, const float* in, std::uint32_t* out_bits,
                                       std::size_t n, const RoundingSpec& spec_in, std::uint64_t first_position,
                                       Flags* flags_out) {
  // A local copy whose mode is a constant lets the compiler drop the mode switch;
  // it must not escape (convert gets spec_in), or the compiler reloads it.
  const RoundingSpec spec{Mode, spec_in.overflow, spec_in.sr_bits, spec_in.seed};
  const Format& to = source.format();
  Flags all_flags = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(in[i]);
    const Decoded d = decode(formats::fp32, bits);
    Rounded r;
    if (d.cls == ValueClass::normal || d.cls == ValueClass::subnormal) [[likely]] {
      r = round_pack_inline(to, d.negative, d.exponent - formats::fp32.man_bits, d.significand, false, spec,
                            first_position + i, nullptr);
    } else {
      r = convert(to, formats::fp32, bits, spec_in, first_position + i);
    }
    out_bits[i] = r.bits;
    all_flags |= r.flags;
  }
  if (flags_out) *flags_out = all_flags;
}

// Inputs whose exponent field is all ones (infinities, NaNs) were run through a lane
// routine as stand-ins; fb::convert redoes them here, in a scalar pass over the
// (cache-resident) chunk [start, start + m) that held one: real tensors rarely do.
template <Format F, bool WithFlags, class Out>
void redo_specials(const std::uint32_t* in_bits, Out* out_bits, std::size_t start, std::uint32_t m,
                   const RoundingSpec& spec, std::uint64_t first_position, std::uint32_t& chunk_flags,
                   std::uint32_t any_special) {
  if (!any_special) return;
  for (std::size_t i = start; i < start + m; ++i) {
    if ((in_bits[i] & 0x7f800000u) == 0x7f800000u) {
      const Rounded r = convert(F, formats::fp32, in_bits[i], spec, first_position + i);
      out_bits[i] = static_cast<Out>(r.bits);
      if constexpr (WithFlags) chunk_flags |= r.flags;
    }
  }
}

// Formats that keep fp32's exponent field and bias (bf16): there, rounding needs no
// decode. Cutting an fp32 encoding's low fraction bits leaves F's encoding of the
// value truncated toward zero, subnormals included (both formats put them at exponent
// field 0 under 2^-126), and adding one to that encoding gives the next magnitude up:
// a carry out of the fraction moves into the next binade, and out of the largest
// finite value into the infinity pattern (overflow under the ieee policy). So a
// rounding here is the kept encoding plus round_up_decision, the mode rule that
// round_pack and round_pack_lane share (emu/rounding.hpp), or for rto the kept LSB
// forced to one when inexact; satfinite turns a carry into infinity back into the
// largest finite value. Flags-free path only (overflow and underflow flags would need
// the exponent); not for sr, whose random bits come by position in round_pack_lane.
// Same bits as round_pack_lane: tests/test_array_rounding.cpp checks both against MPFR.
template <Format F, RoundingMode Mode>
constexpr bool rounds_on_the_encoding() {
  const bool fp32_exponent_field = F.exp_bits == formats::fp32.exp_bits && F.bias == formats::fp32.bias;
  const bool fp32_layout = F.has_inf() && F.is_signed && F.storage_shift() == 0;
  return fp32_exponent_field && fp32_layout && F.man_bits < formats::fp32.man_bits && Mode != RoundingMode::sr;
}

template <Format F, RoundingMode Mode, bool Saturate>
[[gnu::always_inline]] inline std::uint32_t round_fp32_encoding(std::uint32_t bits) {
  constexpr int kDropped = formats::fp32.man_bits - F.man_bits;
  constexpr std::uint32_t kLowMask = (1u << kDropped) - 1u, kStickyMask = kLowMask >> 1;
  const std::uint32_t negative = bits >> 31;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  const std::uint32_t kept = magnitude >> kDropped;
  std::uint32_t result;
  if constexpr (Mode == RoundingMode::rto) {
    result = kept | (((magnitude & kLowMask) + kLowMask) >> kDropped);  // 1 iff any dropped bit is set
  } else {
    const std::uint32_t round_bit = (magnitude >> (kDropped - 1)) & 1u;
    const std::uint32_t sticky = ((magnitude & kStickyMask) + kStickyMask) >> (kDropped - 1);  // 0 or 1
    result = kept + detail::round_up_decision<std::uint32_t>(Mode, negative, kept & 1u, round_bit, sticky, 0u);
  }
  if constexpr (Saturate) result -= static_cast<std::uint32_t>(result == F.inf_pattern());
  return (negative << (F.exp_bits + F.man_bits)) | result;
}

// The compiled-in formats: every element through round_pack_lane (round_pack over
// 32-bit lanes, emu/rounding.hpp), in a loop without branches that GCC vectorises.
// Zeros need nothing special; infinities and NaNs (exponent field all ones) run
// through the lane routine as stand-ins, are left out of the flags, and are then
// redone by fb::convert, whose bits and flags they must have, in a scalar pass over
// the (cache-resident) chunk that held them: real tensors rarely hold any, so the
// vector loop carries no selects for them. Compiled three times: for AVX-512 (VL,
// BW, DQ: 8 lanes still, but 32 vector registers instead of 16, which removes most
// spills), for AVX2, and for the baseline target, the best the CPU has being
// chosen at run time (lane_isa); all compute the same integers.
// WithFlags false is the flags-free path (round_array with flags_out null, what
// most callers use): the flags round_pack_lane computes are never read, so the
// compiler drops them and their OR-reduction; the bits are the same integers.
template <Format F, RoundingMode Mode, bool WithFlags, class Out>
[[gnu::always_inline]] inline void round_array_lanes_body(const float* in, Out* out_bits, std::size_t n,
                                                          const RoundingSpec& spec_in, std::uint64_t first_position,
                                                          Flags* flags_out) {
  const RoundingSpec spec{Mode, spec_in.overflow, spec_in.sr_bits, spec_in.seed};
  // stochastic_bits(seed, position) with its key hoisted out of the loop (the
  // caller splits arrays where the position's high word changes).
  const StochasticKey key = stochastic_key(spec.seed, static_cast<std::uint32_t>(first_position >> 32));
  const std::uint32_t position_low = static_cast<std::uint32_t>(first_position);
  std::uint32_t all_flags = 0;
  const std::uint32_t* in_bits = reinterpret_cast<const std::uint32_t*>(in);
  constexpr std::size_t kChunk = 1024;
  for (std::size_t start = 0; start < n; start += kChunk) {
    // 32-bit lane indices and positions: a 64-bit induction variable would make
    // the vectoriser widen and narrow it in every iteration.
    const std::uint32_t m = static_cast<std::uint32_t>(n - start < kChunk ? n - start : kChunk);
    const std::uint32_t* chunk_in = in_bits + start;
    Out* chunk_out = out_bits + start;
    const std::uint32_t chunk_position = position_low + static_cast<std::uint32_t>(start);
    // sr's draws for the chunk first, in a loop of their own: fused into the
    // rounding loop, the hash's constants push GCC's register allocator into
    // rebuilding and spilling constants in every iteration.
    [[maybe_unused]] std::uint32_t random[Mode == RoundingMode::sr ? kChunk : 1];
    if constexpr (Mode == RoundingMode::sr) {
      for (std::uint32_t j = 0; j < m; ++j) random[j] = stochastic_bits_keyed(key, chunk_position + j);
    }
    // fp32 decode without selects: the implicit bit and exponent field 0 read as 1.
    auto decode_fp32 = [](std::uint32_t bits, std::uint32_t& significand, std::int32_t& exponent) {
      const std::uint32_t exp_field = (bits >> 23) & 0xffu;
      significand = (bits & 0x7fffffu) | (std::min(exp_field, 1u) << 23);
      exponent = static_cast<std::int32_t>(std::max(exp_field, 1u)) - 150;
    };
    // Formats with emin above fp32's: the decode in a loop of its own (fewer live
    // values in the rounding loop, fewer AVX2 spills). bf16 (fp32's emin) keeps it
    // fused, where the compiler sees that every fp32 input keeps bits down to the
    // same quantum, and the number of bits dropped is a constant.
    constexpr bool kSplitDecode = F.emin() > formats::fp32.emin();
    [[maybe_unused]] std::uint32_t decoded_significand[kSplitDecode ? kChunk : 1];
    [[maybe_unused]] std::int32_t decoded_exponent[kSplitDecode ? kChunk : 1];
    if constexpr (kSplitDecode) {
      for (std::uint32_t j = 0; j < m; ++j) {
        std::uint32_t bits;
        std::memcpy(&bits, chunk_in + j, sizeof bits);
        decode_fp32(bits, decoded_significand[j], decoded_exponent[j]);
      }
    }
    std::uint32_t chunk_flags = 0, any_special = 0;
    if constexpr (!WithFlags && rounds_on_the_encoding<F, Mode>()) {
      // bf16 without flags: rounding on the fp32 encoding (round_fp32_encoding).
      // special_sum's bit 31 ends up set iff some exponent field is all ones.
      std::uint32_t special_sum = 0;
      auto round_chunk = [&]<bool Saturate>() {
        for (std::uint32_t j = 0; j < m; ++j) {
          std::uint32_t bits;
          std::memcpy(&bits, chunk_in + j, sizeof bits);
          chunk_out[j] = static_cast<Out>(round_fp32_encoding<F, Mode, Saturate>(bits));
          special_sum |= (bits & 0x7f800000u) + 0x00800000u;
        }
      };
      if (spec.overflow == OverflowPolicy::satfinite) {
        round_chunk.template operator()<true>();
      } else {
        round_chunk.template operator()<false>();
      }
      redo_specials<F, false>(in_bits, out_bits, start, m, spec_in, first_position, chunk_flags, special_sum >> 31);
      continue;
    }
    // Narrow containers: rounded into 32-bit lanes in L1 first, then narrowed in a loop
    // of its own (narrowing inside the rounding loop vectorises badly).
    [[maybe_unused]] std::uint32_t rounded_buffer[std::is_same_v<Out, std::uint32_t> ? 1 : kChunk];
    std::uint32_t* rounded;
    if constexpr (std::is_same_v<Out, std::uint32_t>) {
      rounded = chunk_out;
    } else {
      rounded = rounded_buffer;
    }
    for (std::uint32_t j = 0; j < m; ++j) {
      std::uint32_t bits;
      std::memcpy(&bits, chunk_in + j, sizeof bits);
      const std::uint32_t negative = bits >> 31;
      std::uint32_t significand;
      std::int32_t exponent;
      if constexpr (kSplitDecode) {
        significand = decoded_significand[j];
        exponent = decoded_exponent[j];
      } else {
        decode_fp32(bits, significand, exponent);
      }
      std::uint32_t random32 = 0;
      if constexpr (Mode == RoundingMode::sr) random32 = random[j];
      // Zeros go through the routine too (it gives the signed zero, no flag).
      std::uint32_t flags;
      // Lead 23: fp32 normals have their leading bit there; subnormals and zeros
      // (exponent -149) lie below every lane format's 2^emin (emin >= -126).
      rounded[j] = round_pack_lane<F, Mode, 23>(negative, exponent, significand, spec, random32, flags);
      const std::uint32_t special = static_cast<std::uint32_t>(exponent == 0xff - 150);  // inf, NaN
      if constexpr (WithFlags) chunk_flags |= flags & (special - 1u);
      any_special |= special;
    }
    if constexpr (!std::is_same_v<Out, std::uint32_t>) {
      for (std::uint32_t j = 0; j < m; ++j) chunk_out[j] = static_cast<Out>(rounded[j]);
    }
    redo_specials<F, WithFlags>(in_bits, out_bits, start, m, spec_in, first_position, chunk_flags, any_special);
    all_flags |= chunk_flags;
  }
  if (flags_out) *flags_out = static_cast<Flags>(all_flags);
}

#ifdef FLASHBITS_LANES_MULTIVERSION
template <Format F, RoundingMode Mode, bool WithFlags, class Out>
[[FLASHBITS_TARGET_AVX2]] void round_array_lanes_avx2(const float* in, Out* out_bits, std::size_t n,
                                                      const RoundingSpec& spec, std::uint64_t first_position,
                                                      Flags* flags_out) {
  round_array_lanes_body<F, Mode, WithFlags>(in, out_bits, n, spec, first_position, flags_out);
}
template <Format F, RoundingMode Mode, bool WithFlags, class Out>
[[FLASHBITS_TARGET_AVX512]] void round_array_lanes_avx512(const float* in, Out* out_bits, std::size_t n,
                                                          const RoundingSpec& spec, std::uint64_t first_position,
                                                          Flags* flags_out) {
  round_array_lanes_body<F, Mode, WithFlags>(in, out_bits, n, spec, first_position, flags_out);
}

// fp16 without flags, in the modes F16C has (nearest even, down, up, toward zero):
// the CPU's own conversion, vcvtps2ph, whose rounding is IEEE 754's and so
// round_pack's (tests/test_array_rounding.cpp checks it against MPFR like every path).
// The mode comes from the instruction's immediate, never from MXCSR; but MXCSR's DAZ
// (denormal inputs read as zero) or FTZ could still apply, so the path is taken only
// while both are clear (f16c_usable). satfinite clamps finite inputs to +-65504 first:
// every finite value beyond the largest fp16 rounds to it or to infinity in every
// mode, and satfinite wants it. Infinities and NaNs are redone by fb::convert.
template <int Immediate, class Out>
[[gnu::target("avx2,f16c")]] void round_fp16_by_f16c(const float* in, Out* out_bits, std::size_t n,
                                                     const RoundingSpec& spec, std::uint64_t first_position) {
  const std::uint32_t* in_bits = reinterpret_cast<const std::uint32_t*>(in);
  const float limit = spec.overflow == OverflowPolicy::satfinite ? 65504.0f : std::numeric_limits<float>::infinity();
  const __m256 upper = _mm256_set1_ps(limit), lower = _mm256_set1_ps(-limit);
  const __m256i exponent_mask = _mm256_set1_epi32(0x7f800000);
  constexpr std::size_t kChunk = 1024;
  for (std::size_t start = 0; start < n; start += kChunk) {
    const std::uint32_t m = static_cast<std::uint32_t>(std::min(kChunk, n - start));
    __m256i special = _mm256_setzero_si256();
    std::uint32_t j = 0;
    for (; j + 8 <= m; j += 8) {
      const __m256 x = _mm256_loadu_ps(in + start + j);
      const __m256i exponent = _mm256_and_si256(_mm256_castps_si256(x), exponent_mask);
      special = _mm256_or_si256(special, _mm256_cmpeq_epi32(exponent, exponent_mask));
      const __m128i half = _mm256_cvtps_ph(_mm256_max_ps(_mm256_min_ps(x, upper), lower), Immediate);
      if constexpr (sizeof(Out) == 2) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out_bits + start + j), half);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_bits + start + j), _mm256_cvtepu16_epi32(half));
      }
    }
    std::uint32_t any_special = static_cast<std::uint32_t>(!_mm256_testz_si256(special, special));
    for (; j < m; ++j) {
      const float x = std::clamp(in[start + j], -limit, limit);
      out_bits[start + j] = static_cast<Out>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), Immediate), 0));
      any_special |= static_cast<std::uint32_t>((in_bits[start + j] & 0x7f800000u) == 0x7f800000u);
    }
    std::uint32_t unused_flags = 0;
    redo_specials<formats::fp16, false>(in_bits, out_bits, start, m, spec, first_position, unused_flags, any_special);
  }
}

// F16C is there, the lane loops may use AVX2 (so FLASHBITS_NO_AVX2 turns this path
// off too), and MXCSR has neither DAZ (bit 6) nor FTZ (bit 15) set: read per call,
// since a caller's library may set them (e.g. PyTorch's set_flush_denormal).
bool f16c_usable() {
  static const bool has_f16c = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1u) != 0;
  }();
  return has_f16c && array_lanes::lane_isa() != array_lanes::LaneIsa::baseline && (_mm_getcsr() & 0x8040u) == 0;
}
using array_lanes::lane_isa;
using array_lanes::LaneIsa;
#endif
using array_lanes::for_each_key_span;

template <Format F, RoundingMode Mode, bool WithFlags, class Out>
void round_array_lanes(const float* in, Out* out_bits, std::size_t n, const RoundingSpec& spec,
                       std::uint64_t first_position, Flags* flags_out) {
#ifdef FLASHBITS_LANES_MULTIVERSION
  if constexpr (F == formats::fp16 && !WithFlags) {
    constexpr int kImmediate = Mode == RoundingMode::rne   ? 0
                               : Mode == RoundingMode::rdn ? 1
                               : Mode == RoundingMode::rup ? 2
                               : Mode == RoundingMode::rtz ? 3
                                                           : -1;
    if constexpr (kImmediate >= 0) {
      if (f16c_usable()) return round_fp16_by_f16c<kImmediate>(in, out_bits, n, spec, first_position);
    }
  }
#endif
  for_each_key_span(n, first_position, flags_out,
                    [&](std::size_t offset, std::size_t count, std::uint64_t position, Flags* span_flags) {
#ifdef FLASHBITS_LANES_MULTIVERSION
                      switch (lane_isa()) {
                        case LaneIsa::avx512:
                          return round_array_lanes_avx512<F, Mode, WithFlags>(in + offset, out_bits + offset, count,
                                                                              spec, position, span_flags);
                        case LaneIsa::avx2:
                          return round_array_lanes_avx2<F, Mode, WithFlags>(in + offset, out_bits + offset, count, spec,
                                                                            position, span_flags);
                        case LaneIsa::baseline:
                          break;
                      }
#endif
                      round_array_lanes_body<F, Mode, WithFlags>(in + offset, out_bits + offset, count, spec, position,
                                                                 span_flags);
                    });
}

template <Format F, class Out>
void dispatch_lanes(const float* in, Out* out_bits, std::size_t n, const RoundingSpec& spec,
                    std::uint64_t first_position, Flags* flags_out) {
  switch (spec.mode) {
#define FB_MODE_CASE(m)                                                                                              \
  case RoundingMode::m:                                                                                              \
    return flags_out ? round_array_lanes<F, RoundingMode::m, true>(in, out_bits, n, spec, first_position, flags_out) \
                     : round_array_lanes<F, RoundingMode::m, false>(in, out_bits, n, spec, first_position, nullptr);
    FB_MODE_CASE(rne)
    FB_MODE_CASE(rna)
    FB_MODE_CASE(rtz)
    FB_MODE_CASE(rup)
    FB_MODE_CASE(rdn)
    FB_MODE_CASE(rto)
    FB_MODE_CASE(sr)
#undef FB_MODE_CASE
  }
}

template <class FormatSource>
void dispatch_mode(const FormatSource& source, const float* in, std::uint32_t* out_bits, std::size_t n,
                   const RoundingSpec& spec, std::uint64_t first_position, Flags* flags_out) {
  switch (spec.mode) {
#define FB_MODE_CASE(m) \
  case RoundingMode::m: \
    return round_array_loop<FormatSource, RoundingMode::m>(source, in, out_bits, n, spec, first_position, flags_out);
    FB_MODE_CASE(rne)
    FB_MODE_CASE(rna)
    FB_MODE_CASE(rtz)
    FB_MODE_CASE(rup)
    FB_MODE_CASE(rdn)
    FB_MODE_CASE(rto)
    FB_MODE_CASE(sr)
#undef FB_MODE_CASE
  }
}

}  // namespace

const char* lane_instruction_set() {
#ifdef FLASHBITS_LANES_MULTIVERSION
  switch (lane_isa()) {
    case LaneIsa::avx512:
      return "avx512";
    case LaneIsa::avx2:
      return "avx2";
    case LaneIsa::baseline:
      break;
  }
#endif
  return "baseline";
}

void round_array(const Format& to, const float* in, std::uint32_t* out_bits, std::size_t n, const RoundingSpec& spec,
                 std::uint64_t first_position, Flags* flags_out) {
  // The formats that carry real tensors get a loop compiled for them; others share
  // one loop that reads the format at run time (same routine, slower).
  auto lanes = [&]<Format F>() { dispatch_lanes<F>(in, out_bits, n, spec, first_position, flags_out); };
  if (to == formats::bf16) return lanes.template operator()<formats::bf16>();
  if (to == formats::fp16) return lanes.template operator()<formats::fp16>();
  if (to == formats::e4m3) return lanes.template operator()<formats::e4m3>();
  if (to == formats::e5m2) return lanes.template operator()<formats::e5m2>();
  if (to == formats::e2m1) return lanes.template operator()<formats::e2m1>();
  dispatch_mode(RuntimeFormat{to}, in, out_bits, n, spec, first_position, flags_out);
}

namespace {
// The narrow-container overloads: the compiled-in formats of that container width write
// it directly; any other format of that width goes through uint32 chunks.
template <class Out, Format... Direct>
void round_array_narrow(const Format& to, const float* in, Out* out_bits, std::size_t n, const RoundingSpec& spec,
                        std::uint64_t first_position, Flags* flags_out) {
  constexpr int kBits = 8 * static_cast<int>(sizeof(Out));
  if (to.container_bits != kBits) {
    throw std::invalid_argument(std::string("round_array: format ") + to.name + " has a " +
                                std::to_string(to.container_bits) + "-bit container, not " + std::to_string(kBits));
  }
  bool done = false;
  ((!done && to == Direct ? (dispatch_lanes<Direct>(in, out_bits, n, spec, first_position, flags_out), done = true)
                          : false),
   ...);
  if (done) return;
  Flags all_flags = 0;
  std::uint32_t chunk[1024];
  for (std::size_t start = 0; start < n; start += std::size(chunk)) {
    const std::size_t m = std::min(std::size(chunk), n - start);
    Flags chunk_flags = 0;
    round_array(to, in + start, chunk, m, spec, first_position + start, flags_out ? &chunk_flags : nullptr);
    for (std::size_t i = 0; i < m; ++i) out_bits[start + i] = static_cast<Out>(chunk[i]);
    all_flags |= chunk_flags;
  }
  if (flags_out) *flags_out = all_flags;
}
}  // namespace

void round_array(const Format& to, const float* in, std::uint16_t* out_bits, std::size_t n, const RoundingSpec& spec,
                 std::uint64_t first_position, Flags* flags_out) {
  round_array_narrow<std::uint16_t, formats::bf16, formats::fp16>(to, in, out_bits, n, spec, first_position, flags_out);
}

void round_array(const Format& to, const float* in, std::uint8_t* out_bits, std::size_t n, const RoundingSpec& spec,
                 std::uint64_t first_position, Flags* flags_out) {
  round_array_narrow<std::uint8_t, formats::e4m3, formats::e5m2, formats::e2m1>(to, in, out_bits, n, spec,
                                                                                first_position, flags_out);
}
}  // namespace fb
