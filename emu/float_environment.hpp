// emu/float_environment.hpp: the floating-point environment flashbits' arithmetic assumes.
//
// Why: the emulator computes with the host's binary32 and binary64 arithmetic wherever that is
// exact or correctly rounded to nearest (fp64 TwoSum and FMA residuals, the tensor-core
// kernels' fp32 products on fp32's subnormal grid, float conversions, the final rounding of
// CDNA3's AVX2 column path). That holds only in the default environment: round to nearest
// even, subnormals neither flushed to zero (MXCSR's FTZ) nor read as zero (DAZ). A library
// loaded into the caller's process may change it for the thread (PyTorch's
// set_flush_denormal, a shared object built with -ffast-math, fesetround), and every result
// would then silently depend on it.
//
// flashbits keeps no floating-point state of its own: an entry point called from another
// runtime (each function of the Python module) holds a DefaultFloatingPointEnvironment for the
// call, and the threads the call starts inherit it (POSIX: a new thread takes its creator's
// environment). The CLI starts in the default environment and changes nothing.
//
// Contract: the constructor saves the calling thread's environment (rounding mode, exception
// masks, status flags, and on x86 the whole MXCSR, FTZ and DAZ included) and sets the default
// one: round to nearest even, every exception masked, no status flag, FTZ and DAZ clear. The
// destructor restores what was saved, status flags included, so a call leaves the caller's
// sticky flags and modes as they were.
#pragma once

#include <cfenv>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLASHBITS_HAS_MXCSR 1
#endif

namespace fb {

class DefaultFloatingPointEnvironment {
 public:
  DefaultFloatingPointEnvironment() {
    std::fegetenv(&saved_);
#ifdef FLASHBITS_HAS_MXCSR
    saved_mxcsr_ = _mm_getcsr();
#endif
    std::fesetenv(FE_DFL_ENV);  // x87's control word too: long double arithmetic
#ifdef FLASHBITS_HAS_MXCSR
    _mm_setcsr(kDefaultMxcsr);  // FE_DFL_ENV need not clear FTZ and DAZ
#endif
  }
  ~DefaultFloatingPointEnvironment() {
    std::fesetenv(&saved_);
#ifdef FLASHBITS_HAS_MXCSR
    _mm_setcsr(saved_mxcsr_);
#endif
  }
  DefaultFloatingPointEnvironment(const DefaultFloatingPointEnvironment&) = delete;
  DefaultFloatingPointEnvironment& operator=(const DefaultFloatingPointEnvironment&) = delete;

#ifdef FLASHBITS_HAS_MXCSR
  // Every exception masked (bits 7-12), round to nearest (bits 13-14 zero), FTZ (bit 15) and
  // DAZ (bit 6) clear, no status flag (bits 0-5): the power-on value.
  static constexpr unsigned kDefaultMxcsr = 0x1f80u;
#endif

 private:
  std::fenv_t saved_{};
#ifdef FLASHBITS_HAS_MXCSR
  unsigned saved_mxcsr_ = kDefaultMxcsr;
#endif
};

}  // namespace fb
