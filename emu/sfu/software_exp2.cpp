// emu/sfu/software_exp2.cpp: FlashAttention-4's software exp2 (contract in software_exp2.hpp).
#include "emu/sfu/software_exp2.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

#include "emu/ops.hpp"
#include "formats/format.hpp"

namespace fb {

float fa4_software_ex2(float x) {
  constexpr float kRoundInt = 12582912.0f;  // 0x1.8p23 = 2^23 + 2^22
  // .ftz: a subnormal input is flushed to a zero of its sign before anything else.
  if (std::fpclassify(x) == FP_SUBNORMAL) x = std::copysign(0.0f, x);
  const float clamped = std::isnan(x) ? -127.0f : std::fmax(x, -127.0f);
  // add.rm: the one directed rounding of the sequence, through the emulator's round-and-pack.
  RoundingSpec down;
  down.mode = RoundingMode::rdn;
  const std::uint32_t rounded =
      add(formats::fp32, std::bit_cast<std::uint32_t>(clamped), std::bit_cast<std::uint32_t>(kRoundInt), down).bits;
  // Host float arithmetic is IEEE binary32 with round to nearest even: sub.rn and fma.rn.
  const float rounded_back = std::bit_cast<float>(rounded) - kRoundInt;
  const float frac = clamped - rounded_back;
  const float poly = std::fma(std::fma(std::fma(kFa4Ex2C3, frac, kFa4Ex2C2), frac, kFa4Ex2C1), frac, 1.0f);
  return std::bit_cast<float>((rounded << 23) + std::bit_cast<std::uint32_t>(poly));
}

bool fa4_software_ex2_uses_polynomial(int column, int tile_columns, int every, int start_fragment,
                                      int pairs_per_period) {
  if (every <= 0) return false;
  constexpr int kFragment = 32;
  const int fragment = column / kFragment, fragments = tile_columns / kFragment;
  const int pair = (column % kFragment) & ~1;
  if (fragment >= fragments - 1 || fragment < start_fragment) return false;
  return pair % every >= every - pairs_per_period;
}

}  // namespace fb
