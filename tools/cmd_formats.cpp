// tools/cmd_formats.cpp: `flashbits formats`, the table of format facts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string_view>
#include <nlohmann/json.hpp>

#include "tools/cli_common.hpp"

namespace fb::cli {
namespace {

const char* special_name(SpecialEncoding s) {
  switch (s) {
    case SpecialEncoding::ieee:
      return "ieee (inf; NaN = exp all ones, man!=0)";
    case SpecialEncoding::fn:
      return "fn (no inf; NaN = S.1..1.1..1 only)";
    case SpecialEncoding::fnuz:
      return "fnuz (no inf, no -0; NaN = 1000..0 only)";
    case SpecialEncoding::finite:
      return "finite (no inf, no NaN; saturates)";
    case SpecialEncoding::scale:
      return "scale (unsigned, no zero; NaN = all ones)";
  }
  return "?";
}

struct FormatFacts {
  double max_finite, min_normal, min_subnormal;
};
FormatFacts facts_of(const Format& f) {
  FormatFacts r;
  r.max_finite = to_double(f, to_container(f, f.max_finite_pattern()));
  r.min_normal = std::ldexp(1.0, f.emin());
  r.min_subnormal = f.has_subnormals() ? std::ldexp(1.0, f.emin() - f.man_bits) : NAN;
  return r;
}

// No names: every named format. Names (named or custom eXmY): exactly those, each once, in
// the order given.
int run_formats(bool json, const std::vector<std::string>& names) {
  std::vector<Format> list;
  if (names.empty()) list.assign(std::begin(formats::all_named), std::end(formats::all_named));
  for (const auto& name : names) {
    const Format f = parse_format_or_throw(name, "format");
    if (std::none_of(list.begin(), list.end(), [&](const Format& g) { return std::string_view(g.name) == f.name; }))
      list.push_back(f);
  }
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const Format& f : list) {
      const FormatFacts x = facts_of(f);
      nlohmann::json j{{"name", f.name},
                       {"exp_bits", f.exp_bits},
                       {"man_bits", f.man_bits},
                       {"bias", f.bias},
                       {"signed", f.is_signed},
                       {"container_bits", f.container_bits},
                       {"inf", f.has_inf()},
                       {"nan", f.has_nan()},
                       {"negative_zero", f.has_negative_zero()},
                       {"special", special_name(f.special)},
                       {"max_finite", x.max_finite},
                       {"min_normal", x.min_normal},
                       {"emin", f.emin()},
                       {"emax", f.emax()}};
      if (f.has_subnormals())
        j["min_subnormal"] = x.min_subnormal;
      else
        j["min_subnormal"] = nullptr;
      j["max_finite_hex"] = hex_bits(f, to_container(f, f.max_finite_pattern()));
      arr.push_back(j);
    }
    std::cout << json_text(nlohmann::json{{"formats", arr}}, 2) << "\n";
    return kExitOk;
  }
  std::printf("%-9s %3s %3s %4s %-44s %-14s %-13s %-13s\n", "name", "exp", "man", "bias", "specials", "max finite",
              "min normal", "min subnormal");
  for (const Format& f : list) {
    const FormatFacts x = facts_of(f);
    char sub[32];
    if (f.has_subnormals())
      std::snprintf(sub, sizeof sub, "2^%d", f.emin() - f.man_bits);
    else
      std::snprintf(sub, sizeof sub, "-");
    char mn[32];
    std::snprintf(mn, sizeof mn, "2^%d", f.emin());
    std::printf("%-9s %3d %3d %4d %-44s %-14.8g %-13s %-13s\n", f.name, f.exp_bits, f.man_bits, f.bias,
                special_name(f.special), x.max_finite, mn, sub);
  }
  std::printf("Custom IEEE-style formats: eXmY with 2<=X<=8, 1<=Y<=23 (bias 2^(X-1)-1), e.g. e5m10 = fp16.\n");
  return kExitOk;
}

Runner setup_formats(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto extra = std::make_shared<std::vector<std::string>>();
  app.add_flag("--json", *json, "machine-readable output");
  app.add_option("formats", *extra,
                 "only these formats (names such as bf16, or custom eXmY); default: every named format");
  return [json, extra] { return run_formats(*json, *extra); };
}

}  // namespace
FLASHBITS_SUBCOMMAND(formats, "formats", "List every format with its parameters and limits", setup_formats);
}  // namespace fb::cli
