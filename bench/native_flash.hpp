// bench/native_flash.hpp: the speed baseline bench_attention compares the emulator with.
//
// Contract: native_flash_forward() runs the same tiled online-softmax forward as FA2 (KV
// tiles of block_n keys, last to first) in native float arithmetic: fp32 scores and
// accumulators, std::exp2 on floats, one cast of O to in.dtype with round_double. It models
// no kernel (no tensor-core or SFU model, the compiler's own operation order), so its O is
// only a sanity reference for the emulated one (their difference is printed), never a result.
// Returns O and LSE; heads are split over `threads` threads (the result does not depend on it).
#pragma once

#include "attention/attention.hpp"

namespace fb::bench {

attn::AttentionOutputs native_flash_forward(const attn::AttentionInputs& in, int block_n, int threads = 1);

}  // namespace fb::bench
