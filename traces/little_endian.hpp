// traces/little_endian.hpp: words in byte buffers, least significant byte first: the byte
// order of every file flashbits reads and writes (safetensors headers and tensor data, .npy
// arrays, probe files, SFU tables and captures). One reader and one writer, so that no file
// format carries its own shift loop.
//
// Contract: header-only and dependency-free (the standalone gpu/ build uses it too).
// `width` is 1..8 bytes; the caller has checked that `width` bytes are readable at `bytes`.
// Byte may be char, unsigned char or std::uint8_t: every byte is read as unsigned.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fb {

template <class Byte>
std::uint64_t load_little_endian(const Byte* bytes, std::size_t width) {
  static_assert(sizeof(Byte) == 1, "a byte buffer");
  std::uint64_t word = 0;
  for (std::size_t i = 0; i < width; ++i) word |= std::uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  return word;
}

// Appends the low `width` bytes of `word` to `out` (a std::string or a byte vector).
template <class ByteContainer>
void append_little_endian(ByteContainer& out, std::uint64_t word, std::size_t width) {
  using Byte = typename ByteContainer::value_type;
  static_assert(sizeof(Byte) == 1, "a byte buffer");
  for (std::size_t i = 0; i < width; ++i) out.push_back(static_cast<Byte>((word >> (8 * i)) & 0xffu));
}

// Writes the low `width` bytes of `word` at `bytes` (already sized by the caller).
template <class Byte>
void store_little_endian(Byte* bytes, std::uint64_t word, std::size_t width) {
  static_assert(sizeof(Byte) == 1, "a byte buffer");
  for (std::size_t i = 0; i < width; ++i) bytes[i] = static_cast<Byte>((word >> (8 * i)) & 0xffu);
}

}  // namespace fb
