// gpu/sfu_table.hpp: reads the SFU tables fb-sfu-probe captures on a GPU (FBSFUT1,
// gpu/README.md) and turns them into the emu's `table` model (FBSFU1, emu/special_functions).
//
// Contract: sfu_capture_to_table() accepts an ex2 fixed-point table (key
// ex2_fixed_point_floor | ex2_fixed_point_nearest_even | ex2_fixed_point_toward_zero), an
// rcp mantissa table (function rcp, key rcp_mantissa, key_bits 23) or an lg2 exponent-split
// table (function lg2, key lg2_exponent_split, key_bits 23) whose header records that
// the emu's evaluation of the table reproduced the hardware on all 2^32 inputs
// (table_model_mismatches=0); it returns T[i] = the correctly rounded value at the key
// (2^(i/2^N) for ex2, 1/(1 + m/2^23) for rcp, lg2(1 + m/2^23) for lg2) plus the captured
// 4-bit delta, or the escaped explicit bits, as FBSFU1 form ex2_fixed_point (with the
// captured argument rounding), rcp_mantissa or lg2_exponent_split, measured_on_hardware =
// true and the capture's device fields as the source.
// Anything else (another function or key, a table that did not reproduce the hardware, a
// malformed file) throws std::runtime_error "<path>: <field>: <what>".
#pragma once

#include <string>

#include "emu/special_functions.hpp"

namespace fb::gpu {

SfuTable sfu_capture_to_table(const std::string& path);

}  // namespace fb::gpu
