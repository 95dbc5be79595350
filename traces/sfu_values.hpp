// traces/sfu_values.hpp: the hardware SFU outputs one replay needs (FBSFUVAL1 files).
//
// Contract:
// - A values file holds, per special function, the (input bits, output bits) pairs of every
//   input a replay evaluated, sorted by input, with the hardware it was read from:
//     "FBSFUVAL1\n", key=value lines (source=cuda:<gpu> required; trace=, model=, program=),
//     one "function=<ex2|rcp|lg2> count=<N>" line per function, then "end\n"; then per
//     function, in header order, N pairs of little-endian u32 (input, output), inputs strictly
//     increasing.
// - `flashbits replay --sfu-record FILE` (with --sfu-dump models on the device machine)
//   writes one; `flashbits replay --sfu-values FILE` replays with them as oracle models:
//   an input the file lacks falls back to correct rounding and is counted, and the replay
//   reports the count, since such a replay is no longer hardware-exact.
// - read_sfu_values throws std::runtime_error naming the file and the field on any
//   malformed, truncated, unsorted or non-hardware file, a header key given twice, and a
//   function line with words after count=N or a count that is not decimal digits.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emu/sfu/special_functions.hpp"

namespace fb {

struct SfuValues {
  std::map<std::string, std::string> header;  // source, trace, model, program, ...
  std::map<SpecialFunction, std::vector<std::pair<std::uint32_t, std::uint32_t>>> pairs;
};

// The file's bytes; throws std::runtime_error naming `path` on a header key holding '=' or a
// newline, or a value holding a newline. The caller writes them whole (replay: write_output_file).
std::string encode_sfu_values(const std::string& path, const SfuValues& values);
SfuValues read_sfu_values(const std::string& path);

// Decorator that records every input it evaluates (thread-safe) and forwards to `inner`.
class RecordingSfuModel final : public SpecialFunctionModel {
 public:
  explicit RecordingSfuModel(std::shared_ptr<const SpecialFunctionModel> inner) : inner_(std::move(inner)) {}
  SpecialFunction function() const override { return inner_->function(); }
  SfuKind kind() const override { return inner_->kind(); }
  bool hardware_measured() const override { return inner_->hardware_measured(); }
  std::string describe() const override { return inner_->describe() + " (recording inputs)"; }
  std::string summary() const override { return inner_->summary() + " (recording)"; }
  float evaluate(float x) const override;
  std::uint64_t fallback_count() const override { return inner_->fallback_count(); }
  // The recorded (input, output) pairs, sorted by input.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> recorded() const;

 private:
  std::shared_ptr<const SpecialFunctionModel> inner_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::uint32_t, std::uint32_t> seen_;
};

}  // namespace fb
