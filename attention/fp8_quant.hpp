// attention/fp8_quant.hpp: the FP8 operand preparation of the fp8 kernel models
// (fa3-fp8-sm90, standard-fp8; issue 10): incoherent processing and quantisation.
//
// Contract:
// - quantise_fp8_inputs() turns the high-precision Q, K, V of an AttentionInputs into
//   values of the 8-bit format (e4m3) plus descale factors, exactly as the caller of
//   FlashAttention-3's fp8 forward does before the launch:
//   * +hadamard: every row of Q and K (over the head dim d) becomes x·D·H/sqrt(d), with D
//     a random ±1 diagonal (from the seed, the same D for Q and K) and H the Sylvester
//     Hadamard matrix, so Q'K'ᵀ = QKᵀ. d must be a power of two (std::invalid_argument
//     otherwise). Computed in fp64: the ±x sums are exact for bf16/fp16 inputs of the
//     range the scenarios draw, then one fp64 multiply by 1/sqrt(d) (exact for d = 4^j).
//     A real pre-processing kernel would run it in fp32 or bf16 (NOT modelled: assumed
//     negligible against e4m3's 3 mantissa bits).
//   * scale = fp32(amax / 448) per (batch, head) slice of a tensor (FA3's descale has
//     shape (batch, kv heads), so under grouped-query attention the amax of Q is taken
//     over each group of q heads and shared by them), or with +block-quant per Br×d block
//     of Q (per q head; ASSUMED, FA3's interface has no block descales) and Bc×d block of
//     K and V; amax 0 gives scale 1.
//   * x8 = e4m3(fp32(x / scale)), RNE, satfinite (the PyTorch `(x / scale).to(e4m3)`
//     order: an fp32 division, then the conversion, as `cvt.rn.satfinite` does). Both
//     fp32 quotients are correctly rounded (one rounding of the exact quotient).
//   * descale = scale.
// - With `exact` (RunOptions::exact_arithmetic) nothing is rounded: scale = amax/448 and
//   x8 = x/scale in fp64, so the quantisation cancels algebraically.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"

namespace fb::attn {

struct Fp8Inputs {
  Tensor4 q, k, v;        // values of the 8-bit format (exact in double)
  int q_block_rows = 0;   // rows per Q scale block (q's length for per-tensor scaling)
  int kv_block_rows = 0;  // rows per K/V scale block (k's length for per-tensor scaling)
  int q_blocks = 1, kv_blocks = 1;
  // Descale factors, index (batch * heads + head) * blocks + block, with the heads of the
  // tensor (q's for q_descale, k's for k_descale and v_descale).
  std::vector<double> q_descale, k_descale, v_descale;
};

Fp8Inputs quantise_fp8_inputs(const Fp8Quantisation& spec, const AttentionInputs& in, int block_m, int block_n,
                              std::uint64_t seed, bool exact);

// ---- the pieces, exposed for tests ------------------------------------------------------
// Sylvester Hadamard matrix of order d (a power of two), entries ±1, row-major.
std::vector<int> sylvester_hadamard(int d);
// The random ±1 diagonal of the incoherent processing for a seed.
std::vector<int> incoherent_signs(int d, std::uint64_t seed);
// row <- row·D·H/sqrt(d) in place (fast Walsh-Hadamard transform in fp64).
void incoherent_transform(double* row, int d, const std::vector<int>& signs);
// fp32(amax / max finite of `format`), 1 when amax is 0 (exact: the fp64 quotient).
double fp8_scale(const Format& format, double amax, bool exact);
// The 8-bit value of x under `scale`: format(fp32(x / scale)), RNE satfinite.
double fp8_quantise(const Format& format, double x, double scale, bool exact);

}  // namespace fb::attn
