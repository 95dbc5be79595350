// emu/dot/dot_step_json.hpp: one fused tensor-core step's record (DotStepEvent) as JSON, the one
// serialiser of it: probe-check's --json (traces/probe_check.cpp) and the Python module's
// traces (python/src/bind_attention.cpp) both write it.
//
// Contract: an object with, in this order, largest_exponent, terms, truncated_value,
// truncated_terms, carry_out, normalisation_shift, output_residue (the published record of
// emu/dot/tensor_core.hpp) and first_product, fraction_bits, aligned_sum, special,
// every_term_zero, error (this project's additions; error is DotStepEvent::error, output - exact with the exact sign,
// where
// -(truncated_value + output_residue) can lose a tiny term's sign). The output rounding's
// event is not included: a face that reports it renders it with its format (api/event_json.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include "emu/dot/tensor_core.hpp"

namespace fb {

nlohmann::ordered_json dot_step_json(const DotStepEvent& step);

}  // namespace fb
