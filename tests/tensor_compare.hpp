// tests/tensor_compare.hpp: comparisons of two engine tensors that the attention tests share.
//
// Contract:
// - same_bits(a, b): same shape of data and every element equal bit for bit as a double
//   (signed zeros told apart; any NaN matches any NaN).
// - max_rel_diff(a, b): the largest |a - b| / max(1, |b|) over the finite elements (b is the
//   reference); infinity when an infinity in one is not the same infinity in the other.
//   Both must hold the same number of elements (a failed REQUIRE otherwise).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "attention/attention.hpp"

namespace fb::test {

inline bool same_bits(const attn::Tensor4& a, const attn::Tensor4& b) {
  if (a.data.size() != b.data.size()) return false;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    if (!(a.data[i] == b.data[i] && std::signbit(a.data[i]) == std::signbit(b.data[i])) &&
        !(std::isnan(a.data[i]) && std::isnan(b.data[i])))
      return false;
  return true;
}

inline double max_rel_diff(const attn::Tensor4& a, const attn::Tensor4& b) {
  REQUIRE(a.data.size() == b.data.size());
  double m = 0.0;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    const double x = a.data[i], y = b.data[i];
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    m = std::max(m, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
  }
  return m;
}

}  // namespace fb::test
