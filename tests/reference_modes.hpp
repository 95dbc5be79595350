// tests/reference_modes.hpp: the MPFR reference's rounding modes and overflow policies
// (tests/mpfr_reference.hpp: fbref::Mode, fbref::Policy) as the emulator names them. The
// reference keeps enums of its own so that it includes nothing of the code under test; the
// suites that hold the two side by side map them here, once.
#pragma once

#include "emu/rounding.hpp"
#include "tests/mpfr_reference.hpp"

namespace fb_test {

inline fb::RoundingMode to_emu(fbref::Mode m) {
  switch (m) {
    case fbref::Mode::rne:
      return fb::RoundingMode::rne;
    case fbref::Mode::rna:
      return fb::RoundingMode::rna;
    case fbref::Mode::rtz:
      return fb::RoundingMode::rtz;
    case fbref::Mode::rup:
      return fb::RoundingMode::rup;
    case fbref::Mode::rdn:
      return fb::RoundingMode::rdn;
    case fbref::Mode::rto:
      return fb::RoundingMode::rto;
  }
  return fb::RoundingMode::sr;  // unreachable: every fbref::Mode has its case (GCC wants a return)
}

inline fb::OverflowPolicy to_emu(fbref::Policy p) {
  return p == fbref::Policy::ieee ? fb::OverflowPolicy::ieee : fb::OverflowPolicy::satfinite;
}

}  // namespace fb_test
