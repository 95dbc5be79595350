// fuzz/fuzz_sfu_values.cpp: libFuzzer target for the FBSFUVAL1 reader behind
// `flashbits replay --sfu-values` (traces/sfu_values.hpp read_sfu_values), and for the
// FBSFUDUMP1 header check behind `--sfu-dump` (traces/sfu_dump.hpp parse_sfu_dump_header;
// a real dump is 16 GiB, so its header is fuzzed on its own). The first input byte picks:
// odd for the dump header (the rest is the header, as if NUL-padded to 4096 bytes; the
// byte's bits 1-2 pick the expected function), even for a values file (the rest is the file).
// Properties checked on every input:
// - a bad file is refused only by std::runtime_error whose one-line message starts with
//   the file name; any other exception, a crash, a sanitizer report or a leak is a finding;
// - a values file it accepts is from hardware (source=cuda:...), has strictly increasing
//   inputs per function, and survives encode_sfu_values -> read_sfu_values unchanged;
// - a dump header it accepts names the expected function and a cuda: source.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.hpp"
#include "traces/sfu_dump.hpp"
#include "traces/sfu_values.hpp"

namespace {

void fuzz_dump_header(std::uint8_t selector, std::string_view header) {
  static const std::string path = "fuzzed_dump.fbsfudump";
  constexpr fb::SpecialFunction functions[] = {fb::SpecialFunction::ex2, fb::SpecialFunction::rcp,
                                               fb::SpecialFunction::lg2, fb::SpecialFunction::ex2};
  if (header.size() > 4096) header = header.substr(0, 4096);
  const fb::SpecialFunction expected = functions[(selector >> 1) & 3];
  fb::SfuDumpHeader parsed;
  try {
    parsed = fb::parse_sfu_dump_header(path, header, expected);
  } catch (const std::runtime_error& e) {
    fb::fuzz::check_message(e.what(), path);
    return;
  }
  fb::fuzz::require(parsed.source.rfind("cuda:", 0) == 0, "accepted a dump header whose source is not cuda:");
  const std::string function_line = "\nfunction=" + std::string(fb::to_string(expected));
  fb::fuzz::require(std::string(header).find(function_line) != std::string::npos,
                    "accepted a dump header without the expected function= line");
}

void fuzz_values(const std::uint8_t* data, std::size_t size) {
  static const fb::fuzz::TempFile file("sfu_values"), copy("sfu_values_copy");
  file.write(data, size);
  fb::SfuValues values;
  try {
    values = fb::read_sfu_values(file.path());
  } catch (const std::runtime_error& e) {
    fb::fuzz::check_message(e.what(), file.path());
    return;
  }
  fb::fuzz::require(values.header.at("source").rfind("cuda:", 0) == 0, "accepted values not from hardware");
  for (const auto& [function, pairs] : values.pairs)
    for (std::size_t i = 1; i < pairs.size(); ++i)
      fb::fuzz::require(pairs[i - 1].first < pairs[i].first,
                        std::string(fb::to_string(function)) + " inputs accepted out of order");
  const std::string bytes = fb::encode_sfu_values(copy.path(), values);
  copy.write(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  const fb::SfuValues again = fb::read_sfu_values(copy.path());
  fb::fuzz::require(again.header == values.header, "round trip changed the header");
  fb::fuzz::require(again.pairs == values.pairs, "round trip changed the pairs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1)
    fuzz_dump_header(data[0], std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  else
    fuzz_values(data + 1, size - 1);
  return 0;
}
