// studies/scenarios.hpp: seeded input scenarios for the studies (bias tests, sweeps, the
// demo's synthetic rows), built on the engine's AttentionInputs.
//
// Contract:
// random: N(0,1); fa3-outliers: N(0,1) + N(0,100)*Bernoulli(0.001); sink: rows with >= 2
// keys tied exactly for the max score, the rest 8-20 below, V and dO mostly negative in
// some features; ties: residual-free exact ties; wide-ties: ~59% of rows with two keys tied
// for the max, tied maxima spread over [-11.5, 17], the other keys 0-8 below the row's max,
// V and dO ~ N(-1, 1/16) (studies/scenarios.cpp). Values are rounded to `dtype` (RNE).
// Deterministic in (name, seed, shape); throws std::invalid_argument on an unknown name.
// kv_heads (0: = heads) makes grouped-query inputs: k and v keep the first head of each
// group of heads / kv_heads (which must divide heads), so each group's first q head meets
// the k it was drawn with (a sink row stays a sink row) and its other q heads share it.
// seqlen_k (0: = seqlen) another key length: the scenario drawn at max(seqlen, seqlen_k), then
// q and dO keep its last seqlen rows, k and v its first seqlen_k rows (so a decode, seqlen 1,
// holds the last query row of the square problem of seqlen_k).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attention/attention.hpp"
#include "formats/format.hpp"

namespace fb::attn {

AttentionInputs make_scenario(std::string_view name, std::uint64_t seed, int batch, int heads, int seqlen, int head_dim,
                              const Format& dtype, bool with_backward, int kv_heads = 0, int seqlen_k = 0);
std::vector<std::string> scenario_names();
// Whether `name` is one of scenario_names().
bool known_scenario(std::string_view name);
// The names of scenario_names(), comma-separated, for error messages.
std::string scenario_list();

}  // namespace fb::attn
