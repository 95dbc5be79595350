// gpu/sfu_rehearse_hypotheses.hpp: fb-sfu-rehearse's host restatement of fb-sfu-probe's hypotheses
// (ex2 fixed point and sign magnitude, rcp mantissa, lg2 split and extended) and table verifications.
// Contract: not a stand-alone header. gpu/sfu_rehearse.cpp includes it once, at this point of its
// translation unit (after its includes and the definitions before it), so the code keeps its
// original order and linkage.
#pragma once

namespace fb::gpu {
namespace {

// ---- hypotheses (fb-sfu-probe's ex2_hypothesis_kernel, rcp_hypothesis_kernel, ...) -----------
// The first value seen at a key stays; returns 1 for a different later one (a conflict).
unsigned long long record_key(std::vector<std::uint32_t>& table, std::uint32_t key, std::uint32_t value) {
  std::uint32_t& slot = table[key];
  if (slot == kSfuTableUnfilled) {
    slot = value;
    return 0;
  }
  return slot != value ? 1 : 0;
}

unsigned long long ex2_fixed_point_hypothesis(const Context& c, int nbits, int rounding,
                                              std::vector<std::uint32_t>& table) {
  table.assign(std::size_t{1} << nbits, kSfuTableUnfilled);
  unsigned long long conflicts = 0;
  domain_of(kSfuTableEx2).for_each([&](std::uint32_t in) {
    if (!ex2_hypothesis_domain(in)) return;
    const SfuHypothesisEntry entry = ex2_fixed_point_entry(in, c.hw(kSfuTableEx2, in), nbits, rounding);
    conflicts += record_key(table, entry.key, entry.value);
  });
  return conflicts;
}

unsigned long long ex2_sign_magnitude_hypothesis(const Context& c, int nbits, std::vector<std::uint32_t>& table) {
  table.assign(std::size_t{2} << nbits, kSfuTableUnfilled);
  unsigned long long conflicts = 0;
  domain_of(kSfuTableEx2).for_each([&](std::uint32_t in) {
    if (!ex2_hypothesis_domain(in)) return;
    const SfuHypothesisEntry entry = ex2_sign_magnitude_entry(in, c.hw(kSfuTableEx2, in), nbits);
    conflicts += record_key(table, entry.key, entry.value);
  });
  return conflicts;
}

unsigned long long rcp_hypothesis(const Context& c, std::vector<std::uint32_t>& table) {
  table.assign(kRcpMantissaTableEntries, kSfuTableUnfilled);
  unsigned long long conflicts = 0;
  domain_of(kSfuTableRcp).for_each([&](std::uint32_t in) {
    if (!rcp_hypothesis_domain(in)) return;
    const SfuHypothesisEntry entry = rcp_mantissa_entry(in, c.hw(kSfuTableRcp, in));
    conflicts += record_key(table, entry.key, entry.value);
  });
  return conflicts;
}

void write_table(const Context& c, int fn, int nbits, const std::string& key, const std::vector<std::uint32_t>& table,
                 std::uint32_t nan_output, const std::string& extra, const std::string& tail = std::string()) {
  write_sfu_table(c.out_dir, fn, nbits, key, nan_output, extra, stand_in_lines(),
                  sfu_table_deltas(fn, nbits, key, table.data()), c.summary, tail);
}

// ex2 and rcp: fb-sfu-probe's loop over N and the argument roundings, the preference for the
// smallest N whose model reproduces the stand-in, then (ex2) the sign-magnitude hypothesis.
void ex2_or_rcp(const Context& c, int fn, std::vector<int> bits, const std::vector<int>& roundings,
                const std::vector<int>& sm_bits) {
  std::sort(bits.begin(), bits.end());
  bool emitted = false, emitted_clean = false;
  int held_at[kArgRoundingCount] = {-1, -1, -1};
  std::vector<std::uint32_t> table;
  const std::uint32_t nan_output = c.hw(fn, kNanInput);
  for (int nbits : bits) {
    for (int rounding : roundings) {
      if (fn == kSfuTableEx2 && rounding != kNearestEven && held_at[rounding] >= 0) {
        c.summary << "  hypothesis ex2(x) = 2^k * T(frac), x fixed point (" << kArgRoundingNames[rounding]
                  << ") with N=" << nbits << " fraction bits: HOLDS (implied by N=" << held_at[rounding] << ")\n";
        continue;
      }
      const unsigned long long conflicts =
          fn == kSfuTableEx2 ? ex2_fixed_point_hypothesis(c, nbits, rounding, table) : rcp_hypothesis(c, table);
      c.summary << "  hypothesis "
                << (fn == kSfuTableEx2 ? std::string("ex2(x) = 2^k * T(frac), x fixed point (") +
                                             kArgRoundingNames[rounding] + ") with N="
                                       : std::string("rcp(2^e m) = 2^-e * T(m), N="))
                << nbits << " fraction bits: " << (conflicts == 0 ? "HOLDS" : "fails") << " (" << conflicts
                << " inputs disagree with the first seen at their key)\n";
      if (conflicts == 0 && held_at[rounding] < 0) held_at[rounding] = nbits;
      if (conflicts == 0 && nbits <= 24 && !emitted_clean) {
        const std::string key = fn == kSfuTableEx2 ? std::string("ex2_fixed_point_") + kArgRoundingNames[rounding]
                                                   : std::string("rcp_mantissa");
        const unsigned long long mismatches = verify_table_model(
            c, {fn == kSfuTableEx2 ? kTmEx2FixedPoint : kTmRcpMantissa, nbits, rounding, table.data(), nullptr, 0},
            nan_output);
        const std::string extra =
            (fn == kSfuTableEx2 ? "argument_rounding=" + std::string(kArgRoundingNames[rounding]) + "\n"
                                : std::string("table_model=rcp_mantissa\n")) +
            "table_model_mismatches=" + std::to_string(mismatches) + "\n" + domain_line(fn);
        if (mismatches == 0 || !emitted) {
          write_table(c, fn, nbits, key, table, nan_output, extra);
          emitted = true;
          emitted_clean = mismatches == 0;
        }
      }
    }
  }
  if (fn != kSfuTableEx2) return;
  bool sm_emitted = false, sm_clean = false;
  for (int nbits : sm_bits) {
    const unsigned long long conflicts = ex2_sign_magnitude_hypothesis(c, nbits, table);
    c.summary << "  hypothesis ex2(x) = 2^k * T+(i) for x >= 0, 2^-k * T-(i) for x < 0, |x| truncated to N=" << nbits
              << " fraction bits (k.i, sign-magnitude): " << (conflicts == 0 ? "HOLDS" : "fails") << " (" << conflicts
              << " inputs disagree with the first seen at their key)\n";
    if (conflicts != 0 || sm_clean) continue;
    const unsigned long long mismatches =
        verify_table_model(c, {kTmEx2SignMagnitude, nbits, 0, table.data(), nullptr, 0}, nan_output);
    const std::string extra =
        "table_model=ex2_sign_magnitude\ntable_model_mismatches=" + std::to_string(mismatches) + "\n" + domain_line(fn);
    if (mismatches == 0 || !sm_emitted) {
      write_table(c, fn, nbits, "ex2_sign_magnitude", table, nan_output, extra);
      sm_emitted = true;
      sm_clean = mismatches == 0;
    }
  }
  c.summary << "  raw evidence: not written (rehearsal)\n";
}

// lg2: the exponent-split hypothesis (fb-sfu-probe's lg2_split_hypothesis, emit_lg2_table).
void lg2_split(const Context& c, const std::vector<std::uint32_t>& t) {
  unsigned long long tested = 0, mismatches = 0;
  long long max_ulps = 0;
  std::vector<std::uint32_t> examples;
  domain_of(kSfuTableLg2).for_each([&](std::uint32_t in) {
    if (!lg2_split_domain(in)) return;
    ++tested;
    const std::uint32_t hw_bits = c.hw(kSfuTableLg2, in),
                        predicted = lg2_exponent_split_model(in, t[in & kFp32ManMask]);
    if (hw_bits == predicted) return;
    ++mismatches;
    const auto ordered = [](std::uint32_t b) {
      const long long mag = b & 0x7fffffffu;
      return (b >> 31) ? -mag : mag;
    };
    max_ulps = std::max(max_ulps, std::llabs(ordered(hw_bits) - ordered(predicted)));
    if (examples.size() < 3 * 16) examples.insert(examples.end(), {in, hw_bits, predicted});
  });
  c.summary << "  hypothesis lg2(2^e * 1.m) = RN_fp32(e + lg2(1.m)) over " << tested
            << " positive normal inputs: " << (mismatches == 0 ? "HOLDS" : "fails") << " (" << mismatches
            << " inputs differ, max |ulp difference| " << max_ulps << ")\n";
  for (std::size_t e = 0; e < examples.size(); e += 3) {
    char line[96];
    std::snprintf(line, sizeof line, "    x=0x%08x hardware=0x%08x prediction=0x%08x\n", examples[e], examples[e + 1],
                  examples[e + 2]);
    c.summary << line;
  }
  if (mismatches != 0) return;
  const std::uint32_t nan_output = c.hw(kSfuTableLg2, kNanInput);
  const unsigned long long verified =
      verify_table_model(c, {kTmLg2Split, 23, kFloor, t.data(), nullptr, 0}, nan_output);
  write_table(c, kSfuTableLg2, 23, "lg2_exponent_split", t, nan_output,
              "table_model=lg2_exponent_split\ntable_model_mismatches=" + std::to_string(verified) + "\n" +
                  domain_line(kSfuTableLg2));
}

// lg2 extended (fb-sfu-probe's lg2_interval_kernel and lg2_extended_analysis): per mantissa
// and final rounding, the intersection of the intervals of L from the domain's positive normal
// inputs with that mantissa, the e = 0 one (x = 1 excepted) applied last.
void lg2_extended(const Context& c, std::vector<std::uint32_t> t) {
  const std::size_t n = std::size_t{1} << 23, modes = kFinalRoundingCount;
  std::vector<long long> lo(modes * n, -kLg2UnitCap), hi(modes * n, kLg2UnitCap);
  unsigned long long non_finite = 0, inputs = 0;
  domain_of(kSfuTableLg2).for_each([&](std::uint32_t in) {
    const std::uint32_t biased = (in >> 23) & 0xffu;
    if ((in >> 31) != 0 || biased == 0 || biased == 255 || biased == 127) return;  // e = 0: below
    ++inputs;
    const std::uint32_t rb = c.hw(kSfuTableLg2, in), m = in & 0x7fffffu;
    if ((rb & 0x7f800000u) == 0x7f800000u) ++non_finite;
    for (std::size_t k = 0; k < modes; ++k) {
      long long l, h;
      lg2_interval(static_cast<int>(biased) - 127, rb, static_cast<int>(k), l, h);
      lo[k * n + m] = std::max(lo[k * n + m], l);
      hi[k * n + m] = std::min(hi[k * n + m], h);
    }
  });
  std::size_t empty_before[kFinalRoundingCount] = {}, empty[kFinalRoundingCount] = {};
  for (std::size_t k = 0; k < modes; ++k) {
    for (std::size_t m = 0; m < n; ++m) {
      empty_before[k] += lo[k * n + m] > hi[k * n + m];
      if (m == 0) continue;  // x = 1 is the special value lg2(1) = +0
      long long l, h;
      lg2_interval(0, t[m], static_cast<int>(k), l, h);
      lo[k * n + m] = std::max(lo[k * n + m], l);
      hi[k * n + m] = std::min(hi[k * n + m], h);
    }
  }
  c.summary
      << "  lg2 extended precision (--lg2-extended): lg2(2^e * 1.m) = round(e + L[m]), one L[m] per mantissa over the "
      << inputs << " positive normal inputs of the domain with e != 0 and the 2^23 of [1, 2) (" << non_finite
      << " NaN or infinite outputs)\n";
  for (std::size_t k = 0; k < modes; ++k) {
    for (std::size_t m = 0; m < n; ++m) empty[k] += lo[k * n + m] > hi[k * n + m];
    c.summary << "    final rounding " << kFinalRoundingNames[k] << ": " << (empty[k] == 0 ? "HOLDS" : "fails") << " ("
              << empty[k] << " of 8388608 mantissas have no consistent L; " << empty_before[k]
              << " already without the e = 0 constraint)\n";
  }
  int best = 0;
  for (int k = 1; k < kFinalRoundingCount; ++k) best = empty[k] < empty[best] ? k : best;
  if (empty[best] != 0) {
    c.summary << "  lg2 raw evidence: not written (rehearsal)\n";
    return;
  }
  const std::size_t b = static_cast<std::size_t>(best) * n;
  {
    const long double mid = std::ldexp(0.5L * (static_cast<long double>(lo[b]) + hi[b]), -60);
    t[0] = sfu_bits(static_cast<float>(mid));
    c.summary << "    T[0] = " << static_cast<double>(mid)
              << " (L[0]'s interval midpoint; lg2(1) = +0 is a special value)\n";
  }
  std::vector<int> g(n);
  std::vector<long long> r(n);
  std::size_t unrepresentable = 0, guard_hist[25] = {}, zero_r = 0;
  int guard = 0;
  for (std::size_t m = 0; m < n; ++m) {
    if (!lg2_representative(t[m], lo[b + m], hi[b + m], g[m], r[m])) {
      ++unrepresentable;
      g[m] = 0, r[m] = 0;
      continue;
    }
    ++guard_hist[g[m]];
    guard = std::max(guard, g[m]);
  }
  std::vector<int> residuals(n);
  std::string tail;
  for (std::size_t m = 0; m < n; ++m) {
    residuals[m] = static_cast<int>(r[m] * (1ll << (guard - g[m])));
    zero_r += residuals[m] == 0;
    std::uint32_t z = (static_cast<std::uint32_t>(residuals[m]) << 1) ^ static_cast<std::uint32_t>(residuals[m] >> 31);
    do {
      tail += static_cast<char>((z & 0x7fu) | (z > 0x7fu ? 0x80u : 0u));
      z >>= 7;
    } while (z);
  }
  c.summary << "    representative L[m] = T[m] + R[m] ulp(T[m]) 2^-g (" << kFinalRoundingNames[best]
            << "): guard bits needed per mantissa:";
  for (int k = 0; k <= 24; ++k) {
    if (guard_hist[k]) c.summary << " " << k << ":" << guard_hist[k];
  }
  c.summary << "; table guard bits " << guard << ", R = 0 for " << zero_r << " mantissas, " << unrepresentable
            << " mantissas need more than 24 guard bits\n";
  if (unrepresentable != 0) return;
  const std::uint32_t nan_output = c.hw(kSfuTableLg2, kNanInput);
  const unsigned long long mismatches =
      verify_table_model(c, {kTmLg2Extended, 23, best, t.data(), residuals.data(), guard}, nan_output);
  const std::string extra = "table_model=lg2_extended\nguard_bits=" + std::to_string(guard) +
                            "\nfinal_rounding=" + kFinalRoundingNames[best] +
                            "\ntable_model_mismatches=" + std::to_string(mismatches) + "\n" + domain_line(kSfuTableLg2);
  write_table(c, kSfuTableLg2, 23, "lg2_extended", t, nan_output, extra, tail);
}

struct Options {
  std::string out_dir;
  bool functions[3] = {true, true, true};
  std::vector<int> ex2_bits = {23};
  std::vector<int> ex2_roundings = {kFloor, kNearestEven, kTowardZero};
  std::vector<int> ex2_sm_bits = {23};
  bool lg2_extended = false;
  std::vector<std::pair<int, std::string>> checks;
};

int run(const Options& o, const StandIn& hw) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t_start = Clock::now();
  std::ostringstream summary, timing;
  summary << "fb-sfu-rehearse summary (REHEARSAL: no GPU; reduced domains, not all 2^32 inputs)\n" << stand_in_lines();
  summary << "options: functions=";
  const char* sep = "";
  for (int fn = 0; fn < 3; ++fn) {
    if (o.functions[fn]) summary << sep << kFnNames[fn], sep = ",";
  }
  summary << " ex2_bits=";
  for (std::size_t i = 0; i < o.ex2_bits.size(); ++i) summary << (i ? "," : "") << o.ex2_bits[i];
  summary << " ex2_roundings=";
  for (std::size_t i = 0; i < o.ex2_roundings.size(); ++i)
    summary << (i ? "," : "") << kArgRoundingNames[o.ex2_roundings[i]];
  summary << " ex2_sm_bits=";
  for (std::size_t i = 0; i < o.ex2_sm_bits.size(); ++i) summary << (i ? "," : "") << o.ex2_sm_bits[i];
  if (o.ex2_sm_bits.empty()) summary << "none";
  summary << " lg2_extended=" << (o.lg2_extended ? 1 : 0) << "\n";
  const auto write_summary = [&](bool final_write) {
    std::ofstream(o.out_dir + "/sfu_summary.txt")
        << summary.str() << (final_write ? "" : "\n(run in progress or cut short: functions above finished)\n");
  };
  const Context c{hw, o.out_dir, summary};
  timing << "\n[timing] wall seconds per function:";
  for (int fn : {kSfuTableEx2, kSfuTableRcp, kSfuTableLg2}) {
    if (!o.functions[fn]) continue;
    const Clock::time_point t_fn = Clock::now();
    summary << "\n[" << kFnPtx[fn] << "] stand-in: "
            << (fn == kSfuTableEx2   ? *hw.set.ex2
                : fn == kSfuTableRcp ? *hw.set.rcp
                                     : *hw.set.lg2)
                   .describe()
            << "\n  domain: " << domain_of(fn).describe() << "\n";
    if (fn != kSfuTableLg2) {
      ex2_or_rcp(c, fn, fn == kSfuTableEx2 ? o.ex2_bits : std::vector<int>{23},
                 fn == kSfuTableEx2 ? o.ex2_roundings : std::vector<int>{kFloor}, o.ex2_sm_bits);
    } else {
      std::vector<std::uint32_t> t(kLg2MantissaTableEntries);
      for (std::uint32_t m = 0; m < kLg2MantissaTableEntries; ++m) t[m] = hw(kSfuTableLg2, 0x3f800000u | m);
      lg2_split(c, t);
      if (o.lg2_extended) lg2_extended(c, std::move(t));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t_fn).count();
    timing << " " << kFnNames[fn] << ": " << seconds << " s";
    std::printf("%s (stand-in) done: %.2f s\n", kFnPtx[fn], seconds);
    std::fflush(stdout);
    write_summary(false);
  }
  timing << "; total " << std::chrono::duration<double>(Clock::now() - t_start).count() << " s\n";
  summary << timing.str();
  write_summary(true);
  std::fputs(summary.str().c_str(), stdout);
  return 0;
}

// --check: a converted table (FBSFU1) against the stand-in on its function's domain.
int check(const std::vector<std::pair<int, std::string>>& checks, const StandIn& hw) {
  int rc = 0;
  for (const auto& check_entry : checks) {
    // Named variables, not structured bindings: clang before 16 cannot capture bindings.
    const int fn = check_entry.first;
    const std::string& path = check_entry.second;
    std::unique_ptr<SpecialFunctionModel> model;
    try {
      model = load_table_model(path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    }
    if (to_string(model->function()) != kFnNames[fn]) {
      std::fprintf(stderr, "error: %s: an %s table, not %s\n", path.c_str(),
                   std::string(to_string(model->function())).c_str(), kFnNames[fn]);
      return 2;
    }
    const Domain& d = domain_of(fn);
    unsigned long long differ = 0;
    std::string listed;
    d.for_each([&](std::uint32_t in) {
      const std::uint32_t got = sfu_bits(model->evaluate(sfu_float(in))), want = hw(fn, in);
      if (got == want) return;
      if (differ++ < 8) {
        char line[96];
        std::snprintf(line, sizeof line, "  x=0x%08x stand-in=0x%08x loaded=0x%08x\n", in, want, got);
        listed += line;
      }
    });
    std::printf("check %s %s: %llu of %llu domain inputs differ from the stand-in%s (%s)\n%s", kFnNames[fn],
                path.c_str(), differ, static_cast<unsigned long long>(d.size()), differ == 0 ? ", all bit for bit" : "",
                model->describe().c_str(), listed.c_str());
    if (differ != 0) rc = 1;
  }
  return rc;
}

const char kUsage[] =
    "usage: fb-sfu-rehearse --out-dir DIR [--functions ex2,rcp,lg2] [--ex2-bits 23]\n"
    "                       [--ex2-roundings floor,nearest_even,toward_zero] [--ex2-sm-bits 23|none] [--lg2-extended]\n"
    "       fb-sfu-rehearse --check FUNC=FILE.fbsfu [--check FUNC=FILE.fbsfu ...]\n"
    "fb-sfu-probe's table step on a CPU: the emu's hw-sm90 tables stand in for the GPU, on reduced domains;\n"
    "writes DIR/sfu_summary.txt and the FBSFUT1 tables. --check compares converted tables with the stand-in.\n"
    "Exit 0 done, 1 a --check differed, 2 bad arguments or an unloadable table, 3 no stand-in.\n";

bool parse_ints(const std::string& arg, int lo, int hi, std::vector<int>& out) {
  out.clear();
  std::stringstream s(arg);
  for (std::string item; std::getline(s, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < lo || v > hi) return false;
    out.push_back(static_cast<int>(v));
  }
  return !out.empty();
}

int function_code(const std::string& name) {
  for (int fn = 0; fn < 3; ++fn) {
    if (name == kFnNames[fn]) return fn;
  }
  return -1;
}

}  // namespace
}  // namespace fb::gpu
