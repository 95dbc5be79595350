// tests/test_ops_mpfr.cpp: every scalar operation and conversion of the emulator
// (emu/ops.hpp: add sub mul div fma sqrt convert) against the independent MPFR
// reference in tests/mpfr_reference.hpp, result bits and flags, in every rounding
// mode except sr and under both overflow policies (docs/DESIGN.md §10, rung 1).
//
// Contract: each checked operand tuple is rounded by the reference and by the
// emulator in all 6 modes x 2 policies; bits must match exactly, except that a NaN
// result may be any NaN encoding of the format; flags must match exactly.
// Fast tier (about a minute in Release on one core):
// - every operand pair of add sub mul div and every input of sqrt, for each format of
//   8 bits or fewer (e4m3 e5m2 e4m3fnuz e5m2fnuz e3m2 e2m3 e2m1 e8m0 e3m4 e2m2);
// - every input of cvt from each of those formats and from bf16, fp16 and tf32 into
//   every format, and fp32 inputs on every rounding boundary of every target;
// - every input of sqrt for bf16, fp16 and tf32;
// - 10^6 random and edge-case pairs per binary op for bf16, fp16 and fp32 (10^5 for
//   tf32), 10^6 fma triples for bf16 and fp16, fewer for fp32, tf32 and the small
//   formats. Edge cases are built from nextafter-style neighbours (bit pattern +-k)
//   of subnormal, normal, one and overflow boundaries, exact cancellations,
//   short significands that make ties, carries into the exponent, and products
//   and quotients aimed at max finite and the underflow threshold.
// Slow tier (names contain "exhaustive", multithreaded): 10^8 random pairs per op
// for bf16/fp16/fp32, all fma triples of the 8-bit formats, all 2^32 pairs of
// bf16 and fp16 add and mul, all 2^32 fp32 inputs converted to bf16/fp16/e4m3/e5m2.
// FLASHBITS_TEST_SCALE=sanitizer shrinks every count about 50x (exhaustive loops
// are strided). Random cases use fixed-seed std::mt19937_64 streams.
// A mismatch prints op, formats, mode, policy, operand bits, expected and got bits
// and flags; each test case reports at most 20 mismatches, then the total.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "emu/ops.hpp"
#include "formats/format.hpp"
#include "tests/mpfr_reference.hpp"
#include "tests/reference_modes.hpp"
#include "tests/test_scale.hpp"

namespace {

using fb::OpKind;
using fbref::Exact;
using fbref::Mode;
using fbref::Policy;
using fbref::RefFormat;

static_assert(fbref::kInexact == fb::flag::inexact && fbref::kUnderflow == fb::flag::underflow &&
              fbref::kOverflow == fb::flag::overflow && fbref::kDivByZero == fb::flag::divbyzero &&
              fbref::kInvalid == fb::flag::invalid);

using fb_test::sanitizer_scale;
std::uint64_t scaled(std::uint64_t n) { return sanitizer_scale() ? std::max<std::uint64_t>(1, n / 50) : n; }
// Exhaustive loops visit every index, or every 47th (a prime) under the sanitizer.
std::uint64_t exhaustive_stride() { return sanitizer_scale() ? 47 : 1; }

using fb_test::to_emu;

// A format as the emulator knows it (parsed from its name) and as the reference does.
struct FormatPair {
  fb::Format emu;
  const RefFormat* ref;
};
FormatPair pair_of(const RefFormat& ref) {
  FormatPair p{};
  p.ref = &ref;
  REQUIRE(fb::parse_format(ref.name, p.emu));
  return p;
}

namespace t = fbref::table;
const RefFormat* const kSmallFormats[] = {&t::e4m3, &t::e5m2, &t::e4m3fnuz, &t::e5m2fnuz, &t::e3m2,
                                          &t::e2m3, &t::e2m1, &t::e8m0,     &t::e3m4,     &t::e2m2};
const RefFormat* const kAllFormats[] = {&t::fp32, &t::tf32,     &t::bf16,     &t::fp16, &t::e4m3,
                                        &t::e5m2, &t::e4m3fnuz, &t::e5m2fnuz, &t::e3m2, &t::e2m3,
                                        &t::e2m1, &t::e8m0,     &t::e3m4,     &t::e2m2, &t::e6m9};

std::string flags_text(fbref::RefFlags f) {
  char out[6];
  fb::flags_to_chars(f, out);
  return out;
}

// Mismatches of one test case (or one thread of it): the first few in full.
struct MismatchLog {
  static constexpr std::size_t kReported = 20;
  std::uint64_t checked = 0;
  std::uint64_t mismatches = 0;
  std::uint64_t exact_results = 0;    // reference raised no flag
  std::uint64_t flag_counts[5] = {};  // how often the reference raised x u o z v
  std::vector<std::string> reports;

  void count_flags(fbref::RefFlags f) {
    exact_results += f == 0;
    for (int i = 0; i < 5; ++i) flag_counts[i] += (f >> i) & 1u;
  }
  void merge(const MismatchLog& other) {
    checked += other.checked;
    mismatches += other.mismatches;
    exact_results += other.exact_results;
    for (int i = 0; i < 5; ++i) flag_counts[i] += other.flag_counts[i];
    for (const std::string& r : other.reports)
      if (reports.size() < kReported) reports.push_back(r);
  }
  void finish() const {
    for (const std::string& r : reports) FAIL_CHECK(r);
    INFO("checked " << checked << " results, " << mismatches
                    << " mismatches; reference flags x u o z v: " << flag_counts[0] << " " << flag_counts[1] << " "
                    << flag_counts[2] << " " << flag_counts[3] << " " << flag_counts[4] << ", exact " << exact_results);
    CHECK(checked > 0);
    CHECK(mismatches == 0);
  }
};

struct Operands {
  int count;  // 1, 2 or 3
  std::uint32_t a, b, c;
};

bool same_result(const RefFormat& f, const fbref::Result& want, const fb::Rounded& got) {
  if (got.flags != want.flags) return false;
  if (!want.is_nan) return got.bits == want.bits;
  return f.to_container(f.to_layout(got.bits)) == got.bits && fbref::decode(f, got.bits).cls == fbref::Class::nan;
}

void record_mismatch(MismatchLog& log, const char* op, const RefFormat& to, const RefFormat* from, Mode mode,
                     Policy policy, const Operands& x, const fbref::Result& want, const fb::Rounded& got) {
  ++log.mismatches;
  if (log.reports.size() >= MismatchLog::kReported) return;
  char text[320];
  std::snprintf(text, sizeof text,
                "%s %s%s%s mode=%s policy=%s a=0x%x b=0x%x c=0x%x (%d operands): expected 0x%x%s flags %s, "
                "got 0x%x flags %s",
                op, from ? from->name : "", from ? "->" : "", to.name, fbref::name_of(mode), fbref::name_of(policy),
                x.a, x.b, x.c, x.count, want.bits, want.is_nan ? " (any NaN)" : "", flags_text(want.flags).c_str(),
                got.bits, flags_text(got.flags).c_str());
  log.reports.emplace_back(text);
}

// Round `exact` with the reference and run the emulator, in every mode and policy.
template <class EmuCall>
inline void check_every_mode(MismatchLog& log, const char* op, const RefFormat& to, const RefFormat* from,
                             const Operands& x, const Exact& exact, EmuCall&& emu) {
  for (Mode mode : fbref::kModes) {
    for (Policy policy : fbref::kPolicies) {
      const fbref::Result want = fbref::round_to(to, exact, mode, policy);
      fb::RoundingSpec spec;
      spec.mode = to_emu(mode);
      spec.overflow = to_emu(policy);
      const fb::Rounded got = emu(spec);
      ++log.checked;
      log.count_flags(want.flags);
      if (!same_result(to, want, got)) record_mismatch(log, op, to, from, mode, policy, x, want, got);
    }
  }
}

Exact reference_exact(fbref::MpfrExact& mpfr, OpKind op, const RefFormat& f, const Operands& x) {
  switch (op) {
    case OpKind::add:
      return mpfr.add(f, x.a, x.b);
    case OpKind::sub:
      return mpfr.sub(f, x.a, x.b);
    case OpKind::mul:
      return mpfr.mul(f, x.a, x.b);
    case OpKind::div:
      return mpfr.div(f, x.a, x.b);
    case OpKind::fma:
      return mpfr.fma(f, x.a, x.b, x.c);
    case OpKind::sqrt:
      return mpfr.sqrt(f, x.a);
    case OpKind::cvt:
      break;
  }
  std::abort();
}

// One operation on one operand tuple in one format, all modes and policies.
void check_op(MismatchLog& log, fbref::MpfrExact& mpfr, OpKind op, const FormatPair& f, const Operands& x) {
  const Exact exact = reference_exact(mpfr, op, *f.ref, x);
  const std::string_view name = fb::to_string(op);
  check_every_mode(log, name.data(), *f.ref, nullptr, x, exact,
                   [&](const fb::RoundingSpec& spec) { return fb::apply_op(op, f.emu, f.emu, x.a, x.b, x.c, spec); });
}

void check_convert(MismatchLog& log, const FormatPair& to, const FormatPair& from, std::uint32_t a) {
  const Exact exact = fbref::MpfrExact::convert(*from.ref, a);
  check_every_mode(log, "cvt", *to.ref, from.ref, Operands{1, a, 0, 0}, exact,
                   [&](const fb::RoundingSpec& spec) { return fb::convert(to.emu, from.emu, a, spec); });
}

std::uint32_t container_of_index(const RefFormat& f, std::uint64_t index) {
  return f.to_container(static_cast<std::uint32_t>(index));
}

// Splits [0, count) over the hardware threads; each thread gets its own MPFR
// scratch and log, merged afterwards (doctest assertions stay on this thread).
template <class Body>
MismatchLog parallel_for(std::uint64_t count, Body&& body) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<MismatchLog> logs(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      fbref::MpfrExact mpfr;
      const std::uint64_t lo = count * t / threads, hi = count * (t + 1) / threads;
      body(logs[t], mpfr, lo, hi);
    });
  }
  for (std::thread& th : pool) th.join();
  MismatchLog all;
  for (const MismatchLog& l : logs) all.merge(l);
  return all;
}

// ---- operand generators for the wide formats --------------------------------
// Builds layouts (not containers) of one format, then hands out container bits.
class OperandSource {
 public:
  explicit OperandSource(const RefFormat& f) : f_(f) {
    const std::uint32_t one = static_cast<std::uint32_t>(f.bias) << f.man_bits;
    const std::uint32_t min_normal = 1u << f.man_bits;
    const std::uint32_t max_finite = max_finite_magnitude();
    const std::uint32_t top_binade = f.top_finite_exp_field() << f.man_bits;
    const std::uint32_t half_ulp_above_one = one | (1u << (f.man_bits - 1));
    const std::uint32_t bases[] = {0u,
                                   1u,
                                   min_normal,
                                   one,
                                   one + min_normal,
                                   one - min_normal,
                                   half_ulp_above_one,
                                   top_binade,
                                   max_finite,
                                   max_finite + 1u,
                                   f.exp_ones() << f.man_bits,
                                   (f.exp_ones() << f.man_bits) | 1u,
                                   (f.bias - f.man_bits - 1u) << f.man_bits,  // 2^-(p): half ulp of one
                                   (f.bias + f.man_bits + 1u) << f.man_bits};
    for (std::uint32_t base : bases) {
      for (int k = -3; k <= 3; ++k) {
        const std::int64_t m = static_cast<std::int64_t>(base) + k;
        if (m < 0 || m > static_cast<std::int64_t>(magnitude_mask())) continue;
        edges_.push_back(static_cast<std::uint32_t>(m));
        edges_.push_back(static_cast<std::uint32_t>(m) | f.sign_bit());
      }
    }
    std::sort(edges_.begin(), edges_.end());
    edges_.erase(std::unique(edges_.begin(), edges_.end()), edges_.end());
  }

  const RefFormat& format() const { return f_; }
  std::uint32_t container(std::uint32_t layout) const { return f_.to_container(layout); }
  std::uint32_t layout(std::uint32_t container) const { return f_.to_layout(container); }
  std::uint32_t magnitude_mask() const { return f_.sign_bit() ? f_.sign_bit() - 1u : ~0u; }
  std::uint32_t max_finite_magnitude() const {
    return (f_.top_finite_exp_field() << f_.man_bits) |
           (static_cast<std::uint32_t>(f_.max_significand()) & f_.man_ones());
  }

  // Any bit pattern: NaN, inf, zeros and subnormals included.
  std::uint32_t any(std::mt19937_64& rng) const {
    return container(static_cast<std::uint32_t>(rng()) & static_cast<std::uint32_t>(f_.pattern_count() - 1u));
  }
  std::uint32_t edge(std::mt19937_64& rng) const { return container(edges_[rng() % edges_.size()]); }
  // A finite number: exponent uniform, or near the subnormal range, one, or the top;
  // significand uniform, short (few leading bits, to make ties and exact results),
  // or all ones minus a little (to carry into the exponent).
  std::uint32_t finite(std::mt19937_64& rng) const {
    const std::uint32_t top = f_.top_finite_exp_field();
    std::uint32_t exp_field = 0;
    switch (rng() % 4) {
      case 0:
        exp_field = static_cast<std::uint32_t>(rng() % (top + 1));
        break;
      case 1:
        exp_field = static_cast<std::uint32_t>(rng() % 4);
        break;
      case 2:
        exp_field = top - static_cast<std::uint32_t>(rng() % 4);
        break;
      default: {
        const int spread = f_.precision() + 3;
        exp_field = static_cast<std::uint32_t>(
            std::clamp<std::int64_t>(f_.bias + static_cast<std::int64_t>(rng() % (2 * spread + 1)) - spread, 0, top));
      }
    }
    return container(with_exponent(rng, exp_field));
  }
  // A finite number in binade exp_field (clamped to the finite range), random sign.
  std::uint32_t with_exponent(std::mt19937_64& rng, std::uint32_t exp_field) const {
    exp_field = std::min(exp_field, f_.top_finite_exp_field());
    std::uint32_t man = 0;
    switch (rng() % 3) {
      case 0:
        man = static_cast<std::uint32_t>(rng()) & f_.man_ones();
        break;
      case 1: {
        const int kept = 1 + static_cast<int>(rng() % 3);
        man = (static_cast<std::uint32_t>(rng()) & f_.man_ones()) & ~(f_.man_ones() >> std::min(kept, f_.man_bits));
        break;
      }
      default:
        man = f_.man_ones() - static_cast<std::uint32_t>(rng() % 3);
        break;
    }
    std::uint32_t m = (exp_field << f_.man_bits) | (man & f_.man_ones());
    m = std::min(m, max_finite_magnitude());
    return (rng() & 1 ? f_.sign_bit() : 0u) | m;
  }
  // The pattern k steps away in magnitude (nextafter applied k times), same sign.
  std::uint32_t neighbour(std::uint32_t stored, int k) const {
    const std::uint32_t l = layout(stored);
    const std::uint32_t sign = l & f_.sign_bit();
    const std::int64_t m =
        std::clamp<std::int64_t>(static_cast<std::int64_t>(l & magnitude_mask()) + k, 0, magnitude_mask());
    return container(sign | static_cast<std::uint32_t>(m));
  }
  std::uint32_t negate(std::uint32_t stored) const { return container(layout(stored) ^ f_.sign_bit()); }
  std::uint32_t exp_field(std::uint32_t stored) const { return (layout(stored) >> f_.man_bits) & f_.exp_ones(); }
  // The format's value nearest to x (reference rounding, rne, saturating).
  std::uint32_t nearest(double x) const {
    return fbref::round_to(f_, fbref::exact_of_double(x), Mode::rne, Policy::satfinite).bits;
  }
  double value(std::uint32_t stored) const { return fbref::to_double(fbref::decode(f_, stored)); }
  double max_finite() const { return value(container(max_finite_magnitude())); }

 private:
  const RefFormat& f_;
  std::vector<std::uint32_t> edges_;
};

int random_step(std::mt19937_64& rng) { return static_cast<int>(rng() % 7) - 3; }

// An operand pair for op, drawn from a mixture of plain random and edge schemes.
Operands random_pair(OpKind op, const OperandSource& src, std::mt19937_64& rng) {
  const RefFormat& f = src.format();
  std::uint32_t a = 0, b = 0;
  const int scheme = static_cast<int>(rng() % 8);
  switch (scheme) {
    case 0:
      a = src.any(rng), b = src.any(rng);
      break;
    case 1:
      a = src.finite(rng), b = src.finite(rng);
      break;
    case 2:
      a = src.edge(rng), b = rng() & 1 ? src.edge(rng) : src.finite(rng);
      break;
    default: {
      a = src.finite(rng);
      if (op == OpKind::add || op == OpKind::sub) {
        const std::uint32_t ea = src.exp_field(a);
        switch (scheme) {
          case 3: {  // exact or near cancellation
            const std::uint32_t cancel = op == OpKind::add ? src.negate(a) : a;
            b = src.neighbour(cancel, random_step(rng));
            break;
          }
          case 4:
          case 5: {  // alignment shifts around p: ties, sticky bits, carries
            const int d = static_cast<int>(rng() % (f.precision() + 4));
            b = src.with_exponent(rng, ea > static_cast<std::uint32_t>(d) ? ea - d : 0);
            break;
          }
          default: {  // sums that land on the overflow boundary
            a = src.neighbour(src.container(src.max_finite_magnitude()), -static_cast<int>(rng() % 4));
            b = src.with_exponent(rng,
                                  f.top_finite_exp_field() - static_cast<std::uint32_t>(rng() % (f.precision() + 2)));
            const bool same_sign = ((src.layout(a) ^ src.layout(b)) & f.sign_bit()) == 0;
            if (same_sign != (op == OpKind::add)) b = src.negate(b);
          }
        }
      } else {
        // Products and quotients aimed at max finite, the normal and subnormal
        // thresholds and one, then moved a few ulps.
        const double min_normal = std::ldexp(1.0, f.emin());
        const double min_subnormal = std::ldexp(1.0, f.emin() - f.man_bits);
        const double targets[] = {src.max_finite(),
                                  min_normal,
                                  min_normal * (1 - std::ldexp(1.0, -f.precision())),
                                  min_subnormal,
                                  min_subnormal / 2,
                                  1.0,
                                  1.5};
        const double target = targets[rng() % std::size(targets)];
        const double x = src.value(a);
        if (x == 0.0 || !std::isfinite(x)) break;
        double want = op == OpKind::mul ? target / x : (op == OpKind::div ? x / target : target);
        b = src.neighbour(src.nearest(std::fabs(want)), random_step(rng));
        if (rng() & 1) b = src.negate(b);
      }
    }
  }
  if ((rng() & 1) != 0 && op != OpKind::div) std::swap(a, b);
  return Operands{2, a, b, 0};
}

Operands random_triple(const OperandSource& src, std::mt19937_64& rng) {
  const RefFormat& f = src.format();
  Operands x{3, 0, 0, 0};
  switch (rng() % 6) {
    case 0:
      x.a = src.any(rng), x.b = src.any(rng), x.c = src.any(rng);
      break;
    case 1:
      x.a = src.finite(rng), x.b = src.finite(rng), x.c = src.finite(rng);
      break;
    case 2:
      x.a = src.edge(rng), x.b = src.finite(rng), x.c = rng() & 1 ? src.edge(rng) : src.any(rng);
      break;
    default: {
      x.a = src.finite(rng);
      x.b = src.finite(rng);
      const double product = src.value(x.a) * src.value(x.b);  // exact: <= 48 bits
      if (!std::isfinite(product) || product == 0.0) {
        x.c = src.finite(rng);
        break;
      }
      // c cancels most of the product, or sits p bits below it (ties, sticky).
      const int shift = static_cast<int>(rng() % (2 * f.precision() + 3));
      const double target = rng() % 2 ? -product : std::ldexp(product, -shift) * (rng() & 1 ? 1 : -1);
      x.c = src.neighbour(src.nearest(std::fabs(target)), random_step(rng));
      if (std::signbit(target)) x.c = src.negate(x.c);
    }
  }
  return x;
}

// The generators must reach exact, inexact, overflowing and (except for add and
// sub, whose subnormal results are always exact) underflowing results, or the
// comparison says little about the edges.
void require_edges_reached(const MismatchLog& log, bool can_underflow) {
  const std::uint64_t floor = log.checked / 2000;
  INFO("reference flags x u o z v: " << log.flag_counts[0] << " " << log.flag_counts[1] << " " << log.flag_counts[2]
                                     << " " << log.flag_counts[3] << " " << log.flag_counts[4] << ", exact "
                                     << log.exact_results);
  CHECK(log.exact_results > floor);
  CHECK(log.flag_counts[0] > floor);
  if (can_underflow) CHECK(log.flag_counts[1] > floor);
  CHECK(log.flag_counts[2] > floor);
}

void run_random_binary(OpKind op, const RefFormat& ref, std::uint64_t count, std::uint64_t seed) {
  const FormatPair f = pair_of(ref);
  const OperandSource src(ref);
  std::mt19937_64 rng(seed);
  fbref::MpfrExact mpfr;
  MismatchLog log;
  for (std::uint64_t i = 0; i < count; ++i) check_op(log, mpfr, op, f, random_pair(op, src, rng));
  log.finish();
  require_edges_reached(log, op != OpKind::add && op != OpKind::sub);
}

void run_random_fma(const RefFormat& ref, std::uint64_t count, std::uint64_t seed) {
  const FormatPair f = pair_of(ref);
  const OperandSource src(ref);
  std::mt19937_64 rng(seed);
  fbref::MpfrExact mpfr;
  MismatchLog log;
  for (std::uint64_t i = 0; i < count; ++i) check_op(log, mpfr, OpKind::fma, f, random_triple(src, rng));
  log.finish();
  require_edges_reached(log, true);
}

// Every pair of patterns of a small format, for the four binary ops, and every
// input of sqrt.
void run_all_pairs(const RefFormat& ref) {
  const FormatPair f = pair_of(ref);
  const std::uint64_t n = ref.pattern_count();
  fbref::MpfrExact mpfr;
  MismatchLog log;
  for (OpKind op : {OpKind::add, OpKind::sub, OpKind::mul, OpKind::div}) {
    for (std::uint64_t i = 0; i < n * n; i += exhaustive_stride()) {
      check_op(log, mpfr, op, f, Operands{2, container_of_index(ref, i / n), container_of_index(ref, i % n), 0});
    }
  }
  for (std::uint64_t i = 0; i < n; ++i)
    check_op(log, mpfr, OpKind::sqrt, f, Operands{1, container_of_index(ref, i), 0, 0});
  log.finish();
}

// Every input of `from` converted into every format.
void run_convert_all_inputs(const RefFormat& from_ref) {
  const FormatPair from = pair_of(from_ref);
  MismatchLog log;
  for (const RefFormat* to_ref : kAllFormats) {
    const FormatPair to = pair_of(*to_ref);
    for (std::uint64_t i = 0; i < from_ref.pattern_count(); i += exhaustive_stride())
      check_convert(log, to, from, container_of_index(from_ref, i));
  }
  log.finish();
}

}  // namespace

// ---- the reference's own facts against the docs/DESIGN.md §2 table --------------------
TEST_CASE("reference_format_table_matches_design") {
  struct Row {
    const RefFormat* f;
    double max_finite, min_normal, min_subnormal;
  };
  const Row rows[] = {
      {&t::fp32, 3.4028234663852886e38, std::ldexp(1.0, -126), std::ldexp(1.0, -149)},
      {&t::tf32, std::ldexp(2.0 - std::ldexp(1.0, -10), 127), std::ldexp(1.0, -126), std::ldexp(1.0, -136)},
      {&t::bf16, 3.3895313892515355e38, std::ldexp(1.0, -126), std::ldexp(1.0, -133)},
      {&t::fp16, 65504, std::ldexp(1.0, -14), std::ldexp(1.0, -24)},
      {&t::e4m3, 448, std::ldexp(1.0, -6), std::ldexp(1.0, -9)},
      {&t::e5m2, 57344, std::ldexp(1.0, -14), std::ldexp(1.0, -16)},
      {&t::e4m3fnuz, 240, std::ldexp(1.0, -7), std::ldexp(1.0, -10)},
      {&t::e5m2fnuz, 57344, std::ldexp(1.0, -15), std::ldexp(1.0, -17)},
      {&t::e3m2, 28, 0.25, std::ldexp(1.0, -4)},
      {&t::e2m3, 7.5, 1, 0.125},
      {&t::e2m1, 6, 1, 0.5},
      {&t::e8m0, std::ldexp(1.0, 127), std::ldexp(1.0, -127), std::ldexp(1.0, -127)},
  };
  for (const Row& row : rows) {
    const RefFormat& f = *row.f;
    CAPTURE(f.name);
    double max_finite = -1, min_positive = HUGE_VAL, min_normal = HUGE_VAL;
    int nans = 0, infs = 0, zeros = 0;
    for (std::uint64_t i = 0; i < f.pattern_count(); i += (f.width() > 16 ? 4099 : 1)) {
      const fbref::RefValue v = fbref::decode(f, f.to_container(static_cast<std::uint32_t>(i)));
      nans += v.cls == fbref::Class::nan;
      infs += v.cls == fbref::Class::inf;
      zeros += v.cls == fbref::Class::zero;
      if (v.cls != fbref::Class::finite) continue;
      const double x = std::fabs(fbref::to_double(v));
      max_finite = std::max(max_finite, x);
      min_positive = std::min(min_positive, x);
      if (v.significand >> f.man_bits) min_normal = std::min(min_normal, x);
    }
    if (f.width() <= 16) {
      CHECK(max_finite == row.max_finite);
      CHECK(min_positive == row.min_subnormal);
      CHECK(min_normal == row.min_normal);
      CHECK(zeros == (f.has_zero() ? (f.has_negative_zero() ? 2 : 1) : 0));
      CHECK(infs == (f.has_inf() ? 2 : 0));
      CHECK((nans > 0) == f.has_nan());
    }
    CHECK(fbref::to_double(fbref::decode(
              f, fbref::round_to(f, fbref::exact_of_double(1e300), Mode::rtz, Policy::ieee).bits)) == row.max_finite);
    // The emulator's table agrees on the layout.
    const FormatPair p = pair_of(f);
    CHECK(p.emu.exp_bits == f.exp_bits);
    CHECK(p.emu.man_bits == f.man_bits);
    CHECK(p.emu.bias == f.bias);
    CHECK(p.emu.container_bits == f.container_bits);
    CHECK(p.emu.is_signed == f.is_signed);
    CHECK(p.emu.storage_shift() == f.container_shift());
  }
  CHECK(fbref::decode(t::e4m3, 0x7f).cls == fbref::Class::nan);
  CHECK(fbref::decode(t::e4m3, 0x7e).cls == fbref::Class::finite);
  CHECK(fbref::decode(t::e4m3fnuz, 0x80).cls == fbref::Class::nan);
  CHECK(fbref::decode(t::e8m0, 0xff).cls == fbref::Class::nan);
}

// Hand-checked results that pin the reference itself to docs/DESIGN.md §2 (a reference
// that drifted would otherwise agree with a drifted emulator).
TEST_CASE("reference_pins_spec_examples") {
  fbref::MpfrExact mpfr;
  const auto rounded = [](const RefFormat& f, const Exact& e, Mode m, Policy p = Policy::ieee) {
    return fbref::round_to(f, e, m, p);
  };
  // fp16: 1 + 2^-11 is a tie: rne keeps 1, rna goes to 1 + 2^-10, rto to 1 + 2^-10.
  const Exact tie = fbref::exact_of_double(1.0 + std::ldexp(1.0, -11));
  CHECK(rounded(t::fp16, tie, Mode::rne).bits == 0x3c00);
  CHECK(rounded(t::fp16, tie, Mode::rna).bits == 0x3c01);
  CHECK(rounded(t::fp16, tie, Mode::rto).bits == 0x3c01);
  CHECK(rounded(t::fp16, tie, Mode::rtz).bits == 0x3c00);
  CHECK(rounded(t::fp16, tie, Mode::rne).flags == fbref::kInexact);
  // e4m3: 464 ties between 448 and (NaN-coded) 480: rne keeps 448 without overflow;
  // 465 overflows to NaN (ieee) or 448 (satfinite), with overflow and inexact.
  CHECK(rounded(t::e4m3, fbref::exact_of_double(464), Mode::rne).bits == 0x7e);
  CHECK(rounded(t::e4m3, fbref::exact_of_double(464), Mode::rne).flags == fbref::kInexact);
  CHECK(rounded(t::e4m3, fbref::exact_of_double(465), Mode::rne).is_nan);
  CHECK(rounded(t::e4m3, fbref::exact_of_double(465), Mode::rne, Policy::satfinite).bits == 0x7e);
  CHECK(rounded(t::e4m3, fbref::exact_of_double(465), Mode::rne).flags == (fbref::kOverflow | fbref::kInexact));
  // rtz never overflows to inf, but still raises overflow above max finite.
  CHECK(rounded(t::e5m2, fbref::exact_of_double(1e6), Mode::rtz).bits == 0x7b);
  CHECK(rounded(t::e5m2, fbref::exact_of_double(-1e6), Mode::rup).bits == 0xfb);
  CHECK(rounded(t::e5m2, fbref::exact_of_double(-1e6), Mode::rdn).bits == 0xfc);
  CHECK(rounded(t::e5m2, fbref::exact_of_double(1e6), Mode::rtz).flags == (fbref::kOverflow | fbref::kInexact));
  // fp4 always saturates: 7 -> 6 with overflow, even under ieee.
  CHECK(rounded(t::e2m1, fbref::exact_of_double(7), Mode::rne).bits == 0x7);
  CHECK(rounded(t::e2m1, fbref::exact_of_double(7), Mode::rne).flags == (fbref::kOverflow | fbref::kInexact));
  // Tininess after rounding: fp16 (1 - 2^-12) * 2^-14 rounds up to min normal in rne
  // (no underflow) but not in rtz (underflow).
  const Exact below_min_normal = fbref::exact_of_double(std::ldexp(1.0 - std::ldexp(1.0, -12), -14));
  CHECK(rounded(t::fp16, below_min_normal, Mode::rne).bits == 0x0400);
  CHECK(rounded(t::fp16, below_min_normal, Mode::rne).flags == fbref::kInexact);
  CHECK(rounded(t::fp16, below_min_normal, Mode::rtz).bits == 0x03ff);
  CHECK(rounded(t::fp16, below_min_normal, Mode::rtz).flags == (fbref::kInexact | fbref::kUnderflow));
  // Exact zero sums: +0, or -0 under rdn; fnuz has no -0.
  const Exact zero_sum = mpfr.add(t::fp16, 0x3c00, 0xbc00);
  CHECK(rounded(t::fp16, zero_sum, Mode::rne).bits == 0x0000);
  CHECK(rounded(t::fp16, zero_sum, Mode::rdn).bits == 0x8000);
  CHECK(rounded(t::e4m3fnuz, mpfr.add(t::e4m3fnuz, 0x40, 0xc0), Mode::rdn).bits == 0x00);
  // 0*inf, inf-inf, 0/0, sqrt(-1): invalid NaN; 1/0: inf with divbyzero.
  CHECK(rounded(t::fp16, mpfr.mul(t::fp16, 0x0000, 0x7c00), Mode::rne).flags == fbref::kInvalid);
  CHECK(rounded(t::fp16, mpfr.add(t::fp16, 0x7c00, 0xfc00), Mode::rne).is_nan);
  CHECK(rounded(t::fp16, mpfr.div(t::fp16, 0x0000, 0x0000), Mode::rne).flags == fbref::kInvalid);
  CHECK(rounded(t::fp16, mpfr.sqrt(t::fp16, 0xbc00), Mode::rne).is_nan);
  CHECK(rounded(t::fp16, mpfr.div(t::fp16, 0x3c00, 0x0000), Mode::rne).bits == 0x7c00);
  CHECK(rounded(t::fp16, mpfr.div(t::fp16, 0x3c00, 0x0000), Mode::rne).flags == fbref::kDivByZero);
  // e8m0: no zero, no sign, nothing below 2^-127.
  CHECK(rounded(t::e8m0, mpfr.sub(t::e8m0, 0x7f, 0x7f), Mode::rne).flags == fbref::kInvalid);
  CHECK(rounded(t::e8m0, mpfr.div(t::e8m0, 0x00, 0x7f), Mode::rne).bits == 0x00);
  CHECK(rounded(t::e8m0, mpfr.div(t::e8m0, 0x00, 0x80), Mode::rne).flags == (fbref::kUnderflow | fbref::kInexact));
  CHECK(rounded(t::e8m0, fbref::exact_of_double(3.0), Mode::rne).bits == 0x81);  // tie 2|4 -> 4 (even)
  // Below 2^-127 the result is pinned to 2^-127, and underflow follows tininess after
  // rounding: 1.5 * 2^-128 rounds up to 2^-127 under rne (not tiny), down under rtz.
  CHECK(rounded(t::e8m0, fbref::exact_of_double(0x1.8p-128), Mode::rne).bits == 0x00);
  CHECK(rounded(t::e8m0, fbref::exact_of_double(0x1.8p-128), Mode::rne).flags == fbref::kInexact);
  CHECK(rounded(t::e8m0, fbref::exact_of_double(0x1.8p-128), Mode::rup).flags == fbref::kInexact);
  CHECK(rounded(t::e8m0, fbref::exact_of_double(0x1.8p-128), Mode::rtz).flags == (fbref::kUnderflow | fbref::kInexact));
  CHECK(rounded(t::e8m0, fbref::exact_of_double(0x1.4p-128), Mode::rne).flags == (fbref::kUnderflow | fbref::kInexact));
  // fp6 has no NaN: 0/0 gives +0 with invalid.
  CHECK(rounded(t::e3m2, mpfr.div(t::e3m2, 0x00, 0x00), Mode::rne).bits == 0x00);
  // Division is inexact where the quotient does not terminate: bf16 1/3.
  CHECK(rounded(t::bf16, mpfr.div(t::bf16, 0x3f80, 0x4040), Mode::rne).bits == 0x3eab);
  CHECK(rounded(t::bf16, mpfr.div(t::bf16, 0x3f80, 0x4040), Mode::rtz).bits == 0x3eaa);
}

// ---- fast tier: small formats, exhaustive ---------------------------------------
TEST_CASE("e4m3_all_pairs_all_ops") { run_all_pairs(t::e4m3); }
TEST_CASE("e5m2_all_pairs_all_ops") { run_all_pairs(t::e5m2); }
TEST_CASE("e4m3fnuz_all_pairs_all_ops") { run_all_pairs(t::e4m3fnuz); }
TEST_CASE("e5m2fnuz_all_pairs_all_ops") { run_all_pairs(t::e5m2fnuz); }
TEST_CASE("e3m2_all_pairs_all_ops") { run_all_pairs(t::e3m2); }
TEST_CASE("e2m3_all_pairs_all_ops") { run_all_pairs(t::e2m3); }
TEST_CASE("e2m1_all_pairs_all_ops") { run_all_pairs(t::e2m1); }
TEST_CASE("e8m0_all_pairs_all_ops") { run_all_pairs(t::e8m0); }
TEST_CASE("e3m4_all_pairs_all_ops") { run_all_pairs(t::e3m4); }
TEST_CASE("e2m2_all_pairs_all_ops") { run_all_pairs(t::e2m2); }

TEST_CASE("small_formats_cvt_all_inputs_to_every_format") {
  for (const RefFormat* f : kSmallFormats) {
    CAPTURE(f->name);
    run_convert_all_inputs(*f);
  }
}
TEST_CASE("bf16_cvt_all_inputs_to_every_format") { run_convert_all_inputs(t::bf16); }
TEST_CASE("fp16_cvt_all_inputs_to_every_format") { run_convert_all_inputs(t::fp16); }
TEST_CASE("tf32_cvt_all_inputs_to_every_format") { run_convert_all_inputs(t::tf32); }

// fp32 on every rounding boundary of every narrower target: each target value, the
// fp32 midpoint to its upper neighbour, and fp32 neighbours of both.
TEST_CASE("fp32_cvt_boundaries_to_every_format") {
  const FormatPair from = pair_of(t::fp32);
  const OperandSource fp32(t::fp32);
  MismatchLog log;
  std::mt19937_64 rng(0x5eed0001);
  for (const RefFormat* to_ref : kAllFormats) {
    if (to_ref == &t::fp32) continue;
    const FormatPair to = pair_of(*to_ref);
    const std::uint64_t n = to_ref->pattern_count();
    const std::uint64_t stride = std::max<std::uint64_t>(1, n / scaled(1u << 14));
    for (std::uint64_t i = rng() % stride; i < n; i += stride) {
      const std::uint32_t here = to_ref->to_container(static_cast<std::uint32_t>(i));
      const std::uint32_t next = to_ref->to_container(static_cast<std::uint32_t>(i + 1 < n ? i + 1 : i));
      const double x = fbref::to_double(fbref::decode(*to_ref, here));
      const double y = fbref::to_double(fbref::decode(*to_ref, next));
      for (double v : {x, (std::isfinite(x) && std::isfinite(y)) ? x + (y - x) / 2 : x}) {
        if (std::isnan(v)) continue;
        const std::uint32_t centre = fp32.nearest(v);
        for (int k = -2; k <= 2; ++k) check_convert(log, to, from, fp32.neighbour(centre, k));
      }
    }
    for (std::uint64_t i = 0; i < scaled(20000); ++i) check_convert(log, to, from, fp32.any(rng));
  }
  log.finish();
}

TEST_CASE("wide_formats_sqrt_all_inputs") {
  fbref::MpfrExact mpfr;
  MismatchLog log;
  for (const RefFormat* ref : {&t::bf16, &t::fp16, &t::tf32, &t::e6m9}) {
    const FormatPair f = pair_of(*ref);
    for (std::uint64_t i = 0; i < ref->pattern_count(); i += exhaustive_stride())
      check_op(log, mpfr, OpKind::sqrt, f, Operands{1, container_of_index(*ref, i), 0, 0});
  }
  log.finish();
}

TEST_CASE("fp32_sqrt_random") {
  const FormatPair f = pair_of(t::fp32);
  const OperandSource src(t::fp32);
  std::mt19937_64 rng(0x5eed0002);
  fbref::MpfrExact mpfr;
  MismatchLog log;
  for (std::uint64_t i = 0; i < scaled(300000); ++i) {
    const std::uint32_t a = i % 3 == 0 ? src.any(rng) : (i % 3 == 1 ? src.finite(rng) : src.edge(rng));
    check_op(log, mpfr, OpKind::sqrt, f, Operands{1, a, 0, 0});
  }
  log.finish();
}

// ---- fast tier: wide formats, random and edge cases ------------------------------
TEST_CASE("bf16_add_random") { run_random_binary(OpKind::add, t::bf16, scaled(1000000), 101); }
TEST_CASE("bf16_sub_random") { run_random_binary(OpKind::sub, t::bf16, scaled(1000000), 102); }
TEST_CASE("bf16_mul_random") { run_random_binary(OpKind::mul, t::bf16, scaled(1000000), 103); }
TEST_CASE("bf16_div_random") { run_random_binary(OpKind::div, t::bf16, scaled(1000000), 104); }
TEST_CASE("fp16_add_random") { run_random_binary(OpKind::add, t::fp16, scaled(1000000), 201); }
TEST_CASE("fp16_sub_random") { run_random_binary(OpKind::sub, t::fp16, scaled(1000000), 202); }
TEST_CASE("fp16_mul_random") { run_random_binary(OpKind::mul, t::fp16, scaled(1000000), 203); }
TEST_CASE("fp16_div_random") { run_random_binary(OpKind::div, t::fp16, scaled(1000000), 204); }
TEST_CASE("fp32_add_random") { run_random_binary(OpKind::add, t::fp32, scaled(1000000), 301); }
TEST_CASE("fp32_sub_random") { run_random_binary(OpKind::sub, t::fp32, scaled(1000000), 302); }
TEST_CASE("fp32_mul_random") { run_random_binary(OpKind::mul, t::fp32, scaled(1000000), 303); }
TEST_CASE("fp32_div_random") { run_random_binary(OpKind::div, t::fp32, scaled(1000000), 304); }
TEST_CASE("tf32_add_random") { run_random_binary(OpKind::add, t::tf32, scaled(100000), 401); }
TEST_CASE("tf32_sub_random") { run_random_binary(OpKind::sub, t::tf32, scaled(100000), 402); }
TEST_CASE("tf32_mul_random") { run_random_binary(OpKind::mul, t::tf32, scaled(100000), 403); }
TEST_CASE("tf32_div_random") { run_random_binary(OpKind::div, t::tf32, scaled(100000), 404); }

TEST_CASE("bf16_fma_random") { run_random_fma(t::bf16, scaled(1000000), 501); }
TEST_CASE("fp16_fma_random") { run_random_fma(t::fp16, scaled(1000000), 502); }
TEST_CASE("fp32_fma_random") { run_random_fma(t::fp32, scaled(200000), 503); }
TEST_CASE("tf32_fma_random") { run_random_fma(t::tf32, scaled(100000), 504); }

TEST_CASE("small_formats_fma_random") {
  fbref::MpfrExact mpfr;
  MismatchLog log;
  std::mt19937_64 rng(0x5eed0003);
  for (const RefFormat* ref : kSmallFormats) {
    const FormatPair f = pair_of(*ref);
    const std::uint32_t mask = static_cast<std::uint32_t>(ref->pattern_count() - 1u);
    for (std::uint64_t i = 0; i < scaled(100000); ++i) {
      const Operands x{3, ref->to_container(static_cast<std::uint32_t>(rng()) & mask),
                       ref->to_container(static_cast<std::uint32_t>(rng()) & mask),
                       ref->to_container(static_cast<std::uint32_t>(rng()) & mask)};
      check_op(log, mpfr, OpKind::fma, f, x);
    }
  }
  log.finish();
}

// ---- slow tier ------------------------------------------------------------------
namespace {
void run_random_exhaustive(const RefFormat& ref, std::uint64_t pairs_per_op) {
  const FormatPair f = pair_of(ref);
  const OperandSource src(ref);
  for (OpKind op : {OpKind::add, OpKind::sub, OpKind::mul, OpKind::div, OpKind::fma}) {
    CAPTURE(fb::to_string(op));
    const std::uint64_t chunks = 1024;
    const MismatchLog log =
        parallel_for(chunks, [&](MismatchLog& l, fbref::MpfrExact& mpfr, std::uint64_t lo, std::uint64_t hi) {
          for (std::uint64_t chunk = lo; chunk < hi; ++chunk) {
            std::mt19937_64 rng(0x5eed1000 + chunk * 131 + static_cast<std::uint64_t>(op));
            for (std::uint64_t i = 0; i < pairs_per_op / chunks; ++i) {
              const Operands x = op == OpKind::fma ? random_triple(src, rng) : random_pair(op, src, rng);
              check_op(l, mpfr, op, f, x);
            }
          }
        });
    log.finish();
  }
}

void run_all_pairs_exhaustive(const RefFormat& ref, OpKind op) {
  const FormatPair f = pair_of(ref);
  const std::uint64_t n = ref.pattern_count();
  const MismatchLog log =
      parallel_for(n, [&](MismatchLog& l, fbref::MpfrExact& mpfr, std::uint64_t lo, std::uint64_t hi) {
        for (std::uint64_t a = lo; a < hi; a += exhaustive_stride())
          for (std::uint64_t b = 0; b < n; ++b)
            check_op(l, mpfr, op, f, Operands{2, container_of_index(ref, a), container_of_index(ref, b), 0});
      });
  log.finish();
}

void run_fma_exhaustive(const RefFormat& ref) {
  const FormatPair f = pair_of(ref);
  const std::uint64_t n = ref.pattern_count();
  const MismatchLog log =
      parallel_for(n, [&](MismatchLog& l, fbref::MpfrExact& mpfr, std::uint64_t lo, std::uint64_t hi) {
        for (std::uint64_t a = lo; a < hi; a += exhaustive_stride())
          for (std::uint64_t b = 0; b < n; ++b)
            for (std::uint64_t c = 0; c < n; ++c)
              check_op(l, mpfr, OpKind::fma, f,
                       Operands{3, container_of_index(ref, a), container_of_index(ref, b), container_of_index(ref, c)});
      });
  log.finish();
}
}  // namespace

TEST_CASE("bf16_random_1e8_exhaustive") { run_random_exhaustive(t::bf16, scaled(100000000)); }
TEST_CASE("fp16_random_1e8_exhaustive") { run_random_exhaustive(t::fp16, scaled(100000000)); }
TEST_CASE("fp32_random_1e8_exhaustive") { run_random_exhaustive(t::fp32, scaled(100000000)); }
TEST_CASE("e4m3_fma_exhaustive") { run_fma_exhaustive(t::e4m3); }
TEST_CASE("e5m2_fma_exhaustive") { run_fma_exhaustive(t::e5m2); }
TEST_CASE("small_formats_fma_exhaustive") {
  for (const RefFormat* ref : kSmallFormats) {
    CAPTURE(ref->name);
    if (ref != &t::e4m3 && ref != &t::e5m2) run_fma_exhaustive(*ref);
  }
}
TEST_CASE("bf16_add_all_pairs_exhaustive") { run_all_pairs_exhaustive(t::bf16, OpKind::add); }
TEST_CASE("bf16_mul_all_pairs_exhaustive") { run_all_pairs_exhaustive(t::bf16, OpKind::mul); }
TEST_CASE("fp16_add_all_pairs_exhaustive") { run_all_pairs_exhaustive(t::fp16, OpKind::add); }
TEST_CASE("fp16_mul_all_pairs_exhaustive") { run_all_pairs_exhaustive(t::fp16, OpKind::mul); }
TEST_CASE("fp32_cvt_all_inputs_exhaustive") {
  const FormatPair from = pair_of(t::fp32);
  for (const RefFormat* to_ref : {&t::bf16, &t::fp16, &t::e4m3, &t::e5m2}) {
    CAPTURE(to_ref->name);
    const FormatPair to = pair_of(*to_ref);
    const MismatchLog log = parallel_for(std::uint64_t{1} << 32,
                                         [&](MismatchLog& l, fbref::MpfrExact&, std::uint64_t lo, std::uint64_t hi) {
                                           for (std::uint64_t a = lo; a < hi; a += exhaustive_stride())
                                             check_convert(l, to, from, static_cast<std::uint32_t>(a));
                                         });
    log.finish();
  }
}
