// python/src/common.hpp: what the binding files share: name parsing with the CLI's messages,
// typed array helpers, and the two ways a long call stays interruptible with the GIL released.
//
// Contract:
// - Bad input throws fb::api::InputError (or TraceError, std::invalid_argument) with the
//   message the CLI prints after "error: "; module.cpp translates them to ValueError.
//   PyTypeError (below) becomes TypeError.
// - Short loops over arrays run on the calling thread with the GIL released and call
//   SignalPoll::poll() between chunks: every ~50 ms it takes the GIL and runs
//   PyErr_CheckSignals(), so Ctrl-C raises KeyboardInterrupt within a chunk.
// - Calls into the engine (one run_attention call has no point where it could stop) run on a
//   worker thread (run_interruptible): the calling thread waits with the GIL released and
//   polls signals. The work gets a Cancel flag it checks between trials; on Ctrl-C the flag
//   is set and the call raises KeyboardInterrupt at once. Work still inside the engine then
//   finishes in the background on data it owns (nothing it touches belongs to Python); the
//   interpreter waits for such work at exit (wait_for_abandoned_work, an atexit hook).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <nlohmann/json.hpp>

#include "emu/float_environment.hpp"
#include "emu/rounding.hpp"
#include "formats/format.hpp"
#include "api/input_error.hpp"
#include "api/names.hpp"
#include "api/output_file.hpp"
#include "formats/file_read.hpp"

namespace fb::py {

namespace pyb = pybind11;

// Every function of the module runs in the default floating-point environment, whatever the
// caller's thread has set (emu/float_environment.hpp): each m.def names this guard.
using InDefaultFloatingPoint = pyb::call_guard<DefaultFloatingPointEnvironment>;

struct PyTypeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The work was cancelled (Ctrl-C); only seen inside abandoned workers.
struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled"; }
};
using Cancel = std::atomic<bool>;
inline void check_cancel(const Cancel& c) {
  if (c.load(std::memory_order_relaxed)) throw Cancelled{};
}

// ---- names, with the CLI's messages ------------------------------------------------------
inline Format parse_fmt(const std::string& text, const char* what = "fmt") {
  return api::parse_format_or_throw(text, what);
}
RoundingSpec make_spec(const std::string& mode, const std::string& overflow, std::uint64_t seed,
                       std::optional<long long> sr_bits);

// ---- arrays ------------------------------------------------------------------------------
template <class T>
using carray = pyb::array_t<T, pyb::array::c_style | pyb::array::forcecast>;

// A new array of `shape` whose dtype is the container of `f` (uint8, uint16 or uint32).
pyb::array bits_array(const Format& f, const std::vector<pyb::ssize_t>& shape);
// Writes uint32 bit patterns into a bits_array of f's container, element `offset` on.
void store_bits(const Format& f, pyb::array& out, std::size_t offset, const std::uint32_t* bits, std::size_t n);
std::vector<pyb::ssize_t> shape_of(const pyb::array& a);
// An element of `a` by its index in a's shape, for messages: "q[0,1,2,3]", "a[7]".
std::string element_name(const std::string& what, const std::vector<pyb::ssize_t>& shape, std::size_t flat);
// The width a bit-pattern array of f must have: its container (8, 16 or 32 bits). Throws the
// ValueError naming `what` when an unsigned integer array of `dtype_bits` bits is another width.
void check_bits_width(const Format& f, int dtype_bits, const std::string& what);
// Bit patterns as uint32, each checked to be a valid pattern of f (the CLI's message for the
// first bad one, naming its element of `what`).
std::vector<std::uint32_t> checked_bits(const Format& f, const carray<std::uint64_t>& bits, const std::string& what);
// Values, each exactly representable in f (the CLI's message otherwise), as bit patterns.
std::vector<std::uint32_t> encode_values(const Format& f, const carray<double>& values, const std::string& what);
// THE conversion of an operand array (README "Python": unsigned integer arrays are bit
// patterns, any other array holds values): an unsigned integer array must be f's container
// width and hold valid patterns of f; any other array (the Python layer hands float64) holds
// values exactly representable in f. Returns the bit patterns, row-major.
std::vector<std::uint32_t> operand_bits(const Format& f, const pyb::array& a, const std::string& what);
// A JSON value as the Python object json.loads would give (dicts keep the order).
pyb::object to_python(const nlohmann::ordered_json& j);
pyb::object to_python(const nlohmann::json& j);

// ---- interruptible work ------------------------------------------------------------------
class SignalPoll {
 public:
  // Call with the GIL released. Throws pybind11::error_already_set (KeyboardInterrupt, ...)
  // when a signal handler raised.
  void poll() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(50)) return;
    last_ = now;
    pyb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw pyb::error_already_set();
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

void note_abandoned(int delta);
void wait_for_abandoned_work();

// Runs work(cancel) on a worker thread; call with the GIL held. Returns its result or rethrows
// its exception; raises KeyboardInterrupt (error_already_set) when a signal arrives first.
template <class R>
R run_interruptible(std::function<R(const Cancel&)> work) {
  struct State {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::optional<R> result;
    std::exception_ptr error;
    Cancel cancel{false};
  };
  auto state = std::make_shared<State>();
  std::thread worker([state, work = std::move(work)] {
    std::optional<R> r;
    std::exception_ptr e;
    try {
      r.emplace(work(state->cancel));
    } catch (...) {
      e = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(state->m);
    state->result = std::move(r);
    state->error = e;
    state->done = true;
    state->cv.notify_all();
  });
  bool interrupted = false;
  {
    pyb::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(state->m);
    while (!state->done) {
      state->cv.wait_for(lock, std::chrono::milliseconds(50));
      if (state->done) break;
      lock.unlock();
      {
        pyb::gil_scoped_acquire gil;
        interrupted = PyErr_CheckSignals() != 0;  // leaves the exception set when true
      }
      lock.lock();
      if (interrupted) {
        state->cancel = true;
        // Work that checks the flag stops within a trial; give it a moment.
        state->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return state->done; });
        break;
      }
    }
  }
  if (interrupted) {
    bool finished;
    {
      std::lock_guard<std::mutex> lock(state->m);
      finished = state->done;
    }
    if (finished) {
      worker.join();
    } else {
      note_abandoned(+1);
      std::thread([state, w = std::move(worker)]() mutable {
        w.join();
        note_abandoned(-1);
      }).detach();
    }
    throw pyb::error_already_set();
  }
  worker.join();
  if (state->error) std::rethrow_exception(state->error);
  return std::move(*state->result);
}

}  // namespace fb::py
