// emu/sfu/cuda_expf.cpp: the PTX sequence of CUDA's expf (contract in emu/sfu/cuda_expf.hpp).
#include "emu/sfu/cuda_expf.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

#include "emu/ops.hpp"
#include "formats/format.hpp"

namespace fb {

float cuda_expf(float x, const SpecialFunctionModel& ex2_ftz) {
  const auto from_bits = [](std::uint32_t b) { return std::bit_cast<float>(b); };
  // std::fmaf and float * float are IEEE fp32 operations rounded to nearest even with
  // subnormals kept, as fma.rn.f32 and mul.rn.f32 without .ftz are.
  const float t = std::fmaf(x, from_bits(0x3BBB989Du), 0.5f);
  const float u = std::isnan(t) ? 0.0f : std::fmin(std::fmax(t, 0.0f), 1.0f);  // cvt.sat.f32.f32
  // fma.rm: the one rounding routine, toward -inf.
  RoundingSpec down;
  down.mode = RoundingMode::rdn;
  const std::uint32_t j_bits =
      fma(formats::fp32, std::bit_cast<std::uint32_t>(u), std::bit_cast<std::uint32_t>(252.0f), 0x4B400001u, down).bits;
  const float j = from_bits(j_bits);
  const float r = -(j + from_bits(0xCB40007Fu));  // exact: both integers below 2^24
  float a = std::fmaf(x, from_bits(0x3FB8AA3Bu), r);
  a = std::fmaf(x, from_bits(0x32A57060u), a);
  const float scale = from_bits(j_bits << 23);
  return ex2_ftz.evaluate(a) * scale;
}

}  // namespace fb
