// traces/sfu_dump.hpp: an SFU model read from a full hardware dump (FBSFUDUMP1).
//
// Contract: a dump holds one special function's fp32 output bits for every one of the
// 2^32 input bit patterns, in input order, as written by gpu/sfu_dump.cu on a GPU:
//   4096-byte text header, NUL-padded: "FBSFUDUMP1\n" then key=value lines (function=
//   ex2|rcp|lg2, instruction=<PTX form>, source=cuda:<gpu>, driver=, cuda_runtime=,
//   program=), then 2^32 little-endian u32 outputs (16 GiB).
// The file is mapped read-only; a lookup is one load. It is a hardware table covering
// every input, so the model reports hardware_measured() = true and kind table. Such
// dumps are made and used on the device machine (gpu/device_replay.sh): they settle
// whether a replay's remaining differences come from the SFU models alone. A missing,
// short or malformed file throws std::runtime_error naming the file and what is wrong.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "emu/sfu/special_functions.hpp"

namespace fb {

std::unique_ptr<SpecialFunctionModel> load_sfu_dump(const std::string& path, SpecialFunction expected);

// What load_sfu_dump reads from a dump's 4096-byte header (the bytes up to the first NUL):
// the magic line, then key=value lines, of which function=, source= and instruction= are
// read and other lines are ignored. Throws std::runtime_error "PATH: what" when the magic
// is wrong, function= is not `expected`, or source= is not a hardware capture (cuda:...).
// Separate from the mapping so that the header check can be tested and fuzzed without a
// 16 GiB file.
struct SfuDumpHeader {
  std::string source, instruction;
};
SfuDumpHeader parse_sfu_dump_header(const std::string& path, std::string_view header, SpecialFunction expected);

}  // namespace fb
