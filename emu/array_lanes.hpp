// emu/array_lanes.hpp: internal to emu/array_rounding.cpp, emu/array_ops.cpp and
// emu/sfu/special_functions.cpp (not a public interface): what their vectorised lane loops
// share, the instruction-set choice made once at run time and the split of an array into
// pieces with one stochastic key each. Kept in one place so that every translation unit
// (split for compile time: each is a large set of template instantiations) chooses alike.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "emu/rounding.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define FLASHBITS_LANES_MULTIVERSION 1
#define FLASHBITS_TARGET_AVX2 gnu::target("avx2")
#define FLASHBITS_TARGET_AVX512 gnu::target("avx2,avx512f,avx512vl,avx512bw,avx512dq")
#endif

namespace fb::array_lanes {

// The instruction set the lane loops run with, chosen once from the CPU.
// FLASHBITS_NO_AVX512 (set, any value) caps it at AVX2, FLASHBITS_NO_AVX2 at the
// baseline: how the other builds are tested, and timed, on a machine that has
// more (all compute the same integers).
enum class LaneIsa { baseline, avx2, avx512 };
inline LaneIsa lane_isa() {
#ifdef FLASHBITS_LANES_MULTIVERSION
  static const LaneIsa isa = [] {
    if (!__builtin_cpu_supports("avx2") || std::getenv("FLASHBITS_NO_AVX2") != nullptr) return LaneIsa::baseline;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    if (!avx512 || std::getenv("FLASHBITS_NO_AVX512") != nullptr) return LaneIsa::avx2;
    return LaneIsa::avx512;
  }();
  return isa;
#else
  return LaneIsa::baseline;
#endif
}

// Runs body(offset, count, position, span_flags) over consecutive pieces of [0, n)
// whose positions (first_position + i) share their high 32 bits, so that each
// piece has one stochastic key (stochastic_key); ORs the pieces' flags into
// *flags_out when it is not null.
template <class Body>
void for_each_key_span(std::size_t n, std::uint64_t first_position, Flags* flags_out, Body&& body) {
  Flags all_flags = 0;
  for (std::size_t done = 0; done < n;) {
    const std::uint64_t position = first_position + done;
    const std::uint64_t to_next_key = (std::uint64_t{1} << 32) - (position & 0xffffffffu);
    const std::size_t count = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, to_next_key));
    Flags span_flags = 0;
    body(done, count, position, &span_flags);
    all_flags |= span_flags;
    done += count;
  }
  if (flags_out) *flags_out = all_flags;
}

}  // namespace fb::array_lanes
