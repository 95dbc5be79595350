// gpu/sfu_table_convert.cpp: fb-sfu-table-convert, turns an ex2, rcp or lg2 table captured by
// fb-sfu-probe (FBSFUT1, gpu/README.md) into the emu's FBSFU1 table file
// (emu/special_functions.cpp), the form `table` SFU models load.
//
// Contract: gpu/sfu_table.hpp sfu_capture_to_table() does the conversion (ex2 fixed-point,
// rcp mantissa and lg2 exponent-split tables whose emu evaluation reproduced the hardware on
// all 2^32 inputs); this program writes its result (FBSFU1 form ex2_fixed_point,
// rcp_mantissa or lg2_exponent_split). A table that
// did not reproduce the hardware is refused and a malformed input fails: each exits 2 with
// one line naming the file and field.
// Usage: fb-sfu-table-convert IN.fbsfut OUT.fbsfu
#include <cstdio>
#include <exception>

#include "gpu/sfu_table.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fb-sfu-table-convert IN.fbsfut OUT.fbsfu\n");
    return 2;
  }
  try {
    const fb::SfuTable table = fb::gpu::sfu_capture_to_table(argv[1]);
    fb::write_table_file(argv[2], table);
    if (table.form == fb::SfuTableForm::rcp_mantissa) {
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
