// emu/sfu/sfu_table_models.hpp: the emulator's SFU table models (FBSFU1 forms 1..5), built from
// already-decoded tables. traces/sfu_table_file.cpp decodes a file and calls these factories;
// the evaluation rules themselves are emu/sfu/sfu_table_rules.hpp, shared with the device.
//
// Contract: each factory takes the table exactly as the file defines it (sizes already
// checked by the loader: 2^N entries for forms 1 and 4's halves, 2^23 for forms 2, 3, 5)
// and returns a SpecialFunctionModel whose evaluate() is the form's rule (the hypotheses in
// emu/sfu/sfu_table_models.cpp), kind() table, hardware_measured() = provenance.measured, and
// describe() "<f>: table <path> (source: ...), <rule>, measured on hardware | SYNTHETIC".
// TableModel is the shared base, also used by traces/sfu_table_file.cpp's delta-segment model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "emu/sfu/special_functions.hpp"

namespace fb {

// Where a table came from, for hardware_measured() and reports.
struct TableProvenance {
  bool measured = false;  // captured on a GPU (the file's `measured` byte)
  std::string path;       // the file it was loaded from
  std::string source;     // the file's provenance text (GPU, driver, date)
};

// What every table model shares: the function, its file and provenance, and how a report
// names them.
class TableModel : public SpecialFunctionModel {
 public:
  TableModel(SpecialFunction f, TableProvenance provenance) : f_(f), provenance_(std::move(provenance)) {}
  SpecialFunction function() const override { return f_; }
  SfuKind kind() const override { return SfuKind::table; }
  bool hardware_measured() const override { return provenance_.measured; }
  // "ex2 table ex2_h200.fbsfu (measured)": the file's name, not its directory or provenance.
  std::string summary() const override;

 protected:
  // "<f>: table <path> (source: ...), <rule>, measured on hardware | SYNTHETIC, not measured".
  std::string describe_rule(const std::string& rule) const;
  bool measured() const { return provenance_.measured; }
  SpecialFunction f_;

 private:
  TableProvenance provenance_;
};

// Form 1: T[i] = the hardware's 2^(i / 2^fraction_bits), 2^fraction_bits entries.
std::unique_ptr<SpecialFunctionModel> make_ex2_fixed_point_model(TableProvenance provenance, int fraction_bits,
                                                                 FixedPointRounding rounding, std::uint32_t nan_output,
                                                                 std::vector<std::uint32_t> table);
// Form 2: T[m] = the hardware's rcp(1.m), kRcpMantissaEntries entries.
std::unique_ptr<SpecialFunctionModel> make_rcp_mantissa_model(TableProvenance provenance, std::uint32_t nan_output,
                                                              std::vector<std::uint32_t> table);
// Form 3: T[m] = the hardware's lg2(1.m), kLg2MantissaEntries entries.
std::unique_ptr<SpecialFunctionModel> make_lg2_exponent_split_model(TableProvenance provenance,
                                                                    std::uint32_t nan_output,
                                                                    std::vector<std::uint32_t> table);
// Form 4: positive = T+[i], negative = T-[i], 2^fraction_bits entries each.
std::unique_ptr<SpecialFunctionModel> make_ex2_sign_magnitude_model(TableProvenance provenance, int fraction_bits,
                                                                    std::uint32_t nan_output,
                                                                    std::vector<std::uint32_t> positive,
                                                                    const std::vector<std::uint32_t>& negative);
// Form 5: T[m] and R[m], kLg2MantissaEntries entries each, every entry within
// lg2_extended_rule's limits (the loader checks them).
std::unique_ptr<SpecialFunctionModel> make_lg2_extended_model(TableProvenance provenance, std::uint32_t nan_output,
                                                              int guard_bits, FinalRounding rounding,
                                                              std::vector<std::uint32_t> table,
                                                              std::vector<std::int32_t> residuals);

}  // namespace fb
