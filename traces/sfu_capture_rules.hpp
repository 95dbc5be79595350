// traces/sfu_capture_rules.hpp: the entries of an FBSFUT1 table (traces/README.md "FBSFUT1"), the table fb-sfu-probe
// captures on a GPU: computed per key by fb-sfu-probe's table_delta_kernel on the device and by the host writer
// (traces/sfu_capture_writer.hpp sfu_table_deltas) alike, so this header is host and device code (plain C++ when not
// compiled by nvcc). The table rules it builds on are emu/sfu/sfu_table_rules.hpp, visible here in fb::gpu.
//
// Contract:
// sfu_round_reference(r, uncertain): fp32 RNE of a double approximation r of an exact value,
// `uncertain` set when r lies within 2^-49 (relative) of an fp32 rounding boundary (the double
// evaluation's error bound does not prove the rounding); fb-sfu-probe's reference for all its
// comparisons.
// sfu_table_delta(fn, N, sign_magnitude, j, value): the FBSFUT1 entry of table key j holding
// `value` (fn: kSfuTableEx2, kSfuTableRcp, kSfuTableLg2): value minus the bits of the correctly
// rounded value at the key (ex2: 2^(j / 2^N); sign magnitude: 2^(j / 2^N) for j < 2^N,
// 2^(-(j - 2^N) / 2^N) above; rcp: 1 / (1 + j 2^-23); lg2: lg2(1 + j 2^-23)), in ulps, escaped
// when outside -7..7 or when the double reference is uncertain.
#pragma once

#include <cmath>
#include <cstdint>

#include "emu/sfu/sfu_table_rules.hpp"

namespace fb::gpu {

// The shared table rules under the names the device code and tests use.
using namespace fb::sfu_rules;

// Function numbering of the FBSFUT1 writers (fb-sfu-probe's Fn: ex2, rcp, lg2 first).
enum SfuTableFunction : int { kSfuTableEx2 = 0, kSfuTableRcp = 1, kSfuTableLg2 = 2 };
// The delta that marks an escaped entry, and a key no input set (fb-sfu-probe's kEmpty).
constexpr int kSfuTableEscape = -8;
constexpr std::uint32_t kSfuTableUnfilled = 0xffffffffu;

FB_HD inline bool sfu_isfinite(double v) {
#ifdef __CUDA_ARCH__
  return isfinite(v);
#else
  return std::isfinite(v);
#endif
}
FB_HD inline bool sfu_isfinite(float v) {
#ifdef __CUDA_ARCH__
  return isfinite(v);
#else
  return std::isfinite(v);
#endif
}

FB_HD inline float sfu_round_reference(double r, bool& uncertain) {
  uncertain = false;
  const float f = static_cast<float>(r);  // RNE
  if (!sfu_isfinite(r) || r == 0.0 || !sfu_isfinite(f) || f == 0.f) return f;
  const float toward = static_cast<double>(f) < r ? nextafterf(f, INFINITY) : nextafterf(f, -INFINITY);
  if (!sfu_isfinite(toward)) return f;
  const double boundary = 0.5 * (static_cast<double>(f) + static_cast<double>(toward));
  uncertain = fabs(r - boundary) <= fabs(r) * 0x1p-49;
  return f;
}

struct SfuTableDelta {
  int delta;       // -7..7, or kSfuTableEscape
  bool uncertain;  // escaped because the double reference was too close to a rounding boundary
};
FB_HD inline SfuTableDelta sfu_table_delta(int fn, int nbits, bool sign_magnitude, std::uint32_t j,
                                           std::uint32_t value) {
  bool uncertain = false;
  const std::uint32_t half = 1u << nbits;
  const double frac = ldexp(static_cast<double>(sign_magnitude ? j % half : j), -nbits);  // in [0,1)
  const double arg = sign_magnitude && j >= half ? -frac : frac;
  const float ref = sfu_round_reference(fn == kSfuTableEx2   ? exp2(arg)
                                        : fn == kSfuTableRcp ? 1.0 / (1.0 + frac)
                                                             : log2(1.0 + frac),
                                        uncertain);
  const long long d = static_cast<long long>(value) - static_cast<long long>(sfu_bits(ref));
  if (uncertain || d < -7 || d > 7) return {kSfuTableEscape, uncertain};
  return {static_cast<int>(d), false};
}

}  // namespace fb::gpu
