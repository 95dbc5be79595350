// emu/dot/dot_step_json.cpp: the DotStepEvent serialiser (contract: emu/dot/dot_step_json.hpp).
#include "emu/dot/dot_step_json.hpp"

namespace fb {

nlohmann::ordered_json dot_step_json(const DotStepEvent& step) {
  return {{"largest_exponent", step.largest_exponent},
          {"terms", step.terms},
          {"truncated_value", step.truncated_value},
          {"truncated_terms", step.truncated_terms},
          {"carry_out", step.carry_out},
          {"normalisation_shift", step.normalisation_shift},
          {"output_residue", step.output_residue},
          {"first_product", step.first_product},
          {"fraction_bits", step.fraction_bits},
          {"aligned_sum", step.aligned_sum},
          {"special", step.special},
          {"every_term_zero", step.every_term_zero},
          {"error", step.error}};
}

}  // namespace fb
