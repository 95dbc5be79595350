// tools/sweep_columns.hpp: the column layout of sweep files, shared by their writer
// (sweep_table.cpp) and their reader (sweep_file.cpp) so that the two cannot drift apart.
// Internal to those two files; the format itself is documented in sweep_table.hpp and
// docs/CLI.md.
#pragma once

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>

#include "tools/sweep_table.hpp"

namespace fb::cli::sweep_columns {

// The moments of each statistic, by the prefix naming their columns (PREFIX_sum, _sumsq,
// _pos, _neg), in file order: the CSV columns, the JSON "sufficient" members and the shard
// checks all walk this one list.
using MomentsMember = attn::ErrorMoments SweepRow::*;
struct NamedMoments {
  const char* prefix;
  MomentsMember member;
};
inline constexpr NamedMoments kMoments[] = {{"o", &SweepRow::o},
                                            {"d", &SweepRow::d},
                                            {"mag_o", &SweepRow::mag_o},
                                            {"mag_d", &SweepRow::mag_d},
                                            {"cr_o", &SweepRow::cr_o},
                                            {"cr_d", &SweepRow::cr_d},
                                            {"ex_o", &SweepRow::ex_o},
                                            {"ex_d", &SweepRow::ex_d},
                                            {"cr_mag_o", &SweepRow::cr_mag_o},
                                            {"cr_mag_d", &SweepRow::cr_mag_d},
                                            {"ex_mag_o", &SweepRow::ex_mag_o},
                                            {"ex_mag_d", &SweepRow::ex_mag_d}};
// The per-trial ones come before the row's element counts, the reference ones after.
inline constexpr std::span<const NamedMoments> kTrialMoments(kMoments, 4), kReferenceMoments(kMoments + 4, 8);

// The CSV header: the sufficient columns, then the derived ones (sweep_table.cpp write_csv).
// Macros, so that the two headers below are one literal each, built from shared parts.
#define FB_SWEEP_CSV_SUMS                                                                                        \
  "index,format,round,model,scenario,seqlen,headdim,trials,o_sum,o_sumsq,o_pos,o_neg,d_sum,d_sumsq,d_pos,d_neg," \
  "mag_o_sum,mag_o_sumsq,mag_o_pos,mag_o_neg,mag_d_sum,mag_d_sumsq,mag_d_pos,mag_d_neg,"                         \
  "elements,sq_sum,max_abs,sig_overflows,ties,rounded_up,rounded_down,"                                          \
  "ref_trials,cr_o_sum,cr_o_sumsq,cr_o_pos,cr_o_neg,cr_d_sum,cr_d_sumsq,cr_d_pos,cr_d_neg,"                      \
  "ex_o_sum,ex_o_sumsq,ex_o_pos,ex_o_neg,ex_d_sum,ex_d_sumsq,ex_d_pos,ex_d_neg,"                                 \
  "cr_mag_o_sum,cr_mag_o_sumsq,cr_mag_o_pos,cr_mag_o_neg,cr_mag_d_sum,cr_mag_d_sumsq,cr_mag_d_pos,cr_mag_d_neg," \
  "ex_mag_o_sum,ex_mag_o_sumsq,ex_mag_o_pos,ex_mag_o_neg,ex_mag_d_sum,ex_mag_d_sumsq,ex_mag_d_pos,ex_mag_d_neg," \
  "non_finite,"
#define FB_SWEEP_CSV_SIGNED                                           \
  "o_mean_ulps,o_p_t,o_cr_mean_ulps,o_excess_mean_ulps,o_excess_p_t," \
  "delta_mean_ulps,delta_p_t,delta_cr_mean_ulps,delta_excess_mean_ulps,delta_excess_p_t,"
#define FB_SWEEP_CSV_LAST "rms_ulps,max_abs_ulps,verdict_from,verdict"
// The CSV header line; a file whose first line differs is not a sweep CSV.
inline constexpr const char* kCsvHeader = FB_SWEEP_CSV_SUMS FB_SWEEP_CSV_SIGNED
    "o_mag_excess_mean_ulps,o_mag_excess_p_t,delta_mag_excess_mean_ulps,delta_mag_excess_p_t," FB_SWEEP_CSV_LAST;
inline constexpr std::size_t kCsvColumns = 83;
// The header of 2026-12-07's files: the same sums, without the four magnitude-excess columns
// derived from them (the reader reads sums only, so such a file merges as it is).
inline constexpr const char* kCsvHeaderWithoutMagnitudeColumns =
    FB_SWEEP_CSV_SUMS FB_SWEEP_CSV_SIGNED FB_SWEEP_CSV_LAST;
inline constexpr std::size_t kCsvColumnsWithoutMagnitudeColumns = 79;
// Each count is its header's: a column added to one is caught here, not by a reader.
constexpr std::size_t column_count(const char* header) {
  std::size_t n = 1;
  for (; *header != '\0'; ++header) n += *header == ',' ? 1 : 0;
  return n;
}
static_assert(column_count(kCsvHeader) == kCsvColumns);
static_assert(column_count(kCsvHeaderWithoutMagnitudeColumns) == kCsvColumnsWithoutMagnitudeColumns);
#undef FB_SWEEP_CSV_SUMS
#undef FB_SWEEP_CSV_SIGNED
#undef FB_SWEEP_CSV_LAST
// The run record line: this prefix, then the run's JSON object.
inline constexpr const char* kRunPrefix = "# run ";
// Derived columns and messages print statistics to 4 significant digits.
inline std::string short_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace fb::cli::sweep_columns
