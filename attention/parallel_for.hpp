// attention/parallel_for.hpp: the one thread pool of attention/ (run_attention's passes and
// exact_attention's heads).
//
// Contract: parallel_for(count, threads, fn) calls fn(i) once for every i in [0, count) on up
// to `threads` threads, the caller's own among them, and returns when all are done. The items
// must be independent: every result is then the same on any number of threads, so a thread
// the system cannot start is left out rather than failing the run. An exception from fn
// (std::bad_alloc included) stops the items not yet taken and is rethrown on the caller's
// thread once every started thread is joined: it never escapes a thread (which would call
// std::terminate).
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace fb::attn {

template <class Fn>
void parallel_for(int count, int threads, const Fn& fn) {
  threads = std::max(1, std::min(threads, count));
  if (threads == 1) {
    for (int i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  const auto work = [&] {
    for (int i = next++; i < count && !failed; i = next++) {
      try {
        fn(i);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  try {
    pool.reserve(static_cast<std::size_t>(threads - 1));
  } catch (const std::bad_alloc&) {
    threads = 1;  // no room for the pool: the caller's thread does every item
  }
  for (int t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fb::attn
