// gpu/sfu_table_model.hpp: fb-sfu-probe's table analysis on top of the table models. The
// models themselves (ex2_table_model, rcp_table_model, lg2_exponent_split_model,
// lg2_table_model, ex2_sign_magnitude_table_model, lg2_extended_model,
// lg2_extended_table_model, the splits that key the hypotheses, ArgRounding,
// FinalRoundingCode) are stated once in emu/sfu/sfu_table_rules.hpp, which the emulator's table
// models use too; they are visible here in fb::gpu, where the device code and the tests name
// them. The FBSFUT1 entries (sfu_round_reference, sfu_table_delta) are
// traces/sfu_capture_rules.hpp, included here.
//
// Contract of what this header adds (host and device):
// lg2_interval / lg2_representative: the `--lg2-extended` interval analysis (below).
// Plain C++ when not compiled by nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "emu/sfu/sfu_table_rules.hpp"
#include "traces/sfu_capture_rules.hpp"

namespace fb::gpu {

// The shared table rules under the names the device code and tests use.
using namespace fb::sfu_rules;

// ---- lg2 extended: fb-sfu-probe's interval analysis (host and device) -----------------------
// For a positive normal x = 2^e * 1.m whose hardware result has bits r_bits, lg2_interval gives
// the closed interval [lo, hi] of L (in units of 2^-60, int64) such that `rounding` (a
// FinalRoundingCode) of the exact e + L gives r_bits (lg2_extended_model's rounding; an empty
// interval, lo > hi, for a NaN or infinite result). Bounds are rounded inward to the units
// (exact for |L| >= 2^-37) and clamped to +-3 (L is near [0, 1)). A zero result gives L = -e.
constexpr long long kLg2UnitCap = 3ll << 60;

FB_HD inline void sfu_two_sum(double a, double b, double& s, double& t) {
  s = a + b;  // additions only: no contraction
  const double bb = s - a;
  t = (a - (s - bb)) + (b - bb);
}
// floor / ceil of (a + b) * 2^60 for the exact pair (a, b) of a two_sum, clamped to +-3.
FB_HD inline long long lg2_units_floor(double a, double b) {
  if (a >= 3.0) return kLg2UnitCap;
  if (a <= -3.0) return -kLg2UnitCap;
  const double A = ldexp(a, 60), B = ldexp(b, 60);
  const double fa = floor(A);  // A non-integer: |B| <= ulp(A) / 2 cannot move A + B past an integer
  return fa != A ? static_cast<long long>(fa) : static_cast<long long>(A) + static_cast<long long>(floor(B));
}
FB_HD inline long long lg2_units_ceil(double a, double b) {
  if (a >= 3.0) return kLg2UnitCap;
  if (a <= -3.0) return -kLg2UnitCap;
  const double A = ldexp(a, 60), B = ldexp(b, 60);
  const double ca = ceil(A);
  return ca != A ? static_cast<long long>(ca) : static_cast<long long>(A) + static_cast<long long>(ceil(B));
}

FB_HD inline void lg2_interval(int e, std::uint32_t r_bits, int rounding, long long& lo, long long& hi) {
  const float r = sfu_float(r_bits);
  if ((r_bits & kFp32ExpMask) == kFp32ExpMask) {
    lo = kLg2UnitCap, hi = -kLg2UnitCap;
    return;
  }
  if (r == 0.f) {  // e + L rounds to zero: L = -e (e + L is never in (0, 2^-126) with ftz flushing it)
    lo = hi = (e >= -2 && e <= 2) ? -static_cast<long long>(e) * (1ll << 60) : kLg2UnitCap;
    if (lo == kLg2UnitCap) hi = -kLg2UnitCap;
    return;
  }
  const double rd = r, below = nextafterf(r, -INFINITY), above = nextafterf(r, INFINITY);
  double lb, ub;  // e + L in [lb, ub], ends closed or open
  bool lb_closed, ub_closed;
  if (rounding == kFinalNearestEven) {
    lb = 0.5 * (below + rd), ub = 0.5 * (rd + above);  // exact
    lb_closed = ub_closed = (r_bits & 1u) == 0;
  } else if (rounding == kFinalDown || (rounding == kFinalTowardZero && r > 0.f)) {
    lb = rd, ub = above, lb_closed = true, ub_closed = false;
  } else {  // up, or toward zero for a negative result
    lb = below, ub = rd, lb_closed = false, ub_closed = true;
  }
  double s, t;
  sfu_two_sum(lb, -static_cast<double>(e), s, t);
  lo = lb_closed ? lg2_units_ceil(s, t) : lg2_units_floor(s, t) + 1;
  sfu_two_sum(ub, -static_cast<double>(e), s, t);
  hi = ub_closed ? lg2_units_floor(s, t) : lg2_units_ceil(s, t) - 1;
}

FB_HD inline long long sfu_floor_div(long long a, long long b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// The representative of [lo, hi] (units 2^-60) written into an lg2_extended table:
// L = T + R * ulp(T) * 2^-g with the fewest guard bits g (0..24), then R nearest 0. False when
// none exists (or T is NaN or infinite). For |T| < 2^-37 (finer than the units) only R = 0.
FB_HD inline bool lg2_representative(std::uint32_t t_bits, long long lo, long long hi, int& g_out, long long& r_out) {
  if ((t_bits & kFp32ExpMask) == kFp32ExpMask || lo > hi) return false;
  const std::uint32_t biased = (t_bits >> 23) & 0xffu;
  const int ue = static_cast<int>(biased > 1 ? biased : 1u) - 150;  // ulp(T) = 2^ue
  const long long q = (biased == 0 ? 0ll : 1ll << 23) | static_cast<long long>(t_bits & kFp32ManMask);
  const long long signed_q = (t_bits >> 31) ? -q : q;
  if (ue + 60 < 0) {
    const double a = ldexp(static_cast<double>(signed_q), ue + 60);
    if (!(static_cast<double>(lo) <= a && a <= static_cast<double>(hi))) return false;
    g_out = 0, r_out = 0;
    return true;
  }
  if (ue + 60 > 38) return false;  // |T| >= 2: outside the analysis
  const long long tu = signed_q * (1ll << (ue + 60));
  const int g_max = ue + 60 < 24 ? ue + 60 : 24;
  for (int g = 0; g <= g_max; ++g) {
    const long long step = 1ll << (ue + 60 - g);
    const long long jlo = -sfu_floor_div(-(lo - tu), step), jhi = sfu_floor_div(hi - tu, step);
    if (jlo > jhi) continue;
    g_out = g;
    r_out = jlo > 0 ? jlo : jhi < 0 ? jhi : 0;
    return true;
  }
  return false;
}

}  // namespace fb::gpu
