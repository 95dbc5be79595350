// tools/sweep_file.cpp: reading sweep CSV/JSON files back and checking that a set of them
// is exactly the shards of one run (contract in sweep_table.hpp: read_sweep_file,
// check_shards); what merge and the fuzz targets read.
#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "api/json_strict.hpp"
#include "attention/attention.hpp"
#include "attention/problem_limits.hpp"
#include "formats/decimal_text.hpp"
#include "tools/cli_common.hpp"
#include "tools/sweep_columns.hpp"
#include "tools/sweep_grid.hpp"
#include "tools/sweep_table.hpp"

namespace fb::cli {

using namespace sweep_columns;
using api::parse_json_strict;
using api::StrictJsonError;

namespace {
// One CSV line's fields, RFC 4180's quoting read as write_csv writes it (sweep_table.hpp
// csv_field): a field that starts with '"' runs to the next lone '"', whose doubled '""' is
// one '"'. A stray or unterminated quote is an error naming `where`.
std::vector<std::string> split_csv(const std::string& line, const std::string& where) {
  std::vector<std::string> out;
  std::string cur;
  std::size_t i = 0;
  while (true) {
    if (i < line.size() && line[i] == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) throw InputError(where + ": a quoted field has no closing '\"'");
        if (line[i] != '"') {
          cur += line[i];
        } else if (i + 1 < line.size() && line[i + 1] == '"') {
          cur += '"';
          ++i;
        } else {
          break;
        }
      }
      ++i;  // past the closing quote: a comma or the end must follow
      if (i < line.size() && line[i] != ',')
        throw InputError(where + ": text after a quoted field's closing '\"' (expected a comma)");
    } else {
      for (; i < line.size() && line[i] != ','; ++i) {
        if (line[i] == '"') throw InputError(where + ": a '\"' inside an unquoted field");
        cur += line[i];
      }
    }
    out.push_back(cur);
    cur.clear();
    if (i >= line.size()) return out;
    ++i;  // past the comma
  }
}
// Sweep writes decimal numbers (%.17g): a hex float, inf or a padded word was edited in.
double to_num(const std::string& s, const std::string& where) {
  const std::optional<double> v = read_decimal(s);
  if (!v) throw InputError(where + ": expected a decimal number, got '" + s + "'");
  return *v;
}
// An integer column in lo..hi, in the plain digits sweep writes (an optional '-'). Read through
// a double, "1e0" passed as 1 and a count beyond 2^53 changed silently.
long long to_int(const std::string& s, const std::string& where, long long lo = LLONG_MIN, long long hi = LLONG_MAX) {
  long long v = 0;
  const PlainIntegerError error = read_plain_integer(s, v);
  if (error == PlainIntegerError::not_plain_digits)
    throw InputError(where + ": expected an integer in plain digits, got '" + s + "'");
  if (error == PlainIntegerError::out_of_range || v < lo || v > hi)
    throw InputError(where + ": " + s + " is outside " +
                     (lo == LLONG_MIN ? "the range of a count" : std::to_string(lo)) +
                     (lo == LLONG_MIN ? " (at most " : "..") + std::to_string(hi) + (lo == LLONG_MIN ? ")" : ""));
  return v;
}
// A member of a JSON object, named by place when the object is none or lacks it (nlohmann's
// at() said only "key 'o_sum' not found", without the row).
const nlohmann::json& member(const nlohmann::json& object, const char* key, const std::string& where) {
  if (!object.is_object()) throw InputError(where + ": expected a JSON object, got " + object.type_name());
  const auto it = object.find(key);
  if (it == object.end()) throw InputError(where + " field " + key + ": missing");
  return *it;
}
// An integer member of a JSON row in lo..hi; nlohmann's get<long long>() of a float, or
// of an integer out of range, would convert silently (or be undefined).
long long json_int(const nlohmann::json& row, const char* key, const std::string& where, long long lo = LLONG_MIN,
                   long long hi = LLONG_MAX) {
  const nlohmann::json& v = member(row, key, where);
  const std::string field = where + " field " + key;
  if (!v.is_number_integer()) throw InputError(field + ": expected an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(hi))
    throw InputError(field + ": " + v.dump() + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  const long long x = v.is_number_unsigned() ? static_cast<long long>(v.get<unsigned long long>()) : v.get<long long>();
  if (x < lo || x > hi)
    throw InputError(field + ": " + v.dump() + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}
// A row's sums as sweep writes them: finite (sweep leaves a trial whose output is not finite
// out of its sums, counting it in non_finite), and a sum of squares never negative; anything else was edited, and would
// change the verdict silently.
void check_moments(const attn::ErrorMoments& m, const std::string& where, const std::string& prefix) {
  if (!std::isfinite(m.sum))
    throw InputError(where + " " + prefix + "_sum: " + shortest_decimal(m.sum) +
                     " is not finite (sweep writes finite sums)");
  if (!std::isfinite(m.sumsq) || m.sumsq < 0)
    throw InputError(where + " " + prefix + "_sumsq: " + shortest_decimal(m.sumsq) +
                     " is not a finite sum of squares >= 0");
}
// A row's error statistics beyond the moments, as sweep writes them: counts >= 0, a sum of
// squares and a largest magnitude finite and >= 0, both 0 when no element was compared.
// `field` turns a name into the message's place (CSV "... column NAME", JSON "... field NAME").
void check_error_sums(const SweepRow& s, const std::function<std::string(const char*)>& field) {
  if (s.elements < 0) throw InputError(field("elements") + ": " + std::to_string(s.elements) + " is negative");
  for (const auto& [name, v] : {std::pair<const char*, double>{"sq_sum", s.sq_sum}, {"max_abs", s.max_abs}}) {
    if (!std::isfinite(v) || v < 0)
      throw InputError(field(name) + ": " + shortest_decimal(v) + " is not a finite number >= 0");
    if (s.elements == 0 && v != 0)
      throw InputError(field(name) + ": " + shortest_decimal(v) + " with elements 0 (no element was compared)");
  }
  for (const auto& [name, v] : {std::pair<const char*, long long>{"trials", s.trials},
                                {"sig_overflows", s.sig_overflows},
                                {"ties", s.ties},
                                {"rounded_up", s.rounded_up},
                                {"rounded_down", s.rounded_down},
                                {"ref_trials", s.ref_trials},
                                {"non_finite", s.non_finite_trials}})
    if (v < 0) throw InputError(field(name) + ": " + std::to_string(v) + " is negative");
  // What no sweep writes, each of which changed the merged figures silently (the bad-input
  // audit): more reference trials than trials, more elements than the trials hold, a sum of
  // squares too small for its sum (a variance below 0, clamped to 0: an interval of one
  // point), more signed samples than samples, and sums over no sample.
  if (s.non_finite_trials > s.trials)
    throw InputError(field("non_finite") + ": " + std::to_string(s.non_finite_trials) + " exceeds trials " +
                     std::to_string(s.trials));
  // The sums hold the finite trials only (SweepRow::non_finite_trials).
  const long long finite = s.trials - s.non_finite_trials;
  if (s.ref_trials > finite)
    throw InputError(field("ref_trials") + ": " + std::to_string(s.ref_trials) + " exceeds the " +
                     std::to_string(finite) + " finite trials");
  const long double held = static_cast<long double>(finite) * std::max(s.seqlen, 0) * std::max(s.headdim, 0);
  if (static_cast<long double>(s.elements) > held)
    throw InputError(field("elements") + ": " + std::to_string(s.elements) + " exceeds the " +
                     std::to_string(static_cast<long long>(held)) +
                     " elements of the finite trials x seqlen x headdim");
  // A sum of n doubles errs by at most about n ulps: the slack grows with the count.
  const auto slack = [](long long n) { return 1e-9 + 4.0 * static_cast<double>(n) * 0x1p-53; };
  if (s.sq_sum > static_cast<double>(s.elements) * s.max_abs * s.max_abs * (1 + slack(s.elements)))
    throw InputError(field("sq_sum") + ": " + shortest_decimal(s.sq_sum) + " exceeds elements x max_abs^2");
  if (s.max_abs * s.max_abs > s.sq_sum)  // exact: a sum of squares never rounds below one of its terms
    throw InputError(field("max_abs") + ": " + shortest_decimal(s.max_abs) + " exceeds the root of sq_sum " +
                     shortest_decimal(s.sq_sum) + " (the largest error is one of the summed squares)");
  const auto check = [&](const NamedMoments& named, long long n, const char* count) {
    const attn::ErrorMoments& m = s.*named.member;
    const std::string prefix(named.prefix);
    // Each in 0..n before their sum is formed (two counts near 2^63 would overflow it).
    if (m.pos < 0 || m.neg < 0 || m.pos > n || m.neg > n - m.pos)
      throw InputError(field((prefix + "_pos").c_str()) + " " + std::to_string(m.pos) + " and " + prefix + "_neg " +
                       std::to_string(m.neg) + ": not two counts of the " + std::to_string(n) + " samples");
    if (n == 0 && (m.sum != 0 || m.sumsq != 0))
      throw InputError(field((prefix + "_sum").c_str()) + ": nonzero sums over no sample (" + count + " 0)");
    if (m.sum * m.sum > static_cast<double>(n) * m.sumsq * (1 + slack(n)))
      throw InputError(field((prefix + "_sumsq").c_str()) + ": " + shortest_decimal(m.sumsq) +
                       " is below sum^2 / n for sum " + shortest_decimal(m.sum) + " over " + std::to_string(n) +
                       " samples (a negative variance)");
  };
  for (const NamedMoments& m : kTrialMoments) check(m, finite, "finite trials");
  for (const NamedMoments& m : kReferenceMoments) check(m, s.ref_trials, "ref_trials");
  // Each trial's excess is its kernel error minus its floor's (SweepRow::add_trial), so where
  // every finite trial has a floor, the excess sum is the difference of the two sums up to
  // the rounding of the sums (at most about n ulps of their magnitude, which the sums of
  // squares bound: sum|x| <= sqrt(n sum x^2)). An excess edited alone changed the verdict.
  if (s.ref_trials == finite && finite > 0) {
    const auto agree = [&](const attn::ErrorMoments& kernel, const attn::ErrorMoments& floor,
                           const attn::ErrorMoments& excess, const char* name) {
      const double n = static_cast<double>(finite);
      const double scale =
          std::sqrt(n * kernel.sumsq) + std::sqrt(n * floor.sumsq) + std::sqrt(n * excess.sumsq) + 0x1p-1000;
      if (!(std::fabs(excess.sum - (kernel.sum - floor.sum)) <= 4.0 * slack(finite) * scale))
        throw InputError(field(name) + ": " + shortest_decimal(excess.sum) +
                         " is not the kernel's sum minus the floor's (" + shortest_decimal(kernel.sum) + " - " +
                         shortest_decimal(floor.sum) + "): the excess is their difference trial by trial");
    };
    agree(s.o, s.cr_o, s.ex_o, "ex_o_sum");
    agree(s.d, s.cr_d, s.ex_d, "ex_d_sum");
    agree(s.mag_o, s.cr_mag_o, s.ex_mag_o, "ex_mag_o_sum");
    agree(s.mag_d, s.cr_mag_d, s.ex_mag_d, "ex_mag_d_sum");
  }
}
// A number member of a JSON row (nlohmann's get<double>() names neither row nor field).
double json_number(const nlohmann::json& row, const char* key, const std::string& where) {
  const nlohmann::json& v = member(row, key, where);
  if (!v.is_number()) throw InputError(where + " field " + key + ": expected a number, got " + v.dump());
  return v.get<double>();
}
// The four members PREFIX_sum, _sumsq, _pos, _neg of a JSON row's "sufficient" object.
attn::ErrorMoments moments_from_json(const nlohmann::json& sufficient, const std::string& prefix,
                                     const std::string& where) {
  attn::ErrorMoments m;
  m.sum = json_number(sufficient, (prefix + "_sum").c_str(), where);
  m.sumsq = json_number(sufficient, (prefix + "_sumsq").c_str(), where);
  m.pos = json_int(sufficient, (prefix + "_pos").c_str(), where);
  m.neg = json_int(sufficient, (prefix + "_neg").c_str(), where);
  check_moments(m, where + " field", prefix);
  return m;
}
// The four CSV columns from `first` on, named PREFIX_sum, _sumsq, _pos, _neg in messages.
attn::ErrorMoments moments_from_csv(const std::vector<std::string>& fields, std::size_t first,
                                    const std::string& prefix, const std::string& where) {
  attn::ErrorMoments m;
  m.sum = to_num(fields[first], where + " column " + prefix + "_sum");
  m.sumsq = to_num(fields[first + 1], where + " column " + prefix + "_sumsq");
  m.pos = to_int(fields[first + 2], where + " column " + prefix + "_pos");
  m.neg = to_int(fields[first + 3], where + " column " + prefix + "_neg");
  check_moments(m, where + " column", prefix);
  return m;
}
}  // namespace

namespace {
std::string json_string(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = member(j, key, where);
  if (!v.is_string()) throw InputError(where + " field " + key + ": expected a string, got " + v.dump());
  return v.get<std::string>();
}

SweepRun parse_run(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + ": expected a JSON object");
  SweepRun run;
  try {
    if (json_string(j, "program", where) != "flashbits sweep")
      throw InputError(where + " field program: expected \"flashbits sweep\"");
    const nlohmann::json& seed = member(j, "seed", where);
    if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<long long>() >= 0))
      throw InputError(where + " field seed: expected an unsigned integer, got " + seed.dump());
    run.seed = seed.get<std::uint64_t>();
    const std::string shard = json_string(j, "shard", where);
    if (!run.read_shard_text(shard))
      throw InputError(where + " field shard: '" + shard + "' is not K/N with 1 <= K <= N");
    run.configurations = json_int(j, "configurations", where, 1);
    run.trials = json_int(j, "trials", where, 1, INT_MAX);
    run.formats = json_string(j, "formats", where);
    run.rounds = json_string(j, "round", where);
    run.models = json_string(j, "models", where);
    run.scenarios = json_string(j, "scenarios", where);
    run.against = json_string(j, "against", where);
    run.seqlen = json_int(j, "seqlen", where, 1, INT_MAX);
    // Sizes sweep could not have run (its --headdim and problem-size checks): a merged row
    // "n2147483647/d9999" would read as a result.
    run.headdim = json_int(j, "headdim", where, 1, attn::kMaxHeadDim);
    if (const attn::SizeRefusal refusal = attn::problem_size_refusal(1, 1, run.seqlen, run.headdim))
      throw InputError(where + " fields seqlen " + std::to_string(run.seqlen) + ", headdim " +
                       std::to_string(run.headdim) + ": " + refusal.reason + " (no sweep runs such a problem)");
    run.sr_bits = json_int(j, "sr_bits", where, 1, kMaxSrBits);
    const nlohmann::json& alpha = member(j, "alpha", where);
    if (!alpha.is_number()) throw InputError(where + " field alpha: expected a number, got " + alpha.dump());
    run.alpha = alpha_or_throw(alpha.get<double>(), where + " field alpha");
    // Absent from records written before sweep took --at-stake: those were judged at the default.
    if (j.contains("at_stake_ulps")) {
      const nlohmann::json& at_stake = member(j, "at_stake_ulps", where);
      if (!at_stake.is_number())
        throw InputError(where + " field at_stake_ulps: expected a number, got " + at_stake.dump());
      run.at_stake = at_stake_or_throw(at_stake.get<double>(), where + " field at_stake_ulps");
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": " + json_error_text(e));
  }
  return run;
}
}  // namespace

SweepFile read_sweep_file(const std::string& given_path) {
  const bool from_stdin = given_path == "-";
  const std::string path = from_stdin ? std::string("standard input") : given_path;
  std::error_code ec;
  if (!from_stdin && std::filesystem::is_directory(path, ec))
    throw InputError(path + ": is a directory, expected a sweep CSV or JSON file");
  // FileReadError: exit 2 (tools/main.cpp)
  std::string text = from_stdin ? read_standard_input_capped(kSweepFile) : read_file_capped(path, kSweepFile);
  // A UTF-8 byte order mark (an editor's, or Excel's on a CSV) is no part of either format:
  // left in, a JSON shard was read as a CSV whose header was wrong.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  SweepFile file;
  std::vector<SweepRow>& rows = file.rows;
  const auto first = text.find_first_not_of(" \t\r\n");
  // JSON that is no object (an array, say) is no sweep JSON; read as CSV, its defects were
  // named as a CSV file's.
  if (first != std::string::npos && text[first] == '[')
    throw InputError(path + ": not a sweep JSON file (expected an object, got an array)");
  if (first != std::string::npos && text[first] == '{') {
    nlohmann::json j;
    try {
      j = parse_json_strict(text);
      if (!j.is_object()) throw InputError(path + ": not a sweep JSON file (expected an object)");
      if (j.contains("run")) file.run = parse_run(j.at("run"), path + ": run");
      // Messages start with the file's name, then the place: "FILE: field rows: ...".
      const nlohmann::json& all_rows = member(j, "rows", path + ":");
      if (!all_rows.is_array()) throw InputError(path + ": field rows: expected an array, got " + all_rows.type_name());
      for (const auto& r : all_rows) {
        const std::string where = path + ": rows[" + std::to_string(rows.size()) + "]";
        SweepRow s;
        file.row_where.push_back("rows[" + std::to_string(rows.size()) + "]");
        s.index = json_int(r, "index", where);
        s.format = json_string(r, "format", where);
        s.round = json_string(r, "round", where);
        s.model = json_string(r, "model", where);
        s.scenario = json_string(r, "scenario", where);
        s.seqlen = static_cast<int>(json_int(r, "seqlen", where, INT_MIN, INT_MAX));
        s.headdim = static_cast<int>(json_int(r, "headdim", where, INT_MIN, INT_MAX));
        s.trials = json_int(r, "trials", where);
        const auto& q = member(r, "sufficient", where);
        if (!q.is_object()) throw InputError(where + " field sufficient: expected a JSON object, got " + q.type_name());
        // Written before the magnitude sums (sweep_columns.hpp): the signed ones alone.
        if (q.contains("o_sum") && !q.contains("mag_o_sum"))
          throw InputError(where +
                           ": a sweep JSON written by an older flashbits, without the magnitude sums "
                           "(mag_o_sum, ...) the verdict needs: rerun that sweep");
        for (const NamedMoments& m : kTrialMoments) s.*m.member = moments_from_json(q, m.prefix, where);
        s.elements = json_int(q, "elements", where);
        s.sq_sum = json_number(q, "sq_sum", where);
        s.max_abs = json_number(q, "max_abs", where);
        s.sig_overflows = json_int(q, "sig_overflows", where);
        s.ties = json_int(q, "ties", where);
        s.rounded_up = json_int(q, "rounded_up", where);
        s.rounded_down = json_int(q, "rounded_down", where);
        s.ref_trials = json_int(q, "ref_trials", where);
        for (const NamedMoments& m : kReferenceMoments) s.*m.member = moments_from_json(q, m.prefix, where);
        s.non_finite_trials = json_int(q, "non_finite", where);
        check_error_sums(s, [&](const char* name) { return where + " field " + name; });
        rows.push_back(s);
      }
    } catch (const StrictJsonError& e) {
      throw InputError(path + ": " + e.what());
    } catch (const nlohmann::json::exception& e) {
      throw InputError(path + ": not a sweep JSON file (" + json_error_text(e) + ")");
    }
    return file;
  }
  std::istringstream lines(text);
  std::string line;
  int line_no = 0;
  std::size_t columns = kCsvColumns;  // the header's count (an earlier header has fewer derived ones)
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = path + ": line " + std::to_string(line_no);
    if (file.run) throw InputError(where + ": text after the run record (the record is the last line)");
    if (line.rfind(kRunPrefix, 0) == 0 && line_no > 1) {
      nlohmann::json j;
      try {
        j = parse_json_strict(line.substr(std::string(kRunPrefix).size()));
      } catch (const StrictJsonError& e) {
        throw InputError(where + ": run record: " + e.what());
      } catch (const nlohmann::json::exception& e) {
        throw InputError(where + ": run record: " + json_error_text(e));
      }
      file.run = parse_run(j, where + ": run record");
      continue;
    }
    if (line_no == 1) {
      // Files written before the magnitude sums (sweep_columns.hpp) had d_neg then elements.
      if (line != kCsvHeader && line.find(",d_neg,elements,") != std::string::npos)
        throw InputError(where +
                         ": a sweep CSV written by an older flashbits, without the magnitude sums "
                         "(mag_o_sum, ...) the verdict needs: rerun that sweep");
      if (line == kCsvHeaderWithoutMagnitudeColumns)
        columns = kCsvColumnsWithoutMagnitudeColumns;
      else if (line != kCsvHeader)
        throw InputError(where + ": expected the sweep CSV header");
      continue;
    }
    const auto f = split_csv(line, where);
    if (f.size() != columns)
      throw InputError(where + ": expected " + std::to_string(columns) + " columns, got " + std::to_string(f.size()));
    SweepRow s;
    file.row_where.push_back("line " + std::to_string(line_no));
    s.index = to_int(f[0], where + " column index");
    s.format = f[1];
    s.round = f[2];
    s.model = f[3];
    s.scenario = f[4];
    s.seqlen = static_cast<int>(to_int(f[5], where + " column seqlen", INT_MIN, INT_MAX));
    s.headdim = static_cast<int>(to_int(f[6], where + " column headdim", INT_MIN, INT_MAX));
    s.trials = to_int(f[7], where + " column trials");
    std::size_t column = 8;
    for (const NamedMoments& m : kTrialMoments) {
      s.*m.member = moments_from_csv(f, column, m.prefix, where);
      column += 4;
    }
    s.elements = to_int(f[column++], where + " column elements");
    s.sq_sum = to_num(f[column++], where + " column sq_sum");
    s.max_abs = to_num(f[column++], where + " column max_abs");
    s.sig_overflows = to_int(f[column++], where + " column sig_overflows");
    s.ties = to_int(f[column++], where + " column ties");
    s.rounded_up = to_int(f[column++], where + " column rounded_up");
    s.rounded_down = to_int(f[column++], where + " column rounded_down");
    s.ref_trials = to_int(f[column++], where + " column ref_trials");
    for (const NamedMoments& m : kReferenceMoments) {
      s.*m.member = moments_from_csv(f, column, m.prefix, where);
      column += 4;
    }
    s.non_finite_trials = to_int(f[column], where + " column non_finite");
    check_error_sums(s, [&](const char* name) { return where + " column " + name; });
    rows.push_back(s);
  }
  if (line_no == 0) throw InputError(path + ": empty file, expected a sweep CSV or JSON");
  return file;
}

SweepRun check_shards(const std::vector<std::pair<std::string, SweepFile>>& files, std::optional<double> alpha,
                      std::optional<double> at_stake) {
  if (files.empty()) throw InputError("merge: no shard files");
  for (const auto& [path, file] : files)
    if (!file.run)
      throw InputError(path +
                       ": no run record (the sweep's parameters, seed and shard: a file written by an older "
                       "flashbits, or truncated); rerun that sweep shard");
  const std::string& first_path = files.front().first;
  const SweepRun& first = *files.front().second.run;
  // Every parameter the rows depend on must agree.
  for (const auto& [shard_path, file] : files) {
    // A named reference, not the structured binding: clang before 16 cannot capture bindings.
    const std::string& path = shard_path;
    const SweepRun& r = *file.run;
    auto differ = [&](const std::string& what, const std::string& mine, const std::string& theirs) {
      if (mine != theirs)
        throw InputError(path + ": " + what + " " + mine + " differs from " + theirs + " in " + first_path +
                         " (shards of one sweep share every parameter)");
    };
    differ("seed", std::to_string(r.seed), std::to_string(first.seed));
    if (r.shard_n != first.shard_n)
      throw InputError(path + ": shard " + r.shard_text() + " is of a sweep cut into " + std::to_string(r.shard_n) +
                       " shards, " + first_path + " (" + first.shard_text() + ") of one cut into " +
                       std::to_string(first.shard_n));
  }
  for (const auto& [shard_path, file] : files) {
    const std::string& path = shard_path;
    const SweepRun& r = *file.run;
    auto differ = [&](const std::string& what, const std::string& mine, const std::string& theirs) {
      if (mine != theirs)
        throw InputError(path + ": " + what + " '" + mine + "' differs from '" + theirs + "' in " + first_path +
                         " (shards of one sweep share every parameter)");
    };
    differ("--trials", std::to_string(r.trials), std::to_string(first.trials));
    differ("--formats", r.formats, first.formats);
    differ("--round", r.rounds, first.rounds);
    differ("--model", r.models, first.models);
    differ("--scenario", r.scenarios, first.scenarios);
    differ("--against", r.against, first.against);
    differ("--seqlen", std::to_string(r.seqlen), std::to_string(first.seqlen));
    differ("--headdim", std::to_string(r.headdim), std::to_string(first.headdim));
    differ("--sr-bits", std::to_string(r.sr_bits), std::to_string(first.sr_bits));
    differ("configuration count", std::to_string(r.configurations), std::to_string(first.configurations));
  }
  // Each shard K of 1..N exactly once.
  std::vector<const std::string*> shard_file(static_cast<std::size_t>(first.shard_n), nullptr);
  for (const auto& [path, file] : files) {
    const std::string*& seen = shard_file[static_cast<std::size_t>(file.run->shard_k - 1)];
    if (seen) throw InputError(path + ": shard " + file.run->shard_text() + " is given twice (also " + *seen + ")");
    seen = &path;
  }
  for (int k = 1; k <= first.shard_n; ++k)
    if (!shard_file[static_cast<std::size_t>(k - 1)])
      throw InputError(first_path + ": its sweep has " + std::to_string(first.shard_n) + " shards and shard " +
                       std::to_string(k) + "/" + std::to_string(first.shard_n) + " is missing");
  // The grid the run's options make: row i must be its configuration i.
  SweepGrid grid;
  try {
    grid = sweep_grid(first);
  } catch (const InputError& e) {
    throw InputError(first_path + ": run record: " + e.what());
  }
  if (static_cast<long long>(grid.cells.size()) != first.configurations)
    throw InputError(first_path + ": run record: configurations " + std::to_string(first.configurations) +
                     ", but its options make a grid of " + std::to_string(grid.cells.size()));
  // Every row belongs to its shard and holds the run's trials.
  std::set<long long> index_seen;
  for (const auto& [path, file] : files) {
    const SweepRun& r = *file.run;
    long long expected_rows = 0;
    if (r.configurations >= r.shard_k) expected_rows = (r.configurations - r.shard_k) / r.shard_n + 1;
    for (std::size_t i = 0; i < file.rows.size(); ++i) {
      const SweepRow& row = file.rows[i];
      const std::string where = path + ": " +
                                (i < file.row_where.size() ? file.row_where[i] : "row " + std::to_string(i + 1)) +
                                " (index " + std::to_string(row.index) + ")";
      if (row.index < 0 || row.index >= r.configurations || row.index % r.shard_n != r.shard_k - 1)
        throw InputError(where + ": not a configuration of shard " + r.shard_text() + " of " +
                         std::to_string(r.configurations));
      if (const SweepRow& cell = grid.cells[static_cast<std::size_t>(row.index)].row;
          row.format != cell.format || row.round != cell.round || row.model != cell.model ||
          row.scenario != cell.scenario)
        throw InputError(where + ": configuration " + row.configuration() + " is not in the run's grid (index " +
                         std::to_string(row.index) + " is " + cell.configuration() + ")");
      if (row.trials != r.trials)
        throw InputError(where + ": trials " + std::to_string(row.trials) + " differs from the run's " +
                         std::to_string(r.trials));
      if (row.seqlen != r.seqlen || row.headdim != r.headdim)
        throw InputError(where + ": seqlen/headdim " + std::to_string(row.seqlen) + "/" + std::to_string(row.headdim) +
                         " differ from the run's " + std::to_string(r.seqlen) + "/" + std::to_string(r.headdim));
      if (row.ref_trials != 0 && row.ref_trials != row.trials)
        throw InputError(where + ": ref_trials " + std::to_string(row.ref_trials) + " is neither 0 nor trials");
      std::vector<std::pair<std::string, long long>> counts;
      for (const NamedMoments& m : kMoments) {
        counts.emplace_back(std::string(m.prefix) + "_pos", (row.*m.member).pos);
        counts.emplace_back(std::string(m.prefix) + "_neg", (row.*m.member).neg);
      }
      for (const auto& [name, v] : counts)
        if (v < 0 || v > row.trials)
          throw InputError(where + ": " + name + " " + std::to_string(v) + " is outside 0..trials");
      for (const auto& [name, v] : {std::pair<const char*, long long>{"elements", row.elements},
                                    {"sig_overflows", row.sig_overflows},
                                    {"ties", row.ties},
                                    {"rounded_up", row.rounded_up},
                                    {"rounded_down", row.rounded_down}})
        if (v < 0) throw InputError(where + ": " + name + " " + std::to_string(v) + " is negative");
      if (!index_seen.insert(row.index).second)
        throw InputError(where + ": configuration " + row.configuration() + " appears twice");
    }
    if (static_cast<long long>(file.rows.size()) != expected_rows)
      throw InputError(path + ": shard " + r.shard_text() + " of " + std::to_string(r.configurations) +
                       " configurations should hold " + std::to_string(expected_rows) + " rows, holds " +
                       std::to_string(file.rows.size()));
  }
  SweepRun merged = first;
  merged.shard_k = merged.shard_n = 1;
  // The verdict's levels: merge's own when given, else the shards must share theirs.
  auto level = [&](double SweepRun::*member, const std::optional<double>& given, const std::string& option) {
    if (given) {
      merged.*member = *given;
      return;
    }
    for (const auto& [path, file] : files)
      if ((*file.run).*member != first.*member)
        throw InputError(path + ": " + option + " " + shortest_decimal((*file.run).*member) + " differs from " +
                         shortest_decimal(first.*member) + " in " + first_path + "; give merge " + option);
  };
  level(&SweepRun::alpha, alpha, "--alpha");
  level(&SweepRun::at_stake, at_stake, "--at-stake");
  return merged;
}

}  // namespace fb::cli
