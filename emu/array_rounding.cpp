// emu/array_rounding.cpp: fp32 array rounding (round_array, see array_rounding.hpp):
// array loops around round_pack_lane / round_pack. The batched add, mul, fma are in
// emu/array_ops.cpp; what both share (ISA choice, key spans) in emu/array_lanes.hpp.
#include "emu/array_rounding.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

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
template <Format F, RoundingMode Mode, bool WithFlags>
[[gnu::always_inline]] inline void round_array_lanes_body(const float* in, std::uint32_t* out_bits, std::size_t n,
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
    std::uint32_t* chunk_out = out_bits + start;
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
      chunk_out[j] = round_pack_lane<F, Mode, 23>(negative, exponent, significand, spec, random32, flags);
      const std::uint32_t special = static_cast<std::uint32_t>(exponent == 0xff - 150);  // inf, NaN
      if constexpr (WithFlags) chunk_flags |= flags & (special - 1u);
      any_special |= special;
    }
    if (any_special) {
      for (std::size_t i = start; i < start + m; ++i) {
        if ((in_bits[i] & 0x7f800000u) == 0x7f800000u) {
          const Rounded r = convert(F, formats::fp32, in_bits[i], spec_in, first_position + i);
          out_bits[i] = r.bits;
          if constexpr (WithFlags) chunk_flags |= r.flags;
        }
      }
    }
    all_flags |= chunk_flags;
  }
  if (flags_out) *flags_out = static_cast<Flags>(all_flags);
}

#ifdef FLASHBITS_LANES_MULTIVERSION
template <Format F, RoundingMode Mode, bool WithFlags>
[[FLASHBITS_TARGET_AVX2]] void round_array_lanes_avx2(const float* in, std::uint32_t* out_bits, std::size_t n,
                                                      const RoundingSpec& spec, std::uint64_t first_position,
                                                      Flags* flags_out) {
  round_array_lanes_body<F, Mode, WithFlags>(in, out_bits, n, spec, first_position, flags_out);
}
template <Format F, RoundingMode Mode, bool WithFlags>
[[FLASHBITS_TARGET_AVX512]] void round_array_lanes_avx512(const float* in, std::uint32_t* out_bits, std::size_t n,
                                                          const RoundingSpec& spec, std::uint64_t first_position,
                                                          Flags* flags_out) {
  round_array_lanes_body<F, Mode, WithFlags>(in, out_bits, n, spec, first_position, flags_out);
}
using array_lanes::lane_isa;
using array_lanes::LaneIsa;
#endif
using array_lanes::for_each_key_span;

template <Format F, RoundingMode Mode, bool WithFlags>
void round_array_lanes(const float* in, std::uint32_t* out_bits, std::size_t n, const RoundingSpec& spec,
                       std::uint64_t first_position, Flags* flags_out) {
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

template <Format F>
void dispatch_lanes(const float* in, std::uint32_t* out_bits, std::size_t n, const RoundingSpec& spec,
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
  auto run = [&](const auto& source) { dispatch_mode(source, in, out_bits, n, spec, first_position, flags_out); };
  auto lanes = [&]<Format F>() { dispatch_lanes<F>(in, out_bits, n, spec, first_position, flags_out); };
  if (to == formats::bf16) return lanes.template operator()<formats::bf16>();
  if (to == formats::fp16) return lanes.template operator()<formats::fp16>();
  if (to == formats::e4m3) return lanes.template operator()<formats::e4m3>();
  if (to == formats::e5m2) return lanes.template operator()<formats::e5m2>();
  if (to == formats::e2m1) return lanes.template operator()<formats::e2m1>();
  run(RuntimeFormat{to});
}
}  // namespace fb
