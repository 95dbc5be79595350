// attention/kernel_model_parser.cpp: kernel model names -> recipes (parse_kernel_model: a base
// recipe from attention/kernel_models.cpp plus variant suffixes, which only set fields) and the
// help text of every base model and variant (describe_kernel_models, for `flashbits models`).
// Contract: attention/attention.hpp; docs/CLI.md "Kernel models".
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "emu/dot/dot_model.hpp"
#include "formats/decimal_text.hpp"
#include "formats/text_escape.hpp"

namespace fb::attn {
namespace {

// The recipe names its tensor-core model; its form depends on the operands' format, known
// only once the variants are read (fp8 models feed the quantised format).
void resolve_dot(DotSpec& d, const Format& input) {
  if (d.kind != DotKind::tensor_core) return;
  try {
    d.dot = find_dot_model(d.tensor_core, input);
  } catch (const DotModelError&) {
    throw std::invalid_argument("dot model '" + d.tensor_core + "' has no form for input format " +
                                std::string(input.name));
  }
  // Attention feeds a dot no scales; a block-scaled kind is not reachable without its kind.
  d.model = d.dot.nvidia();
}

// A decimal number only (read_decimal): stod also read "0x10", " 5" and "" as a prefix's value.
double parse_number(const std::string& text, const std::string& what) {
  const std::optional<double> v = read_decimal(text);
  // '+' separates variants: "beta=+2" reaches here as "beta=" and a variant "2".
  if (!v && text.empty())
    throw std::invalid_argument("kernel model: no number for " + what +
                                " (a decimal number; '+' starts the next variant, so write 2, not +2)");
  if (!v) throw std::invalid_argument("kernel model: bad number '" + text + "' for " + what + " (a decimal number)");
  return *v;
}

}  // namespace

ModelHandle parse_kernel_model(std::string_view full_name, const Format& dtype) {
  if (!(dtype == formats::bf16 || dtype == formats::fp16)) {
    throw std::invalid_argument(std::string("kernel model dtype must be bf16 or fp16, got ") + dtype.name);
  }
  std::string text(full_name);
  // Every message below quotes the name, and what() ends at a NUL (a metadata string from a file).
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos)
    throw std::invalid_argument("kernel model name '" + without_nul_bytes(text) + "': a NUL byte at position " +
                                std::to_string(nul));
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
  // Each setting once: a repeated variant (+dynmax+dynmax) or two final casts of O
  // (+o-rtz+o-rup) would otherwise silently keep the last. Setting -> the part that set it.
  std::map<std::string, std::string> settings;
  // The variants are independent switches, so the canonical name lists them in one fixed order
  // whatever order they were given in: "+a+b" and "+b+a" name one kernel, and every comparison
  // of canonical names (a trace's model against another's) agrees with the arithmetic.
  // docs/CLI.md's table order, with +o-MODE (not listed: every mode but o-fp32) last.
  static constexpr std::array<std::string_view, 13> canonical_order = {
      "dynmax", "visit-masked-tiles", "cuda-expf", "unfused-exp", "delta-dpp",   "o-fp32",
      "tile",   "lazy-rescale",       "sw-exp2",   "splitkv",     "block-quant", "hadamard",
      "promote"};
  std::vector<std::pair<std::size_t, std::string>> suffixes;  // (place in canonical_order, text)
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const std::size_t colon = p.find(':');
    const std::string variant = p.substr(0, colon);
    suffixes.emplace_back(static_cast<std::size_t>(std::find(canonical_order.begin(), canonical_order.end(), variant) -
                                                   canonical_order.begin()),
                          std::string());
    std::string& canonical_suffix = suffixes.back().second;
    // A colon says parameters follow: "+splitkv:" with none was read as the default.
    if (colon != std::string::npos && colon + 1 == p.size())
      throw std::invalid_argument("+" + p + ": nothing after ':' (give a parameter, or drop the ':')" +
                                  (i + 1 < parts.size()
                                       ? "; a '+' starts the next variant, so '+" + p + "+" + parts[i + 1] +
                                             "' reads as two: write a signed parameter without its '+'"
                                       : std::string()));
    {
      RoundingMode o_mode{};
      const bool o_cast = variant.starts_with("o-") && parse_rounding_mode(variant.substr(2), o_mode);
      const std::string setting = o_cast ? "O's final rounding (+o-MODE)" : "+" + variant;
      if (const auto [at, first] = settings.emplace(setting, p); !first)
        throw std::invalid_argument(at->second == p
                                        ? "+" + p + " is given twice"
                                        : "+" + at->second + " and +" + p + " both set " + setting + "; give one");
    }
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
        std::set<std::string> given;
        while (s <= args.size()) {
          const std::size_t comma = args.find(',', s);
          const std::string kv = args.substr(s, comma == std::string::npos ? std::string::npos : comma - s);
          const std::size_t eq = kv.find('=');
          if (eq == std::string::npos) throw std::invalid_argument("+dynmax: expected key=value, got '" + kv + "'");
          const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
          if (!given.insert(key).second) throw std::invalid_argument("+dynmax: " + key + " is given twice");
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
      canonical_suffix += "+dynmax:beta=" + shortest_decimal(m.dynmax_beta) + ",tol=" + shortest_decimal(m.dynmax_tol);
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
      canonical_suffix += "+promote:" + std::to_string(every);
    } else if (variant == "lazy-rescale") {
      if (m.structure != Structure::online_softmax || m.scale == ScaleHandling::multiply_scores)
        throw std::invalid_argument("+lazy-rescale applies to online models with base-2 exponents (FA2, FA3, Triton)");
      double threshold = 8.0;  // FA4's value for 16-bit inputs (flash_fwd_sm100.py)
      if (colon != std::string::npos && p.substr(colon + 1) == "off") {
        // fa4-sm100 without its lazy rescaling: the max moves on every rise, as in FA2.
        m.lazy_rescale_log2 = 0.0;
        canonical_suffix += "+lazy-rescale:off";
        continue;
      }
      if (colon != std::string::npos) threshold = parse_number(p.substr(colon + 1), "+lazy-rescale:T");
      if (!(threshold > 0.0) || threshold > 64.0)
        throw std::invalid_argument("+lazy-rescale:T: T must be in (0, 64] (log2 units)");
      // FA4 asserts max_offset + rescale_threshold < log2(max of the P̄ cast's format): P̄
      // may reach 2^(offset + T), and above the format's largest value it would saturate.
      const Format& p_format = m.p_cast ? *m.p_cast : formats::fp32;
      const double log2_max = std::log2(to_double(p_format, p_format.max_finite_pattern()));
      if (m.fp8.p_max_offset + threshold >= log2_max) {
        if (m.fp8.enabled) {
          // Expressible: the fp8 P̄ cast saturates (cvt.rn.satfinite), as FA4's fp8 forward did
          // before Dao-AILab/flash-attention#2717 (Max_offset 8 with threshold 4: P̄ up to 2^12).
          m.warning = "+lazy-rescale:" + shortest_decimal(threshold) + ": P̄ can reach 2^" +
                      shortest_decimal(m.fp8.p_max_offset + threshold) + ", beyond " + p_format.name +
                      "'s largest value " + shortest_decimal(to_double(p_format, p_format.max_finite_pattern())) +
                      ": it saturates there (FA4's fp8 bug before flash-attention#2717)";
        } else {
          char log2_max_text[32];
          std::snprintf(log2_max_text, sizeof log2_max_text, "%.3f", log2_max);
          throw std::invalid_argument("+lazy-rescale:" + shortest_decimal(threshold) + ": P̄ could reach 2^" +
                                      shortest_decimal(m.fp8.p_max_offset + threshold) + ", beyond " + p_format.name +
                                      "'s largest value 2^" + log2_max_text);
        }
      }
      m.lazy_rescale_log2 = threshold;
      canonical_suffix += "+lazy-rescale:" + shortest_decimal(threshold);
    } else if (variant == "sw-exp2") {
      if (m.structure != Structure::online_softmax || m.scale == ScaleHandling::multiply_scores)
        throw std::invalid_argument("+sw-exp2 applies to online models whose P̄ is an exp2 (FA2, FA3, Triton)");
      m.sw_exp2 = true;
      m.sw_exp2_fa4_tuning = false;  // an explicit split replaces fa4-sm100's tuning table
      if (colon != std::string::npos && p.substr(colon + 1) == "off") {
        // fa4-sm100 with every P̄ exponential on the MUFU.
        m.sw_exp2 = false;
        canonical_suffix += "+sw-exp2:off";
      } else if (colon != std::string::npos) {
        const std::string args = p.substr(colon + 1);
        const std::size_t comma = args.find(',');
        if (comma == std::string::npos) throw std::invalid_argument("+sw-exp2:EVERY,START: expected two integers");
        const double every = parse_number(args.substr(0, comma), "+sw-exp2 EVERY");
        const double first_fragment = parse_number(args.substr(comma + 1), "+sw-exp2 START");
        if (every != std::floor(every) || every < 2 || every > 32 || static_cast<int>(every) % 2 != 0)
          throw std::invalid_argument("+sw-exp2:EVERY,START: EVERY must be an even number in 2..32");
        if (first_fragment != std::floor(first_fragment) || first_fragment < 0 || first_fragment > 64)
          throw std::invalid_argument("+sw-exp2:EVERY,START: START must be a fragment index in 0..64");
        m.sw_exp2_every = static_cast<int>(every);
        m.sw_exp2_start_fragment = static_cast<int>(first_fragment);
        canonical_suffix +=
            "+sw-exp2:" + std::to_string(m.sw_exp2_every) + "," + std::to_string(m.sw_exp2_start_fragment);
      } else {
        canonical_suffix += "+sw-exp2";
      }
    } else if (variant == "splitkv") {
      // FA2's split-KV forward (flash_api.cpp set_params_splitkv, flash_fwd_kernel.h
      // compute_attn_1rowblock_splitkv and combine_attn_seqk_parallel): the online FA2 models only.
      if (m.base.rfind("fa2-", 0) != 0 && m.base.rfind("pytorch-fa2-", 0) != 0)
        throw std::invalid_argument("+splitkv applies to the FA2 models (fa2-*, pytorch-fa2-*), not " + m.base);
      m.splitkv.enabled = true;
      const std::string args = colon == std::string::npos ? "" : p.substr(colon + 1);
      std::size_t s = 0;
      bool first = true;
      std::set<std::string> given_keys;  // each once, as +dynmax's: a repeat kept its last value
      while (!args.empty() && s <= args.size()) {
        const std::size_t comma = args.find(',', s);
        const std::string item = args.substr(s, comma == std::string::npos ? std::string::npos : comma - s);
        const std::size_t eq = item.find('=');
        const std::string key = eq == std::string::npos ? (first ? "n" : item) : item.substr(0, eq);
        const std::string value = eq == std::string::npos ? item : item.substr(eq + 1);
        if (eq == std::string::npos && !first)
          throw std::invalid_argument("+splitkv: expected key=value after the first parameter, got '" + item + "'");
        if (!given_keys.insert(key).second)
          throw std::invalid_argument("+splitkv: " + (key == "n" ? std::string("the split count") : key) +
                                      " is given twice");
        if (key == "n") {
          if (value == "auto") {
            m.splitkv.num_splits = 0;
          } else {
            const double n = parse_number(value, "+splitkv:N");
            // set_params_splitkv: TORCH_CHECK(params.num_splits <= 128)
            if (n != std::floor(n) || n < 1 || n > 128)
              throw std::invalid_argument("+splitkv:N: N must be an integer in 1..128 (or auto)");
            m.splitkv.num_splits = static_cast<int>(n);
          }
        } else if (key == "sms") {
          const double sms = parse_number(value, "+splitkv sms");
          if (sms != std::floor(sms) || sms < 1 || sms > 4096)
            throw std::invalid_argument("+splitkv: sms must be an integer in 1..4096");
          m.splitkv.sm_count = static_cast<int>(sms);
        } else if (key == "combine") {
          if (value == "logsum") {
            m.splitkv.scale = SplitKvScale::exp_minus_logsum;
          } else if (value == "inv-sum") {
            m.splitkv.scale = SplitKvScale::exp_minus_max_inv_sum;
          } else {
            throw std::invalid_argument("+splitkv: combine must be logsum or inv-sum, got '" + value + "'");
          }
        } else {
          throw std::invalid_argument("+splitkv: unknown parameter '" + key + "' (n, sms, combine)");
        }
        first = false;
        if (comma == std::string::npos) break;
        s = comma + 1;
      }
      // sms feeds the auto heuristic only: beside a fixed split count it would be dropped unread.
      if (given_keys.count("sms") && m.splitkv.num_splits != 0)
        throw std::invalid_argument("+splitkv: sms sets the SM count of the auto heuristic; with " +
                                    std::to_string(m.splitkv.num_splits) + " splits given it is not used (drop sms, " +
                                    "or give auto)");
      canonical_suffix += "+splitkv:" + (m.splitkv.num_splits == 0 ? "auto,sms=" + std::to_string(m.splitkv.sm_count)
                                                                   : std::to_string(m.splitkv.num_splits));
      if (m.splitkv.scale == SplitKvScale::exp_minus_max_inv_sum) canonical_suffix += ",combine=inv-sum";
      m.description +=
          "; split-KV forward (+splitkv: pytorch-fa2-sm90's H200 captures of 2 to 8 splits replay bit for bit; "
          "more than 32 splits, whose combine spreads a row's LSEs over several threads, UNMEASURED)";
    } else if (variant == "tile") {
      // The Triton tutorial's forward tile, which its autotuner picks at run time among these
      // candidates (KernelModel::tutorial_tiles): the user names the one that ran.
      const KernelModel::TritonTutorialTiles& tt = m.tutorial_tiles;
      if (tt.block_n.empty())
        throw std::invalid_argument(
            "+tile applies to the Triton tutorial models (triton-tutorial, "
            "triton-tutorial-sm90), whose forward tile is autotuned; " +
            m.base + " takes its tiles from its source");
      const std::string arg = colon == std::string::npos ? "" : p.substr(colon + 1);
      const std::size_t x = arg.find('x');
      if (x == std::string::npos)
        throw std::invalid_argument("+tile:BMxBN: expected BLOCK_M x BLOCK_N, e.g. +tile:128x64");
      const double bm = parse_number(arg.substr(0, x), "+tile BLOCK_M");
      const double bn = parse_number(arg.substr(x + 1), "+tile BLOCK_N");
      const auto candidate = [](double v, const std::vector<int>& set) {
        return v == std::floor(v) && std::find(set.begin(), set.end(), static_cast<int>(v)) != set.end();
      };
      if (!candidate(bm, tt.block_m) || !candidate(bn, tt.block_n)) {
        throw std::invalid_argument("+tile:" + arg + ": " + m.base + "'s autotuner tries BLOCK_M in " +
                                    int_set_text(tt.block_m) + " and BLOCK_N in " + int_set_text(tt.block_n));
      }
      TileSizes tile = m.tiles_by_head_dim.back().second;  // the backward's fixed tiles are kept
      tile.block_m = static_cast<int>(bm);
      tile.block_n = static_cast<int>(bn);
      m.tiles_by_head_dim = {{0, tile}};
      m.tutorial_tiles.named = true;
      canonical_suffix += "+tile:" + std::to_string(tile.block_m) + "x" + std::to_string(tile.block_n);
    } else if (colon != std::string::npos) {
      throw std::invalid_argument("variant '+" + variant + "' takes no parameters");
    } else if (variant == "block-quant" || variant == "hadamard") {
      if (!m.fp8.enabled) throw std::invalid_argument("+" + variant + " applies to the fp8 models only");
      if (variant == "block-quant" && m.structure == Structure::materialised)
        throw std::invalid_argument("+block-quant: " + m.base + " is per-tensor by definition (no tiles)");
      (variant == "block-quant" ? m.fp8.block : m.fp8.hadamard) = true;
      canonical_suffix += "+" + variant;
    } else if (variant == "visit-masked-tiles") {
      // Only Qiu & Yao's loop visits causal-masked tiles with a finite mask value; every other
      // model's kernel skips them (FA2, FA3, FA4, Triton, CK) or masks with -inf (PyTorch).
      if (m.base != "fa-bf16acc")
        throw std::invalid_argument(
            "+visit-masked-tiles applies to fa-bf16acc only (Qiu & Yao's causal loop, which "
            "masks with -finfo.max); " +
            m.base + "'s kernel skips tiles above the diagonal");
      m.visit_masked_tiles = true;
      canonical_suffix += "+visit-masked-tiles";
    } else if (variant == "cuda-expf") {
      // torch.exp on an fp32 CUDA tensor: only fa-bf16acc spells its exponentials as torch.exp.
      if (m.base != "fa-bf16acc")
        throw std::invalid_argument("+cuda-expf applies to fa-bf16acc only (its exp is torch.exp on an fp32 tensor); " +
                                    m.base + " computes its exponentials otherwise");
      m.cuda_expf = true;
      canonical_suffix += "+cuda-expf";
    } else if (variant == "delta-dpp") {
      if (!m.backward_modelled) throw std::invalid_argument("+delta-dpp: " + m.base + " has no backward (dP) modelled");
      m.delta_dpp = true;
      canonical_suffix += "+delta-dpp";
    } else if (variant == "unfused-exp") {
      if (m.scale != ScaleHandling::exponent_ffma)
        throw std::invalid_argument("+unfused-exp applies to models whose exponent is S*scale_log2 - max (FA2, FA3)");
      m.exponent_argument = ExponentArgument::fmul_fadd;
      canonical_suffix += "+unfused-exp";
    } else if (variant == "o-fp32") {
      m.o_fp32 = true;
      canonical_suffix += "+o-fp32";
    } else if (RoundingMode mode{}; variant.starts_with("o-") && parse_rounding_mode(variant.substr(2), mode)) {
      if (colon != std::string::npos) throw std::invalid_argument("+" + p + ": +o-MODE takes no parameters");
      m.o_round = mode;
      // +o-rne restates every recipe's own final cast: fa2-sm80 and fa2-sm80+o-rne are one kernel.
      if (mode != RoundingMode::rne) canonical_suffix += "+" + variant;
    } else {
      throw std::invalid_argument(
          "unknown variant '+" + variant +
          "' (dynmax, visit-masked-tiles, cuda-expf, unfused-exp, lazy-rescale, sw-exp2, splitkv, delta-dpp, "
          "o-fp32, o-sr, o-rtz, o-rup, o-rdn, o-rna, "
          "o-rto; fp8 models: "
          "block-quant, hadamard, promote; Triton tutorial: tile)");
    }
  }
  std::stable_sort(suffixes.begin(), suffixes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& suffix : suffixes) canonical += suffix.second;
  // +o-fp32 moves the O that delta reads, and +delta-dpp makes delta rowsum(dP∘P): where delta
  // already is rowsum(dP∘P) (the tensor-op softmax backward, or +delta-dpp beside +o-fp32) they
  // would be accepted and change nothing.
  const bool softmax_backward_delta = m.delta == DeltaFormula::softmax_backward;
  if (m.delta_dpp && softmax_backward_delta)
    throw std::invalid_argument("+delta-dpp: " + m.base +
                                " already computes delta as rowsum(dP∘P) (its softmax backward), so +delta-dpp would "
                                "change nothing");
  if (m.o_fp32 && (m.delta_dpp || softmax_backward_delta))
    throw std::invalid_argument(std::string("+o-fp32") + (m.delta_dpp ? " with +delta-dpp" : "") +
                                ": delta = rowsum(dP∘P) reads no O, so +o-fp32 would change nothing");
  if (m.o_round != RoundingMode::rne) {
    if (const std::string why = why_o_cast_rounds_nothing(m); !why.empty())
      throw std::invalid_argument("+o-" + std::string(to_string(m.o_round)) + ": " + why);
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
  out.push_back({"+visit-masked-tiles",
                 "fa-bf16acc: causal runs visit every KV tile as Qiu & Yao's loop does, tiles wholly above the "
                 "diagonal included, with the masked scores -finfo(bf16).max (not -inf): P-bar = 0 there, the "
                 "block sum is clamped to 1e-10 and joins l; with +dynmax (STABLE=1) such a tile's max is 0, so a "
                 "negative running max becomes 0 and O, l and LSE are rescaled by exp(m). Also sums the diagonal "
                 "tile over all its keys, masked ones as exact zeros. Off: those tiles are skipped",
                 "ucker/why-low-precision-training-fails attention.py @30ef0216: line 29 (max_neg_value = "
                 "-finfo(q.dtype).max), 68-78 (every key tile; causal masked_fill_), 80-89 (amax, STABLE=1), "
                 "93-109 (exp, clamp(min=EPSILON), l and O updates)"});
  out.push_back({"+cuda-expf",
                 "fa-bf16acc: torch.exp on fp32 as CUDA's expf without fast math computes it: k from "
                 "fma.rm(sat(fma(x, log2e/256, 0.5)), 252, 1.5*2^23+1), ex2.approx.ftz(fma(x, log2e_lo, fma(x, "
                 "log2e_hi, -k))) * 2^k, the ex2 from the model's SFU set (correct = UNMEASURED; a recipe's "
                 "\"sfu\": \"hw-sm90\" gives the H200's measured ex2). Default: exp correctly rounded (ASSUMED). "
                 "That PyTorch's exp kernel compiles to this sequence is ASSUMED (read from nvcc 13.0's PTX for expf, "
                 "sm_90, not from a PyTorch binary)",
                 "emu/sfu/cuda_expf.hpp; nvcc -arch=sm_90 -ptx of a kernel calling expf (CUDA 13.0)"});
  out.push_back({"+unfused-exp",
                 "FA2/FA3 models: the exponent argument S*scale_log2 - max_scaled as __fmul_rn then a separate "
                 "subtraction (two roundings, PyTorch's UNFUSE_FMA) instead of one FFMA",
                 ""});
  out.push_back(
      {"+lazy-rescale[:T|:off]",
       "online models: FlashAttention-4's lazy rescaling. The running max (and the rescale of O and l) "
       "moves only when a tile's max exceeds it by more than T in log2 units, (m_old - m_new)*scale_log2 "
       "< -T in fp32; until then P-bar may reach 2^T. T defaults to 8, FA4's value for 16-bit inputs "
       "(FA4 uses 0, no lazy rescaling, for fp8); :off turns it off (fa4-sm100 has it). EMULATION: not measured "
       "on hardware",
       "flash_attn/cute/softmax.py SoftmaxSm100.update_row_max; flash_attn/cute/flash_fwd_sm100.py "
       "rescale_threshold (Dao-AILab/flash-attention 0251105a)"});
  out.push_back(
      {"+sw-exp2[:EVERY,START|:off]",
       "online models: FlashAttention-4's software exp2 for the forward's P-bar: max(x,-127), "
       "add.rm with 1.5*2^23 (floor), the fraction f, Horner p(f) = 1 + f(0.6951461 + f(0.2275644 + "
       "f*0.0771191)) by fp32 FMAs, floor(x) added to p's exponent bits. Bare: every P-bar; "
       ":EVERY,START: FA4's split, in each 32-column fragment of the tile but the last and those before "
       "START, column pairs k with k % EVERY >= EVERY-4 (FA4 tunes e.g. 10,1 or 16,1 at head dim 128). "
       "The rescale factor and the backward keep the SFU ex2; :off puts every P-bar back on the SFU (fa4-sm100 "
       "has the split). Plain fp32 arithmetic: bit-exact without "
       "hardware; the split is read from the source, not measured",
       "flash_attn/cute/utils.py ex2_emulation_2, e2e_asm2, POLY_EX2[3]; flash_attn/cute/softmax.py "
       "apply_exp2_convert; flash_attn/cute/flash_fwd_sm100.py _TUNING_CONFIG (Dao-AILab/flash-attention "
       "0251105a)"});
  out.push_back(
      {"+splitkv[:P,...] (each P one of N, auto, sms=S, combine=logsum|inv-sum)",
       "FA2 models: the split-KV forward PyTorch's SDPA flash backend takes when batch*heads*ceil(seqlen_q/64) "
       "is below 0.8 * 2 * SMs (decoding): N splits of the KV blocks (block_n 256 for d <= 64, 128 for d <= 128, "
       "64 above), each normalised by its own l into an fp32 O_accum and LSE_accum (-inf when empty), then the "
       "combine kernel: lse_max, a butterfly sum of expf(lse_s - lse_max), lse = logf(sum) + lse_max, "
       "O = sum of fma(scale_s, O_accum_s) cast once. auto (default): num_splits_heuristic with S SMs (132 on "
       "sm90 models, 108 on sm80); combine=inv-sum: FA3's scale (hopper/flash_fwd_combine_kernel.h, no "
       "FA2 build has it) expf(lse_s - lse_max) * (1/sum) instead of expf(lse_s - lse), FA2's LSE kept. Combine's "
       "expf/logf: fast math on fa2-*, CUDA's expf and libdevice logf "
       "(read from nvcc 13.0 PTX) on pytorch-fa2-*. Measured: the H200's pytorch-fa2-sm90 captures of 2 to 8 "
       "splits replay bit for bit under logsum (3 of the 5 differ under inv-sum); more than 32 splits, a GQA "
       "decode and head dims over 128 UNMEASURED",
       "flash_api.cpp num_splits_heuristic, set_params_splitkv (pytorch/pytorch ef3d5c9e; Dao-AILab/"
       "flash-attention 0251105a lines 281-347); flash_fwd_kernel.h compute_attn_1rowblock_splitkv:535-581, "
       "combine_attn_seqk_parallel:1118-1299; flash_fwd_launch_template.h:136-191; utils.h Allreduce:112-131 "
       "(0251105a); docs/DESIGN.md §6"});
  out.push_back(
      {"+tile:BMxBN",
       "Triton tutorial models: the forward tile BLOCK_M x BLOCK_N the tutorial's autotuner picked (it times its "
       "configs at run time): BLOCK_M 64 or 128, BLOCK_N 32 or 64 (triton-tutorial-sm90: 32, 64 or 128, at most the "
       "head dim; under a causal mask at most BLOCK_M). Default: 128x64, the tile the H200 captures forced "
       "(triton-tutorial-sm90 at head dim 32: 128x32, the only BLOCK_N that compiles there). Other tiles are "
       "UNMEASURED",
       "triton-lang/triton python/tutorials/06-fused-attention.py @003da478: configs, keep, configs_tma, keep_tma, "
       "tl.static_assert(BLOCK_N <= HEAD_DIM)"});
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
