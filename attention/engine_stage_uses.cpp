// attention/engine_stage_uses.cpp: which KernelModel fields the engine's passes read for a
// recipe (recipe_stage_fields, uses_special_function; contract in attention/kernel_models.hpp),
// kept beside the passes so that a change to where a pass reads a field changes its predicate
// here too. Each predicate names the step (attention/engine_detail.hpp, online_forward.cpp,
// materialised_forward.cpp, backward.cpp) that reads the field. Recipe overrides
// (tools/recipe_file.cpp) refuse a stage a model would ignore by these predicates, and
// tests/test_attention_models.cpp checks them against the engine itself.
#include <vector>

#include "attention/kernel_models.hpp"

namespace fb::attn {
namespace {
bool reference(const KernelModel& m) { return m.structure == Structure::correctly_rounded; }
bool online(const KernelModel& m) { return m.structure == Structure::online_softmax; }
bool materialised(const KernelModel& m) { return m.structure == Structure::materialised; }
bool scales_scores(const KernelModel& m) { return !reference(m) && m.scale == ScaleHandling::multiply_scores; }
// exponent() takes exp(F(S - m)) (multiply_scores and the math backend's sqrt_prescale_qk).
bool exp_of_difference(const KernelModel& m) {
  return scales_scores(m) || (!reference(m) && m.scale == ScaleHandling::sqrt_prescale_qk);
}
// Forward-only recipes run no backward kernel (engine.cpp run_typed: backward_modelled).
bool tensor_op_backward(const KernelModel& m) {
  return !reference(m) && m.backward == BackwardKernel::tensor_ops && m.backward_modelled;
}
bool o_buffer(const KernelModel& m) { return online(m) && m.o_acc == OAccumulator::buffer; }
bool pairwise_row_sum(const KernelModel& m) { return online(m) && m.row_sum == RowSumOrder::pairwise; }
}  // namespace

const std::vector<StageField>& recipe_stage_fields() {
  static const std::vector<StageField> fields = {
      // score(), and the backwards' recomputed scores
      {"score_format", "S = F(Q·Kᵀ), every model's scores", &KernelModel::score_format,
       [](const KernelModel& m) { return !reference(m); }},
      // score() for multiply_scores; reduce_max's +dynmax threshold
      {"scaled_score_format", "S = F(S * scale) (models that scale the scores as a tensor op)",
       &KernelModel::scaled_score_format, scales_scores},
      // reduce_max (+dynmax only)
      {"max_format", "+dynmax's m = F(beta * r_m)", &KernelModel::max_format,
       [](const KernelModel& m) { return m.dynmax; }},
      // exponent() and rescale_factor() for multiply_scores; tensorop_backward_head's P
      {"sub_format", "S - m before exp (models that scale the scores as a tensor op or prescale q and k)",
       &KernelModel::sub_format, exp_of_difference},
      // exponent() for multiply_scores; materialised_forward_row / materialised_p_row;
      // tensorop_backward_head and delta_from_dpp's P
      {"p_format", "P = F(exp(...)) as stored (tensor-op exponent, materialised softmax, tensor-op backward)",
       &KernelModel::p_format,
       [](const KernelModel& m) { return exp_of_difference(m) || materialised(m) || tensor_op_backward(m); }},
      // reduce_sum (pairwise); materialised_forward_row's l
      {"row_sum_internal", "the row sum's additions (pairwise row sums, materialised softmax)",
       &KernelModel::row_sum_internal, [](const KernelModel& m) { return pairwise_row_sum(m) || materialised(m); }},
      // reduce_sum (pairwise, without l_update_fma)
      {"row_sum_format", "the ℓ buffer (pairwise online row sums updated by a separate add)",
       &KernelModel::row_sum_format, [](const KernelModel& m) { return pairwise_row_sum(m) && !m.l_update_fma; }},
      // online_forward_loop's P̄ cast; materialised_forward_row; every backward's P and dS
      {"p_cast", "P̄ as fed to the P·V dot, every model", &KernelModel::p_cast,
       [](const KernelModel& m) { return !reference(m); }},
      // gemm_pv (buffer accumulators) and normalize_softmax_lse
      {"o_buffer_format", "the O accumulator, its rescale and the final division (buffer accumulators)",
       &KernelModel::o_buffer_format, o_buffer},
      // gemm_pv (buffer accumulators); materialised_forward_row's O
      {"pv_result_format", "F(P̄·V) of one KV tile (buffer accumulators) or of the row (materialised)",
       &KernelModel::pv_result_format, [](const KernelModel& m) { return o_buffer(m) || materialised(m); }},
      // normalize_softmax_lse (natural); materialised_forward_row; tensorop_backward_head, delta_from_dpp
      {"lse_format", "LSE = F(m + log ℓ) (natural LSE, materialised models, tensor-op backward)",
       &KernelModel::lse_format,
       [](const KernelModel& m) { return m.lse == LseFormula::natural || materialised(m) || tensor_op_backward(m); }},
      // delta_from_o (rounded_products); tensorop_backward_head's dP - delta
      {"delta_format",
       "delta's result, the stored delta (delta from rounded products; fa-bf16acc: also dP - delta, "
       "in PyTorch's promotion of bwd_format and this)",
       &KernelModel::delta_format, [](const KernelModel& m) { return m.delta == DeltaFormula::rounded_products; }},
      // delta_from_o (rounded_products)
      {"delta_product_format", "each product dO·O of delta (delta from rounded products)",
       &KernelModel::delta_product_format,
       [](const KernelModel& m) { return m.delta == DeltaFormula::rounded_products; }},
      // tensorop_backward_head
      {"bwd_format", "every backward tensor op's result (tensor-op backward)", &KernelModel::bwd_format,
       tensor_op_backward},
  };
  return fields;
}

bool uses_special_function(const KernelModel& km, SpecialFunction f) {
  if (reference(km)) return false;  // exact attention: no SFU
  switch (f) {
    case SpecialFunction::ex2:  // kernel_exp2 in exponent() and rescale_factor(), or fa2/triton_backward_p
      return km.cuda_expf || !exp_of_difference(km) || km.backward == BackwardKernel::fa2_seqk_parallel ||
             km.backward == BackwardKernel::triton_prescaled_k || km.backward == BackwardKernel::flex_blocks;
    case SpecialFunction::rcp:  // normalize_softmax_lse (rcp_multiply, fa3_finalize)
      return online(km) &&
             (km.normalisation == Normalisation::rcp_multiply || km.normalisation == Normalisation::fa3_finalize);
    case SpecialFunction::lg2:  // normalize_softmax_lse: fast_log (fa2, fa3) or lg2 (log2_units, fa4); ck_fp64
                                // takes logf, modelled correctly rounded, and log2_libdevice libdevice's
                                // software log2f (neither an SfuSet function)
      return online(km) && km.lse != LseFormula::natural && km.lse != LseFormula::ck_fp64 &&
             km.lse != LseFormula::log2_libdevice;
  }
  return false;
}

bool evaluates_special_functions(const KernelModel& km) {
  for (SpecialFunction f : {SpecialFunction::ex2, SpecialFunction::rcp, SpecialFunction::lg2})
    if (uses_special_function(km, f)) return true;
  return false;
}

}  // namespace fb::attn
