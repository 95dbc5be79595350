// tools/cmd_demo.cpp: `flashbits demo`, the main job on the embedded default.
//
// Until the attention engine and shipped traces exist, the demo shows the scalar
// core on Qiu & Yao's worked example (DESIGN.md §7): the fp32 partial sum
// -4.703990459442139 rounded to bf16, bit by bit, and the same sum without its
// residual, which is a tie.
#include <iostream>
#include <memory>

#include "emu/ops.hpp"
#include "tools/cli_common.hpp"
#include "tools/event_report.hpp"

namespace fb::cli {
namespace {

int run_demo() {
  const Format& fp32 = formats::fp32;
  const Format& bf16 = formats::bf16;
  RoundingSpec rne{};
  std::uint32_t with_residual = 0;
  from_double_exact(fp32, -4.703990459442139, with_residual);  // exact in fp32 by construction
  std::cout << "flashbits demo: the rounding step behind bf16 FlashAttention's bias (Qiu & Yao)\n\n";
  std::cout << "An fp32 partial sum of P.V, cast to bf16 with round-to-nearest-even:\n";
  RoundingEvent ev;
  Rounded r = convert(bf16, fp32, with_residual, rne, 0, &ev);
  std::cout << "  fp32 " << hex_bits(fp32, with_residual) << " -> bf16 " << hex_bits(bf16, r.bits) << "\n";
  std::cout << explain_event(bf16, rne, ev, r.bits) << "\n";
  // Remove every bit below the round bit: the residual that small same-sign terms left.
  const std::uint32_t tie_bits = with_residual & 0xffff8000u;
  RoundingEvent tie_ev;
  Rounded t = convert(bf16, fp32, tie_bits, rne, 0, &tie_ev);
  std::cout << "The same sum with its residual removed (fp32 " << hex_bits(fp32, tie_bits) << "):\n";
  std::cout << explain_event(bf16, rne, tie_ev, t.bits) << "\n";
  const double err_residual = to_double(bf16, r.bits) - to_double(fp32, with_residual);
  std::cout << "Verdict: with the residual the sticky bit breaks the tie away from zero (error "
            << err_residual << "); without it RNE ties to even and rounds toward zero.\n"
            << "Repeated at every P.V step where P=1 exactly, the away-from-zero choice biases O.\n";
  return kExitOk;
}

Runner setup_demo(CLI::App&) { return [] { return run_demo(); }; }

}  // namespace
FLASHBITS_SUBCOMMAND(demo, "demo", "Show the bias mechanism on the embedded default example", setup_demo);
}  // namespace fb::cli
