// tests/test_tensor_core_amd.cpp: the AMD CDNA1/2/3 MFMA dot-add models
// (emu/dot/tensor_core_amd.hpp).
//
// The reference is written here from MMA-Sim's rules as read from its sources (github
// microsoft/MMA-Sim mmasim/mmasim/amd/sim.py; github peichenxie/MMA-Sim
// src/mmasim/mmasim/arithmetic/fdpa.py tr_fdpa/gtr_fdpa/e_fdpa, ftz_mul_add.py, fma.py), not
// from the implementation: its own decoding of every format's bits, exact values as Boost
// cpp_int multiples of 2^-700, its own IEEE fp32 round-to-nearest-even, its own IEEE add/mul/fma
// with signed-zero rules, and the two-stage floors and truncations on exact integers. Its
// parameters (step sizes, F, F2, which arithmetic) come from the table below, which is checked
// against the presets. Only what MMA-Sim leaves open follows the implementation's stated
// [assumption]s (canonical NaN 0x7fc00000, +0 for an exact-zero fused sum, a short last step
// fuses what is left). Every preset is UNMEASURED: nothing here is checked against hardware.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <boost/multiprecision/cpp_int.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu/dot/tensor_core_amd.hpp"
#include "tests/test_scale.hpp"

namespace {

namespace mp = boost::multiprecision;
using Big = mp::number<mp::cpp_int_backend<1024, 1024, mp::signed_magnitude, mp::unchecked, void>>;
constexpr int kGrid = -700;  // every exact value is an integer multiple of 2^kGrid
constexpr std::uint32_t kNan = 0x7fc00000u, kPosInf = 0x7f800000u, kNegInf = 0xff800000u;

// ---- independent decoding ------------------------------------------------------------
enum class Kind { ieee, fnuz };
struct RefFormat {
  const char* name;
  int ebits, mbits, bias;
  Kind kind;
  int shift;  // tf32: the fp32 register's low 13 bits are not part of the value
  const fb::Format* fmt;
};
const RefFormat kFp32{"fp32", 8, 23, 127, Kind::ieee, 0, &fb::formats::fp32};
const RefFormat kTf32{"tf32", 8, 10, 127, Kind::ieee, 13, &fb::formats::tf32};
const RefFormat kFp16{"fp16", 5, 10, 15, Kind::ieee, 0, &fb::formats::fp16};
const RefFormat kBf16{"bf16", 8, 7, 127, Kind::ieee, 0, &fb::formats::bf16};
const RefFormat kFp8{"e4m3fnuz", 4, 3, 8, Kind::fnuz, 0, &fb::formats::e4m3fnuz};
const RefFormat kBf8{"e5m2fnuz", 5, 2, 16, Kind::fnuz, 0, &fb::formats::e5m2fnuz};

enum class Cls { zero, finite, inf, nan };
struct RefValue {
  Cls cls = Cls::zero;
  bool neg = false;
  std::int64_t mant = 0;  // value = mant * 2^lsb
  int lsb = 0;
  int align = 0;  // leading bit's exponent; the format's emin for subnormals and zeros
};
int emin_of(const RefFormat& f) { return 1 - f.bias; }
std::uint32_t low_mask(int n) { return n >= 32 ? 0xffffffffu : (1u << n) - 1u; }

RefValue ref_decode(const RefFormat& f, std::uint32_t stored) {
  const std::uint32_t bits = stored >> f.shift;
  const int width = 1 + f.ebits + f.mbits;
  const std::uint32_t man = bits & ((1u << f.mbits) - 1), ex = (bits >> f.mbits) & ((1u << f.ebits) - 1);
  RefValue v;
  v.neg = ((bits >> (width - 1)) & 1u) != 0;
  v.align = emin_of(f);
  if (f.kind == Kind::fnuz && (bits & low_mask(width)) == (1u << (width - 1))) {
    v.cls = Cls::nan;
    return v;
  }
  if (f.kind == Kind::ieee && ex == (1u << f.ebits) - 1) {
    v.cls = man == 0 ? Cls::inf : Cls::nan;
    return v;
  }
  if (ex == 0 && man == 0) return v;
  v.cls = Cls::finite;
  v.mant = ex == 0 ? man : (man | (1u << f.mbits));
  v.align = ex == 0 ? emin_of(f) : static_cast<int>(ex) - f.bias;
  v.lsb = v.align - f.mbits;
  return v;
}

Big exact(const RefValue& v) {
  if (v.cls != Cls::finite) return Big(0);
  const Big m = Big(v.mant) << (v.lsb - kGrid);
  return v.neg ? Big(-m) : m;
}
Big abs_big(const Big& v) { return v < 0 ? Big(-v) : v; }
// v rounded toward zero / toward minus infinity to a multiple of 2^g (g >= kGrid).
Big trunc_to(const Big& v, int g) {
  const int s = g - kGrid;
  const Big q = abs_big(v) >> s;
  return v < 0 ? Big(-(q << s)) : Big(q << s);
}
Big floor_to(const Big& v, int g) {
  const int s = g - kGrid;
  if (v >= 0) return Big((v >> s) << s);
  const Big mag = -v;
  Big q = mag >> s;
  if ((q << s) != mag) q += 1;
  return Big(-(q << s));
}
int leading_exponent(const Big& v) { return static_cast<int>(mp::msb(abs_big(v))) + kGrid; }

// IEEE fp32 round to nearest even of a non-zero exact value; overflow gives inf.
std::uint32_t ref_rne_fp32(const Big& v) {
  const bool neg = v < 0;
  const std::uint32_t sign = neg ? 0x80000000u : 0u;
  const Big mag = abs_big(v);
  const int e = std::max(leading_exponent(v), -126);
  int q = e - 23;  // exponent of the result's last bit
  const int s = q - kGrid;
  Big kept = mag >> s;
  const Big rest = mag - (kept << s);
  const Big half = Big(1) << (s - 1);
  if (rest > half || (rest == half && (kept & 1) != 0)) kept += 1;
  auto k = static_cast<std::uint64_t>(kept);
  if (k == (std::uint64_t{1} << 24)) k >>= 1, q += 1;
  if (k == 0) return sign;
  if (k < (1u << 23)) return sign | static_cast<std::uint32_t>(k);  // subnormal (q == -149)
  const int biased = q + 23 + 127;
  if (biased >= 255) return sign | 0x7f800000u;
  return sign | (static_cast<std::uint32_t>(biased) << 23) | (static_cast<std::uint32_t>(k) & 0x7fffffu);
}

// IEEE fp32 operations (round to nearest even), NaN results canonical.
RefValue d32(std::uint32_t bits) { return ref_decode(kFp32, bits); }
std::uint32_t ref_add(std::uint32_t x, std::uint32_t y) {
  const RefValue a = d32(x), b = d32(y);
  if (a.cls == Cls::nan || b.cls == Cls::nan) return kNan;
  if (a.cls == Cls::inf && b.cls == Cls::inf) return a.neg == b.neg ? x : kNan;
  if (a.cls == Cls::inf) return x;
  if (b.cls == Cls::inf) return y;
  const Big s = exact(a) + exact(b);
  if (s == 0) return (a.cls == Cls::zero && b.cls == Cls::zero && a.neg && b.neg) ? 0x80000000u : 0u;
  return ref_rne_fp32(s);
}
// a*b + c (a and b values of any format as RefValue, c fp32 bits), one rounding.
std::uint32_t ref_fma(const RefValue& a, const RefValue& b, std::uint32_t c_bits) {
  const RefValue c = d32(c_bits);
  if (a.cls == Cls::nan || b.cls == Cls::nan || c.cls == Cls::nan) return kNan;
  const bool pneg = a.neg != b.neg;
  const bool pinf = a.cls == Cls::inf || b.cls == Cls::inf, pzero = a.cls == Cls::zero || b.cls == Cls::zero;
  if (pinf && pzero) return kNan;
  if (pinf) {
    if (c.cls == Cls::inf && c.neg != pneg) return kNan;
    return pneg ? kNegInf : kPosInf;
  }
  if (c.cls == Cls::inf) return c_bits;
  Big product = 0;
  if (!pzero) {
    product = Big(a.mant * b.mant) << (a.lsb + b.lsb - kGrid);
    if (pneg) product = -product;
  }
  const Big sum = product + exact(c);
  if (sum == 0) return (pzero && c.cls == Cls::zero && pneg && c.neg) ? 0x80000000u : 0u;
  return ref_rne_fp32(sum);
}
std::uint32_t ref_mul(const RefValue& a, const RefValue& b) { return ref_fma(a, b, 0x80000000u); }  // + (-0): exact

// ---- the models, as the reference reads MMA-Sim ----------------------------------------
enum class Arith { fma, exact, ftz, tr, gtr };
struct RefModel {
  const char* name;
  RefFormat a, b;
  Arith arith;
  int L;  // products per step
  fb::AmdArithmetic expected_kind;
};
// From microsoft/MMA-Sim mmasim/mmasim/amd/sim.py and mmasim/isa/amd.py (L = min(K, L_max)).
const RefModel kRefModels[] = {
    {"cdna1", kFp32, kFp32, Arith::fma, 1, fb::AmdArithmetic::fma_chain},
    {"cdna1", kFp16, kFp16, Arith::exact, 4, fb::AmdArithmetic::exact_step},
    {"cdna1", kBf16, kBf16, Arith::exact, 2, fb::AmdArithmetic::exact_step},
    {"cdna2", kFp32, kFp32, Arith::fma, 1, fb::AmdArithmetic::fma_chain},
    {"cdna2", kFp16, kFp16, Arith::ftz, 4, fb::AmdArithmetic::ftz_pairwise},
    {"cdna2", kBf16, kBf16, Arith::ftz, 2, fb::AmdArithmetic::ftz_pairwise},
    {"cdna2-1k", kBf16, kBf16, Arith::ftz, 4, fb::AmdArithmetic::ftz_pairwise},
    {"cdna3", kFp32, kFp32, Arith::fma, 1, fb::AmdArithmetic::fma_chain},
    {"cdna3", kTf32, kTf32, Arith::tr, 4, fb::AmdArithmetic::two_stage},
    {"cdna3", kFp16, kFp16, Arith::tr, 8, fb::AmdArithmetic::two_stage},
    {"cdna3", kBf16, kBf16, Arith::tr, 8, fb::AmdArithmetic::two_stage},
    {"cdna3-k4", kFp16, kFp16, Arith::tr, 4, fb::AmdArithmetic::two_stage},
    {"cdna3-k4", kBf16, kBf16, Arith::tr, 4, fb::AmdArithmetic::two_stage},
    {"cdna3", kFp8, kFp8, Arith::gtr, 16, fb::AmdArithmetic::grouped_two_stage},
    {"cdna3", kBf8, kBf8, Arith::gtr, 16, fb::AmdArithmetic::grouped_two_stage},
    {"cdna3", kFp8, kBf8, Arith::gtr, 16, fb::AmdArithmetic::grouped_two_stage},
    {"cdna3", kBf8, kFp8, Arith::gtr, 16, fb::AmdArithmetic::grouped_two_stage},
};
constexpr int kF = 24, kF2 = 31;  // fdpa.py MMA_TR_FDPA / MMA_GTR_FDPA(F=24, F2=31)

// Specials of a fused step: NaN, inf*0, +inf with -inf -> NaN; else inf. `overflow`: a finite
// product >= 2^128 in magnitude is an infinity (tr_fdpa).
bool ref_specials(const RefModel& m, std::uint32_t c_bits, const std::uint32_t* a, const std::uint32_t* b, int n,
                  bool overflow, std::uint32_t* out) {
  const RefValue c = d32(c_bits);
  bool nan = c.cls == Cls::nan, pinf = c.cls == Cls::inf && !c.neg, ninf = c.cls == Cls::inf && c.neg;
  for (int i = 0; i < n; ++i) {
    const RefValue x = ref_decode(m.a, a[i]), y = ref_decode(m.b, b[i]);
    const bool neg = x.neg != y.neg;
    if (x.cls == Cls::nan || y.cls == Cls::nan) {
      nan = true;
    } else if (x.cls == Cls::inf || y.cls == Cls::inf) {
      if (x.cls == Cls::zero || y.cls == Cls::zero)
        nan = true;
      else
        (neg ? ninf : pinf) = true;
    } else if (overflow && x.cls == Cls::finite && y.cls == Cls::finite) {
      const Big p = Big(x.mant * y.mant) << (x.lsb + y.lsb - kGrid);
      if (p >= (Big(1) << (128 - kGrid))) (neg ? ninf : pinf) = true;
    }
  }
  if (nan || (pinf && ninf)) return *out = kNan, true;
  if (pinf) return *out = kPosInf, true;
  if (ninf) return *out = kNegInf, true;
  return false;
}

std::uint32_t ref_exact_step(const RefModel& m, std::uint32_t c, const std::uint32_t* a, const std::uint32_t* b,
                             int n) {
  std::uint32_t special = 0;
  if (ref_specials(m, c, a, b, n, false, &special)) return special;
  Big sum = exact(d32(c));
  for (int i = 0; i < n; ++i) {
    const RefValue x = ref_decode(m.a, a[i]), y = ref_decode(m.b, b[i]);
    if (x.cls == Cls::finite && y.cls == Cls::finite) {
      const Big p = Big(x.mant * y.mant) << (x.lsb + y.lsb - kGrid);
      sum += x.neg != y.neg ? Big(-p) : p;
    }
  }
  return sum == 0 ? 0u : ref_rne_fp32(sum);
}

// ftz_mul_add.py: inputs below 2^emin (zeros too) -> +0; results below 2^-126 -> signed 0.
std::uint32_t flush_result(std::uint32_t bits) { return (bits & 0x7f800000u) == 0 ? (bits & 0x80000000u) : bits; }
RefValue flush_input(const RefFormat& f, std::uint32_t bits) {
  RefValue v = ref_decode(f, bits);
  if (v.cls == Cls::zero || (v.cls == Cls::finite && v.align == emin_of(f) && v.mant < (std::int64_t{1} << f.mbits)))
    return RefValue{Cls::zero, false, 0, 0, emin_of(f)};
  return v;
}
std::uint32_t ref_ftz_step(const RefModel& m, std::uint32_t c, const std::uint32_t* a, const std::uint32_t* b, int n) {
  std::uint32_t p[4] = {};
  for (int i = 0; i < n; ++i) p[i] = flush_result(ref_mul(flush_input(m.a, a[i]), flush_input(m.b, b[i])));
  auto addf = [](std::uint32_t x, std::uint32_t y) { return flush_result(ref_add(x, y)); };
  std::uint32_t acc = (c & 0x7f800000u) == 0 ? 0u : c;       // C below 2^-126 (and -0) -> +0
  if (n == 0) return d32(acc).cls == Cls::nan ? kNan : acc;  // NaN canonical (assumed)
  std::uint32_t s = p[0];
  if (n >= 2) s = addf(p[0], p[1]);
  if (n == 3) s = addf(s, p[2]);
  if (n == 4) s = addf(s, addf(p[2], p[3]));
  return addf(acc, s);
}

// fdpa.py tr_fdpa (groups = 1) and gtr_fdpa (groups = 2: even and odd indices).
std::uint32_t ref_two_stage_step(const RefModel& m, std::uint32_t c_bits, const std::uint32_t* a,
                                 const std::uint32_t* b, int n, int groups) {
  std::uint32_t special = 0;
  if (ref_specials(m, c_bits, a, b, n, true, &special)) return special;
  constexpr int kNone = -100000;
  std::vector<Big> product(static_cast<std::size_t>(n));
  std::vector<int> align(static_cast<std::size_t>(n), kNone);
  for (int i = 0; i < n; ++i) {
    const RefValue x = ref_decode(m.a, a[i]), y = ref_decode(m.b, b[i]);
    if (x.cls != Cls::finite || y.cls != Cls::finite) continue;  // zero products: e = -999, out of the max
    const Big p = Big(x.mant * y.mant) << (x.lsb + y.lsb - kGrid);
    product[static_cast<std::size_t>(i)] = x.neg != y.neg ? Big(-p) : p;
    align[static_cast<std::size_t>(i)] = x.align + y.align;
  }
  int e_group[2] = {kNone, kNone};
  for (int i = 0; i < n; ++i) e_group[i % groups] = std::max(e_group[i % groups], align[static_cast<std::size_t>(i)]);
  Big s_group[2] = {0, 0};
  for (int i = 0; i < n; ++i)
    if (align[static_cast<std::size_t>(i)] != kNone)
      s_group[i % groups] += trunc_to(product[static_cast<std::size_t>(i)], e_group[i % groups] - kF);
  const int e_dot = std::max(e_group[0], e_group[1]);
  Big s_dot = s_group[0];
  if (groups == 2) {
    s_dot = 0;
    for (int g = 0; g < 2; ++g)
      if (e_group[g] != kNone) s_dot += floor_to(s_group[g], e_dot - kF);
  }
  const RefValue c = d32(c_bits);
  const int e_c = c.align;  // -126 for zero and subnormal C
  const int E = std::max(e_dot, e_c);
  Big total = e_dot == kNone ? Big(0) : floor_to(s_dot, E - (kF2 + 1));
  if (!(groups == 2 && e_c < E - kF - 1)) total += floor_to(exact(c), E - kF);
  if (total == 0) return 0u;
  const int e_norm = std::max(leading_exponent(total), -126);
  total = floor_to(total, e_norm - kF2);
  if (total == 0) return 0u;
  return ref_rne_fp32(total);
}

std::uint32_t ref_dot(const RefModel& m, std::uint32_t c, const std::vector<std::uint32_t>& a,
                      const std::vector<std::uint32_t>& b) {
  const int k = static_cast<int>(a.size());
  int i = 0;
  do {
    const int n = std::min(m.L, k - i);
    switch (m.arith) {
      case Arith::fma:
        if (n > 0)
          c = ref_fma(ref_decode(m.a, a[i]), ref_decode(m.b, b[i]), c);
        else if (d32(c).cls == Cls::nan)
          c = kNan;
        break;
      case Arith::exact:
        c = ref_exact_step(m, c, a.data() + i, b.data() + i, n);
        break;
      case Arith::ftz:
        c = ref_ftz_step(m, c, a.data() + i, b.data() + i, n);
        break;
      case Arith::tr:
        c = ref_two_stage_step(m, c, a.data() + i, b.data() + i, n, 1);
        break;
      case Arith::gtr:
        c = ref_two_stage_step(m, c, a.data() + i, b.data() + i, n, 2);
        break;
    }
    i += n;
  } while (i < k);
  return c;
}

// ---- random operands ------------------------------------------------------------------
// Bit patterns of `f`: mostly exponents near `center` (so that alignment truncation bites),
// also subnormals, zeros of both signs, any pattern (NaN/inf included), random mantissas.
std::uint32_t random_bits(const RefFormat& f, std::mt19937_64& rng, int center) {
  const int width = 1 + f.ebits + f.mbits;
  const std::uint32_t sign = static_cast<std::uint32_t>(rng() & 1u) << (width - 1);
  const std::uint32_t man = static_cast<std::uint32_t>(rng()) & ((1u << f.mbits) - 1);
  const int max_field = (1 << f.ebits) - (f.kind == Kind::ieee ? 2 : 1);
  const int r = static_cast<int>(rng() % 1000);
  std::uint32_t bits = 0;
  if (r < 8) {
    bits = static_cast<std::uint32_t>(rng()) & low_mask(width);  // anything
  } else if (r < 90) {
    bits = sign | man;  // subnormal (or zero)
  } else if (r < 130) {
    bits = sign;  // zero of either sign (fnuz: 0x80 is NaN)
    if (f.kind == Kind::fnuz) bits = 0;
  } else if (r < 180) {
    bits = sign | (static_cast<std::uint32_t>(1 + rng() % static_cast<std::uint64_t>(max_field)) << f.mbits) | man;
  } else {
    const int field = std::clamp(center + f.bias + static_cast<int>(rng() % 7) - 3, 0, max_field);
    bits = sign | (static_cast<std::uint32_t>(field) << f.mbits) | man;
  }
  bits <<= f.shift;
  if (f.shift > 0) bits |= static_cast<std::uint32_t>(rng()) & ((1u << f.shift) - 1);  // ignored low bits
  return bits;
}

struct Case {
  std::uint32_t c;
  std::vector<std::uint32_t> a, b;
};
Case random_case(const RefModel& m, std::mt19937_64& rng) {
  Case t;
  // k: mostly two full steps; sometimes a partial last step or k == 0.
  const int r = static_cast<int>(rng() % 10);
  const int k = r < 7 ? 2 * m.L : r < 9 ? static_cast<int>(rng() % static_cast<std::uint64_t>(3 * m.L + 1)) : 0;
  const int ea_span = (1 << m.a.ebits) - 2, eb_span = (1 << m.b.ebits) - 2;
  const int center_a = static_cast<int>(rng() % static_cast<std::uint64_t>(ea_span)) + 1 - m.a.bias;
  const int center_b = static_cast<int>(rng() % static_cast<std::uint64_t>(eb_span)) + 1 - m.b.bias;
  for (int i = 0; i < k; ++i) {
    t.a.push_back(random_bits(m.a, rng, center_a));
    t.b.push_back(random_bits(m.b, rng, center_b));
  }
  // Sparse cases (a third): most products zero, so that sums land on exact tie patterns.
  if (rng() % 3 == 0)
    for (auto& x : t.a)
      if (rng() % 4 != 0) x = 0;
  // C near the products, far below them (truncated or dropped), or 20-34 binades above them
  // (the products then fall into C's rounding bits: ties, floors, F2 matter).
  const int rc = static_cast<int>(rng() % 10);
  const int offset = rc < 4   ? static_cast<int>(rng() % 8) - 4
                     : rc < 6 ? -static_cast<int>(rng() % 40)
                     : rc < 9 ? 20 + static_cast<int>(rng() % 15)
                              : static_cast<int>(rng() % 200) - 100;
  const int center_c = std::clamp(center_a + center_b + offset, -140, 127);
  t.c = random_bits(kFp32, rng, center_c);
  // Tie cases (a quarter): product 0 is exactly half an ulp of a normal C, the other products
  // a tail a few binades below it, so that the floors and F2 decide the RNE tie.
  if (k >= 1 && rng() % 4 == 0) {
    auto max_exponent = [](const RefFormat& f) { return (1 << f.ebits) - (f.kind == Kind::ieee ? 2 : 1) - f.bias; };
    const int x =
        emin_of(m.a) + static_cast<int>(rng() % static_cast<std::uint64_t>(max_exponent(m.a) - emin_of(m.a) + 1));
    const int y =
        emin_of(m.b) + static_cast<int>(rng() % static_cast<std::uint64_t>(max_exponent(m.b) - emin_of(m.b) + 1));
    const int ec = x + y + 24;
    if (ec >= -126 && ec <= 127) {
      auto pow2 = [&](const RefFormat& f, int e) {
        const std::uint32_t sign = static_cast<std::uint32_t>(rng() & 1u) << (f.ebits + f.mbits);
        return (sign | (static_cast<std::uint32_t>(e + f.bias) << f.mbits)) << f.shift;
      };
      t.a[0] = pow2(m.a, x);
      t.b[0] = pow2(m.b, y);
      t.c = pow2(kFp32, ec) | (static_cast<std::uint32_t>(rng()) & 0x7fffffu);
      for (int i = 1; i < k; ++i) {
        t.a[static_cast<std::size_t>(i)] = random_bits(m.a, rng, x - 2 - static_cast<int>(rng() % 6));
        t.b[static_cast<std::size_t>(i)] = random_bits(m.b, rng, y - 2 - static_cast<int>(rng() % 6));
      }
    }
  }
  return t;
}

std::string hex(std::uint32_t x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", x);
  return buf;
}

// Runs `cases` random cases of every preset against the reference; returns the number run.
long run_random(int cases, std::uint64_t seed) {
  long total = 0;
  std::uint64_t model_index = 0;
  for (const RefModel& rm : kRefModels) {
    const fb::AmdDotModel* m = fb::find_amd_dot_model(rm.name, *rm.a.fmt, *rm.b.fmt);
    REQUIRE(m != nullptr);
    std::mt19937_64 rng(seed + 0x9e3779b97f4a7c15ull * ++model_index);
    int failures = 0, finite_nonzero = 0;
    for (int n = 0; n < cases; ++n) {
      const Case t = random_case(rm, rng);
      const std::uint32_t want = ref_dot(rm, t.c, t.a, t.b);
      const std::uint32_t got = fb::fused_dot_amd_bits(*m, t.c, t.a, t.b);
      finite_nonzero += (want & 0x7fffffffu) != 0 && (want & 0x7f800000u) != 0x7f800000u ? 1 : 0;
      if (got != want && failures++ < 5) {
        std::string in;
        for (std::size_t i = 0; i < t.a.size(); ++i) {
          in.push_back(' ');
          in.append(hex(t.a[i]));
          in.push_back('*');
          in.append(hex(t.b[i]));
        }
        FAIL_CHECK(std::string(rm.name) << " " << std::string(rm.a.name) << "x" << std::string(rm.b.name)
                                        << ": C=" << hex(t.c) << in << " -> got " << hex(got) << " want " << hex(want));
      }
    }
    CHECK_MESSAGE(failures == 0, std::string(rm.name) << " " << std::string(rm.a.name) << "x" << std::string(rm.b.name)
                                                      << ": " << failures << " of " << cases << " differ");
    // The generator must mostly exercise the arithmetic, not the NaN/inf/zero shortcuts.
    CHECK_MESSAGE(finite_nonzero >= cases / 2, std::string(rm.name) << " " << std::string(rm.a.name) << ": only "
                                                                    << finite_nonzero << " finite non-zero results");
    total += cases;
  }
  return total;
}

std::uint32_t dot(const char* name, const fb::Format& f, std::uint32_t c, std::vector<std::uint32_t> a,
                  std::vector<std::uint32_t> b) {
  const fb::AmdDotModel* m = fb::find_amd_dot_model(name, f);
  REQUIRE(m != nullptr);
  return fb::fused_dot_amd_bits(*m, c, a, b);
}

}  // namespace

TEST_CASE("AMD presets carry MMA-Sim's parameters and are marked unmeasured") {
  CHECK(fb::amd_dot_models().size() == std::size(kRefModels));
  for (const RefModel& rm : kRefModels) {
    CAPTURE(rm.name);
    CAPTURE(rm.a.name);
    const fb::AmdDotModel* m = fb::find_amd_dot_model(rm.name, *rm.a.fmt, *rm.b.fmt);
    REQUIRE(m != nullptr);
    CHECK(m->arithmetic == rm.expected_kind);
    CHECK(m->products_per_step == rm.L);
    if (rm.arith == Arith::tr || rm.arith == Arith::gtr) {
      CHECK(m->fraction_bits == kF);
      CHECK(m->sum_fraction_bits == kF2);
    }
    CHECK_FALSE(m->hardware_validated);
    CHECK(m->note.find("UNMEASURED") != std::string_view::npos);
    CHECK(m->source.find("MMA-Sim") != std::string_view::npos);
  }
  CHECK(fb::is_amd_dot_model_name("cdna2-1k"));
  CHECK_FALSE(fb::is_amd_dot_model_name("cdna4"));
  CHECK(fb::find_amd_dot_model("cdna1", fb::formats::e4m3fnuz) == nullptr);
  CHECK(fb::find_amd_dot_model("cdna3", fb::formats::e4m3fnuz, fb::formats::e5m2fnuz) != nullptr);
  const std::uint32_t one[] = {0x3c00u};
  CHECK_THROWS_AS(fb::fused_dot_amd_bits(*fb::find_amd_dot_model("cdna3", fb::formats::fp16), 0, one, {}),
                  std::invalid_argument);
}

TEST_CASE("AMD directed cases (hand-computed results)") {
  using namespace fb::formats;
  const std::uint32_t one32 = 0x3f800000u, h_one = 0x3c00u, b_one = 0x3f80u;
  // 2^-12 (fp16 0x0c00) squared = 2^-24; 2^-20 (fp16 subnormal 0x0010) squared = 2^-40.
  // C = 1: exact sum 1 + 2^-24 + 2^-40 rounds (RNE) up to 1 + 2^-23 on CDNA1; CDNA3 floors the
  // products' sum at 2^-32 (2^-40 is lost), leaving the tie 1 + 2^-24, which goes to even: 1.
  CHECK(dot("cdna1", fp16, one32, {0x0c00, 0x0010}, {0x0c00, 0x0010}) == 0x3f800001u);
  CHECK(dot("cdna3", fp16, one32, {0x0c00, 0x0010}, {0x0c00, 0x0010}) == one32);
  // CDNA2 flushes the fp16 subnormal input 2^-15 (0x0200) to +0: 0 + (+0 * 2^10) = +0.
  CHECK(dot("cdna2", fp16, 0, {0x0200, 0, 0, 0}, {0x6400, 0, 0, 0}) == 0u);
  CHECK(dot("cdna1", fp16, 0, {0x0200, 0, 0, 0}, {0x6400, 0, 0, 0}) == 0x3d000000u);  // 2^-5
  // bf16 2^-100 * 2^-30 = 2^-130: an fp32 subnormal, flushed on CDNA2, kept on CDNA1.
  CHECK(dot("cdna2", bf16, 0, {0x0d80, 0}, {0x3080, 0}) == 0u);
  CHECK(dot("cdna1", bf16, 0, {0x0d80, 0}, {0x3080, 0}) == 0x00080000u);
  // A negative product flushed keeps its sign; C = -0 reads as +0, so (+0) + (-0) = +0.
  CHECK(dot("cdna2", bf16, 0x80000000u, {0x8d80, 0}, {0x3080, 0}) == 0u);
  // bf16 2^127 * 2^127 twice with opposite signs: CDNA1 sums exactly (C = 1 survives);
  // CDNA3 makes each product >= 2^128 an infinity: +inf with -inf is NaN.
  CHECK(dot("cdna1", bf16, one32, {0x7f00, 0xff00}, {0x7f00, 0x7f00}) == one32);
  CHECK(dot("cdna3", bf16, one32, {0x7f00, 0xff00}, {0x7f00, 0x7f00}) == kNan);
  // Overflow of the rounded sum gives inf: 2^127 * 1.5 twice (bf16 0x7f00 * 0x3fc0).
  CHECK(dot("cdna3", bf16, 0, {0x7f00, 0x7f00}, {0x3fc0, 0x3fc0}) == kPosInf);
  CHECK(dot("cdna1", bf16, 0, {0x7f00, 0x7f00}, {0x3fc0, 0x3fc0}) == kPosInf);
  // fp8: C = -2^-30 is below E - 25 (E = 0 from 1*1) and dropped: exactly 1. The fp16
  // two-stage floors it to -2^-24 at E - 24 instead: 1 - 2^-24 (0x3f7fffff).
  CHECK(dot("cdna3", e4m3fnuz, 0xb0800000u, {0x40}, {0x40}) == one32);
  CHECK(dot("cdna3", fp16, 0xb0800000u, {h_one}, {h_one}) == 0x3f7fffffu);
  // The threshold is e_c < E - 25: C = -2^-26 is dropped (1), C = -2^-25 floors to -2^-24.
  CHECK(dot("cdna3", e4m3fnuz, 0xb2800000u, {0x40}, {0x40}) == one32);
  CHECK(dot("cdna3", e4m3fnuz, 0xb3000000u, {0x40}, {0x40}) == 0x3f7fffffu);
  // Specials: inf * 0, NaN (fnuz 0x80), +inf with -inf, an infinite C.
  CHECK(dot("cdna3", fp16, 0, {0x7c00}, {0}) == kNan);
  CHECK(dot("cdna2", fp16, 0, {0x7c00, 0, 0, 0}, {0, 0, 0, 0}) == kNan);
  CHECK(dot("cdna1", bf16, 0, {0x7f80, 0xff80}, {b_one, b_one}) == kNan);
  CHECK(dot("cdna3", e5m2fnuz, one32, {0x80}, {0x40}) == kNan);
  CHECK(dot("cdna3", bf16, kNegInf, {b_one}, {b_one}) == kNegInf);
  CHECK(dot("cdna3", fp32, kPosInf, {0x7f800000u}, {0xbf800000u}) == kNan);
  // F2 = 31: C = 1 plus 2^-24 (2^-12 squared) plus 2^-31 (fp16 subnormals 2^-16 * 2^-15): the
  // floor to 31 fraction bits keeps 2^-31, so the sum is above the tie: 1 + 2^-23.
  CHECK(dot("cdna3", fp16, one32, {0x0c00, 0x0100}, {0x0c00, 0x0200}) == 0x3f800001u);
  // Below 2^-126 the total is floored on the grid 2^-157: bf16 2^-75 squared plus 2^-85 squared
  // (2^-150 + 2^-170) becomes 2^-150, a tie between 0 and 2^-149: +0. CDNA1 rounds the exact
  // sum: 2^-149.
  CHECK(dot("cdna3", bf16, 0, {0x1a00, 0x1500}, {0x1a00, 0x1500}) == 0u);
  CHECK(dot("cdna1", bf16, 0, {0x1a00, 0x1500}, {0x1a00, 0x1500}) == 1u);
  // k == 0: one step with C alone. CDNA2 flushes a subnormal C to +0; a NaN C is canonical.
  CHECK(dot("cdna2", fp16, 0x00000001u, {}, {}) == 0u);
  CHECK(dot("cdna2", fp16, 0xffdd7114u, {}, {}) == kNan);
  CHECK(dot("cdna3", fp16, 0x80000001u, {}, {}) == 0x80000001u);
  CHECK(dot("cdna1", fp32, 0x7fba8960u, {}, {}) == kNan);
  // Zeros: fused kinds give +0 for an exact zero; the fma chain keeps IEEE's -0 + -0 = -0.
  CHECK(dot("cdna3", fp16, 0x80000000u, {0x8000}, {h_one}) == 0u);
  CHECK(dot("cdna1", fp16, 0x80000000u, {0x8000}, {h_one}) == 0u);
  CHECK(dot("cdna3", fp32, 0x80000000u, {0x80000000u}, {one32}) == 0x80000000u);
  CHECK(dot("cdna3", fp32, 0x80000000u, {0}, {one32}) == 0u);
  // Cancellation: 1*1 + (-1)*1 + C (2^-30): CDNA1 keeps C exactly; CDNA3 aligns C at the
  // products' exponent 0 and floors it at 2^-24 before the products cancel: +0.
  CHECK(dot("cdna1", fp16, 0x30800000u, {h_one, 0xbc00}, {h_one, h_one}) == 0x30800000u);
  CHECK(dot("cdna3", fp16, 0x30800000u, {h_one, 0xbc00}, {h_one, h_one}) == 0u);
  // fma chain: (1 + 2^-23)^2 - 1 = 2^-22 + 2^-46, a tie at fp32's precision: to even, 2^-22.
  CHECK(dot("cdna1", fp32, 0xbf800000u, {0x3f800001u}, {0x3f800001u}) == 0x34800000u);
  // xf32 ignores the low 13 bits: 0x3f801fff reads as 1.0.
  CHECK(dot("cdna3", tf32, 0, {0x3f801fffu}, {0x3f801fffu}) == one32);
}

TEST_CASE("AMD presets match the exact reference on random cases") {
  const int cases = fb_test::sanitizer_scale() ? 200 : 10000;
  const auto t0 = std::chrono::steady_clock::now();
  const long total = run_random(cases, 0x5eed0001u);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE(total << " random AMD dot cases in " << s << " s");
}

TEST_CASE("AMD presets match the exact reference: exhaustive random tier (5e5 per preset)") {
  const int cases = fb_test::sanitizer_scale() ? 5000 : 500000;
  const auto t0 = std::chrono::steady_clock::now();
  const long total = run_random(cases, 0xe4a05717u);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE(total << " random AMD dot cases in " << s << " s");
}

TEST_CASE("AMD columns: fused_dot_amd_columns equals the exact reference lane by lane") {
  // One shared a against many columns (the attention engine's use), for every preset; the
  // two-stage presets run side by side in AVX2 lanes, the rest per lane. Lane counts cover
  // the groups of four and the scalar tail; columns get zeros, NaN/inf and huge products.
  const int per_preset = fb_test::sanitizer_scale() ? 20 : 400;
  std::uint64_t model_index = 0;
  for (const RefModel& rm : kRefModels) {
    const fb::AmdDotModel* m = fb::find_amd_dot_model(rm.name, *rm.a.fmt, *rm.b.fmt);
    REQUIRE(m != nullptr);
    std::mt19937_64 rng(0xc01u + 0x9e3779b97f4a7c15ull * ++model_index);
    int failures = 0;
    for (int t = 0; t < per_preset; ++t) {
      const Case first = random_case(rm, rng);
      const int k = static_cast<int>(first.a.size());
      const int lanes = 1 + static_cast<int>(rng() % 13);
      const int center_b = static_cast<int>(rng() % 20) - 10;
      std::vector<float> a(static_cast<std::size_t>(k)), b(static_cast<std::size_t>(k) * lanes), c(lanes), d(lanes);
      std::vector<std::uint32_t> c_bits(lanes);
      std::vector<std::vector<std::uint32_t>> columns(lanes, std::vector<std::uint32_t>(static_cast<std::size_t>(k)));
      for (int j = 0; j < k; ++j)
        a[static_cast<std::size_t>(j)] =
            static_cast<float>(fb::to_double(*rm.a.fmt, first.a[static_cast<std::size_t>(j)]));
      for (int l = 0; l < lanes; ++l) {
        const Case other = random_case(rm, rng);
        c_bits[static_cast<std::size_t>(l)] = l == 0 ? first.c : other.c;
        c[static_cast<std::size_t>(l)] = std::bit_cast<float>(c_bits[static_cast<std::size_t>(l)]);
        for (int j = 0; j < k; ++j) {
          const std::uint32_t bits = l == 0 ? first.b[static_cast<std::size_t>(j)] : random_bits(rm.b, rng, center_b);
          columns[static_cast<std::size_t>(l)][static_cast<std::size_t>(j)] = bits;
          b[static_cast<std::size_t>(j) * lanes + l] = static_cast<float>(fb::to_double(*rm.b.fmt, bits));
        }
      }
      fb::fused_dot_amd_columns(*m, c.data(), a.data(), b.data(), static_cast<std::size_t>(lanes), k, lanes, d.data());
      for (int l = 0; l < lanes; ++l) {
        const std::uint32_t want =
            ref_dot(rm, c_bits[static_cast<std::size_t>(l)], first.a, columns[static_cast<std::size_t>(l)]);
        const std::uint32_t got = std::bit_cast<std::uint32_t>(d[static_cast<std::size_t>(l)]);
        if (got != want && failures++ < 5)
          FAIL_CHECK(std::string(rm.name) << " " << std::string(rm.a.name) << " lane " << l << " of " << lanes << " k "
                                          << k << ": got " << hex(got) << " want " << hex(want));
      }
    }
    CHECK(failures == 0);
  }
}
