// emu/array_rounding.hpp: rounding whole fp32 arrays into a narrow format, and
// batched scalar operations (add_array, mul_array, fma_array, ffma_uniform_f32_array).
//
// Contract: round_array(to, in, out_bits, n, spec, first_position, flags_out) gives,
// for every i < n, exactly what fb::convert(to, formats::fp32, bits(in[i]), spec,
// first_position + i) gives: the same bits (in `to`'s container, one uint32 per
// element) and the same flags, which are OR-ed over the array into *flags_out
// (when flags_out is not null). With flags_out null (what most callers pass) it runs
// the flags-free path: loops compiled without the flags and their reduction, same
// bits. Element i uses stochastic-rounding position first_position + i, so
// splitting an array into chunks with matching positions gives identical results.
//
// It is not a second rounding algorithm: for bf16, fp16, e4m3, e5m2 and e2m1 every
// element goes through round_pack_lane (emu/rounding.hpp: round_pack over 32-bit
// lanes for significands of at most 24 bits, same algorithm and results) in a
// branch-free loop that GCC vectorises (AVX-512 and AVX2 builds, the best the
// CPU has chosen at run time, and a baseline one); infinities and NaNs are then
// redone by fb::convert, whose bits and flags they get. Other formats run
// round_pack itself per element. Two flags-free shortcuts give the same bits without
// decoding (see the .cpp): bf16 in every mode but sr rounds the fp32 encoding itself
// (bf16 keeps fp32's exponent field, so round_pack's rule reduces to an integer
// rounding of the encoding), and fp16 in rne/rtz/rup/rdn uses the CPU's F16C
// conversion (vcvtps2ph) where it has one and MXCSR's DAZ and FTZ are clear.
//
// The batched operations below are built the same way; see their comment. They live
// in emu/array_ops.cpp (a translation unit of its own, for compile time); the ISA
// choice both share is emu/array_lanes.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "emu/rounding.hpp"
#include "formats/format.hpp"

namespace fb {

// The instruction set the vectorised loops run with on this CPU, chosen once at
// run time: "avx512" (AVX-512 F/VL/BW/DQ), "avx2" or "baseline". Environment
// variables cap it: FLASHBITS_NO_AVX512 at avx2, FLASHBITS_NO_AVX2 at baseline.
// All give identical results; only the speed differs (reported by flashbits-bench).
const char* lane_instruction_set();

void round_array(const Format& to, const float* in, std::uint32_t* out_bits, std::size_t n, const RoundingSpec& spec,
                 std::uint64_t first_position = 0, Flags* flags_out = nullptr);
// The same, written into the format's own container width: uint16 for formats with a
// 16-bit container (bf16, fp16, custom ones), uint8 for 8-bit ones (fp8, fp6, fp4, e8m0).
// Same bits, flags and positions as the uint32 form; a quarter (half) less memory
// traffic than it, which is what array rounding is bound by (bench_rounding_vs_cpfloat).
// Throws std::invalid_argument if to.container_bits is not the output's width.
void round_array(const Format& to, const float* in, std::uint16_t* out_bits, std::size_t n, const RoundingSpec& spec,
                 std::uint64_t first_position = 0, Flags* flags_out = nullptr);
void round_array(const Format& to, const float* in, std::uint8_t* out_bits, std::size_t n, const RoundingSpec& spec,
                 std::uint64_t first_position = 0, Flags* flags_out = nullptr);

// Batched scalar operations: for every i < n, out[i] and the flags are exactly
// those of fb::add / fb::mul / fb::fma (emu/ops.hpp) on (a[i], b[i][, c[i]]) with
// position first_position + i; flags are OR-ed over the array into *flags_out.
// a, b, c, out hold one value of `f` per uint32 (its container bits).
// mul_array on bf16, fp16, e4m3 and e5m2 runs a vectorised loop: the product of
// two significands of at most 12 bits is exact in 24 bits, so it goes straight
// into round_pack_lane (zeros included); elements with an inf or NaN operand are
// redone by fb::mul. add_array and fma_array (bf16, fp16, e4m3, e5m2) align the two
// addends (for fma the exact product and c) in a 22-bit window and hand the exact
// sum, or a round-to-odd stand-in with a sticky bit at least 3 bits below any
// rounding boundary (see add_lane in the .cpp), to round_pack_lane, in every mode
// but sr (zero operands included; an exactly zero sum gets fb::add's signed zero
// there too); sr, other formats and elements with an inf or NaN operand run the
// scalar operation.
void add_array(const Format& f, const std::uint32_t* a, const std::uint32_t* b, std::uint32_t* out, std::size_t n,
               const RoundingSpec& spec, std::uint64_t first_position = 0, Flags* flags_out = nullptr);
void mul_array(const Format& f, const std::uint32_t* a, const std::uint32_t* b, std::uint32_t* out, std::size_t n,
               const RoundingSpec& spec, std::uint64_t first_position = 0, Flags* flags_out = nullptr);
void fma_array(const Format& f, const std::uint32_t* a, const std::uint32_t* b, const std::uint32_t* c,
               std::uint32_t* out, std::size_t n, const RoundingSpec& spec, std::uint64_t first_position = 0,
               Flags* flags_out = nullptr);

// A kernel's fp32 FFMA with two operands uniform over the array (e.g. S * scale - max):
// out[i] = std::fma(x[i], b, c), one RNE rounding in fp32, and with `ftz` a subnormal result
// replaced by the zero of its sign (nvcc --use_fast_math's results; inputs are not flushed).
// Same bits as that scalar expression per element (NaNs included: the CPU's FMA either way);
// vectorised with the CPU's FMA instructions where lane_instruction_set() is avx2 or avx512
// and the CPU has FMA. out may be x.
void ffma_uniform_f32_array(const float* x, float b, float c, float* out, std::size_t n, bool ftz);

}  // namespace fb
