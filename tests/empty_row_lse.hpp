// tests/empty_row_lse.hpp: the LSE each kernel's source writes for a row that sees no key (or
// whose every score is -inf), written from the sources, independently of the engine's table
// (attention/kernel_models.hpp empty_row_lse), by the model's family (its name's prefix):
// - FA2's flash_fwd_kernel.h (a row block with no KV block) and softmax.h normalize_softmax_lse
//   write INFINITY;
// - FA3's hopper/softmax.h finalize and FA4's cute/softmax.py finalize write -INFINITY, CK's
//   pipelines set_tile(lse, -inf), and Triton's kernels compute m_i + log2(l_i) from m_i = -inf
//   (the tutorial's l_i = 1, FlexAttention's where(l_i == 0, 1, l_i));
// - models of code that returns no LSE (PyTorch's math path, the papers' baselines) and the
//   unmeasured cuDNN keep +inf, the engine's convention.
#pragma once

#include <cmath>
#include <string>

namespace fb::test {

inline double source_empty_row_lse(const std::string& model_base) {
  for (const char* minus : {"fa3-", "fa4-", "ck-", "triton-", "flex-"})
    if (model_base.rfind(minus, 0) == 0) return -INFINITY;
  return INFINITY;
}

}  // namespace fb::test
