// python/src/module.cpp: the extension module flashbits._core: error translation, shared
// helpers (common.hpp) and the registration of every binding file's functions. The public
// API is python/flashbits/__init__.py, which checks dtypes and shapes and calls these.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "formats/decimal_text.hpp"
#include "formats/text_escape.hpp"
#include "common.hpp"
#include "traces/safetensors.hpp"

namespace fb::py {

void register_arrays(pyb::module_& m);
void register_attention(pyb::module_& m);
void register_bias(pyb::module_& m);
void register_traces(pyb::module_& m);

RoundingSpec make_spec(const std::string& mode, const std::string& overflow, std::uint64_t seed,
                       std::optional<long long> sr_bits) {
  RoundingSpec s;
  s.mode = api::parse_mode_or_throw(mode, "mode");
  s.overflow = api::parse_overflow_or_throw(overflow, "overflow");
  s.seed = seed;
  if (sr_bits) s.sr_bits = api::sr_bits_or_throw(*sr_bits, "sr_bits");
  return s;
}

std::vector<pyb::ssize_t> shape_of(const pyb::array& a) {
  return std::vector<pyb::ssize_t>(a.shape(), a.shape() + a.ndim());
}

pyb::array bits_array(const Format& f, const std::vector<pyb::ssize_t>& shape) {
  switch (f.container_bits) {
    case 8:
      return pyb::array_t<std::uint8_t>(shape);
    case 16:
      return pyb::array_t<std::uint16_t>(shape);
    default:
      return pyb::array_t<std::uint32_t>(shape);
  }
}

void store_bits(const Format& f, pyb::array& out, std::size_t offset, const std::uint32_t* bits, std::size_t n) {
  void* base = out.mutable_data();
  switch (f.container_bits) {
    case 8: {
      auto* p = static_cast<std::uint8_t*>(base) + offset;
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(bits[i]);
      break;
    }
    case 16: {
      auto* p = static_cast<std::uint16_t*>(base) + offset;
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint16_t>(bits[i]);
      break;
    }
    default:
      std::memcpy(static_cast<std::uint32_t*>(base) + offset, bits, n * sizeof(std::uint32_t));
  }
}

namespace {
bool valid_pattern(const Format& f, std::uint64_t v) {
  const std::uint64_t limit = std::uint64_t{1} << f.container_bits;
  const std::uint32_t layout = static_cast<std::uint32_t>(v) >> f.storage_shift();
  return v < limit && (static_cast<std::uint32_t>(v) & ((1u << f.storage_shift()) - 1u)) == 0 &&
         (layout & ~f.width_mask()) == 0;
}
std::string hex_of(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

std::string element_name(const std::string& what, const std::vector<pyb::ssize_t>& shape, std::size_t flat) {
  if (shape.empty()) return what;  // a 0-d array is its one element
  std::vector<std::size_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<std::size_t>(shape[d]);
    index[d] = extent ? flat % extent : 0;
    flat = extent ? flat / extent : 0;
  }
  std::string name = what + "[";
  for (std::size_t d = 0; d < index.size(); ++d) {
    if (d) name += ',';
    name += std::to_string(index[d]);
  }
  return name + "]";
}

void check_bits_width(const Format& f, int dtype_bits, const std::string& what) {
  if (dtype_bits == f.container_bits) return;
  const std::string want = std::to_string(f.container_bits), got = std::to_string(dtype_bits);
  throw api::InputError(what + ": a uint" + got + " array holds " + got + "-bit patterns, but " + f.name +
                        " patterns are " + want + "-bit: give them as uint" + want + " (values as a float array)");
}

std::vector<std::uint32_t> checked_bits(const Format& f, const carray<std::uint64_t>& bits, const std::string& what) {
  const std::size_t n = static_cast<std::size_t>(bits.size());
  const std::uint64_t* p = bits.data();
  std::vector<std::uint32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!valid_pattern(f, p[i])) {
      // The CLI's own message for this operand.
      const std::string name = element_name(what, shape_of(bits), i);
      api::parse_operand_or_throw(f, "0x" + hex_of(p[i]), name);
      throw api::InputError(name + ": not a valid bit pattern");
    }
    out[i] = static_cast<std::uint32_t>(p[i]);
  }
  return out;
}

std::vector<std::uint32_t> encode_values(const Format& f, const carray<double>& values, const std::string& what) {
  const std::size_t n = static_cast<std::size_t>(values.size());
  const double* v = values.data();
  std::vector<std::uint32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    // The advice is Python's, not the CLI's (there a hex pattern 0x... is the way out): here
    // the caller rounds explicitly, or hands bit patterns as an unsigned array (operand_bits).
    // `what` is an argument name (q, a) or a trace tensor's key, which may be no identifier.
    if (!from_double_exact(f, v[i], out[i])) {
      const bool identifier = !what.empty() && std::all_of(what.begin(), what.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      }) && !std::isdigit(static_cast<unsigned char>(what[0]));
      const std::string rounded = "flashbits.round(" + (identifier ? what : std::string("x")) + ", \"" + f.name + "\")";
      throw api::InputError(element_name(what, shape_of(values), i) + ": " + shortest_decimal(v[i]) +
                            " is not exactly representable in " + f.name + " (round first: " + rounded +
                            ".values, or give bit patterns as a uint" + std::to_string(f.container_bits) +
                            " array: " + rounded + ".bits)");
    }
  }
  return out;
}

std::vector<std::uint32_t> operand_bits(const Format& f, const pyb::array& a, const std::string& what) {
  const pyb::dtype dt = a.dtype();
  if (dt.kind() == 'u') {
    check_bits_width(f, static_cast<int>(8 * dt.itemsize()), what);
    return checked_bits(f, carray<std::uint64_t>(a), what);
  }
  if (dt.kind() != 'f')
    throw PyTypeError(what + ": expected values (a float array) or bit patterns (unsigned integers)");
  return encode_values(f, carray<double>(a), what);
}

template <class J>
pyb::object json_to_python(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return pyb::none();
    case nlohmann::json::value_t::boolean:
      return pyb::bool_(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return pyb::int_(j.template get<long long>());
    case nlohmann::json::value_t::number_unsigned:
      return pyb::int_(j.template get<unsigned long long>());
    case nlohmann::json::value_t::number_float:
      return pyb::float_(j.template get<double>());
    case nlohmann::json::value_t::string:
      return pyb::str(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      pyb::list l;
      for (const auto& e : j) l.append(json_to_python(e));
      return l;
    }
    case nlohmann::json::value_t::object: {
      pyb::dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d[pyb::str(it.key())] = json_to_python(it.value());
      return d;
    }
    default:
      return pyb::none();
  }
}
pyb::object to_python(const nlohmann::ordered_json& j) { return json_to_python(j); }
pyb::object to_python(const nlohmann::json& j) { return json_to_python(j); }

namespace {
std::mutex abandoned_mutex;
std::condition_variable abandoned_cv;
int abandoned_count = 0;
}  // namespace

void note_abandoned(int delta) {
  std::lock_guard<std::mutex> lock(abandoned_mutex);
  abandoned_count += delta;
  abandoned_cv.notify_all();
}

void wait_for_abandoned_work() {
  pyb::gil_scoped_release release;
  std::unique_lock<std::mutex> lock(abandoned_mutex);
  abandoned_cv.wait(lock, [] { return abandoned_count == 0; });
}

}  // namespace fb::py

namespace fb::py {
namespace {
// A message of the shared layers with its advice put in Python's terms (README "Python": bad
// input is a ValueError with the CLI's message, its advice translated where they differ): the
// catalogues a Python user calls instead of `flashbits models` and `flashbits formats`.
std::string in_python_terms(std::string message) {
  const auto replace = [&message](std::string_view cli, std::string_view python) {
    if (const std::size_t at = message.find(cli); at != std::string::npos) message.replace(at, cli.size(), python);
  };
  if (message.find("unknown dot model") != std::string::npos)
    replace("(see `flashbits models`)", "(see flashbits.dot_models())");
  replace("(see `flashbits models`)", "(see flashbits.models())");
  replace("(see flashbits formats, or fp64)", "(a format flashbits.format_info() knows, or fp64)");
  // Python decodes the message as UTF-8: a byte of a file's broken header echoed in it made the
  // ValueError's message empty (the fuzz audit). Such bytes are shown as \xNN, as the CLI does.
  return escape_unprintable(message, false);
}
}  // namespace
}  // namespace fb::py

PYBIND11_MODULE(_core, m) {
  namespace py = fb::py;
  m.doc() = "flashbits._core: the C++ bindings behind the flashbits package (use `import flashbits`)";
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::PyTypeError& e) {
      PyErr_SetString(PyExc_TypeError, fb::escape_unprintable(e.what(), false).c_str());
    } catch (const fb::api::InputError& e) {
      PyErr_SetString(PyExc_ValueError, py::in_python_terms(e.what()).c_str());
    } catch (const fb::TraceError& e) {
      PyErr_SetString(PyExc_ValueError, py::in_python_terms(e.what()).c_str());
    } catch (const fb::FileReadError& e) {
      PyErr_SetString(PyExc_ValueError, py::in_python_terms(e.what()).c_str());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, py::in_python_terms(e.what()).c_str());
    } catch (const std::out_of_range& e) {
      PyErr_SetString(PyExc_ValueError, py::in_python_terms(e.what()).c_str());
    }
  });
  py::register_arrays(m);
  py::register_attention(m);
  py::register_bias(m);
  py::register_traces(m);
  m.def("_wait_for_abandoned_work", &py::wait_for_abandoned_work,
        "Block until work abandoned by a Ctrl-C has finished (an atexit hook).", py::InDefaultFloatingPoint());
}
