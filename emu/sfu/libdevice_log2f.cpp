// emu/sfu/libdevice_log2f.cpp: libdevice's __nv_log2f as Triton links it (the header has the
// sequence).
#include "emu/sfu/libdevice_log2f.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

namespace fb {
namespace {
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

// fma.rn.ftz.f32: subnormal operands and a subnormal result are flushed to zero of their sign.
float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
float fma_ftz(float a, float b, float c) { return flush(std::fma(flush(a), flush(b), flush(c))); }
}  // namespace

float libdevice_log2f(float x) {
  // The host's float operations are IEEE binary32, round to nearest even, subnormals kept, as
  // the PTX's .rn operations without .ftz; std::fma on floats is one rounding.
  const bool small = x < from_bits(0x00800000u);
  const float x1 = small ? x * from_bits(0x4B000000u) : x;
  const float e0 = small ? -23.0f : 0.0f;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x1);
  const std::uint32_t t = (bits - 0x3F3504F3u) & 0xFF800000u;
  const float m = from_bits(bits - t);
  const float e = fma_ftz(static_cast<float>(static_cast<std::int32_t>(t)), from_bits(0x34000000u), e0);
  const float f = m - 1.0f;
  float p = fma_ftz(from_bits(0x3DC6B27Fu), f, from_bits(0xBE2C7F30u));
  for (std::uint32_t c :
       {0x3E2FCF2Au, 0xBE374E43u, 0x3E520BF4u, 0xBE763C8Bu, 0x3E93BF99u, 0xBEB8AA49u, 0x3EF6384Au, 0xBF38AA3Bu})
    p = fma_ftz(p, f, from_bits(c));
  float q = f * p;
  q = f * q;
  const float r = fma_ftz(f, from_bits(0x3FB8AA3Bu), q);
  float y = e + r;
  if (!(bits < 0x7F800000u)) {
    const float inf = std::numeric_limits<float>::infinity();
    y = fma_ftz(x1, inf, inf);
  }
  return x1 == 0.0f ? -std::numeric_limits<float>::infinity() : y;
}

}  // namespace fb
