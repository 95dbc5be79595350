// traces/probe_file.hpp: the tensor-core probe file format (reader and writer).
//
// Contract: a probe file holds, per instruction form, the raw bit patterns a GPU probe
// fed to one tensor-core instruction and the bits it produced, one "case" per output
// element: D = C + sum_{i<k} a_i * b_i. The layout is documented in traces/README.md:
//   magic "FBPROBE1" (8 bytes), u32 section count, then per section
//   u32 header length H, H bytes of "key=value\n" text, then `cases` records of
//   u32 batch, u32 c, u32 a[k], u32 b[k], u32 d (all little-endian).
// Inputs are stored in their format's container (bf16/fp16 in the low 16 bits, fp8 in
// the low 8, tf32 as the full 32-bit register the instruction read).
// Reading validates every field against the format table; a bad file throws
// ProbeFileError whose message names the file and the field. Host-only C++: it is
// linked by the CLI (probe-check) and by the CUDA probe program alike.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/format.hpp"

namespace fb::gpu {

struct ProbeFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ProbeHeader {
  std::string form;                  // PTX instruction form, e.g. "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
  int k = 0;                         // products per output element
  Format input = formats::bf16;      // A and B element format
  Format c_format = formats::fp32;   // accumulator input C
  Format d_format = formats::fp32;   // output D
  std::vector<std::string> batches;  // batch names; a case's batch field indexes this list
  std::vector<std::string> models;   // emu models that should replay it, first is the default
  std::map<std::string, std::string> extra;  // device, compute_capability, source, driver, cuda, ...
};

class ProbeSection {
 public:
  ProbeHeader header;
  std::size_t cases() const { return header.k > 0 ? words_.size() / words_per_case() : 0; }
  std::size_t words_per_case() const { return 3 + 2 * static_cast<std::size_t>(header.k); }
  std::uint32_t batch(std::size_t i) const { return words_[i * words_per_case()]; }
  std::uint32_t c(std::size_t i) const { return words_[i * words_per_case() + 1]; }
  const std::uint32_t* a(std::size_t i) const { return &words_[i * words_per_case() + 2]; }
  const std::uint32_t* b(std::size_t i) const { return a(i) + header.k; }
  std::uint32_t d(std::size_t i) const { return words_[(i + 1) * words_per_case() - 1]; }
  void set_d(std::size_t i, std::uint32_t bits) { words_[(i + 1) * words_per_case() - 1] = bits; }
  // Appends one case; a and b must hold header.k patterns each.
  void add_case(std::uint32_t batch, std::uint32_t c, const std::uint32_t* a, const std::uint32_t* b, std::uint32_t d);
  const std::vector<std::uint32_t>& words() const { return words_; }
  std::vector<std::uint32_t>& mutable_words() { return words_; }

 private:
  std::vector<std::uint32_t> words_;
};

struct ProbeFile {
  std::vector<ProbeSection> sections;
};

// Throws ProbeFileError ("<path>: <field>: <what>") on any malformed or inconsistent field.
ProbeFile read_probe_file(const std::string& path);
// Throws ProbeFileError when the file cannot be written or a section is inconsistent.
void write_probe_file(const std::string& path, const ProbeFile& file);

// Serialisation of one header (used by the writer; exposed for tests).
std::string header_text(const ProbeHeader& h);

}  // namespace fb::gpu
