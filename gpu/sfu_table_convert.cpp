// gpu/sfu_table_convert.cpp: fb-sfu-table-convert, turns an ex2, rcp or lg2 table captured by
// fb-sfu-probe (FBSFUT1, gpu/README.md) into the emu's FBSFU1 table file
// (traces/sfu_table_file.hpp), the form `table` SFU models load.
//
// Contract: traces/sfu_capture.hpp sfu_capture_to_table() does the conversion (ex2 fixed-point,
// rcp mantissa and lg2 exponent-split tables whose emu evaluation reproduced the hardware on
// all 2^32 inputs); this program writes its result (FBSFU1 form ex2_fixed_point,
// rcp_mantissa or lg2_exponent_split). A table that
// did not reproduce the hardware is refused and a malformed input fails: each exits 2 with
// one line naming the file and field.
// Also: fb-sfu-table-convert --ex2-from-raw RAW.bin OUT.fbsfu derives the ex2 sign-magnitude
// table from fb-sfu-probe's raw ex2 evidence (FBSFURAW1; traces/sfu_capture.hpp
// sfu_raw_ex2_to_sign_magnitude_table: written unmeasured, the rule checked on the file's
// binades only).
// Usage: fb-sfu-table-convert IN.fbsfut OUT.fbsfu | --ex2-from-raw RAW.bin OUT.fbsfu
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "traces/sfu_capture.hpp"
#include "traces/sfu_table_file.hpp"

int main(int argc, char** argv) {
  const bool from_raw = argc == 4 && std::strcmp(argv[1], "--ex2-from-raw") == 0;
  if (argc != 3 && !from_raw) {
    std::fprintf(stderr, "usage: fb-sfu-table-convert IN.fbsfut OUT.fbsfu | --ex2-from-raw RAW.bin OUT.fbsfu\n");
    return 2;
  }
  try {
    if (from_raw) {
      std::string report;
      const fb::SfuTable table = fb::gpu::sfu_raw_ex2_to_sign_magnitude_table(argv[2], report);
      fb::write_table_file(argv[3], table);
      std::printf("wrote %s: ex2 sign magnitude, N=23, UNMEASURED rule (%s)\n", argv[3], report.c_str());
      return 0;
    }
    const fb::SfuTable table = fb::gpu::sfu_capture_to_table(argv[1]);
    fb::write_table_file(argv[2], table);
    if (table.form == fb::SfuTableForm::ex2_sign_magnitude) {
      std::printf("wrote %s: ex2 sign magnitude, N=%d, %s\n", argv[2], table.fraction_bits, table.source.c_str());
    } else if (table.form == fb::SfuTableForm::lg2_extended) {
      std::printf("wrote %s: lg2 extended (2^23 entries), %s\n", argv[2], table.source.c_str());
    } else if (table.form == fb::SfuTableForm::rcp_mantissa) {
      std::printf("wrote %s: rcp mantissa (2^23 entries), %s\n", argv[2], table.source.c_str());
    } else if (table.form == fb::SfuTableForm::lg2_exponent_split) {
      std::printf("wrote %s: lg2 exponent split (2^23 entries), %s\n", argv[2], table.source.c_str());
    } else {
      std::printf("wrote %s: ex2 fixed point, N=%d, %s\n", argv[2], table.fraction_bits, table.source.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
