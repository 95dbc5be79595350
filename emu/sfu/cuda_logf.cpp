// emu/sfu/cuda_logf.cpp: CUDA's logf without fast math (emu/sfu/cuda_logf.hpp has the sequence).
#include "emu/sfu/cuda_logf.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

namespace fb {
namespace {
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
}  // namespace

float cuda_logf(float x) {
  // The host's float operations are IEEE binary32 with round to nearest even and subnormals
  // kept, as the PTX's .rn operations without .ftz; std::fma on floats is one rounding.
  const bool small = x < from_bits(0x00800000u);
  const float x1 = small ? x * from_bits(0x4B000000u) : x;
  const float e0 = small ? -23.0f : 0.0f;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x1);
  const std::uint32_t t = (bits - 0x3F2AAAABu) & 0xFF800000u;
  const float m = from_bits(bits - t);
  const float e = std::fma(static_cast<float>(static_cast<std::int32_t>(t)), from_bits(0x34000000u), e0);
  const float f = m - 1.0f;
  float p = std::fma(from_bits(0xBE055027u), f, from_bits(0x3E1039F6u));
  for (std::uint32_t c : {0xBDF8CDCCu, 0x3E0F2955u, 0xBE2AD8B9u, 0x3E4CED0Bu, 0xBE7FFF22u, 0x3EAAAA78u, 0xBF000000u})
    p = std::fma(p, f, from_bits(c));
  const float q = f * p;
  const float r = std::fma(q, f, f);
  float y = std::fma(e, from_bits(0x3F317218u), r);
  if (!(bits < 0x7F800000u)) {
    const float inf = std::numeric_limits<float>::infinity();
    y = std::fma(x1, inf, inf);
  }
  return x1 == 0.0f ? -std::numeric_limits<float>::infinity() : y;
}

}  // namespace fb
