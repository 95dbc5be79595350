// gpu/sfu_rehearse.cpp: fb-sfu-rehearse, fb-sfu-probe's table step played on a CPU, for the
// device session's rehearsal (gpu/device_session.sh --rehearse, gpu/rehearse_session.sh).
//
// Contract:
// - The "hardware" is a stand-in: the emu's hw-sm90 set (emu/tables/{ex2,rcp,lg2}_h200.fbsfu,
//   the H200's ex2/rcp/lg2.approx.ftz.f32 as measured, evaluated on the host); exit 3 when one
//   of its tables is missing (the set then falls back to correct rounding).
// - Each function is played on a reduced domain (domain_of below): every input of a few
//   binades (ex2: [1,2), (-2,-1], [0.5,1); rcp: [1,2), (-2,-1]; lg2: [1,2), [2,4), [0.5,1)),
//   every 4099th input bit pattern of all 2^32 and a list of special inputs (zeros,
//   subnormals, infinities, NaNs, the region boundaries), about 2^24.6 inputs per function.
// - On it, the same hypotheses and table-model verifications as fb-sfu-probe, restated for the
//   host: ex2 fixed point for --ex2-bits x --ex2-roundings (x in [-125, 127), the table
//   model's split as key, floor and toward-zero not re-run once they held), ex2 sign magnitude
//   (--ex2-sm-bits), rcp mantissa (biased exponent 2..252), lg2 exponent split, and with
//   --lg2-extended the lg2 extended interval analysis (per mantissa, the intersection over the
//   domain's positive normal inputs with that mantissa; L's representative as fb-sfu-probe
//   picks it). A table whose hypothesis held is evaluated with gpu/sfu_table_model.hpp's
//   mirror of the emu's model on the whole domain against the stand-in (mismatches per
//   region) and written, with the same preference as fb-sfu-probe (the smallest N whose model
//   reproduces the stand-in, else the first that held), through traces/sfu_capture_writer.hpp, the
//   writer fb-sfu-probe uses: the same names, header and layout; the header's source is
//   "rehearsal:fb-sfu-rehearse" (fb-sfu-table-convert then marks the table not measured) and
//   table_model_mismatches counts the domain only (table_model_domain says so).
// - DIR/sfu_summary.txt: the verdicts, verifications and "wrote" lines, like fb-sfu-probe's
//   (no accuracy histogram, no raw evidence, no ex2nf), and the wall time per function.
// - --check FUNC=FILE.fbsfu (repeatable): loads FILE with the emu's table loader (what a
//   flashbits recipe's "sfu" entry loads) and compares it with the stand-in on FUNC's domain,
//   bit for bit; prints one line per file (and up to 8 differing inputs); exit 1 when any
//   differs, 2 when a file does not load or is another function's.
// Usage: fb-sfu-rehearse --out-dir DIR [--functions ex2,rcp,lg2] [--ex2-bits 23]
//          [--ex2-roundings floor,nearest_even,toward_zero] [--ex2-sm-bits 23|none] [--lg2-extended]
//        fb-sfu-rehearse --check FUNC=FILE.fbsfu [--check FUNC=FILE.fbsfu ...]
// Exit 0 done, 1 a --check differed, 2 bad arguments or an unloadable file, 3 no stand-in.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "emu/sfu/special_functions.hpp"
#include "gpu/sfu_table_model.hpp"
#include "traces/sfu_capture_writer.hpp"
#include "traces/sfu_sets.hpp"
#include "traces/sfu_table_file.hpp"

namespace fb::gpu {
namespace {

const char* const kFnNames[3] = {"ex2", "rcp", "lg2"};  // SfuTableFunction order
const char* const kFnPtx[3] = {"ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "lg2.approx.ftz.f32"};
const char* const kArgRoundingNames[kArgRoundingCount] = {"floor", "nearest_even", "toward_zero"};
const char* const kFinalRoundingNames[kFinalRoundingCount] = {"nearest_even", "toward_zero", "down", "up"};
constexpr std::uint32_t kNanInput = 0x7fc00000u;  // fb-sfu-probe's nan_output input
constexpr std::uint32_t kStride = 4099;

// ---- the stand-in ------------------------------------------------------------------------
struct StandIn {
  SfuSet set;
  std::uint32_t operator()(int fn, std::uint32_t x_bits) const {
    const SpecialFunctionModel& m = fn == kSfuTableEx2 ? *set.ex2 : fn == kSfuTableRcp ? *set.rcp : *set.lg2;
    return sfu_bits(m.evaluate(sfu_float(x_bits)));
  }
};

std::optional<StandIn> load_stand_in(std::string& why) {
  std::optional<SfuSet> set;
  try {
    set = find_sfu_set("hw-sm90");
  } catch (const std::exception& e) {
    why = e.what();
    return std::nullopt;
  }
  if (!set) {
    why = "the emu has no SFU set hw-sm90";
    return std::nullopt;
  }
  for (const auto* m : {set->ex2.get(), set->rcp.get(), set->lg2.get()}) {
    if (m == nullptr || !m->hardware_measured()) {
      why = "hw-sm90 has no measured table for " + std::string(m ? to_string(m->function()) : "a function") +
            " (emu/tables, FLASHBITS_SFU_TABLES): " + (m ? m->describe() : std::string("missing"));
      return std::nullopt;
    }
  }
  return StandIn{*set};
}

std::string stand_in_lines() {
  return "source=rehearsal:fb-sfu-rehearse\ndevice=stand-in (no GPU): the emu's hw-sm90 tables evaluated on the host\n"
         "compute_capability=0.0\ndriver=0\ncuda_runtime=0\n";
}

// ---- the reduced domain -------------------------------------------------------------------
struct Domain {
  std::vector<std::uint32_t> binades;  // first bit pattern of each binade (2^23 inputs each)
  std::vector<std::uint32_t> extra;    // the stride and the specials, outside the binades, sorted
  std::uint64_t size() const { return (static_cast<std::uint64_t>(binades.size()) << 23) + extra.size(); }
  template <class F>
  void for_each(F&& f) const {
    for (const std::uint32_t start : binades) {
      for (std::uint32_t m = 0; m < (1u << 23); ++m) f(start + m);
    }
    for (const std::uint32_t x : extra) f(x);
  }
  std::string describe() const {
    std::ostringstream s;
    s << size() << " inputs: binades";
    for (std::size_t i = 0; i < binades.size(); ++i) {
      char b[16];
      std::snprintf(b, sizeof b, "%s0x%08x", i ? "," : " ", binades[i]);
      s << b;
    }
    s << " (2^23 inputs each), every " << kStride << "th bit pattern and " << kSpecialsNamed << " special inputs";
    return s.str();
  }
  static constexpr int kSpecialsNamed = 34;
};

Domain make_domain(int fn) {
  Domain d;
  d.binades = fn == kSfuTableEx2   ? std::vector<std::uint32_t>{0x3f800000u, 0xbf800000u, 0x3f000000u}
              : fn == kSfuTableRcp ? std::vector<std::uint32_t>{0x3f800000u, 0xbf800000u}
                                   : std::vector<std::uint32_t>{0x3f800000u, 0x40000000u, 0x3f000000u};
  std::vector<std::uint32_t> extra;
  for (std::uint64_t x = 0; x < (1ull << 32); x += kStride) extra.push_back(static_cast<std::uint32_t>(x));
  const std::uint32_t specials[Domain::kSpecialsNamed] = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu,  // zeros, subnormals
      0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,  // normal ends, inf
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0xffffffffu,               // NaNs
      0x43000000u, 0x42ffffffu, 0xc3200000u, 0xc3200001u, 0xc31fffffu,               // ex2: 128, -160
      0xc2fa0000u, 0xc2fa0001u, 0x42fe0000u, 0x42fdffffu, 0xc2fc0000u,               // -125, 127, -126
      0x7e800000u, 0x7e800001u, 0xfe800000u, 0x00ffffffu, 0x01000000u,               // rcp: 2^126, 2^-125
      0x3f800001u, 0x3f7fffffu};                                                     // around 1
  extra.insert(extra.end(), std::begin(specials), std::end(specials));
  std::sort(extra.begin(), extra.end());
  extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
  const auto in_binades = [&](std::uint32_t x) {
    return std::any_of(d.binades.begin(), d.binades.end(), [&](std::uint32_t s) { return (x >> 23) == (s >> 23); });
  };
  for (const std::uint32_t x : extra) {
    if (!in_binades(x)) d.extra.push_back(x);
  }
  return d;
}

const Domain& domain_of(int fn) {
  static const Domain domains[3] = {make_domain(kSfuTableEx2), make_domain(kSfuTableRcp), make_domain(kSfuTableLg2)};
  return domains[fn];
}

// ---- regions and the verification (fb-sfu-probe's table_verify_kernel) ------------------------
constexpr int kRegionCount = 6;
const char* const kEx2RegionNames[kRegionCount] = {"NaN",          "x >= 128",    "x < -160",
                                                   "[-160, -125)", "[-125, 127)", "[127, 128)"};
const char* const kRcpRegionNames[kRegionCount] = {
    "NaN", "+-0 and subnormal", "+-inf", "|x| in [2^-126, 2^-125)", "|x| in [2^-125, 2^126)", "|x| >= 2^126 finite"};
const char* const kLg2RegionNames[kRegionCount] = {"NaN",    "+-0 and subnormal",    "x < 0 (-inf included)", "+inf",
                                                   "[1, 2)", "other positive normal"};
int region(int fn, float x) {
  const float a = std::fabs(x);
  if (x != x) return 0;
  if (fn == kSfuTableEx2) {
    if (x >= kEx2InfFrom) return 1;
    if (x < kEx2ZeroBelow) return 2;
    if (x < -125.f) return 3;
    return x < 127.f ? 4 : 5;
  }
  if (fn == kSfuTableRcp) {
    if (a < 0x1p-126f) return 1;
    if (a == INFINITY) return 2;
    if (a < 0x1p-125f) return 3;
    return a < 0x1p126f ? 4 : 5;
  }
  if (a < 0x1p-126f) return 1;
  if (x < 0.f) return 2;
  if (x == INFINITY) return 3;
  return (x >= 1.f && x < 2.f) ? 4 : 5;
}

enum TableModelKind : int { kTmEx2FixedPoint, kTmRcpMantissa, kTmLg2Split, kTmEx2SignMagnitude, kTmLg2Extended };
struct TableSpec {
  int kind;
  int nbits;
  int rounding;
  const std::uint32_t* table;
  const int* residuals;
  int guard_bits;
};
int table_fn(int kind) {
  return kind == kTmRcpMantissa                            ? kSfuTableRcp
         : (kind == kTmLg2Split || kind == kTmLg2Extended) ? kSfuTableLg2
                                                           : kSfuTableEx2;
}
std::uint32_t table_model(const TableSpec& spec, float x, std::uint32_t nan_output) {
  switch (spec.kind) {
    case kTmEx2FixedPoint:
      return ex2_table_model(x, spec.nbits, spec.rounding, spec.table, nan_output);
    case kTmEx2SignMagnitude:
      return ex2_sign_magnitude_table_model(x, spec.nbits, spec.table, nan_output);
    case kTmRcpMantissa:
      return rcp_table_model(x, spec.table, nan_output);
    case kTmLg2Split:
      return lg2_table_model(x, spec.table, nan_output);
    default:
      return lg2_extended_table_model(x, spec.table, spec.residuals, spec.guard_bits, spec.rounding, nan_output);
  }
}

struct Context {
  const StandIn& hw;
  std::string out_dir;
  std::ostringstream& summary;
};

// The model `spec` on the whole domain against the stand-in: mismatches per region, the first
// 16 examples, to the summary; returns the count.
unsigned long long verify_table_model(const Context& c, const TableSpec& spec, std::uint32_t nan_output) {
  const int fn = table_fn(spec.kind);
  const Domain& d = domain_of(fn);
  unsigned long long mismatches[kRegionCount] = {};
  std::vector<std::uint32_t> examples;
  d.for_each([&](std::uint32_t in) {
    const float x = sfu_float(in);
    const std::uint32_t hw_bits = c.hw(fn, in), model_bits = table_model(spec, x, nan_output);
    if (hw_bits == model_bits) return;
    ++mismatches[region(fn, x)];
    if (examples.size() < 3 * 16) examples.insert(examples.end(), {in, hw_bits, model_bits});
  });
  std::ostringstream& s = c.summary;
  switch (spec.kind) {
    case kTmEx2FixedPoint:
      s << "  table model (emu Ex2FixedPointModel, N=" << spec.nbits << ", " << kArgRoundingNames[spec.rounding] << ")";
      break;
    case kTmEx2SignMagnitude:
      s << "  table model (emu Ex2SignMagnitudeModel, N=" << spec.nbits << ")";
      break;
    case kTmRcpMantissa:
      s << "  table model (emu RcpMantissaModel, 2^23 mantissas)";
      break;
    case kTmLg2Split:
      s << "  table model (emu Lg2ExponentSplitModel, 2^23 mantissas)";
      break;
    default:
      s << "  table model (emu Lg2ExtendedModel, " << kFinalRoundingNames[spec.rounding] << ", " << spec.guard_bits
        << " guard bits)";
  }
  s << " vs the stand-in on the " << d.size() << " inputs of the domain:";
  const char* const* names = fn == kSfuTableEx2   ? kEx2RegionNames
                             : fn == kSfuTableRcp ? kRcpRegionNames
                                                  : kLg2RegionNames;
  unsigned long long total = 0;
  for (int r = 0; r < kRegionCount; ++r) {
    total += mismatches[r];
    s << " " << names[r] << ": " << mismatches[r];
  }
  s << " mismatches" << (total == 0 ? " (REPRODUCES the stand-in)" : "") << "\n";
  for (std::size_t e = 0; e < examples.size(); e += 3) {
    char line[96];
    std::snprintf(line, sizeof line, "    x=0x%08x hardware=0x%08x model=0x%08x\n", examples[e], examples[e + 1],
                  examples[e + 2]);
    s << line;
  }
  return total;
}

std::string domain_line(int fn) {
  return "table_model_domain=rehearsal:" + std::to_string(domain_of(fn).size()) + " inputs\n";
}

}  // namespace
}  // namespace fb::gpu

// The hypotheses and table verifications, restated for the host.
#include "gpu/sfu_rehearse_hypotheses.hpp"

int main(int argc, char** argv) {
  using namespace fb::gpu;
  Options o;
  const auto bad = [](const std::string& what) {
    std::fprintf(stderr, "error: %s\n%s", what.c_str(), kUsage);
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--out-dir" && has_value) {
      o.out_dir = argv[++i];
    } else if (arg == "--functions" && has_value) {
      std::fill(std::begin(o.functions), std::end(o.functions), false);
      std::stringstream s(argv[++i]);
      for (std::string item; std::getline(s, item, ',');) {
        const int fn = function_code(item);
        if (fn < 0) return bad("--functions: '" + item + "' is not ex2, rcp or lg2 (ex2nf has no stand-in)");
        o.functions[fn] = true;
      }
    } else if (arg == "--ex2-bits" && has_value) {
      if (!parse_ints(argv[++i], 8, 26, o.ex2_bits)) return bad("--ex2-bits: integers in 8..26");
    } else if (arg == "--ex2-sm-bits" && has_value) {
      const std::string v = argv[++i];
      if (v == "none") {
        o.ex2_sm_bits.clear();
      } else if (!parse_ints(v, 8, 24, o.ex2_sm_bits)) {
        return bad("--ex2-sm-bits: integers in 8..24, or none");
      }
    } else if (arg == "--ex2-roundings" && has_value) {
      o.ex2_roundings.clear();
      std::stringstream s(argv[++i]);
      for (std::string item; std::getline(s, item, ',');) {
        int r = 0;
        while (r < kArgRoundingCount && item != kArgRoundingNames[r]) ++r;
        if (r == kArgRoundingCount)
          return bad("--ex2-roundings: '" + item + "' is not floor, nearest_even or toward_zero");
        o.ex2_roundings.push_back(r);
      }
      if (o.ex2_roundings.empty()) return bad("--ex2-roundings: empty list");
    } else if (arg == "--lg2-extended") {
      o.lg2_extended = true;
    } else if (arg == "--check" && has_value) {
      const std::string v = argv[++i];
      const std::size_t eq = v.find('=');
      const int fn = eq == std::string::npos ? -1 : function_code(v.substr(0, eq));
      if (fn < 0 || eq + 1 == v.size()) return bad("--check: FUNC=FILE with FUNC ex2, rcp or lg2");
      o.checks.emplace_back(fn, v.substr(eq + 1));
    } else {
      return bad("unknown or incomplete argument '" + arg + "'");
    }
  }
  if (o.checks.empty() == o.out_dir.empty()) return bad("give --out-dir or --check (not both)");
  std::string why;
  const std::optional<StandIn> hw = load_stand_in(why);
  if (!hw) {
    std::fprintf(stderr, "error: no stand-in for the GPU: %s\n", why.c_str());
    return 3;
  }
  if (!o.checks.empty()) return check(o.checks, *hw);
  if (!(std::ofstream(o.out_dir + "/sfu_summary.txt") << "fb-sfu-rehearse: started, no function finished yet\n")) {
    std::fprintf(stderr, "error: cannot write %s/sfu_summary.txt (does --out-dir exist?)\n", o.out_dir.c_str());
    return 2;
  }
  return run(o, *hw);
}
