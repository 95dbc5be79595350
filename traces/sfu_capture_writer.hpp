// traces/sfu_capture_writer.hpp: the host side of writing an FBSFUT1 table (traces/README.md "FBSFUT1"), shared by
// fb-sfu-probe (the CUDA program; its deltas come from the device) and fb-sfu-rehearse (the CPU rehearsal of the SFU
// step; its deltas from sfu_table_deltas), so both write tables through the same code. Plain C++, no CUDA and no emu:
// it builds in the standalone gpu/ build too.
//
// Contract:
// - sfu_table_entries(N, key): 2^N, 2^(N+1) for key ex2_sign_magnitude (T+ then T-).
// - sfu_table_escape_cap(N, key): the escapes a table may have: 2^20, every entry for
//   lg2_extended (whose T may be far from lg2(1.m) near m = 0).
// - sfu_table_file_name(fn, N, key): ex2_sm_table_nN.fbsfut (ex2_sign_magnitude),
//   lg2_extended_nN.fbsfut, ex2_table_nN_<rounding>.fbsfut (ex2 fixed point, the key's
//   rounding), rcp_table_nN.fbsfut, lg2_table_nN.fbsfut; fn a SfuTableFunction
//   (traces/sfu_capture_rules.hpp: 0 ex2, 1 rcp, 2 lg2).
// - sfu_table_deltas(fn, N, key, table): the FBSFUT1 body of a host table (entries values,
//   kSfuTableUnfilled for a key no input set) by traces/sfu_capture_rules.hpp sfu_table_delta,
//   the function fb-sfu-probe's table_delta_kernel applies per key; escapes in key order
//   (the device lists them in the order its threads record them).
// - write_sfu_table(out_dir, fn, N, key, nan_output, extra, device, deltas, summary, tail):
//   with no unfilled key and at most the cap of escapes, writes out_dir/<file name>:
//   "FBSFUT1\n", function, key, key_bits, entries, nan_output, then `extra` and `device`
//   ("key=value\n" lines each), "end\n", the deltas packed two per byte (entry 2i in the low
//   nibble), the u32 escape count and the (u32 key, u32 bits) pairs (little-endian, as the
//   host is), then `tail`; appends "  wrote NAME: ..." to `summary` and returns true.
//   Otherwise writes nothing, appends "  NOT writing NAME: U keys never seen, E escapes" and
//   returns false. std::invalid_argument when `deltas` does not fit N and key (delta count,
//   escape pairs not 2 * the escape count).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace fb::gpu {

struct SfuTableDeltas {
  std::vector<signed char> delta;      // one per entry: -7..7, or kSfuTableEscape (-8)
  std::vector<std::uint32_t> escapes;  // (key, bits) pairs, min(escape_count, cap) of them
  std::uint32_t unfilled = 0;          // keys no input set
  std::uint32_t escape_count = 0;      // escaped entries (may exceed the cap: then not written)
  std::uint32_t uncertain = 0;         // of which escaped for an uncertain double reference
};

std::uint32_t sfu_table_entries(int nbits, const std::string& key);
std::uint32_t sfu_table_escape_cap(int nbits, const std::string& key);
std::string sfu_table_file_name(int fn, int nbits, const std::string& key);
SfuTableDeltas sfu_table_deltas(int fn, int nbits, const std::string& key, const std::uint32_t* table);
bool write_sfu_table(const std::string& out_dir, int fn, int nbits, const std::string& key, std::uint32_t nan_output,
                     const std::string& extra, const std::string& device, const SfuTableDeltas& deltas,
                     std::ostream& summary, const std::string& tail = std::string());

}  // namespace fb::gpu
