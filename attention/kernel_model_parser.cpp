// attention/kernel_model_parser.cpp: kernel model names -> recipes (parse_kernel_model: a base
// recipe from attention/kernel_models.cpp plus variant suffixes, which only set fields) and the
// help text of every base model and variant (describe_kernel_models, for `flashbits models`).
// Contract: attention/attention.hpp; docs/CLI.md "Kernel models".
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "emu/tensor_core.hpp"

namespace fb::attn {
namespace {

// The recipe names its tensor-core model; its form depends on the operands' format, known
// only once the variants are read (fp8 models feed the quantised format).
void resolve_dot(DotSpec& d, const Format& input) {
  if (d.kind != DotKind::tensor_core) return;
  d.model = find_tensor_core_model(d.tensor_core, input);
  if (!d.model) {
    throw std::invalid_argument("tensor-core model '" + d.tensor_core + "' has no form for input format " +
                                std::string(input.name));
  }
}

double parse_number(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(v)) {
    throw std::invalid_argument("kernel model: bad number '" + text + "' for " + what);
  }
  return v;
}
}  // namespace

ModelHandle parse_kernel_model(std::string_view full_name, const Format& dtype) {
  if (!(dtype == formats::bf16 || dtype == formats::fp16)) {
    throw std::invalid_argument(std::string("kernel model dtype must be bf16 or fp16, got ") + dtype.name);
  }
  std::string text(full_name);
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t plus = text.find('+', start);
    parts.push_back(text.substr(start, plus == std::string::npos ? std::string::npos : plus - start));
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  // docs/CLI.md: a model that does not name its dtype takes it from --dtype or the trace; a
  // bare `standard` is standard-FMT in that dtype.
  const std::string base = parts[0] == "standard" ? "standard-" + std::string(dtype.name) : parts[0];
  std::optional<KernelModel> found;
  for (KernelModel& m : base_kernel_models(dtype)) {
    if (m.base == base) found = std::move(m);
  }
  if (!found) {
    std::string names;
    for (const KernelModel& m : base_kernel_models(dtype)) names += (names.empty() ? "" : ", ") + m.base;
    throw std::invalid_argument("unknown kernel model '" + base + "' (known: " + names + ")");
  }
  KernelModel m = std::move(*found);
  std::string canonical = m.base;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const std::size_t colon = p.find(':');
    const std::string variant = p.substr(0, colon);
    if (RoundingMode mode{}; m.structure == Structure::correctly_rounded &&
                             !(variant.starts_with("o-") && parse_rounding_mode(variant.substr(2), mode))) {
      throw std::invalid_argument(
          "correctly-rounded takes only +o-MODE (the rounding mode of its one rounding per "
          "output), not '+" +
          p + "': it has no kernel arithmetic to vary");
    }
    if (variant == "dynmax") {
      m.dynmax = true;
      if (colon != std::string::npos) {
        std::string args = p.substr(colon + 1);
        std::size_t s = 0;
        while (s <= args.size()) {
          const std::size_t comma = args.find(',', s);
          const std::string kv = args.substr(s, comma == std::string::npos ? std::string::npos : comma - s);
          const std::size_t eq = kv.find('=');
          if (eq == std::string::npos) throw std::invalid_argument("+dynmax: expected key=value, got '" + kv + "'");
          const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
          if (key == "beta") {
            m.dynmax_beta = parse_number(value, "+dynmax beta");
            if (m.dynmax_beta <= 1.0) throw std::invalid_argument("+dynmax: beta must be > 1");
          } else if (key == "tol") {
            m.dynmax_tol = parse_number(value, "+dynmax tol");
            if (m.dynmax_tol < 0.0) throw std::invalid_argument("+dynmax: tol must be >= 0");
          } else {
            throw std::invalid_argument("+dynmax: unknown parameter '" + key + "' (beta, tol)");
          }
          if (comma == std::string::npos) break;
          s = comma + 1;
        }
      }
      char buf[96];
      std::snprintf(buf, sizeof buf, "+dynmax:beta=%g,tol=%g", m.dynmax_beta, m.dynmax_tol);
      canonical += buf;
    } else if (variant == "promote") {
      if (!m.fp8.enabled) throw std::invalid_argument("+promote applies to the fp8 models only");
      int every = 128;
      if (colon != std::string::npos) {
        const double v = parse_number(p.substr(colon + 1), "+promote:N");
        if (v != std::floor(v) || v < 32 || v > 65536 || static_cast<int>(v) % 32 != 0)
          throw std::invalid_argument("+promote:N: N must be a positive multiple of 32 (one wgmma k-block)");
        every = static_cast<int>(v);
      }
      m.score_dot.promote_every = every;
      m.pv_dot.promote_every = every;
      canonical += "+promote:" + std::to_string(every);
    } else if (colon != std::string::npos) {
      throw std::invalid_argument("variant '+" + variant + "' takes no parameters");
    } else if (variant == "block-quant" || variant == "hadamard") {
      if (!m.fp8.enabled) throw std::invalid_argument("+" + variant + " applies to the fp8 models only");
      if (variant == "block-quant" && m.structure == Structure::materialised)
        throw std::invalid_argument("+block-quant: " + m.base + " is per-tensor by definition (no tiles)");
      (variant == "block-quant" ? m.fp8.block : m.fp8.hadamard) = true;
      canonical += "+" + variant;
    } else if (variant == "delta-dpp") {
      if (m.fp8.enabled) throw std::invalid_argument("+delta-dpp: the fp8 models have no backward (dP) modelled");
      m.delta_dpp = true;
      canonical += "+delta-dpp";
    } else if (variant == "unfused-exp") {
      if (m.scale != ScaleHandling::exponent_ffma)
        throw std::invalid_argument("+unfused-exp applies to models whose exponent is S*scale_log2 - max (FA2, FA3)");
      m.exponent_argument = ExponentArgument::fmul_fadd;
      canonical += "+unfused-exp";
    } else if (variant == "o-fp32") {
      m.o_fp32 = true;
      canonical += "+o-fp32";
    } else if (RoundingMode mode{}; variant.starts_with("o-") && parse_rounding_mode(variant.substr(2), mode)) {
      if (colon != std::string::npos) throw std::invalid_argument("+" + p + ": +o-MODE takes no parameters");
      m.o_round = mode;
      canonical += "+" + variant;
    } else {
      throw std::invalid_argument(
          "unknown variant '+" + variant +
          "' (dynmax, unfused-exp, delta-dpp, o-fp32, o-sr, o-rtz, o-rup, o-rdn, o-rna, o-rto; fp8 models: "
          "block-quant, hadamard, promote)");
    }
  }
  // fp8 models feed the tensor cores the quantised operands.
  const Format operands = m.fp8.enabled ? m.fp8.format : m.input;
  resolve_dot(m.score_dot, operands);
  resolve_dot(m.pv_dot, operands);
  return ModelHandle{canonical, std::make_shared<const KernelModel>(std::move(m))};
}

std::vector<KernelModelDescription> describe_kernel_models() {
  std::vector<KernelModelDescription> out;
  for (const KernelModel& m : base_kernel_models(formats::bf16)) out.push_back({m.base, m.description, m.sources});
  out.push_back({"+dynmax[:beta=B,tol=T]",
                 "Qiu & Yao's dynamic max: per KV block, if >1 score ties the row max r_m (within tol), use "
                 "m = beta*r_m (r_m > 0) or 0 (r_m < 0); exact in real arithmetic (defaults beta=2, tol=1e-3). "
                 "Tensor-op models (fa-bf16acc, standard-*, golden-*) count scores >= r_m - tol computed in the "
                 "scores' format, as the authors' code does; kernel models compare exactly",
                 ""});
  out.push_back({"+unfused-exp",
                 "FA2/FA3 models: the exponent argument S*scale_log2 - max_scaled as __fmul_rn then a separate "
                 "subtraction (two roundings, PyTorch's UNFUSE_FMA) instead of one FFMA",
                 ""});
  out.push_back({"+delta-dpp", "backward delta computed as rowsum(dP∘P) instead of rowsum(dO∘O)", ""});
  out.push_back({"+o-fp32", "backward delta computed from O kept in fp32 (before its final cast)", ""});
  out.push_back(
      {"+o-sr", "stochastic rounding (24 random bits, keyed by seed and element) of the final cast of O", ""});
  out.push_back({"+o-rtz, +o-rup, +o-rdn, +o-rna, +o-rto",
                 "the final cast of O in that rounding mode instead of the recipe's RNE (what `sweep --round` selects)",
                 ""});
  out.push_back({"+block-quant",
                 "fp8 models: one e4m3 scale per Br x d block of Q and Bc x d block of K and V (the run's tiles), "
                 "FA3 paper §3.3. Descales (ASSUMED placement, FA3's kernel has per-tensor descales only): "
                 "S = fp32(S * fp32(q_descale_i * k_descale_j)) before the softmax; each KV tile's P·V runs from "
                 "C = 0 and is added as acc = fma(tile, v_descale_j, acc) in fp32",
                 ""});
  out.push_back({"+hadamard",
                 "fp8 models: incoherent processing, Q and K rows times (random +-1 diagonal)(Hadamard/sqrt(d)) "
                 "before quantisation, in fp64; seed from RunOptions::seed (--seed); head dim a power of two",
                 ""});
  out.push_back({"+promote[:N]",
                 "fp8 models: DeepSeek-V3 fp32 promotion, every N products (multiple of 32, default 128) the "
                 "tensor-core partial sum (from C = 0, e8m13-truncated steps) is added into an fp32 accumulator "
                 "by an fp32 add; applies to both S = QK^T and P·V",
                 ""});
  return out;
}

}  // namespace fb::attn
