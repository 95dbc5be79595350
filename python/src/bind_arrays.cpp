// python/src/bind_arrays.cpp: round, decode, the elementwise operations and the
// tensor-core dot products over whole arrays (GIL released, Ctrl-C polled between chunks).
//
// Every function here is a loop over the C++ core's own entry points, element i keyed at
// stochastic-rounding position `position + i`:
// - round_f32: fb::round_array (the vectorised array path) chunk by chunk, or fb::convert per
//   element when per-element flags are asked for (round_array only ORs them);
// - round_f64: fb::round_double per element (an fp64 value is rounded exactly, once);
// - op: fb::add_array / mul_array / fma_array without flags, fb::apply_op per element with
//   (and for "cvt": round() on bit patterns of the format itself, fb::apply_op from it to it);
// - dot: the one dot-model lookup and call (emu/dot/dot_model.hpp), DotModel::dot_pairs over
//   chunks of rows (NVIDIA: the blocked kernel, fused_dot's bits; the CLI's `dot` keeps the
//   bit-level entry point, so the tests compare the two paths);
// - matmul: the same lookup, DotModel::dot_rows over blocks of rows of A against all of B (a
//   block-scaled model: DotModel::dot per element).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>

#include "common.hpp"
#include "emu/array_rounding.hpp"
#include "emu/ops.hpp"
#include "emu/dot/dot_model.hpp"

namespace fb::py {
namespace {

constexpr std::size_t kChunk = std::size_t{1} << 14;

pyb::object flags_or_none(bool want, pyb::array_t<std::uint8_t>& flags) {
  return want ? pyb::object(flags) : pyb::object(pyb::none());
}

// Element i draws at stochastic position `position + i`: past 2^64 - 1 that wrapped around to
// position 0 and reused its draws.
void check_position_range(std::uint64_t position, std::size_t n) {
  if (n > 0 && position > std::numeric_limits<std::uint64_t>::max() - (n - 1))
    throw api::InputError("position: " + std::to_string(position) + " + " + std::to_string(n - 1) +
                          " (the last element's) exceeds 2^64 - 1");
}

pyb::tuple round_f32(const carray<float>& x, const std::string& fmt, const std::string& mode,
                     const std::string& overflow, std::uint64_t seed, std::optional<long long> sr_bits,
                     std::uint64_t position, bool want_flags) {
  const Format f = parse_fmt(fmt);
  const RoundingSpec spec = make_spec(mode, overflow, seed, sr_bits);
  const std::size_t n = static_cast<std::size_t>(x.size());
  check_position_range(position, n);
  pyb::array out = bits_array(f, shape_of(x));
  pyb::array_t<std::uint8_t> flags(want_flags ? shape_of(x) : std::vector<pyb::ssize_t>{0});
  const float* in = x.data();
  {
    pyb::gil_scoped_release release;
    SignalPoll signals;
    if (want_flags) {
      std::uint8_t* fl = flags.mutable_data();
      std::vector<std::uint32_t> tmp(std::min(n, kChunk));
      for (std::size_t start = 0; start < n; start += kChunk) {
        const std::size_t len = std::min(kChunk, n - start);
        for (std::size_t i = 0; i < len; ++i) {
          const Rounded r =
              convert(f, formats::fp32, std::bit_cast<std::uint32_t>(in[start + i]), spec, position + start + i);
          tmp[i] = r.bits;
          fl[start + i] = r.flags;
        }
        store_bits(f, out, start, tmp.data(), len);
        signals.poll();
      }
    } else {
      // Straight into the container (round_array has an overload for each width).
      auto round_into = [&](auto* o) {
        for (std::size_t start = 0; start < n; start += kChunk) {
          const std::size_t len = std::min(kChunk, n - start);
          round_array(f, in + start, o + start, len, spec, position + start);
          signals.poll();
        }
      };
      if (f.container_bits == 16) {
        round_into(static_cast<std::uint16_t*>(out.mutable_data()));
      } else if (f.container_bits == 8) {
        round_into(static_cast<std::uint8_t*>(out.mutable_data()));
      } else {
        round_into(static_cast<std::uint32_t*>(out.mutable_data()));
      }
    }
  }
  return pyb::make_tuple(out, flags_or_none(want_flags, flags));
}

pyb::tuple round_f64(const carray<double>& x, const std::string& fmt, const std::string& mode,
                     const std::string& overflow, std::uint64_t seed, std::optional<long long> sr_bits,
                     std::uint64_t position, bool want_flags) {
  const Format f = parse_fmt(fmt);
  const RoundingSpec spec = make_spec(mode, overflow, seed, sr_bits);
  const std::size_t n = static_cast<std::size_t>(x.size());
  check_position_range(position, n);
  pyb::array out = bits_array(f, shape_of(x));
  pyb::array_t<std::uint8_t> flags(want_flags ? shape_of(x) : std::vector<pyb::ssize_t>{0});
  const double* in = x.data();
  {
    pyb::gil_scoped_release release;
    SignalPoll signals;
    std::vector<std::uint32_t> tmp(std::min(n, kChunk));
    std::uint8_t* fl = want_flags ? flags.mutable_data() : nullptr;
    for (std::size_t start = 0; start < n; start += kChunk) {
      const std::size_t len = std::min(kChunk, n - start);
      for (std::size_t i = 0; i < len; ++i) {
        const Rounded r = round_double(f, in[start + i], spec, position + start + i);
        tmp[i] = r.bits;
        if (fl) fl[start + i] = r.flags;
      }
      store_bits(f, out, start, tmp.data(), len);
      signals.poll();
    }
  }
  return pyb::make_tuple(out, flags_or_none(want_flags, flags));
}

// Exact values of bit patterns (any unsigned dtype, checked against the format), read in
// place: one pass, no widened copy (decoding is memory-bound).
template <class T>
bool decode_typed(const Format& f, const T* p, double* o, std::size_t n, const std::vector<double>& table) {
  const std::uint64_t limit = std::uint64_t{1} << f.container_bits;
  const std::uint32_t low_mask = (1u << f.storage_shift()) - 1u;
  const bool bf16 = f == formats::bf16, fp32 = f == formats::fp32 || f == formats::tf32;
  SignalPoll signals;
  for (std::size_t start = 0; start < n; start += kChunk) {
    const std::size_t end = std::min(n, start + kChunk);
    bool ok = true;
    for (std::size_t i = start; i < end; ++i) {
      const std::uint64_t v = p[i];
      ok &= v < limit && (static_cast<std::uint32_t>(v) & low_mask) == 0 &&
            ((static_cast<std::uint32_t>(v) >> f.storage_shift()) & ~f.width_mask()) == 0;
    }
    if (!ok) return false;  // the caller reports the first bad pattern with the CLI's message
    if (bf16) {
      for (std::size_t i = start; i < end; ++i) o[i] = std::bit_cast<float>(static_cast<std::uint32_t>(p[i]) << 16);
    } else if (fp32) {
      for (std::size_t i = start; i < end; ++i) o[i] = std::bit_cast<float>(static_cast<std::uint32_t>(p[i]));
    } else if (!table.empty()) {
      for (std::size_t i = start; i < end; ++i) o[i] = table[static_cast<std::size_t>(p[i])];
    } else {
      for (std::size_t i = start; i < end; ++i) o[i] = to_double(f, static_cast<std::uint32_t>(p[i]));
    }
    signals.poll();
  }
  return true;
}

// `any_width`: the Python layer's uint64 copy of a signed integer array (a list of ints), which
// has no width of its own; an unsigned array the caller gave must be f's container width.
pyb::array_t<double> decode_bits(const pyb::array& bits, const std::string& fmt, bool any_width) {
  const Format f = parse_fmt(fmt);
  const pyb::dtype dt = bits.dtype();
  if (dt.kind() != 'u' || !(bits.flags() & pyb::array::c_style))
    throw PyTypeError("bits: expected a C-contiguous unsigned integer array");
  if (!any_width) check_bits_width(f, static_cast<int>(8 * dt.itemsize()), "bits");
  pyb::array_t<double> out(shape_of(bits));
  double* o = out.mutable_data();
  const std::size_t n = static_cast<std::size_t>(bits.size());
  const void* p = bits.data();
  std::vector<double> table;
  bool valid = true;
  {
    pyb::gil_scoped_release release;
    if (!(f == formats::bf16) && f.container_bits <= 16 && n > (std::size_t{1} << f.container_bits)) {
      table.resize(std::size_t{1} << f.container_bits);
      for (std::size_t i = 0; i < table.size(); ++i) table[i] = to_double(f, static_cast<std::uint32_t>(i));
    }
    switch (dt.itemsize()) {
      case 1:
        valid = decode_typed(f, static_cast<const std::uint8_t*>(p), o, n, table);
        break;
      case 2:
        valid = decode_typed(f, static_cast<const std::uint16_t*>(p), o, n, table);
        break;
      case 4:
        valid = decode_typed(f, static_cast<const std::uint32_t*>(p), o, n, table);
        break;
      default:
        valid = decode_typed(f, static_cast<const std::uint64_t*>(p), o, n, table);
        break;
    }
  }
  if (!valid) checked_bits(f, carray<std::uint64_t>(bits), "bits");  // throws the CLI's message
  return out;
}

pyb::tuple op(const std::string& kind, const std::string& fmt, const std::vector<pyb::array>& operands,
              const std::string& mode, const std::string& overflow, std::uint64_t seed,
              std::optional<long long> sr_bits, std::uint64_t position, bool want_flags,
              const std::vector<std::string>& names) {
  // cvt: round() on bit patterns of fmt itself (apply_op converts from fmt to fmt).
  OpKind k{};
  if (!parse_op(kind, k)) throw api::InputError("unknown operation '" + kind + "'");
  const Format f = parse_fmt(fmt);
  const RoundingSpec spec = make_spec(mode, overflow, seed, sr_bits);
  if (static_cast<int>(operands.size()) != operand_count(k))
    throw PyTypeError(kind + ": expected " + std::to_string(operand_count(k)) + " operands, got " +
                      std::to_string(operands.size()));
  if (names.size() != operands.size()) throw PyTypeError(kind + ": expected a name for each operand");
  std::vector<std::vector<std::uint32_t>> ops;
  for (std::size_t i = 0; i < operands.size(); ++i) ops.push_back(operand_bits(f, operands[i], names[i]));
  const std::size_t n = ops[0].size();
  for (const auto& o : ops)
    if (o.size() != n) throw api::InputError("operands: expected arrays of one shape (broadcast them first)");
  check_position_range(position, n);
  pyb::array out = bits_array(f, shape_of(operands[0]));
  pyb::array_t<std::uint8_t> flags(want_flags ? shape_of(operands[0]) : std::vector<pyb::ssize_t>{0});
  {
    pyb::gil_scoped_release release;
    SignalPoll signals;
    std::vector<std::uint32_t> tmp(std::min(n, kChunk));
    std::uint8_t* fl = want_flags ? flags.mutable_data() : nullptr;
    const std::uint32_t* a = ops[0].data();
    const std::uint32_t* b = ops.size() > 1 ? ops[1].data() : nullptr;
    const std::uint32_t* c = ops.size() > 2 ? ops[2].data() : nullptr;
    const bool batched = !want_flags && (k == OpKind::add || k == OpKind::mul || k == OpKind::fma);
    for (std::size_t start = 0; start < n; start += kChunk) {
      const std::size_t len = std::min(kChunk, n - start);
      const std::uint64_t pos = position + start;
      if (batched && k == OpKind::add) {
        add_array(f, a + start, b + start, tmp.data(), len, spec, pos);
      } else if (batched && k == OpKind::mul) {
        mul_array(f, a + start, b + start, tmp.data(), len, spec, pos);
      } else if (batched) {
        fma_array(f, a + start, b + start, c + start, tmp.data(), len, spec, pos);
      } else {
        for (std::size_t i = 0; i < len; ++i) {
          const std::size_t e = start + i;
          const Rounded r = apply_op(k, f, f, a[e], b ? b[e] : 0u, c ? c[e] : 0u, spec, pos + i);
          tmp[i] = r.bits;
          if (fl) fl[e] = r.flags;
        }
      }
      store_bits(f, out, start, tmp.data(), len);
      signals.poll();
    }
  }
  return pyb::make_tuple(out, flags_or_none(want_flags, flags));
}

// D values of the accumulator `acc` (fp32, or fp16 for the *-f16acc models) as its bit
// patterns, exactly; a NaN D is the canonical NaN.
void d_bits(const Format& acc, const float* d, std::size_t n, std::uint32_t* bits) {
  for (std::size_t i = 0; i < n; ++i) {
    if (acc.width() == 32) {
      bits[i] = std::bit_cast<std::uint32_t>(d[i]);
    } else if (std::isnan(d[i])) {
      bits[i] = pack_nan(acc);
    } else if (!from_double_exact(acc, d[i], bits[i])) {
      throw std::logic_error("dot: a D value is not exact in " + std::string(acc.name));
    }
  }
}

// fb.dot's model: the one lookup (emu/dot/dot_model.hpp) in fb.dot's keyword names. fmt_b,
// kind and scale_format empty and block 0 when not given.
DotModel dot_model_or_throw(const std::string& model, const std::string& fmt, const std::string& fmt_b,
                            const std::string& kind, const std::string& scale_format, int block) {
  const Format a_input = parse_fmt(fmt);
  const std::optional<Format> b_input = fmt_b.empty() ? std::nullopt : std::optional<Format>(parse_fmt(fmt_b));
  DotModelQuery query;
  query.name = model;
  query.a_input = a_input;
  query.b_input = b_input ? &*b_input : nullptr;
  query.kind = kind;
  query.scale_format = scale_format;
  query.block = block;
  try {
    return find_dot_model(query);
  } catch (const DotModelError& e) {
    throw api::InputError(e.what());
  }
}

// What fb.dot needs to shape its call, and what a user may want to know about the model.
pyb::dict dot_model_info(const std::string& model, const std::string& fmt, const std::string& fmt_b,
                         const std::string& kind, const std::string& scale_format, int block) {
  const DotModel m = dot_model_or_throw(model, fmt, fmt_b, kind, scale_format, block);
  pyb::dict d;
  d["name"] = std::string(m.name());
  d["a_format"] = std::string(m.a_input().name);
  d["b_format"] = std::string(m.b_input().name);
  d["accumulator"] = std::string(m.accumulator().name);
  d["k_step"] = m.k_step();
  d["kind"] = std::string(m.kind());
  d["scale_block"] = m.scale_block();
  d["scale_format"] = m.scale_block() > 0 ? std::string(block_scale_format_name(m.scale_format())) : std::string();
  d["hardware_validated"] = m.hardware_validated();
  d["source"] = std::string(m.source());
  d["note"] = std::string(m.note());
  d["description"] = m.describe();
  return d;
}

// Raw scale bytes, [n, k / block], checked against the model's shape.
std::vector<std::uint8_t> scale_bytes(const std::optional<pyb::array>& scales, std::size_t n, std::size_t blocks,
                                      const std::string& what) {
  if (!scales) throw api::InputError(what + ": missing: the block-scaled dot needs k / block scale bytes per row");
  const pyb::array& s = *scales;
  if (s.dtype().kind() != 'u' || s.dtype().itemsize() != 1 || !(s.flags() & pyb::array::c_style))
    throw PyTypeError(what + ": expected a C-contiguous uint8 array of scale bytes");
  if (s.ndim() != 2 || static_cast<std::size_t>(s.shape(0)) != n || static_cast<std::size_t>(s.shape(1)) != blocks)
    throw api::InputError(what + ": expected shape [" + std::to_string(n) + ", " + std::to_string(blocks) +
                          "] (one byte per block of k)");
  const auto* p = static_cast<const std::uint8_t*>(s.data());
  return std::vector<std::uint8_t>(p, p + n * blocks);
}

// D = C + sum_i a_i b_i per row of a ([n, k] bit patterns of `fmt`), b ([n, k] of fmt_b, or
// of fmt when empty) and c ([n] bit patterns of the accumulator format), times each block's
// scales (scale_a, scale_b: [n, k / block] bytes) for a block-scaled model: the CLI's `dot` on
// every row, through the one DotModel call whatever the family.
pyb::array dot(const std::string& model, const std::string& fmt, const pyb::array& a, const pyb::array& b,
               const pyb::array& c, const std::string& fmt_b, const std::string& kind, const std::string& scale_format,
               int block, const std::optional<pyb::array>& scale_a, const std::optional<pyb::array>& scale_b) {
  const DotModel m = dot_model_or_throw(model, fmt, fmt_b, kind, scale_format, block);
  const Format& acc = m.accumulator();
  if (a.ndim() != 2 || b.ndim() != 2 || c.ndim() != 1 || a.shape(0) != b.shape(0) || a.shape(1) != b.shape(1) ||
      c.shape(0) != a.shape(0))
    throw api::InputError("a, b, c: expected shapes [n, k], [n, k] and [n]");
  // The kernels take k as an int (dot_pairs): a longer row would wrap, not be refused.
  if (static_cast<std::size_t>(a.shape(1)) > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw api::InputError("a, b: k = " + std::to_string(a.shape(1)) + " is above 2^31-1");
  const std::vector<std::uint32_t> av = operand_bits(m.a_input(), a, "a");
  const std::vector<std::uint32_t> bv = operand_bits(m.b_input(), b, "b");
  const std::vector<std::uint32_t> cv = operand_bits(acc, c, "c");
  const std::size_t n = static_cast<std::size_t>(a.shape(0)), k = static_cast<std::size_t>(a.shape(1));
  const std::size_t scale_block = static_cast<std::size_t>(m.scale_block());
  std::vector<std::uint8_t> sa, sb;
  if (scale_block == 0) {
    if (scale_a || scale_b) throw api::InputError("scale_a, scale_b: model " + m.describe() + " takes no scales");
  } else {
    if (k % scale_block != 0)
      throw api::InputError("k = " + std::to_string(k) + " is not a multiple of the block (" +
                            std::to_string(scale_block) + ")");
    sa = scale_bytes(scale_a, n, k / scale_block, "scale_a");
    sb = scale_bytes(scale_b, n, k / scale_block, "scale_b");
  }
  const std::size_t blocks = scale_block == 0 ? 0 : k / scale_block;
  pyb::array out = bits_array(acc, {static_cast<pyb::ssize_t>(n)});
  {
    pyb::gil_scoped_release release;
    SignalPoll signals;
    // Chunks of dots through DotModel::dot_pairs (NVIDIA: the blocked kernel, fused_dot's
    // bits), from the operands' exact values; D back to bits exactly (a NaN D is the
    // canonical NaN).
    constexpr std::size_t kDotChunk = 1024;
    std::vector<std::uint32_t> tmp(std::min(n, kDotChunk));
    std::vector<float> a_values, b_values, c_values, d_values;
    for (std::size_t start = 0; start < n; start += kDotChunk) {
      const std::size_t len = std::min(kDotChunk, n - start);
      a_values.resize(len * k);
      b_values.resize(len * k);
      c_values.resize(len);
      d_values.resize(len);
      for (std::size_t i = 0; i < len * k; ++i) {
        a_values[i] = static_cast<float>(to_double(m.a_input(), av[start * k + i]));
        b_values[i] = static_cast<float>(to_double(m.b_input(), bv[start * k + i]));
      }
      for (std::size_t i = 0; i < len; ++i) c_values[i] = static_cast<float>(to_double(acc, cv[start + i]));
      m.dot_pairs(c_values.data(), a_values.data(), b_values.data(), static_cast<int>(k), static_cast<int>(len),
                  d_values.data(), blocks ? sa.data() + start * blocks : nullptr,
                  blocks ? sb.data() + start * blocks : nullptr);
      d_bits(acc, d_values.data(), len, tmp.data());
      store_bits(acc, out, start, tmp.data(), len);
      signals.poll();
    }
  }
  return out;
}

// D = C + A·B, batch by batch: a [..., M, K] bit patterns or values of `fmt`, b [..., K, N] of
// fmt_b (or fmt) with a's leading (batch) dimensions, or [K, N] shared by every batch (a weight
// matrix: not copied per batch, its alignment exponents prepared once), c [..., M, N] of the
// accumulator with a's batch dimensions, or none (+0); an element's name in a message is its
// index in the array given. A block-scaled model also takes scale_a [batch * M, K / block]
// and scale_b [batch * K / block, N] bytes (b then has the batch dimensions). D[i, m, n] is
// the model's dot of row m of A and column n of B from C[i, m, n]: one chain over k in order,
// as fb.dot gives it for that row and column. NVIDIA and AMD run DotModel::dot_rows on a block
// of rows (NVIDIA: the blocked kernel); a block-scaled model runs DotModel::dot on each
// element, from a copy of B and its scales laid out by column.
pyb::array matmul(const std::string& model, const std::string& fmt, const pyb::array& a, const pyb::array& b,
                  const std::optional<pyb::array>& c, const std::string& fmt_b, const std::string& kind,
                  const std::string& scale_format, int block, const std::optional<pyb::array>& scale_a,
                  const std::optional<pyb::array>& scale_b) {
  const DotModel m = dot_model_or_throw(model, fmt, fmt_b, kind, scale_format, block);
  const Format& acc = m.accumulator();
  const pyb::ssize_t nd = a.ndim();
  const bool shared_b = b.ndim() == 2;
  bool shapes_fit = nd >= 2 && (shared_b || b.ndim() == nd) && (!c || c->ndim() == nd) &&
                    b.shape(b.ndim() - 2) == a.shape(nd - 1) &&
                    (!c || (c->shape(nd - 2) == a.shape(nd - 2) && c->shape(nd - 1) == b.shape(b.ndim() - 1)));
  std::size_t batches = 1;
  std::vector<pyb::ssize_t> out_shape;
  for (pyb::ssize_t i = 0; shapes_fit && i < nd - 2; ++i) {
    shapes_fit = (shared_b || b.shape(i) == a.shape(i)) && (!c || c->shape(i) == a.shape(i));
    batches *= static_cast<std::size_t>(a.shape(i));
    out_shape.push_back(a.shape(i));
  }
  if (!shapes_fit)
    throw api::InputError("a, b, c: expected shapes [..., M, K], [..., K, N] (or [K, N]) and [..., M, N]");
  const std::size_t rows = static_cast<std::size_t>(a.shape(nd - 2)), k = static_cast<std::size_t>(a.shape(nd - 1)),
                    cols = static_cast<std::size_t>(b.shape(b.ndim() - 1));
  out_shape.push_back(static_cast<pyb::ssize_t>(rows));
  out_shape.push_back(static_cast<pyb::ssize_t>(cols));
  if (k == 0) throw api::InputError("a, b: K = 0: a dot product needs at least one term");
  // The blocked kernel counts K, N and a block of rows in int.
  constexpr std::size_t kMaxExtent = static_cast<std::size_t>(std::numeric_limits<int>::max());
  if (k > kMaxExtent || cols > kMaxExtent || rows > kMaxExtent)
    throw api::InputError("a, b: M, K and N must each be at most 2^31-1, got M = " + std::to_string(rows) +
                          ", K = " + std::to_string(k) + ", N = " + std::to_string(cols));
  const std::size_t scale_block = static_cast<std::size_t>(m.scale_block());
  if (scale_block != 0 && shared_b && nd > 2)
    throw api::InputError("b: a block-scaled GEMM takes b with a's batch dimensions");
  const std::vector<std::uint32_t> av = operand_bits(m.a_input(), a, "a");
  const std::vector<std::uint32_t> bv = operand_bits(m.b_input(), b, "b");
  const std::vector<std::uint32_t> cv = c ? operand_bits(acc, *c, "c") : std::vector<std::uint32_t>();
  const std::size_t blocks = scale_block == 0 ? 0 : k / scale_block;
  std::vector<std::uint8_t> sa, sb;
  if (scale_block == 0) {
    if (scale_a || scale_b) throw api::InputError("scale_a, scale_b: model " + m.describe() + " takes no scales");
  } else {
    if (k % scale_block != 0)
      throw api::InputError("K = " + std::to_string(k) + " is not a multiple of the block (" +
                            std::to_string(scale_block) + ")");
    // scale_bytes reads [n, blocks]: A's scales as batch*M rows; B's as batch*blocks rows of N.
    sa = scale_bytes(scale_a, batches * rows, blocks, "scale_a");
    sb = scale_bytes(scale_b, batches * blocks, cols, "scale_b");
  }
  pyb::array out = bits_array(acc, out_shape);
  {
    pyb::gil_scoped_release release;
    SignalPoll signals;
    auto values = [](const Format& f, const std::uint32_t* bits, std::size_t n) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(to_double(f, bits[i]));
      return v;
    };
    // Rows per call: enough to pay the blocked kernel's set-up once per block, few enough
    // that Ctrl-C is seen within a fraction of a second.
    const std::size_t rows_per_block =
        std::max<std::size_t>(1, (std::size_t{1} << 20) / std::max(k * cols, std::size_t{1}));
    std::vector<std::uint32_t> tmp(rows * cols);
    std::vector<float> d(rows * cols);
    std::vector<float> b_values;
    std::vector<std::int32_t> b_alignment;
    for (std::size_t batch = 0; batch < batches; ++batch) {
      const std::vector<float> a_values = values(m.a_input(), av.data() + batch * rows * k, rows * k);
      if (batch == 0 || !shared_b) {
        b_values = values(m.b_input(), bv.data() + (shared_b ? 0 : batch * k * cols), k * cols);
        if (scale_block == 0 && m.nvidia() != nullptr) {
          b_alignment.resize(k * cols);
          dot_alignment_exponents(*m.nvidia(), b_values.data(), k * cols, b_alignment.data());
        }
      }
      const std::vector<float> c_values =
          c ? values(acc, cv.data() + batch * rows * cols, rows * cols) : std::vector<float>(rows * cols, 0.0f);
      if (scale_block == 0) {
        const std::int32_t* alignment = m.nvidia() != nullptr ? b_alignment.data() : nullptr;
        for (std::size_t row = 0; row < rows; row += rows_per_block) {
          const std::size_t n = std::min(rows_per_block, rows - row);
          m.dot_rows(c_values.data() + row * cols, cols, a_values.data() + row * k, k, static_cast<int>(n),
                     b_values.data(), alignment, cols, static_cast<int>(k), static_cast<int>(cols),
                     d.data() + row * cols, cols);
          signals.poll();
        }
      } else {
        // Column n of B and its scales, contiguous: the per-element call reads a dot's b and
        // scale_b as arrays over k.
        std::vector<float> b_columns(k * cols);
        std::vector<std::uint8_t> sb_columns(blocks * cols);
        for (std::size_t j = 0; j < k; ++j)
          for (std::size_t n = 0; n < cols; ++n) b_columns[n * k + j] = b_values[j * cols + n];
        for (std::size_t blk = 0; blk < blocks; ++blk)
          for (std::size_t n = 0; n < cols; ++n) sb_columns[n * blocks + blk] = sb[(batch * blocks + blk) * cols + n];
        for (std::size_t row = 0; row < rows; ++row) {
          const std::uint8_t* row_scales = sa.data() + (batch * rows + row) * blocks;
          for (std::size_t n = 0; n < cols; ++n)
            d[row * cols + n] = m.dot(c_values[row * cols + n], a_values.data() + row * k, b_columns.data() + n * k,
                                      static_cast<int>(k), DotScales{row_scales, sb_columns.data() + n * blocks});
          signals.poll();
        }
      }
      d_bits(acc, d.data(), rows * cols, tmp.data());
      store_bits(acc, out, batch * rows * cols, tmp.data(), rows * cols);
    }
  }
  return out;
}

pyb::dict format_info(const std::string& fmt) {
  const Format f = parse_fmt(fmt);
  pyb::dict d;
  d["name"] = std::string(f.name);
  d["exp_bits"] = f.exp_bits;
  d["man_bits"] = f.man_bits;
  d["bias"] = f.bias;
  d["width"] = f.width();
  d["container_bits"] = f.container_bits;
  d["signed"] = f.is_signed;
  d["has_inf"] = f.has_inf();
  d["has_nan"] = f.has_nan();
  d["has_negative_zero"] = f.has_negative_zero();
  d["has_subnormals"] = f.has_subnormals();
  d["emin"] = f.emin();
  d["emax"] = f.emax();
  d["max_finite"] = to_double(f, to_container(f, f.max_finite_pattern()));
  return d;
}

std::vector<std::string> dot_models() {
  std::vector<std::string> out;
  for (std::string_view name : dot_model_names()) out.emplace_back(name);
  return out;
}

// bench/python_round.py: the C++ array path alone, timed in this process on the same input:
// fb::round_array over all of x into a uint32 buffer allocated once (as flashbits-bench
// times it). Returns per repetition (wall seconds, this thread's CPU seconds).
std::vector<std::pair<double, double>> time_round_array(const carray<float>& x, const std::string& fmt,
                                                        const std::string& mode, int reps) {
  const Format f = parse_fmt(fmt);
  const RoundingSpec spec = make_spec(mode, "ieee", 0, std::nullopt);
  const std::size_t n = static_cast<std::size_t>(x.size());
  // The format's own container, as round_f32 writes it.
  std::vector<std::uint32_t> out32(f.container_bits == 32 ? n : 0);
  std::vector<std::uint16_t> out16(f.container_bits == 16 ? n : 0);
  std::vector<std::uint8_t> out8(f.container_bits == 8 ? n : 0);
  std::vector<std::pair<double, double>> times;
  pyb::gil_scoped_release release;
  const auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  for (int r = 0; r < reps; ++r) {
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    if (f.container_bits == 16) {
      round_array(f, x.data(), out16.data(), n, spec);
    } else if (f.container_bits == 8) {
      round_array(f, x.data(), out8.data(), n, spec);
    } else {
      round_array(f, x.data(), out32.data(), n, spec);
    }
    const double c1 = cpu_now();
    const auto w1 = std::chrono::steady_clock::now();
    times.emplace_back(std::chrono::duration<double>(w1 - w0).count(), c1 - c0);
  }
  return times;
}

}  // namespace

void register_arrays(pyb::module_& m) {
  using namespace pyb::literals;
  m.def("round_f32", &round_f32, "x"_a, "fmt"_a, "mode"_a, "overflow"_a, "seed"_a, "sr_bits"_a, "position"_a, "flags"_a,
        InDefaultFloatingPoint());
  m.def("round_f64", &round_f64, "x"_a, "fmt"_a, "mode"_a, "overflow"_a, "seed"_a, "sr_bits"_a, "position"_a, "flags"_a,
        InDefaultFloatingPoint());
  m.def("decode", &decode_bits, "bits"_a, "fmt"_a, "any_width"_a = false, InDefaultFloatingPoint());
  m.def("op", &op, "kind"_a, "fmt"_a, "operands"_a, "mode"_a, "overflow"_a, "seed"_a, "sr_bits"_a, "position"_a,
        "flags"_a, "names"_a, InDefaultFloatingPoint());
  m.def("dot_model", &dot_model_info, "model"_a, "fmt"_a, "fmt_b"_a, "kind"_a, "scale_format"_a, "block"_a,
        InDefaultFloatingPoint());
  m.def("dot", &dot, "model"_a, "fmt"_a, "a"_a, "b"_a, "c"_a, "fmt_b"_a, "kind"_a, "scale_format"_a, "block"_a,
        "scale_a"_a, "scale_b"_a, InDefaultFloatingPoint());
  m.def("matmul", &matmul, "model"_a, "fmt"_a, "a"_a, "b"_a, "c"_a, "fmt_b"_a, "kind"_a, "scale_format"_a, "block"_a,
        "scale_a"_a, "scale_b"_a, InDefaultFloatingPoint());
  // The operand check alone (operand_bits), for an array as the caller gave it: dot and matmul
  // hand the core reshaped or broadcast arrays, whose element indices are not the caller's.
  m.def(
      "check_operand",
      [](const std::string& fmt, const pyb::array& a, const std::string& name) {
        operand_bits(api::parse_format_or_throw(fmt, "fmt"), a, name);
      },
      "fmt"_a, "a"_a, "name"_a, InDefaultFloatingPoint());
  // The rounding modes and whether each draws from the stochastic stream (the Python layer
  // refuses a seed for a mode that draws none, as `op` does), from the one list.
  m.def(
      "rounding_modes",
      [] {
        pyb::dict modes;
        for (RoundingMode mode : kRoundingModes)
          modes[pyb::str(std::string(to_string(mode)))] = mode == RoundingMode::sr;
        return modes;
      },
      InDefaultFloatingPoint());
  m.def("format_info", &format_info, "fmt"_a, InDefaultFloatingPoint());
  m.def("dot_models", &dot_models, InDefaultFloatingPoint());
  m.def("_time_round_array", &time_round_array, "x"_a, "fmt"_a, "mode"_a, "reps"_a, InDefaultFloatingPoint());
  m.def(
      "lane_instruction_set", [] { return std::string(lane_instruction_set()); }, InDefaultFloatingPoint());
}

}  // namespace fb::py
