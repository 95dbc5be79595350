// traces/sfu_table_file.cpp: the FBSFU1 table file: crc32, the writer (write_table_file), the
// validating loader (load_table_model) and the delta-segment (form 0) model; the models of
// forms 1..5 are emu/sfu/sfu_table_models.cpp, their rules emu/sfu/sfu_table_rules.hpp.
//
// ---- FBSFU1 table file (version 1), all integers little-endian ---------------------
//   magic         6 bytes  "FBSFU1"
//   function      u8       0 = ex2, 1 = rcp, 2 = lg2
//   form          u8       0 = delta_segments, 1 = ex2_fixed_point (function must be ex2),
//                          2 = rcp_mantissa (function must be rcp),
//                          3 = lg2_exponent_split (function must be lg2)
//   measured      u8       1 = captured on a GPU, 0 = synthetic (tests, hypotheses)
//   source_len    u16      then source_len bytes of UTF-8 provenance (GPU, driver, date)
//   form 0: segment_count u32 (>= 1), then per segment, sorted by first_input and not
//           overlapping:  first_input u32, count u32 (>= 1, first_input + count <= 2^32),
//           delta_stream(count) for inputs first_input .. first_input + count - 1
//   form 1: fraction_bits u8 (N, 1..24), argument_rounding u8 (0 floor, 1 nearest-even,
//           2 toward zero), nan_output u32 (bits returned for a NaN input),
//           delta_stream(2^N) for T[0 .. 2^N - 1]
//   form 2: nan_output u32, delta_stream(2^23) for T[0 .. 2^23 - 1]
//   form 3: nan_output u32, delta_stream(2^23) for T[0 .. 2^23 - 1]
//   form 4: fraction_bits u8 (N, 1..24), nan_output u32, delta_stream(2^N) for T+[0 .. 2^N - 1],
//           delta_stream(2^N) for T-[0 .. 2^N - 1]
//   form 5: nan_output u32, guard_bits u8 (g, 0..24), final_rounding u8 (0 nearest-even,
//           1 toward zero, 2 down, 3 up), delta_stream(2^23) for T[0 .. 2^23 - 1],
//           delta_stream(2^23) for R[0 .. 2^23 - 1]
//   crc32         u32      CRC-32 (IEEE 802.3, as zlib) of every preceding byte
// delta_stream(n): runs until n deltas are read; each run is length u32 (>= 1, at most
//   the deltas still due), width u8 (0..32), then ceil(length * width / 8) bytes holding
//   `length` deltas of `width` bits each, LSB first, two's complement (width 0: all
//   deltas are 0, no bytes). A delta is (output bits - base bits) mod 2^32 read as a
//   signed integer: the signed distance in ulps for same-sign finite values, and width
//   32 encodes any output (NaN payloads, sign changes). The base is correct_ftz of the
//   input (form 0), ex2_correct_ftz(i * 2^-N) (form 1; form 4's T+), ex2_correct_ftz(-i * 2^-N)
//   (form 4's T-), rcp_correct_ftz(1 + m * 2^-23) (form 2) or lg2_correct_ftz(1 + m * 2^-23)
//   (forms 3 and 5's T); form 5's R has base 0 (the stream holds R). An all-correct table costs
//   9 bytes per run; the writer splits deltas into 256-entry chunks and merges
//   neighbouring chunks of equal width.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "traces/sfu_table_file.hpp"

#include "emu/sfu/sfu_table_models.hpp"
#include "emu/sfu/sfu_table_rules.hpp"
#include "emu/sfu/special_functions.hpp"
#include "formats/file_read.hpp"
#include "formats/format.hpp"
#include "traces/little_endian.hpp"

namespace fb {

std::uint32_t crc32(const std::uint8_t* data, std::size_t n) {
  static constexpr std::array<std::uint32_t, 256> kTable = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) c = kTable[(c ^ data[i]) & 0xffu] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

namespace {

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
float float_of(std::uint32_t b) { return std::bit_cast<float>(b); }

constexpr std::string_view kTableMagic = "FBSFU1";
constexpr std::uint64_t kAllInputs = std::uint64_t{1} << 32;
constexpr std::size_t kDeltaChunk = 256;
constexpr int kMaxFractionBits = 24;

// The output bits the file's deltas are relative to.
std::uint32_t delta_base(SpecialFunction f, std::uint32_t input) { return bits_of(correct_ftz(f, float_of(input))); }
std::uint32_t fixed_point_base(int fraction_bits, std::uint32_t index) {
  return bits_of(ex2_correct_ftz(std::ldexp(static_cast<float>(index), -fraction_bits)));  // exact argument
}
std::uint32_t negative_fixed_point_base(int fraction_bits, std::uint32_t index) {
  return bits_of(ex2_correct_ftz(-std::ldexp(static_cast<float>(index), -fraction_bits)));  // exact argument
}
constexpr int kMaxGuardBits = 24;
// Why an lg2_extended entry (T bits, R) is outside what lg2_extended_rule supports, or "".
std::string extended_entry_problem(std::uint32_t t_bits, std::int32_t r, int guard_bits) {
  if (r <= -(std::int32_t{1} << 30) || r >= (std::int32_t{1} << 30)) return "|R| >= 2^30";
  if ((t_bits & sfu_rules::kFp32ExpMask) == sfu_rules::kFp32ExpMask)
    return r == 0 ? "" : "R != 0 with a NaN or infinite T";
  using namespace sfu_rules;
  const std::uint32_t biased = (t_bits >> kFp32ManBits) & kFp32ExpFieldMax;
  const int ulp_exponent = static_cast<int>(std::max<std::uint32_t>(biased, 1)) - kFp32Bias - kFp32ManBits;  // ulp(T)
  const double l =
      static_cast<double>(float_of(t_bits)) + std::ldexp(static_cast<double>(r), ulp_exponent - guard_bits);
  return std::fabs(l) < 2.0 ? "" : "|L| >= 2";
}
// The fp32 1.m of mantissa field m: exponent field = the bias (x in [1, 2)).
float one_point(std::uint32_t mantissa) {
  return float_of((static_cast<std::uint32_t>(formats::fp32.bias) << formats::fp32.man_bits) | mantissa);
}
std::uint32_t rcp_mantissa_base(std::uint32_t mantissa) { return bits_of(rcp_correct_ftz(one_point(mantissa))); }
std::uint32_t lg2_mantissa_base(std::uint32_t mantissa) { return bits_of(lg2_correct_ftz(one_point(mantissa))); }

int width_for(std::int32_t d) {
  if (d == 0) return 0;
  for (int w = 1; w < 32; ++w) {
    const std::int64_t lo = -(std::int64_t{1} << (w - 1)), hi = (std::int64_t{1} << (w - 1)) - 1;
    if (d >= lo && d <= hi) return w;
  }
  return 32;
}

class ByteWriter {
 public:
  void u8(std::uint8_t v) { bytes_.push_back(v); }
  void u16(std::uint16_t v) { append_little_endian(bytes_, v, 2); }
  void u32(std::uint32_t v) { append_little_endian(bytes_, v, 4); }
  void text(std::string_view s) { bytes_.insert(bytes_.end(), s.begin(), s.end()); }
  // `deltas` as runs of equal bit width (see the format above).
  void delta_stream(const std::vector<std::uint32_t>& deltas) {
    std::size_t i = 0;
    while (i < deltas.size()) {
      const int width = chunk_width(deltas, i);
      std::size_t end = std::min(deltas.size(), i + kDeltaChunk);
      while (end < deltas.size() && chunk_width(deltas, end) == width) end = std::min(deltas.size(), end + kDeltaChunk);
      u32(static_cast<std::uint32_t>(end - i));
      u8(static_cast<std::uint8_t>(width));
      if (width > 0) {
        std::vector<std::uint8_t> packed(((end - i) * static_cast<std::size_t>(width) + 7) / 8, 0);
        for (std::size_t j = i; j < end; ++j) {
          const std::uint64_t bit = (j - i) * static_cast<std::uint64_t>(width);
          const std::uint64_t v = deltas[j] & (width == 32 ? 0xffffffffull : (1ull << width) - 1);
          for (int b = 0; b < width; ++b) {
            if ((v >> b) & 1u) packed[(bit + b) / 8] |= static_cast<std::uint8_t>(1u << ((bit + b) % 8));
          }
        }
        bytes_.insert(bytes_.end(), packed.begin(), packed.end());
      }
      i = end;
    }
  }
  std::vector<std::uint8_t>& bytes() { return bytes_; }

 private:
  static int chunk_width(const std::vector<std::uint32_t>& deltas, std::size_t start) {
    int w = 0;
    const std::size_t end = std::min(deltas.size(), start + kDeltaChunk);
    for (std::size_t j = start; j < end; ++j) w = std::max(w, width_for(static_cast<std::int32_t>(deltas[j])));
    return w;
  }
  std::vector<std::uint8_t> bytes_;
};

// One run of a delta stream as loaded: `length` deltas of `width` bits at data[offset].
struct DeltaRun {
  std::uint64_t start;  // index of its first delta in the stream
  std::uint32_t length;
  std::uint8_t width;
  std::size_t offset;
};

struct DeltaStream {
  std::vector<DeltaRun> runs;
  std::uint32_t delta(const std::vector<std::uint8_t>& data, std::uint64_t index) const {
    const auto it = std::upper_bound(runs.begin(), runs.end(), index,
                                     [](std::uint64_t i, const DeltaRun& r) { return i < r.start; });
    const DeltaRun& run = *std::prev(it);
    if (run.width == 0) return 0;
    const std::uint64_t bit = (index - run.start) * run.width;
    const std::size_t first_byte = run.offset + bit / 8;
    const std::size_t bytes_needed = (bit % 8 + run.width + 7) / 8;
    std::uint64_t v = load_little_endian(data.data() + first_byte, bytes_needed) >> (bit % 8);
    if (run.width == 32) return static_cast<std::uint32_t>(v);
    v &= (1ull << run.width) - 1;
    if (v >> (run.width - 1)) v |= ~((1ull << run.width) - 1);  // sign-extend
    return static_cast<std::uint32_t>(v);
  }
};

class ByteReader {
 public:
  ByteReader(const std::string& path, const std::vector<std::uint8_t>& bytes, std::size_t end)
      : path_(path), bytes_(bytes), end_(end) {}
  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw std::runtime_error(path_ + ": field '" + field + "': " + why);
  }
  void need(std::size_t n, const std::string& field) const {
    if (end_ - pos_ < n)
      fail(field, "file truncated (needs " + std::to_string(n) + " more bytes at offset " + std::to_string(pos_) + ")");
  }
  std::uint8_t u8(const std::string& field) {
    need(1, field);
    return bytes_[pos_++];
  }
  std::uint16_t u16(const std::string& field) {
    need(2, field);
    const auto v = static_cast<std::uint16_t>(load_little_endian(bytes_.data() + pos_, 2));
    pos_ += 2;
    return v;
  }
  std::uint32_t u32(const std::string& field) {
    need(4, field);
    const auto v = static_cast<std::uint32_t>(load_little_endian(bytes_.data() + pos_, 4));
    pos_ += 4;
    return v;
  }
  std::string text(std::size_t n, const std::string& field) {
    need(n, field);
    std::string s(bytes_.begin() + static_cast<std::ptrdiff_t>(pos_),
                  bytes_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return s;
  }
  DeltaStream delta_stream(std::uint64_t count, const std::string& field) {
    DeltaStream s;
    std::uint64_t done = 0;
    while (done < count) {
      const std::string run_field = field + ".run[" + std::to_string(s.runs.size()) + "]";
      const std::uint32_t length = u32(run_field + ".length");
      if (length == 0 || length > count - done) {
        fail(run_field + ".length",
             std::to_string(length) + " is 0 or exceeds the " + std::to_string(count - done) + " deltas still due");
      }
      const std::uint8_t width = u8(run_field + ".width");
      if (width > 32) fail(run_field + ".width", std::to_string(width) + " > 32");
      const std::uint64_t data_bytes = (static_cast<std::uint64_t>(length) * width + 7) / 8;
      need(data_bytes, run_field + ".data");
      s.runs.push_back({done, length, width, pos_});
      pos_ += data_bytes;
      done += length;
    }
    return s;
  }
  std::size_t position() const { return pos_; }

 private:
  const std::string& path_;
  const std::vector<std::uint8_t>& bytes_;
  std::size_t end_;
  std::size_t pos_ = 0;
};

class DeltaTableModel final : public TableModel {
 public:
  struct Segment {
    std::uint32_t first_input;
    std::uint64_t count;
    DeltaStream deltas;
  };
  DeltaTableModel(SpecialFunction f, TableProvenance provenance, std::vector<Segment> segments,
                  std::vector<std::uint8_t> data)
      : TableModel(f, std::move(provenance)), segments_(std::move(segments)), data_(std::move(data)) {
    for (const Segment& s : segments_) covered_ += s.count;
  }
  bool hardware_measured() const override { return measured() && covered_ == kAllInputs; }
  std::string describe() const override {
    std::string d = describe_rule(std::to_string(covered_) + " inputs");
    if (covered_ != kAllInputs) d += "; other inputs use correct rounding, UNMEASURED";
    return d;
  }
  float evaluate(float x) const override {
    const std::uint32_t b = bits_of(x);
    const auto it = std::upper_bound(segments_.begin(), segments_.end(), b,
                                     [](std::uint32_t v, const Segment& s) { return v < s.first_input; });
    if (it != segments_.begin()) {
      const Segment& s = *std::prev(it);
      const std::uint64_t index = b - s.first_input;
      if (index < s.count) return float_of(delta_base(f_, b) + s.deltas.delta(data_, index));
    }
    fallbacks_.fetch_add(1, std::memory_order_relaxed);
    return correct_ftz(f_, x);
  }
  std::uint64_t fallback_count() const override { return fallbacks_.load(std::memory_order_relaxed); }

 private:
  std::vector<Segment> segments_;
  std::vector<std::uint8_t> data_;
  std::uint64_t covered_ = 0;
  mutable std::atomic<std::uint64_t> fallbacks_{0};
};

}  // namespace

void write_table_file(const std::string& path, const SfuTable& table) {
  auto bad = [&](const std::string& why) { throw std::runtime_error(path + ": cannot write table: " + why); };
  if (table.source.size() > 0xffff) bad("source longer than 65535 bytes");
  ByteWriter w;
  w.text(kTableMagic);
  w.u8(static_cast<std::uint8_t>(table.function));
  w.u8(static_cast<std::uint8_t>(table.form));
  w.u8(table.measured_on_hardware ? 1 : 0);
  w.u16(static_cast<std::uint16_t>(table.source.size()));
  w.text(table.source);
  if (table.form == SfuTableForm::delta_segments) {
    if (table.segments.empty()) bad("no segments");
    w.u32(static_cast<std::uint32_t>(table.segments.size()));
    std::uint64_t next_free = 0;
    for (const SfuTableSegment& s : table.segments) {
      if (s.outputs.empty() || s.outputs.size() > 0xffffffffull) bad("segment size must be in 1..2^32-1");
      if (s.first_input < next_free) bad("segments unsorted or overlapping");
      if (s.first_input + static_cast<std::uint64_t>(s.outputs.size()) > kAllInputs) bad("segment past 0xffffffff");
      next_free = s.first_input + static_cast<std::uint64_t>(s.outputs.size());
      w.u32(s.first_input);
      w.u32(static_cast<std::uint32_t>(s.outputs.size()));
      std::vector<std::uint32_t> deltas(s.outputs.size());
      for (std::size_t i = 0; i < deltas.size(); ++i) {
        deltas[i] = s.outputs[i] - delta_base(table.function, static_cast<std::uint32_t>(s.first_input + i));
      }
      w.delta_stream(deltas);
    }
  } else if (table.form == SfuTableForm::rcp_mantissa) {
    if (table.function != SpecialFunction::rcp) bad("rcp_mantissa form needs function rcp");
    if (table.mantissa_outputs.size() != kRcpMantissaEntries) bad("mantissa_outputs must have 2^23 entries");
    w.u32(table.nan_output);
    std::vector<std::uint32_t> deltas(kRcpMantissaEntries);
    for (std::uint32_t m = 0; m < kRcpMantissaEntries; ++m)
      deltas[m] = table.mantissa_outputs[m] - rcp_mantissa_base(m);
    w.delta_stream(deltas);
  } else if (table.form == SfuTableForm::lg2_exponent_split) {
    if (table.function != SpecialFunction::lg2) bad("lg2_exponent_split form needs function lg2");
    if (table.mantissa_outputs.size() != kLg2MantissaEntries) bad("mantissa_outputs must have 2^23 entries");
    w.u32(table.nan_output);
    std::vector<std::uint32_t> deltas(kLg2MantissaEntries);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m)
      deltas[m] = table.mantissa_outputs[m] - lg2_mantissa_base(m);
    w.delta_stream(deltas);
  } else if (table.form == SfuTableForm::ex2_fixed_point) {
    if (table.function != SpecialFunction::ex2) bad("ex2_fixed_point form needs function ex2");
    if (table.fraction_bits < 1 || table.fraction_bits > kMaxFractionBits) bad("fraction_bits must be 1..24");
    const std::size_t n = std::size_t{1} << table.fraction_bits;
    if (table.fraction_outputs.size() != n) bad("fraction_outputs must have 2^fraction_bits entries");
    w.u8(static_cast<std::uint8_t>(table.fraction_bits));
    w.u8(static_cast<std::uint8_t>(table.argument_rounding));
    w.u32(table.nan_output);
    std::vector<std::uint32_t> deltas(n);
    for (std::size_t i = 0; i < n; ++i) {
      deltas[i] = table.fraction_outputs[i] - fixed_point_base(table.fraction_bits, static_cast<std::uint32_t>(i));
    }
    w.delta_stream(deltas);
  } else if (table.form == SfuTableForm::ex2_sign_magnitude) {
    if (table.function != SpecialFunction::ex2) bad("ex2_sign_magnitude form needs function ex2");
    if (table.fraction_bits < 1 || table.fraction_bits > kMaxFractionBits) bad("fraction_bits must be 1..24");
    const std::size_t n = std::size_t{1} << table.fraction_bits;
    if (table.fraction_outputs.size() != n || table.negative_fraction_outputs.size() != n) {
      bad("fraction_outputs and negative_fraction_outputs must have 2^fraction_bits entries each");
    }
    w.u8(static_cast<std::uint8_t>(table.fraction_bits));
    w.u32(table.nan_output);
    std::vector<std::uint32_t> deltas(n);
    for (std::size_t i = 0; i < n; ++i) {
      deltas[i] = table.fraction_outputs[i] - fixed_point_base(table.fraction_bits, static_cast<std::uint32_t>(i));
    }
    w.delta_stream(deltas);
    for (std::size_t i = 0; i < n; ++i) {
      deltas[i] = table.negative_fraction_outputs[i] -
                  negative_fixed_point_base(table.fraction_bits, static_cast<std::uint32_t>(i));
    }
    w.delta_stream(deltas);
  } else if (table.form == SfuTableForm::lg2_extended) {
    if (table.function != SpecialFunction::lg2) bad("lg2_extended form needs function lg2");
    if (table.mantissa_outputs.size() != kLg2MantissaEntries ||
        table.extended_residuals.size() != kLg2MantissaEntries) {
      bad("mantissa_outputs and extended_residuals must have 2^23 entries each");
    }
    if (table.guard_bits < 0 || table.guard_bits > kMaxGuardBits) bad("guard_bits must be 0..24");
    if (static_cast<int>(table.final_rounding) > 3) bad("unknown final_rounding");
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) {
      if (const std::string why =
              extended_entry_problem(table.mantissa_outputs[m], table.extended_residuals[m], table.guard_bits);
          !why.empty()) {
        bad("entry " + std::to_string(m) + ": " + why);
      }
    }
    w.u32(table.nan_output);
    w.u8(static_cast<std::uint8_t>(table.guard_bits));
    w.u8(static_cast<std::uint8_t>(table.final_rounding));
    std::vector<std::uint32_t> deltas(kLg2MantissaEntries);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m)
      deltas[m] = table.mantissa_outputs[m] - lg2_mantissa_base(m);
    w.delta_stream(deltas);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m)
      deltas[m] = static_cast<std::uint32_t>(table.extended_residuals[m]);
    w.delta_stream(deltas);
  } else {
    bad("unknown form " + std::to_string(static_cast<int>(table.form)));
  }
  std::vector<std::uint8_t>& bytes = w.bytes();
  const std::uint32_t crc = crc32(bytes.data(), bytes.size());
  w.u32(crc);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) bad("cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) bad("write failed");
}

std::unique_ptr<SpecialFunctionModel> load_table_model(const std::string& path) {
  const std::vector<std::uint8_t> bytes =
      read_file_capped_bytes(path, kSfuTableFile);  // FileReadError: a runtime_error
  constexpr std::size_t kCrcBytes = 4;
  {
    ByteReader magic_reader(path, bytes, bytes.size());
    if (magic_reader.text(kTableMagic.size(), "magic") != kTableMagic) {
      magic_reader.fail("magic", "not an FBSFU1 table (expected the bytes \"FBSFU1\")");
    }
  }
  if (bytes.size() < kTableMagic.size() + kCrcBytes) {
    ByteReader(path, bytes, bytes.size()).fail("crc32", "file truncated before the checksum");
  }
  const std::size_t body = bytes.size() - kCrcBytes;
  const auto stored_crc = static_cast<std::uint32_t>(load_little_endian(bytes.data() + body, 4));
  if (crc32(bytes.data(), body) != stored_crc) {
    ByteReader(path, bytes, body).fail("crc32", "checksum mismatch: the file is corrupted or truncated");
  }

  ByteReader r(path, bytes, body);
  r.text(kTableMagic.size(), "magic");
  const std::uint8_t function = r.u8("function");
  if (function > 2) r.fail("function", "unknown function code " + std::to_string(function));
  const auto f = static_cast<SpecialFunction>(function);
  const std::uint8_t form = r.u8("form");
  if (form > 5) r.fail("form", "unknown form code " + std::to_string(form));
  if ((form == 1 || form == 4) && f != SpecialFunction::ex2) {
    r.fail("form", std::string(form == 1 ? "ex2_fixed_point" : "ex2_sign_magnitude") + " needs function ex2");
  }
  if (form == 5 && f != SpecialFunction::lg2) r.fail("form", "lg2_extended needs function lg2");
  if (form == 2 && f != SpecialFunction::rcp) r.fail("form", "rcp_mantissa needs function rcp");
  if (form == 3 && f != SpecialFunction::lg2) r.fail("form", "lg2_exponent_split needs function lg2");
  const std::uint8_t measured = r.u8("measured");
  if (measured > 1) r.fail("measured", "must be 0 or 1, is " + std::to_string(measured));
  const std::uint16_t source_len = r.u16("source_len");
  std::string source = r.text(source_len, "source");

  std::unique_ptr<SpecialFunctionModel> model;
  if (form == 0) {
    const std::uint32_t count = r.u32("segment_count");
    if (count == 0) r.fail("segment_count", "must be at least 1");
    std::vector<DeltaTableModel::Segment> segments;
    std::uint64_t next_free = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::string field = "segment[" + std::to_string(i) + "]";
      const std::uint32_t first = r.u32(field + ".first_input");
      const std::uint32_t n = r.u32(field + ".count");
      if (first < next_free) r.fail(field + ".first_input", "segments unsorted or overlapping");
      if (n == 0 || first + static_cast<std::uint64_t>(n) > kAllInputs) {
        r.fail(field + ".count", std::to_string(n) + " is 0 or runs past input 0xffffffff");
      }
      next_free = first + static_cast<std::uint64_t>(n);
      segments.push_back({first, n, r.delta_stream(n, field)});
    }
    if (r.position() != body)
      r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    model = std::make_unique<DeltaTableModel>(f, TableProvenance{measured == 1, path, std::move(source)},
                                              std::move(segments), std::move(bytes));
  } else if (form == 2) {
    const std::uint32_t nan_output = r.u32("nan_output");
    const DeltaStream deltas = r.delta_stream(kRcpMantissaEntries, "mantissa_table");
    if (r.position() != body)
      r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> table(kRcpMantissaEntries);
    for (std::uint32_t m = 0; m < kRcpMantissaEntries; ++m) table[m] = rcp_mantissa_base(m) + deltas.delta(bytes, m);
    model =
        make_rcp_mantissa_model(TableProvenance{measured == 1, path, std::move(source)}, nan_output, std::move(table));
  } else if (form == 3) {
    const std::uint32_t nan_output = r.u32("nan_output");
    const DeltaStream deltas = r.delta_stream(kLg2MantissaEntries, "mantissa_table");
    if (r.position() != body)
      r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> table(kLg2MantissaEntries);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) table[m] = lg2_mantissa_base(m) + deltas.delta(bytes, m);
    model = make_lg2_exponent_split_model(TableProvenance{measured == 1, path, std::move(source)}, nan_output,
                                          std::move(table));
  } else if (form == 4) {
    const std::uint8_t fraction_bits = r.u8("fraction_bits");
    if (fraction_bits < 1 || fraction_bits > kMaxFractionBits) {
      r.fail("fraction_bits", std::to_string(fraction_bits) + " is outside 1..24");
    }
    const std::uint32_t nan_output = r.u32("nan_output");
    const std::uint64_t n = std::uint64_t{1} << fraction_bits;
    const DeltaStream pos = r.delta_stream(n, "positive_table");
    const DeltaStream neg = r.delta_stream(n, "negative_table");
    if (r.position() != body)
      r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> positive(n), negative(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      positive[i] = fixed_point_base(fraction_bits, static_cast<std::uint32_t>(i)) + pos.delta(bytes, i);
      negative[i] = negative_fixed_point_base(fraction_bits, static_cast<std::uint32_t>(i)) + neg.delta(bytes, i);
    }
    model = make_ex2_sign_magnitude_model(TableProvenance{measured == 1, path, std::move(source)}, fraction_bits,
                                          nan_output, std::move(positive), negative);
  } else if (form == 5) {
    const std::uint32_t nan_output = r.u32("nan_output");
    const std::uint8_t guard_bits = r.u8("guard_bits");
    if (guard_bits > kMaxGuardBits) r.fail("guard_bits", std::to_string(guard_bits) + " is outside 0..24");
    const std::uint8_t rounding = r.u8("final_rounding");
    if (rounding > 3) r.fail("final_rounding", "unknown code " + std::to_string(rounding));
    const DeltaStream t_deltas = r.delta_stream(kLg2MantissaEntries, "mantissa_table");
    const DeltaStream r_values = r.delta_stream(kLg2MantissaEntries, "residual_table");
    if (r.position() != body)
      r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> table(kLg2MantissaEntries);
    std::vector<std::int32_t> residuals(kLg2MantissaEntries);
    for (std::uint32_t m = 0; m < kLg2MantissaEntries; ++m) {
      table[m] = lg2_mantissa_base(m) + t_deltas.delta(bytes, m);
      residuals[m] = static_cast<std::int32_t>(r_values.delta(bytes, m));
      if (const std::string why = extended_entry_problem(table[m], residuals[m], guard_bits); !why.empty()) {
        r.fail("residual_table", "entry " + std::to_string(m) + ": " + why);
      }
    }
    model = make_lg2_extended_model(TableProvenance{measured == 1, path, std::move(source)}, nan_output, guard_bits,
                                    static_cast<FinalRounding>(rounding), std::move(table), std::move(residuals));
  } else {
    const std::uint8_t fraction_bits = r.u8("fraction_bits");
    if (fraction_bits < 1 || fraction_bits > kMaxFractionBits) {
      r.fail("fraction_bits", std::to_string(fraction_bits) + " is outside 1..24");
    }
    const std::uint8_t rounding = r.u8("argument_rounding");
    if (rounding > 2) r.fail("argument_rounding", "unknown code " + std::to_string(rounding));
    const std::uint32_t nan_output = r.u32("nan_output");
    const std::uint64_t n = std::uint64_t{1} << fraction_bits;
    const DeltaStream deltas = r.delta_stream(n, "fraction_table");
    if (r.position() != body)
      r.fail("crc32", std::to_string(body - r.position()) + " unexpected bytes before the checksum");
    std::vector<std::uint32_t> table(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      table[i] = fixed_point_base(fraction_bits, static_cast<std::uint32_t>(i)) + deltas.delta(bytes, i);
    }
    model = make_ex2_fixed_point_model(TableProvenance{measured == 1, path, std::move(source)}, fraction_bits,
                                       static_cast<FixedPointRounding>(rounding), nan_output, std::move(table));
  }
  return model;
}

}  // namespace fb
