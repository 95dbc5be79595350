// tests/test_array_rounding.cpp: fb::round_array (emu/array_rounding.hpp) against an
// independent MPFR-based fp32 -> format conversion, and against per-element
// fb::convert for stochastic rounding.
//
// Contract checked:
// - fp32 -> bf16, fp16, e4m3, e5m2, e2m1, every mode except sr, both overflow
//   policies: round_array's bits (any NaN for a NaN) and its OR-ed flags equal the
//   reference on (a) 2^22 strided fp32 inputs (every sign/exponent/top-13-mantissa
//   pattern, low bits cycling through tie, sticky and hashed patterns) and (b) the
//   edges of each format: every rounding midpoint of every binade (subnormal and
//   overflow binades included) and its fp32 neighbours. Flags are compared per
//   block of 64 elements (round_array ORs them), so a wrong flag is pinned to a block.
// - The reference rounds with MPFR: the fp32 value is scaled exactly onto the
//   format's grid (quantum 2^(max(e, emin) - man_bits)) and rounded to an integer by
//   mpfr_rint in the mode (mpfr_round for rna; mpfr_trunc plus "odd if inexact" for
//   rto). Tininess (after rounding) and overflow come from the same rounding with an
//   unbounded exponent range. Format facts and result packing come from
//   tests/mpfr_reference.hpp (written independently of formats/ and emu/).
// - Zeros and NaNs follow the spec directly (zero keeps its sign, NaN stays NaN
//   with no flag, +0 with invalid in e2m1). fp32 infinities are the one special
//   input whose satfinite packing the spec leaves open, so they are checked only for
//   agreement with fb::convert (round_array promises to equal it).
// - sr: round_array equals per-element fb::convert with position first_position + i
//   (a consistency check, not an independent one), for several sr_bits and seeds,
//   and splitting an array into chunks with matching positions changes nothing;
//   also across a 2^32 position boundary (where the stream's key changes), with
//   mul_array / add_array under sr against fb::mul / fb::add there.
// - add_array, mul_array, fma_array equal the scalar fb::add / fb::mul / fb::fma
//   (the reference here: those are checked against MPFR in tests/test_ops_mpfr.cpp)
//   in bits and per-block flags, every mode and both policies, sr with several
//   sr_bits: every operand pair of e4m3, e5m2, e2m1; for bf16 and fp16 a hashed
//   sample of pairs, the specials, and nearby pairs where additions cancel.
#include <doctest/doctest.h>
#include <mpfr.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "emu/array_rounding.hpp"
#include "emu/ops.hpp"
#include "formats/format.hpp"
#include "tests/mpfr_reference.hpp"
#include "tests/reference_modes.hpp"
#include "tests/test_scale.hpp"

namespace {

using fbref::Mode;
using fbref::Policy;
using fbref::RefFormat;
using fbref::Result;

using fb_test::sanitizer_scale;

struct FormatPair {
  fb::Format emu;
  RefFormat ref;
};
const FormatPair kFormats[] = {{fb::formats::bf16, fbref::table::bf16},
                               {fb::formats::fp16, fbref::table::fp16},
                               {fb::formats::e4m3, fbref::table::e4m3},
                               {fb::formats::e5m2, fbref::table::e5m2},
                               {fb::formats::e2m1, fbref::table::e2m1}};

using fb_test::to_emu;

// ---- the MPFR reference -------------------------------------------------------------

// One per thread: MPFR scratch variables; MPFR's global state is left alone.
class MpfrConvert {
 public:
  MpfrConvert() { mpfr_inits2(96, x_, scaled_, k_, static_cast<mpfr_ptr>(nullptr)); }
  ~MpfrConvert() { mpfr_clears(x_, scaled_, k_, static_cast<mpfr_ptr>(nullptr)); }
  MpfrConvert(const MpfrConvert&) = delete;
  MpfrConvert& operator=(const MpfrConvert&) = delete;

  // fp32 `in` (finite, non-zero, or zero/NaN) rounded into f, under each policy
  // ([0] ieee, [1] satfinite).
  struct PerPolicy {
    Result result[2];
  };
  PerPolicy convert(const RefFormat& f, float in, Mode mode) {
    // The policy matters only on overflow: round once, repack only then.
    overflowed_ = false;
    const Result ieee = convert_once(f, in, mode, Policy::ieee);
    return {{ieee, overflowed_ ? convert_overflow(f, in, mode, Policy::satfinite) : ieee}};
  }

 private:
  Result convert_once(const RefFormat& f, float in, Mode mode, Policy policy) {
    if (std::isnan(in)) return fbref::detail::nan_result(f, 0);
    const bool negative = std::signbit(in);
    if (in == 0.0f) return fbref::detail::zero_result(f, negative, 0);
    mpfr_set_flt(x_, in, MPFR_RNDN);                       // exact: 24 <= 96 bits
    const int e = static_cast<int>(mpfr_get_exp(x_)) - 1;  // |in| in [2^e, 2^(e+1))
    const int emin = f.emin();

    // Unbounded exponent range: the quantum follows the value's own binade.
    bool unbounded_inexact = false;
    const std::uint64_t k_unbounded = round_on_grid(e - f.man_bits, mode, unbounded_inexact);
    // |result| = k_unbounded * 2^(e - man_bits); compare with 2^emin and max finite.
    const bool tiny = e < emin && std::ldexp(static_cast<double>(k_unbounded), e - f.man_bits) < std::ldexp(1.0, emin);
    const double max_finite = std::ldexp(static_cast<double>(f.max_significand()), f.emax() - f.man_bits);
    const bool overflow = std::ldexp(static_cast<double>(k_unbounded), e - f.man_bits) > max_finite;
    if (overflow) {
      overflowed_ = true;
      return convert_overflow(f, in, mode, policy);
    }

    // The format's grid: below 2^emin the quantum stays at the subnormal one (above
    // it, the grid is the unbounded one and the rounding above already holds).
    const int quantum = std::max(e, emin) - f.man_bits;
    bool inexact = unbounded_inexact;
    std::uint64_t k = e >= emin ? k_unbounded : round_on_grid(quantum, mode, inexact);
    fbref::RefFlags flags = inexact ? fbref::kInexact : 0;
    if (tiny && inexact) flags |= fbref::kUnderflow;
    if (k == 0) return fbref::detail::zero_result(f, negative, flags);
    // Encode k * 2^quantum: normalise k to man_bits + 1 bits (a carry adds a bit).
    int q = quantum;
    if (k >> (f.man_bits + 1)) {
      k >>= 1;
      ++q;
    }
    const std::uint64_t hidden = std::uint64_t{1} << f.man_bits;
    if (k < hidden) {  // subnormal (q is the subnormal quantum here)
      return {fbref::detail::encode(f, negative, 0, static_cast<std::uint32_t>(k)), flags, false};
    }
    const int exp_field = q + f.man_bits + f.bias;
    return {fbref::detail::encode(f, negative, static_cast<std::uint32_t>(exp_field),
                                  static_cast<std::uint32_t>(k - hidden)),
            flags, false};
  }

  // The value rounded with unbounded exponent range exceeds max finite.
  static Result convert_overflow(const RefFormat& f, float in, Mode mode, Policy policy) {
    const bool negative = std::signbit(in);
    const fbref::RefFlags flags = fbref::kOverflow | fbref::kInexact;
    const bool to_infinity =
        mode == Mode::rne || mode == Mode::rna || (mode == Mode::rup && !negative) || (mode == Mode::rdn && negative);
    if (policy == Policy::satfinite || !to_infinity || !f.has_nan()) {
      return fbref::detail::max_finite_result(f, negative, flags);
    }
    if (f.has_inf()) return {fbref::detail::encode(f, negative, f.exp_ones(), 0), flags, false};
    return fbref::detail::nan_result(f, flags);
  }

  // |x| / 2^quantum rounded to an integer by MPFR in `mode` (the sign of x decides
  // the directed modes), returned as a magnitude.
  std::uint64_t round_on_grid(int quantum, Mode mode, bool& inexact) {
    mpfr_mul_2si(scaled_, x_, -quantum, MPFR_RNDN);  // exact
    int ternary = 0;
    switch (mode) {
      case Mode::rne:
        ternary = mpfr_rint(k_, scaled_, MPFR_RNDN);
        break;
      case Mode::rna:
        ternary = mpfr_round(k_, scaled_);
        break;
      case Mode::rtz:
        ternary = mpfr_rint(k_, scaled_, MPFR_RNDZ);
        break;
      case Mode::rup:
        ternary = mpfr_rint(k_, scaled_, MPFR_RNDU);
        break;
      case Mode::rdn:
        ternary = mpfr_rint(k_, scaled_, MPFR_RNDD);
        break;
      case Mode::rto:
        ternary = mpfr_trunc(k_, scaled_);
        break;
    }
    inexact = ternary != 0;
    mpfr_abs(k_, k_, MPFR_RNDN);
    std::uint64_t k = mpfr_get_ui(k_, MPFR_RNDN);            // k < 2^26: fits
    if (mode == Mode::rto && inexact && (k & 1u) == 0) ++k;  // land on the odd neighbour
    return k;
  }

  mpfr_t x_, scaled_, k_;
  bool overflowed_ = false;
};

// ---- inputs -----------------------------------------------------------------------

// 2^22 strided fp32 patterns: the top 22 bits take every value; the low 10 bits
// cycle through exact, tie-like and sticky patterns.
std::vector<float> strided_inputs(std::uint32_t count) {
  static const std::uint32_t low_patterns[] = {0x000, 0x001, 0x200, 0x1ff, 0x3ff, 0x155};
  std::vector<float> v;
  v.reserve(count);
  const std::uint32_t step = static_cast<std::uint32_t>((std::uint64_t{1} << 32) / count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t hashed = static_cast<std::uint32_t>(fb::mix64(i)) & 0x3ffu;
    const std::uint32_t low = (i % 7 == 6) ? hashed : low_patterns[i % 7 % 6];
    v.push_back(std::bit_cast<float>(i * step + (low & (step - 1))));
  }
  return v;
}

// Every rounding midpoint of the format's grid that fp32 can hold, in every binade
// from below the smallest subnormal to above max finite, with its fp32 neighbours
// (up to 2 ulps away), both signs.
std::vector<float> edge_inputs(const RefFormat& f) {
  std::vector<float> v;
  const int emin = f.emin();
  const int top = f.emax() + 2;
  auto push_around = [&](double mid) {
    const float m = static_cast<float>(mid);
    if (static_cast<double>(m) != mid || !std::isfinite(m)) return;
    float lo = m, hi = m;
    v.push_back(m);
    for (int step = 0; step < 2; ++step) {
      lo = std::nextafter(lo, 0.0f);
      hi = std::nextafter(hi, INFINITY);
      v.push_back(lo);
      if (std::isfinite(hi)) v.push_back(hi);
    }
  };
  // Below the subnormal grid: halves and quarters of the smallest subnormal.
  const int sub_quantum = emin - f.man_bits;
  for (int k = 1; k < 8; ++k) push_around(std::ldexp(k, sub_quantum - 3));
  for (int b = std::max(sub_quantum, -149); b <= top && b <= 127; ++b) {
    const int quantum = std::max(b, emin) - f.man_bits;
    const int steps = b >= emin ? (1 << f.man_bits) : (1 << (b - sub_quantum));
    for (int j = 0; j < steps; ++j) push_around(std::ldexp(1.0, b) + std::ldexp(j + 0.5, quantum));
  }
  const std::size_t positive = v.size();
  for (std::size_t i = 0; i < positive; ++i) v.push_back(-v[i]);
  v.push_back(0.0f);
  v.push_back(-0.0f);
  v.push_back(std::nanf(""));
  v.push_back(-std::nanf(""));
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(-std::numeric_limits<float>::infinity());
  v.push_back(std::numeric_limits<float>::max());
  v.push_back(std::numeric_limits<float>::denorm_min());
  return v;
}

// ---- comparison -----------------------------------------------------------------------

constexpr std::size_t kFlagBlock = 64;

struct Failure {
  std::size_t index;
  float input;
  int policy;  // index into fbref::kPolicies
  std::uint32_t got_bits, want_bits;
  unsigned got_flags, want_flags;
};

// Runs round_array on the inputs (block by block, so flags are per block) and
// compares with the reference on `threads` threads. Returns the first failures.
// Both policies in one pass over the reference: [0] ieee, [1] satfinite.
// The flags-free path (flags_out null, a loop compiled without flags) runs too, in
// pieces of odd lengths (vector tails, chunk boundaries), and its bits are checked
// against the same reference (policy index + 2 in a Failure).
std::vector<Failure> compare_with_mpfr(const FormatPair& fmt, Mode mode, const std::vector<float>& in) {
  fb::RoundingSpec specs[2];
  std::vector<std::uint32_t> outs[2];
  std::vector<fb::Flags> block_flags_by_policy[2];
  for (int p = 0; p < 2; ++p) {
    specs[p].mode = to_emu(mode);
    specs[p].overflow = to_emu(fbref::kPolicies[p]);
    outs[p].resize(in.size());
    block_flags_by_policy[p].resize((in.size() + kFlagBlock - 1) / kFlagBlock);
    for (std::size_t b = 0; b < block_flags_by_policy[p].size(); ++b) {
      const std::size_t first = b * kFlagBlock;
      const std::size_t n = std::min(kFlagBlock, in.size() - first);
      fb::round_array(fmt.emu, in.data() + first, outs[p].data() + first, n, specs[p], first,
                      &block_flags_by_policy[p][b]);
    }
  }
  std::vector<std::uint32_t> flags_free_outs[2];
  for (int p = 0; p < 2; ++p) {
    flags_free_outs[p].assign(in.size(), 0xdeadbeefu);
    const std::size_t pieces[] = {1, 7, 1023, 1025, 4099};
    std::size_t first = 0;
    for (std::size_t k = 0; first < in.size(); ++k) {
      const std::size_t count = std::min(k < 5 ? pieces[k] : in.size(), in.size() - first);
      fb::round_array(fmt.emu, in.data() + first, flags_free_outs[p].data() + first, count, specs[p], first, nullptr);
      first += count;
    }
  }
  // The narrow-container overloads (uint16 for 16-bit containers, uint8 for 8-bit
  // ones), flags-free in the same odd pieces and flagged per block, widened here for
  // the comparison; their block flags must equal the uint32 form's.
  const int container_bits = fmt.emu.container_bits;
  const bool has_narrow = container_bits == 16 || container_bits == 8;
  std::vector<std::uint32_t> narrow_outs[2][2];  // [policy][0: flagged, 1: flags-free]
  bool narrow_flags_differ = false;
  auto run_narrow = [&](const fb::RoundingSpec& spec, std::uint32_t* widened, std::size_t first, std::size_t count,
                        fb::Flags* flags) {
    if (container_bits == 16) {
      std::vector<std::uint16_t> tmp(count, 0xbeef);
      fb::round_array(fmt.emu, in.data() + first, tmp.data(), count, spec, first, flags);
      std::copy(tmp.begin(), tmp.end(), widened);
    } else {
      std::vector<std::uint8_t> tmp(count, 0xbe);
      fb::round_array(fmt.emu, in.data() + first, tmp.data(), count, spec, first, flags);
      std::copy(tmp.begin(), tmp.end(), widened);
    }
  };
  if (has_narrow) {
    for (int p = 0; p < 2; ++p) {
      narrow_outs[p][0].assign(in.size(), 0xdeadbeefu);
      narrow_outs[p][1].assign(in.size(), 0xdeadbeefu);
      for (std::size_t b = 0; b < block_flags_by_policy[p].size(); ++b) {
        const std::size_t first = b * kFlagBlock;
        fb::Flags flags = 0;
        run_narrow(specs[p], narrow_outs[p][0].data() + first, first, std::min(kFlagBlock, in.size() - first), &flags);
        narrow_flags_differ = narrow_flags_differ || flags != block_flags_by_policy[p][b];
      }
      const std::size_t pieces[] = {3, 9, 1021, 1027, 4097};
      std::size_t first = 0;
      for (std::size_t k = 0; first < in.size(); ++k) {
        const std::size_t count = std::min(k < 5 ? pieces[k] : in.size(), in.size() - first);
        run_narrow(specs[p], narrow_outs[p][1].data() + first, first, count, nullptr);
        first += count;
      }
    }
  }
  const std::size_t block_count = block_flags_by_policy[0].size();

  const unsigned thread_count = 2;
  std::vector<std::vector<Failure>> failures(thread_count);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < thread_count; ++t) {
    pool.emplace_back([&, t] {
      MpfrConvert ref;
      for (std::size_t b = t; b < block_count; b += thread_count) {
        const std::size_t first = b * kFlagBlock;
        const std::size_t n = std::min(kFlagBlock, in.size() - first);
        unsigned want_flags[2] = {0, 0};
        for (std::size_t i = first; i < first + n; ++i) {
          const float x = in[i];
          const auto want = ref.convert(fmt.ref, x, mode);
          for (int p = 0; p < 2; ++p) {
            for (int path = 0; path < (has_narrow ? 4 : 2); ++path) {
              // 0: flagged, 1: flags-free, 2: narrow flagged, 3: narrow flags-free
              const std::uint32_t out = path == 0   ? outs[p][i]
                                        : path == 1 ? flags_free_outs[p][i]
                                                    : narrow_outs[p][path - 2][i];
              const int tag = p + 2 * path;
              if (std::isinf(x)) {
                // The spec leaves satfinite packing of an infinite input open: only
                // agreement with the scalar conversion is required.
                const fb::Rounded r =
                    fb::convert(fmt.emu, fb::formats::fp32, std::bit_cast<std::uint32_t>(x), specs[p], i);
                if (path == 0) want_flags[p] |= r.flags;
                if (r.bits != out && failures[t].size() < 8) failures[t].push_back({i, x, tag, out, r.bits, 0, 0});
                continue;
              }
              if (path == 0) want_flags[p] |= want.result[p].flags;
              // Compared in the format's bit layout: where a narrow format sits in its
              // container is the format table's business, not this unit's.
              const std::uint32_t got = fb::to_layout(fmt.emu, out), expected = fmt.ref.to_layout(want.result[p].bits);
              const bool same = want.result[p].is_nan ? fb::is_nan(fmt.emu, out) : got == expected;
              if (!same && failures[t].size() < 8) failures[t].push_back({i, x, tag, got, expected, 0, 0});
            }
          }
        }
        for (int p = 0; p < 2; ++p) {
          if (want_flags[p] != block_flags_by_policy[p][b] && failures[t].size() < 8)
            failures[t].push_back({first, in[first], p, 0, 0, block_flags_by_policy[p][b], want_flags[p]});
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  std::vector<Failure> all;
  for (auto& f : failures) all.insert(all.end(), f.begin(), f.end());
  if (narrow_flags_differ) all.push_back({0, in[0], 8, 0, 0, 0, 0});
  return all;
}

// Failure::policy is policy + 2 * path; 8 marks narrow-container block flags that differ.
constexpr const char* kPathNames[] = {"", " (flags-free path)", " (narrow container, flagged)",
                                      " (narrow container, flags-free)", " (narrow container: block flags differ)"};

void check_all_modes(const std::vector<float>& common_inputs) {
  for (const FormatPair& fmt : kFormats) {
    std::vector<float> in = common_inputs;
    const std::vector<float> edges = edge_inputs(fmt.ref);
    in.insert(in.end(), edges.begin(), edges.end());
    for (Mode mode : fbref::kModes) {
      const auto failures = compare_with_mpfr(fmt, mode, in);
      CAPTURE(fmt.emu.name);
      CAPTURE(fbref::name_of(mode));
      for (const Failure& f : failures) {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "%s%s: index %zu input 0x%08x: bits got 0x%x want 0x%x, block flags got %u want %u",
                      fbref::name_of(fbref::kPolicies[f.policy % 2]), kPathNames[std::min(f.policy / 2, 4)], f.index,
                      std::bit_cast<std::uint32_t>(f.input), f.got_bits, f.want_bits, f.got_flags, f.want_flags);
        FAIL_CHECK(buf);
      }
      CHECK(failures.empty());
    }
  }
}

}  // namespace

TEST_CASE(
    "round_array equals an MPFR conversion, flagged and flags-free paths: bf16 fp16 e4m3 e5m2 e2m1, all modes but sr, "
    "both policies") {
  const std::uint32_t count = sanitizer_scale() ? (1u << 15) : (1u << 22);
  check_all_modes(strided_inputs(count));
}

TEST_CASE("round_array sr equals per-element convert, and chunking keeps positions") {
  const std::uint32_t count = sanitizer_scale() ? (1u << 12) : (1u << 18);
  std::vector<float> in = strided_inputs(count);
  for (const FormatPair& fmt : kFormats) {
    const std::vector<float> edges = edge_inputs(fmt.ref);
    std::vector<float> all = in;
    all.insert(all.end(), edges.begin(), edges.end());
    for (int sr_bits : {1, 3, 8, 24, 32}) {
      for (fb::OverflowPolicy policy : {fb::OverflowPolicy::ieee, fb::OverflowPolicy::satfinite}) {
        fb::RoundingSpec spec;
        spec.mode = fb::RoundingMode::sr;
        spec.sr_bits = sr_bits;
        spec.seed = 0x1234u + static_cast<unsigned>(sr_bits);
        spec.overflow = policy;
        const std::uint64_t first_position = 1000003;
        std::vector<std::uint32_t> out(all.size()), chunked(all.size());
        fb::Flags flags = 0, chunk_flags = 0;
        fb::round_array(fmt.emu, all.data(), out.data(), all.size(), spec, first_position, &flags);
        const std::size_t split = all.size() / 3;
        fb::Flags part = 0;
        fb::round_array(fmt.emu, all.data(), chunked.data(), split, spec, first_position, &part);
        chunk_flags |= part;
        fb::round_array(fmt.emu, all.data() + split, chunked.data() + split, all.size() - split, spec,
                        first_position + split, &part);
        chunk_flags |= part;
        fb::Flags want_flags = 0;
        std::size_t mismatches = 0, first_bad = 0;
        for (std::size_t i = 0; i < all.size(); ++i) {
          const fb::Rounded r =
              fb::convert(fmt.emu, fb::formats::fp32, std::bit_cast<std::uint32_t>(all[i]), spec, first_position + i);
          want_flags |= r.flags;
          if (r.bits != out[i] || chunked[i] != out[i]) {
            if (mismatches++ == 0) first_bad = i;
          }
        }
        // The flags-free path (flags_out null), in one call and in two pieces.
        std::vector<std::uint32_t> flags_free(all.size(), 0xdeadbeefu), flags_free_split(all.size(), 0xdeadbeefu);
        fb::round_array(fmt.emu, all.data(), flags_free.data(), all.size(), spec, first_position);
        fb::round_array(fmt.emu, all.data(), flags_free_split.data(), split + 1, spec, first_position);
        fb::round_array(fmt.emu, all.data() + split + 1, flags_free_split.data() + split + 1, all.size() - split - 1,
                        spec, first_position + split + 1);
        std::size_t flags_free_mismatches = 0;
        for (std::size_t i = 0; i < all.size(); ++i) {
          const fb::Rounded r =
              fb::convert(fmt.emu, fb::formats::fp32, std::bit_cast<std::uint32_t>(all[i]), spec, first_position + i);
          flags_free_mismatches += (r.bits != flags_free[i]) + (r.bits != flags_free_split[i]);
        }
        CAPTURE(fmt.emu.name);
        CAPTURE(sr_bits);
        CAPTURE(first_bad);
        CHECK(mismatches == 0);
        CHECK(flags_free_mismatches == 0);
        CHECK(flags == want_flags);
        CHECK(chunk_flags == want_flags);
      }
    }
  }
}

TEST_CASE("round_array and the batched ops under sr equal the scalar calls across a 2^32 position boundary") {
  // The array loops derive the stochastic key once per 2^32 positions and split
  // arrays there; elements on both sides must get fb::convert's / fb::add's draws.
  std::vector<float> in;
  for (int i = 0; i < 3000; ++i) in.push_back(1.0f + static_cast<float>(i) * 0x1.3p-19f);  // discards ~1/3-like bits
  fb::RoundingSpec spec;
  spec.mode = fb::RoundingMode::sr;
  spec.sr_bits = 24;
  spec.seed = 77;
  for (std::uint64_t first : {(std::uint64_t{1} << 32) - 1000, (std::uint64_t{5} << 32) - 1}) {
    for (const fb::Format& f : {fb::formats::bf16, fb::formats::fp16, fb::formats::e4m3}) {
      std::vector<std::uint32_t> out(in.size());
      fb::Flags flags = 0, want_flags = 0;
      fb::round_array(f, in.data(), out.data(), in.size(), spec, first, &flags);
      std::size_t bad = 0, ups = 0;
      for (std::size_t i = 0; i < in.size(); ++i) {
        const fb::Rounded r = fb::convert(f, fb::formats::fp32, std::bit_cast<std::uint32_t>(in[i]), spec, first + i);
        want_flags |= r.flags;
        bad += r.bits != out[i];
        ups += r.bits != fb::convert(f, fb::formats::fp32, std::bit_cast<std::uint32_t>(in[i]), {}, 0).bits;
      }
      CAPTURE(f.name);
      CAPTURE(first);
      CHECK(bad == 0);
      CHECK(flags == want_flags);
      CHECK(ups > 0);  // sr is not rne here, so the comparison has draws to compare
      // mul_array under sr runs the lanes; add_array the scalar op: both keyed the same.
      std::vector<std::uint32_t> a(in.size()), b(in.size()), prod(in.size()), sum(in.size());
      fb::round_array(f, in.data(), a.data(), in.size(), {}, 0);
      for (std::size_t i = 0; i < in.size(); ++i) b[i] = a[(i * 7) % a.size()];
      fb::mul_array(f, a.data(), b.data(), prod.data(), a.size(), spec, first);
      fb::add_array(f, a.data(), b.data(), sum.data(), a.size(), spec, first);
      std::size_t bad_mul = 0, bad_add = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        bad_mul += fb::mul(f, a[i], b[i], spec, first + i).bits != prod[i];
        bad_add += fb::add(f, a[i], b[i], spec, first + i).bits != sum[i];
      }
      CHECK(bad_mul == 0);
      CHECK(bad_add == 0);
    }
  }
}

TEST_CASE("round_array on other formats (runtime-format loop) equals the MPFR conversion") {
  // Formats outside the compiled-in list take the generic loop; check one of each
  // special-encoding family that the reference table has.
  const FormatPair others[] = {{fb::formats::e5m2fnuz, fbref::table::e5m2fnuz},
                               {fb::formats::e3m2, fbref::table::e3m2},
                               {fb::formats::tf32, fbref::table::tf32}};
  const std::vector<float> in = strided_inputs(sanitizer_scale() ? (1u << 12) : (1u << 16));
  for (const FormatPair& fmt : others) {
    for (Mode mode : fbref::kModes) {
      const auto failures = compare_with_mpfr(fmt, mode, in);
      CAPTURE(fmt.emu.name);
      CAPTURE(fbref::name_of(mode));
      CHECK(failures.empty());
    }
  }
}

TEST_CASE("round_array handles n = 0 and a null flags pointer") {
  fb::RoundingSpec spec;
  fb::Flags flags = 0xff;
  fb::round_array(fb::formats::bf16, nullptr, static_cast<std::uint32_t*>(nullptr), 0, spec, 0, &flags);
  CHECK(flags == 0);
  const float one_third = 1.0f / 3.0f;  // 0x3eaaaaab: bf16 rne gives 0x3eab
  std::uint32_t out = 0;
  fb::round_array(fb::formats::bf16, &one_third, &out, 1, spec, 0, nullptr);
  CHECK(out == 0x3eabu);
}

TEST_CASE("round_array's narrow containers: a format of another container width is refused") {
  const float x = 1.0f;
  std::uint16_t out16 = 0;
  std::uint8_t out8 = 0;
  const fb::RoundingSpec spec;
  CHECK_THROWS_AS(fb::round_array(fb::formats::e4m3, &x, &out16, 1, spec), std::invalid_argument);
  CHECK_THROWS_AS(fb::round_array(fb::formats::tf32, &x, &out16, 1, spec), std::invalid_argument);
  CHECK_THROWS_AS(fb::round_array(fb::formats::bf16, &x, &out8, 1, spec), std::invalid_argument);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The fp16 fast path uses the CPU's conversion instruction, which MXCSR's DAZ (denormal
// inputs read as zero) and FTZ could affect; round_array must give IEEE results
// whatever the caller's MXCSR holds. Expected values from the definitions: the
// smallest fp32 subnormal rounded up is fp16's smallest subnormal 2^-24 (0x0001);
// 1.5 * 2^-24 rounded to nearest even is 2^-23 (0x0002), a subnormal FTZ would flush.
TEST_CASE("round_array to fp16 ignores MXCSR's DAZ and FTZ") {
  const unsigned saved = _mm_getcsr();
  const float inputs[2] = {std::numeric_limits<float>::denorm_min(), 0x1.8p-24f};
  for (unsigned csr_bits : {0x0040u, 0x8000u, 0x8040u}) {
    _mm_setcsr(saved | csr_bits);
    fb::RoundingSpec spec;
    std::uint16_t out[2] = {0xbeef, 0xbeef};
    spec.mode = fb::RoundingMode::rup;
    fb::round_array(fb::formats::fp16, inputs, out, 1, spec);
    spec.mode = fb::RoundingMode::rne;
    fb::round_array(fb::formats::fp16, inputs + 1, out + 1, 1, spec);
    std::uint32_t out32[64];
    std::vector<float> many(64, inputs[0]);  // a whole vector's worth, not just the scalar tail
    spec.mode = fb::RoundingMode::rup;
    fb::round_array(fb::formats::fp16, many.data(), out32, 64, spec);
    _mm_setcsr(saved);
    CAPTURE(csr_bits);
    CHECK(out[0] == 0x0001);
    CHECK(out[1] == 0x0002);
    CHECK(std::all_of(out32, out32 + 64, [](std::uint32_t b) { return b == 0x0001; }));
  }
}
#endif

// ---- batched scalar ops (add_array, mul_array, fma_array) -----------------------------
// Reference: the scalar fb::add / fb::mul / fb::fma, which tests/test_ops_mpfr.cpp
// checks against MPFR; the batched calls promise identical bits and flags.
namespace {

enum class BatchOp { add, mul, fma };

// Operand patterns: every pattern of an 8-bit format; for 16-bit formats a hashed
// sample plus the specials, zeros, subnormals and extremes of the format.
std::vector<std::uint32_t> operand_patterns(const fb::Format& f, std::size_t sample) {
  std::vector<std::uint32_t> v;
  const std::uint32_t count = 1u << f.width();
  if (count <= 256) {
    for (std::uint32_t x = 0; x < count; ++x) v.push_back(x);
    return v;
  }
  for (std::size_t i = 0; i < sample; ++i) v.push_back(static_cast<std::uint32_t>(fb::mix64(i + 77)) & (count - 1));
  const std::uint32_t s = f.sign_mask();
  for (std::uint32_t x : {0u, 1u, 2u, f.man_mask(), f.man_mask() + 1u, f.max_finite_pattern(), f.inf_pattern(),
                          f.quiet_nan_pattern(), f.inf_pattern() + 1u}) {
    v.push_back(x);
    v.push_back(x | s);
  }
  return v;
}

void check_batched(const fb::Format& f, BatchOp op, const std::vector<std::uint32_t>& a,
                   const std::vector<std::uint32_t>& b, const std::vector<std::uint32_t>& c,
                   const fb::RoundingSpec& spec) {
  const std::size_t n = a.size();
  const std::uint64_t first = 4242;
  std::vector<std::uint32_t> out(n);
  std::size_t bad_bits = 0, bad_flags = 0, first_bad = 0;
  for (std::size_t start = 0; start < n; start += kFlagBlock) {
    const std::size_t m = std::min(kFlagBlock, n - start);
    fb::Flags got_flags = 0;
    switch (op) {
      case BatchOp::add:
        fb::add_array(f, &a[start], &b[start], &out[start], m, spec, first + start, &got_flags);
        break;
      case BatchOp::mul:
        fb::mul_array(f, &a[start], &b[start], &out[start], m, spec, first + start, &got_flags);
        break;
      case BatchOp::fma:
        fb::fma_array(f, &a[start], &b[start], &c[start], &out[start], m, spec, first + start, &got_flags);
        break;
    }
    fb::Flags want_flags = 0;
    for (std::size_t i = start; i < start + m; ++i) {
      fb::Rounded r{};
      switch (op) {
        case BatchOp::add:
          r = fb::add(f, a[i], b[i], spec, first + i);
          break;
        case BatchOp::mul:
          r = fb::mul(f, a[i], b[i], spec, first + i);
          break;
        case BatchOp::fma:
          r = fb::fma(f, a[i], b[i], c[i], spec, first + i);
          break;
      }
      want_flags |= r.flags;
      if (r.bits != out[i] && bad_bits++ == 0) first_bad = i;
    }
    if (want_flags != got_flags) ++bad_flags;
  }
  CAPTURE(f.name);
  CAPTURE(static_cast<int>(op));
  CAPTURE(fb::to_string(spec.mode));
  CAPTURE(fb::to_string(spec.overflow));
  CAPTURE(spec.sr_bits);
  CAPTURE(first_bad);
  CHECK(bad_bits == 0);
  CHECK(bad_flags == 0);
}

}  // namespace

TEST_CASE("mul_array, add_array, fma_array equal the scalar ops: bits and flags, all modes") {
  const std::size_t sample = sanitizer_scale() ? 64 : 700;
  const fb::Format formats[] = {fb::formats::bf16, fb::formats::fp16, fb::formats::e4m3, fb::formats::e5m2,
                                fb::formats::e2m1};
  for (const fb::Format& f : formats) {
    const std::vector<std::uint32_t> values = operand_patterns(f, sample);
    // Every pair of the value list (all 2^16 pairs for 8-bit formats).
    std::vector<std::uint32_t> a, b, c;
    for (std::size_t i = 0; i < values.size(); ++i) {
      for (std::size_t j = 0; j < values.size(); ++j) {
        a.push_back(values[i]);
        b.push_back(values[j]);
        c.push_back(values[(i * 7 + j * 13) % values.size()]);
      }
    }
    // Nearby operands (16-bit formats; the 8-bit ones have every pair already):
    // equal and close exponents, both signs, where additions cancel.
    if (f.width() > 8) {
      const std::uint32_t count = 1u << f.width();
      for (std::size_t i = 0; i < (sanitizer_scale() ? 50u : 2000u); ++i) {
        const std::uint32_t x = static_cast<std::uint32_t>(fb::mix64(i + 1234567)) & (count - 1);
        for (int k = -24; k <= 24; ++k) {
          for (std::uint32_t y : {x + static_cast<std::uint32_t>(k), x + (static_cast<std::uint32_t>(k) << f.man_bits),
                                  x ^ f.sign_mask()}) {
            a.push_back(x);
            b.push_back((y ^ (k & 1 ? f.sign_mask() : 0u)) & (count - 1));
            c.push_back(x);
          }
        }
      }
    }
    std::vector<fb::RoundingSpec> specs;
    for (fb::RoundingMode m : fb::kAllDeterministicModes) {
      for (fb::OverflowPolicy p : {fb::OverflowPolicy::ieee, fb::OverflowPolicy::satfinite}) {
        fb::RoundingSpec s;
        s.mode = m;
        s.overflow = p;
        specs.push_back(s);
      }
    }
    for (int r : {1, 5, 24, 32}) {
      fb::RoundingSpec s;
      s.mode = fb::RoundingMode::sr;
      s.sr_bits = r;
      s.seed = 99u + static_cast<unsigned>(r);
      specs.push_back(s);
    }
    for (const fb::RoundingSpec& s : specs) {
      check_batched(f, BatchOp::mul, a, b, c, s);
      check_batched(f, BatchOp::add, a, b, c, s);
      check_batched(f, BatchOp::fma, a, b, c, s);
    }
  }
}

TEST_CASE("fma_array on fp16 and bf16 where c nearly cancels a*b: equals the scalar fma, all modes") {
  // fp16's 22-bit products fill add_lane's window with no spare bits (W = 0): the
  // cases that test its round-to-odd argument are c within a few ulps of -a*b
  // (deep cancellation, d = 0 and 1) and c a few binades below a*b (sticky bits).
  for (const fb::Format& f : {fb::formats::fp16, fb::formats::bf16}) {
    const std::uint32_t count = 1u << f.width();
    std::vector<std::uint32_t> a, b, c;
    const std::size_t samples = sanitizer_scale() ? 60 : 3000;
    for (std::size_t i = 0; i < samples; ++i) {
      const std::uint32_t x = static_cast<std::uint32_t>(fb::mix64(i + 99)) & (count - 1);
      const std::uint32_t y = static_cast<std::uint32_t>(fb::mix64(i + 5555)) & (count - 1);
      auto finite = [&](std::uint32_t v) {
        const fb::ValueClass k = fb::decode(f, v).cls;
        return k != fb::ValueClass::nan && k != fb::ValueClass::infinite;
      };
      if (!finite(x) || !finite(y)) continue;
      const std::uint32_t product = fb::mul(f, x, y, {}).bits;  // rne product, as a starting point
      if (!finite(product)) continue;
      const std::uint32_t negated = product ^ f.sign_mask();
      for (int k = -6; k <= 6; ++k) {
        for (std::uint32_t z : {negated + static_cast<std::uint32_t>(k), product + static_cast<std::uint32_t>(k),
                                negated - (static_cast<std::uint32_t>(k + 6) << f.man_bits)}) {
          a.push_back(x);
          b.push_back(y);
          c.push_back(z & (count - 1));
        }
      }
    }
    for (fb::RoundingMode m : fb::kAllDeterministicModes) {
      for (fb::OverflowPolicy p : {fb::OverflowPolicy::ieee, fb::OverflowPolicy::satfinite}) {
        fb::RoundingSpec s;
        s.mode = m;
        s.overflow = p;
        check_batched(f, BatchOp::fma, a, b, c, s);
      }
    }
  }
}

TEST_CASE("add_array, mul_array, fma_array with zero operands follow IEEE 754's exact-zero rules, all modes") {
  // The lane loops compute zero operands themselves (a zero significand far below
  // every other value) instead of handing them to the scalar ops, so their results
  // are checked here against the rules written out (IEEE 754-2019 §6.3): x + ±0 =
  // x, x * ±0 = a zero with the XOR of the signs, a*b + c with a*b = 0 and c != 0
  // is c, all exact (no flag); a sum of two zeros (or of a zero product and a zero)
  // is that zero when the signs agree, else +0, or -0 under rdn.
  for (const fb::Format& f : {fb::formats::bf16, fb::formats::fp16, fb::formats::e4m3, fb::formats::e5m2}) {
    const std::uint32_t count = 1u << f.width(), sign = f.sign_mask();
    std::vector<std::uint32_t> finite;  // non-zero finite values of f
    const std::uint32_t step = count <= 256 ? 1u : (sanitizer_scale() ? 257u : 7u);
    for (std::uint32_t x = 0; x < count; x += step) {
      const double v = fb::to_double(f, x);
      if (std::isfinite(v) && v != 0.0) finite.push_back(x);
    }
    REQUIRE(finite.size() > 50);
    std::vector<fb::RoundingMode> modes(std::begin(fb::kAllDeterministicModes), std::end(fb::kAllDeterministicModes));
    modes.push_back(fb::RoundingMode::sr);
    for (fb::RoundingMode mode : modes) {
      fb::RoundingSpec spec;
      spec.mode = mode;
      spec.seed = 5;
      const bool rdn = mode == fb::RoundingMode::rdn;
      // x op zero, zero op x, and fma(x, zero, c) / fma(x, zero, zero) over every
      // non-zero finite x, with both zero signs; c is another non-zero finite value.
      for (std::uint32_t zero_sign : {0u, sign}) {
        const std::uint32_t zero = zero_sign;
        const std::size_t n = finite.size();
        std::vector<std::uint32_t> zeros(n, zero), c(n), out(n), out_swapped(n), expected(n);
        for (std::size_t i = 0; i < n; ++i) c[i] = finite[(i * 31 + 7) % n];
        fb::Flags flags = 0, flags_swapped = 0;
        fb::add_array(f, finite.data(), zeros.data(), out.data(), n, spec, 0, &flags);
        fb::add_array(f, zeros.data(), finite.data(), out_swapped.data(), n, spec, 0, &flags_swapped);
        CAPTURE(f.name);
        CAPTURE(fb::to_string(mode));
        CAPTURE(zero_sign);
        CHECK(out == finite);
        CHECK(out_swapped == finite);
        CHECK(flags == 0);
        CHECK(flags_swapped == 0);
        fb::mul_array(f, finite.data(), zeros.data(), out.data(), n, spec, 0, &flags);
        for (std::size_t i = 0; i < n; ++i) expected[i] = (finite[i] & sign) ^ zero_sign;
        CHECK(out == expected);
        CHECK(flags == 0);
        fb::fma_array(f, finite.data(), zeros.data(), c.data(), out.data(), n, spec, 0, &flags);
        CHECK(out == c);
        CHECK(flags == 0);
        fb::fma_array(f, zeros.data(), finite.data(), zeros.data(), out.data(), n, spec, 0, &flags);
        for (std::size_t i = 0; i < n; ++i) {
          const bool product_negative = ((finite[i] & sign) ^ zero_sign) != 0;
          const bool c_negative = zero_sign != 0;
          const bool negative = product_negative == c_negative ? c_negative : rdn;
          expected[i] = negative ? sign : 0u;
        }
        CHECK(out == expected);
        CHECK(flags == 0);
      }
      // Two zeros, every sign combination (several copies, so the vector loop runs).
      for (std::uint32_t sa : {0u, sign}) {
        for (std::uint32_t sb : {0u, sign}) {
          const std::size_t n = 37;
          std::vector<std::uint32_t> a(n, sa), b(n, sb), out(n);
          fb::Flags flags = 0;
          fb::add_array(f, a.data(), b.data(), out.data(), n, spec, 0, &flags);
          const std::uint32_t sum = sa == sb ? sa : (rdn ? sign : 0u);
          CAPTURE(f.name);
          CAPTURE(fb::to_string(mode));
          CAPTURE(sa);
          CAPTURE(sb);
          CHECK(out == std::vector<std::uint32_t>(n, sum));
          CHECK(flags == 0);
          fb::mul_array(f, a.data(), b.data(), out.data(), n, spec, 0, &flags);
          CHECK(out == std::vector<std::uint32_t>(n, sa ^ sb));
          CHECK(flags == 0);
        }
      }
    }
  }
}

TEST_CASE("ffma_uniform_f32_array equals std::fma per element, flushed as the kernels' ftz") {
  // Inputs: every 65537th fp32 encoding (all magnitudes, so b = 2^-100 gives subnormal
  // products, where ftz acts), the specials and zeros, and values near 2, which b = -0.5 and
  // c = 1 cancel to tiny results and an exact zero. c subnormal too (ftz flushes results, not
  // inputs). An offset of 3 leaves ragged vector tails.
  std::vector<float> x;
  for (std::uint64_t i = 0; i < (1ull << 32); i += 65537)
    x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(i)));
  for (float v : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(), 1.0f, -1.0f,
                  0x1p-126f, -0x1p-127f})
    x.push_back(v);
  // Near x = 2: with b = -0.5 and c = 1 (below) the FMA cancels to tiny and zero results.
  float near_two = 2.0f;
  for (int k = 0; k < 40; ++k) near_two = std::nextafter(near_two, 0.0f);
  for (int k = 0; k < 80; ++k, near_two = std::nextafter(near_two, 4.0f)) x.push_back(near_two);
  const float bs[] = {1.4426950f, -0.5f, 0x1p-100f, 3.0e20f};
  const float cs[] = {-2.0f, 0.0f, -0.0f, 0x1p-130f, 1.0f, 1.0e30f};
  std::vector<float> out(x.size() + 1);
  for (const float b : bs)
    for (const float c : cs)
      for (const bool ftz : {false, true})
        for (const std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
          const std::size_t n = x.size() - offset;
          fb::ffma_uniform_f32_array(x.data() + offset, b, c, out.data(), n, ftz);
          for (std::size_t i = 0; i < n; ++i) {
            float want = std::fma(x[offset + i], b, c);
            if (ftz && want != 0.0f && std::fabs(want) < std::numeric_limits<float>::min())
              want = std::copysign(0.0f, want);
            if (std::isnan(want)) {
              CHECK(std::isnan(out[i]));
            } else {
              INFO("x = " << x[offset + i] << " b = " << b << " c = " << c << " ftz = " << ftz << " i = " << i);
              CHECK(std::bit_cast<std::uint32_t>(out[i]) == std::bit_cast<std::uint32_t>(want));
            }
          }
        }
  // In place (out == x).
  std::vector<float> in_place(x.begin(), x.begin() + 100), copy = in_place;
  fb::ffma_uniform_f32_array(in_place.data(), 2.0f, -1.0f, in_place.data(), in_place.size(), true);
  for (std::size_t i = 0; i < copy.size(); ++i) {
    float want = std::fma(copy[i], 2.0f, -1.0f);
    if (want != 0.0f && std::fabs(want) < std::numeric_limits<float>::min()) want = std::copysign(0.0f, want);
    if (!std::isnan(want)) CHECK(std::bit_cast<std::uint32_t>(in_place[i]) == std::bit_cast<std::uint32_t>(want));
  }
}
