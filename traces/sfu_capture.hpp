// traces/sfu_capture.hpp: reads the SFU tables fb-sfu-probe captures on a GPU (FBSFUT1,
// layout in traces/README.md) and turns them into the emu's `table` model (FBSFU1, traces/sfu_table_file.hpp).
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
// true when the header's source is a GPU (source=cuda:..., fb-sfu-probe; false for anything
// else, e.g. fb-sfu-rehearse's source=rehearsal:...) and the capture's device fields as the
// source.
// Anything else (another function or key, a table that did not reproduce the hardware, a
// malformed file) throws std::runtime_error "<path>: <field>: <what>".
#pragma once

#include <string>

#include "traces/sfu_table_file.hpp"

namespace fb::gpu {

SfuTable sfu_capture_to_table(const std::string& path);

// Also accepted by sfu_capture_to_table: an ex2 sign-magnitude table (function ex2, key
// ex2_sign_magnitude, key_bits N, entries 2^(N+1): T+ then T-) -> FBSFU1 form
// ex2_sign_magnitude; an lg2 extended table (function lg2, key lg2_extended, key_bits 23,
// guard_bits, final_rounding, the T deltas and escapes, then 2^23 zigzag LEB128 residuals)
// -> FBSFU1 form lg2_extended. Both need table_model_mismatches=0.

// The ex2 sign-magnitude table (N = 23) derived from fb-sfu-probe's raw evidence
// (ex2_raw_binades.bin, FBSFURAW1) without a verification on all inputs: T+[i] from the
// binade [1, 2) (ex2(1 + i 2^-23) = 2 T+[i]), T-[i] from (-2, -1] (ex2(-1 - i 2^-23) =
// T-[i] / 2); the rule must then reproduce every input of every binade in the file, else
// std::runtime_error. measured_on_hardware = false (the entries are hardware outputs, the rule
// is checked on the file's binades only); nan_output 0x7fffffff (the SASS documentation's
// canonical NaN; the raw file holds no NaN input). `report` gets one line on what was checked.
SfuTable sfu_raw_ex2_to_sign_magnitude_table(const std::string& path, std::string& report);

}  // namespace fb::gpu
