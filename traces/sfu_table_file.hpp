// traces/sfu_table_file.hpp: the FBSFU1 table file, the emulator's SFU tables (format in
// traces/sfu_table_file.cpp): its in-memory form, the writer and the validating loader.
//
// Contract: write_table_file writes an SfuTable as FBSFU1; load_table_model reads one back as
// the emu's table model (forms 1..5: emu/sfu/sfu_table_models.hpp; form 0, whose model reads
// the file's delta streams in place, is traces/sfu_table_file.cpp's own). The rules that
// evaluate a table are emu/sfu/sfu_table_rules.hpp; this header only reads and writes files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "emu/sfu/special_functions.hpp"

namespace fb {

// In-memory form of an FBSFU1 table file. Outputs are raw fp32 bit patterns; the file stores
// them as deltas from correct_ftz.
enum class SfuTableForm : std::uint8_t {
  delta_segments = 0,      // any function: explicit outputs for ranges of input bit patterns
  ex2_fixed_point = 1,     // ex2 only: x -> fixed point with N fraction bits, 2^k * T[frac]
  rcp_mantissa = 2,        // rcp only: x = +-2^e * 1.m -> +-T[m] * 2^-e (ftz), T over the 2^23 mantissas
  lg2_exponent_split = 3,  // lg2 only: x = 2^e * 1.m > 0 -> RN_fp32(e + T[m]) (ftz), T over the 2^23 mantissas
  ex2_sign_magnitude = 4,  // ex2 only: |x| truncated to N fraction bits, k.i; x >= 0: T+[i] * 2^k, x < 0: T-[i] * 2^-k
  lg2_extended = 5,        // lg2 only: x = 2^e * 1.m > 0 -> one rounding of e + L[m], L[m] finer than fp32
};

struct SfuTableSegment {
  std::uint32_t first_input = 0;       // input bit pattern of outputs[0]
  std::vector<std::uint32_t> outputs;  // outputs for first_input, first_input + 1, ...
};

struct SfuTable {
  SpecialFunction function = SpecialFunction::ex2;
  SfuTableForm form = SfuTableForm::delta_segments;
  bool measured_on_hardware = false;  // false for synthetic tables (tests)
  std::string source;                 // provenance: GPU, driver, date, capture tool
  // delta_segments: sorted, non-overlapping
  std::vector<SfuTableSegment> segments;
  // ex2_fixed_point: T[i] = fp32 bits of the hardware's 2^(i / 2^fraction_bits)
  int fraction_bits = 0;  // 1..24
  FixedPointRounding argument_rounding = FixedPointRounding::floor;
  std::vector<std::uint32_t> fraction_outputs;  // 2^fraction_bits entries
  // rcp_mantissa: T[m] = fp32 bits of the hardware's rcp(1.m), m the 23-bit mantissa field;
  // lg2_exponent_split: T[m] = fp32 bits of the hardware's lg2(1.m)
  std::vector<std::uint32_t> mantissa_outputs;  // 2^23 entries (kRcpMantissaEntries, kLg2MantissaEntries)
  // ex2_sign_magnitude: fraction_bits N (1..24), fraction_outputs = T+[i] (the hardware's
  // 2^(i / 2^N), in [1, 2)) and negative_fraction_outputs = T-[i] (its 2^(-i / 2^N), in
  // (1/2, 1]), 2^N entries each.
  std::vector<std::uint32_t> negative_fraction_outputs;
  // lg2_extended: mantissa_outputs = T[m] (the hardware's lg2(1.m)), extended_residuals = R[m]
  // (2^23 entries), L[m] = T[m] + R[m] * ulp(T[m]) * 2^-guard_bits exactly (ulp of a zero or
  // subnormal T: 2^-149), e + L[m] rounded once by final_rounding (see lg2_extended_rule).
  std::vector<std::int32_t> extended_residuals;
  int guard_bits = 0;  // 0..24
  FinalRounding final_rounding = FinalRounding::nearest_even;
  // forms 1..5: what a NaN input gives (GPU: 0x7fffffff); forms 3, 5: also what x < 0 gives
  std::uint32_t nan_output = 0x7fc00000u;
};

// The FBSFU1 file's checksum: CRC-32 (IEEE 802.3, as zlib) of `n` bytes. Public so that
// tools writing such files (and the fuzzer, to reach past the check) share this one.
std::uint32_t crc32(const std::uint8_t* data, std::size_t n);

// Writes `table` as an FBSFU1 file; throws std::runtime_error on an inconsistent table
// or an I/O error.
void write_table_file(const std::string& path, const SfuTable& table);
// Loads a table file; throws std::runtime_error naming the file and field on a bad file.
std::unique_ptr<SpecialFunctionModel> load_table_model(const std::string& path);

}  // namespace fb
