// tests/test_scale.hpp: whether the test runs in the sanitizer build's bounded slice.
// tools/test.sh runs the ASan+UBSan build's suites with FLASHBITS_TEST_SCALE=sanitizer; a test
// then shrinks its loops or skips parts whose value is statistics, not code paths.
#pragma once

#include <cstdlib>
#include <string_view>

namespace fb_test {

inline bool sanitizer_scale() {
  const char* s = std::getenv("FLASHBITS_TEST_SCALE");
  return s != nullptr && std::string_view(s) == "sanitizer";
}

}  // namespace fb_test
