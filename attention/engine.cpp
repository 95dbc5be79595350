// attention/engine.cpp: run_attention(): prepares each head's operands, splits the work
// over threads and runs the recipe's passes (attention/engine_detail.hpp): the online
// forward (attention/online_forward.cpp) or the materialised one
// (attention/materialised_forward.cpp), then delta and the backward kernel
// (attention/backward.cpp).
//
// Contract (see attention.hpp): deterministic, independent of RunOptions::threads
// (work is split over (batch, head, row block) in the forward and (batch, head) in the
// backward; every reduction has a fixed order). The forward keeps O(N·d) memory: it
// walks one query row at a time over KV tiles. In the FA2 forward each row's numerics
// depend only on the KV tiling (block_n), never on block_m, because max, ℓ and acc_o
// are per-row registers; so block_m only matters for the backward.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "attention/problem_limits.hpp"
#include "formats/decimal_text.hpp"
#include "attention/arith.hpp"
#include "attention/attention.hpp"
#include "attention/engine_detail.hpp"
#include "attention/fp8_quant.hpp"
#include "attention/kernel_models.hpp"
#include "attention/parallel_for.hpp"
#include "attention/splitkv.hpp"

namespace fb::attn {

// The passes and their shared steps.
using namespace detail;

// RunOptions::keep_forward_state: what the backward reads of the forward (O, LSE, O before
// its cast, each row's statistics) and what the run was, so that a backward run from it can
// check that it is the same run.
struct ForwardState {
  std::string model;
  int batch = 0, heads = 0, kv_heads = 0, rows = 0, keys = 0, head_dim = 0;
  std::string dtype;
  double scale = 0.0;
  bool causal = false, top_left = false, exact_arithmetic = false;
  std::uint64_t seed = 0;
  TileSizes tiles;
  std::uint64_t inputs_hash = 0;
  Tensor4 o, lse, o_pre;
  std::vector<std::vector<RowStats>> stats;  // [b * heads + h][row]
};

namespace {

// ---- orchestration ----------------------------------------------------------------------
// Grouped-query attention's dK and dV as FA2's mha_bwd forms them: each q head's gradient is
// written in the output format (dk_expanded, a tensor of q's dtype), then the group's heads
// are summed by a PyTorch reduction (at::sum over the group dim: fp32 accumulation, in head
// order, rounded once to the output format). The order of that fp32 sum is PyTorch's choice
// and is ASSUMED sequential here (not measured on hardware); it matters only when a group's
// partial sums are not exact in fp32, which for bf16/fp16 terms needs exponents over ~13
// binades apart.
template <class A>
Tensor4 sum_kv_groups(const A& ar, const Format& output, const Tensor4& per_q_head, int kv_heads) {
  const int group = per_q_head.heads / kv_heads;
  Tensor4 out(per_q_head.batch, kv_heads, per_q_head.rows, per_q_head.cols);
  for (int b = 0; b < out.batch; ++b)
    for (int hk = 0; hk < kv_heads; ++hk)
      for (int r = 0; r < out.rows; ++r)
        for (int c = 0; c < out.cols; ++c) {
          if constexpr (A::exact) {
            double sum = 0.0;
            for (int h = hk * group; h < (hk + 1) * group; ++h) sum += per_q_head.at(b, h, r, c);
            out.at(b, hk, r, c) = sum;
          } else {
            float sum = 0.0f;  // IEEE binary32 additions, round to nearest even
            for (int h = hk * group; h < (hk + 1) * group; ++h) sum += static_cast<float>(per_q_head.at(b, h, r, c));
            out.at(b, hk, r, c) = ar.op(output, sum);
          }
        }
  return out;
}

// The bit patterns of q, k and v and their shapes, hashed (splitmix64 steps): a kept forward
// state must be the state of these inputs.
std::uint64_t inputs_hash(const AttentionInputs& in) {
  std::uint64_t h = 0;
  const auto mix = [&h](std::uint64_t x) {
    h += x + 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
  };
  for (const Tensor4* t : {&in.q, &in.k, &in.v}) {
    for (int extent : {t->batch, t->heads, t->rows, t->cols}) mix(static_cast<std::uint64_t>(extent));
    for (double value : t->data) mix(std::bit_cast<std::uint64_t>(value));
  }
  return h;
}

// RunOptions::forward_state: the kept state must be this run's forward; names what differs.
void check_kept_state(const ForwardState& kept, const std::string& model, const AttentionInputs& in,
                      const RunOptions& opt, const Geometry& g) {
  const auto refuse = [](const std::string& what) {
    throw std::invalid_argument("forward_state: " + what + " (a kept forward runs only its own backward)");
  };
  if (!in.d_o) refuse("no dO: a kept forward state is for a backward run");
  if (!opt.only_rows.empty() || opt.tracer) refuse("not with only_rows or a tracer");
  if (kept.model != model) refuse("kept by model " + kept.model + ", not " + model);
  if (kept.batch != in.q.batch || kept.heads != in.q.heads || kept.kv_heads != in.k.heads || kept.rows != in.q.rows ||
      kept.keys != in.k.rows || kept.head_dim != in.q.cols)
    refuse("kept for other shapes");
  if (kept.dtype != in.dtype.name) refuse("kept for " + kept.dtype + " inputs, not " + in.dtype.name);
  if (kept.scale != g.scale) refuse("kept for another softmax scale");
  if (kept.causal != g.causal || kept.top_left != g.top_left) refuse("kept for another mask");
  if (kept.seed != opt.seed) refuse("kept for another seed");
  if (kept.exact_arithmetic != opt.exact_arithmetic) refuse("kept for another arithmetic");
  if (kept.tiles.block_m != g.tiles.block_m || kept.tiles.block_n != g.tiles.block_n ||
      kept.tiles.bwd_block_m != g.tiles.bwd_block_m || kept.tiles.bwd_block_n != g.tiles.bwd_block_n)
    refuse("kept for other tiles");
  if (kept.inputs_hash != inputs_hash(in)) refuse("kept for other q, k or v values");
}

// RunOptions::cancel: stop between rows.
void check_cancel(const RunOptions& opt) {
  if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw Cancelled();
}

// The tiles of a run: the recipe's for the shape, RunOptions' block sizes where given.
TileSizes run_tiles(const KernelModel& km, const AttentionInputs& in, const RunOptions& opt) {
  if (const std::string refusal = tile_size_refusal(opt.block_m, opt.block_n); !refusal.empty())
    throw std::invalid_argument("attention: " + refusal);
  TileSizes t = km.tiles_for(in.q.cols, in.q.rows, in.causal, in.k.rows);
  if (opt.block_m > 0) t.block_m = t.bwd_block_m = opt.block_m;
  if (opt.block_n > 0) t.block_n = t.bwd_block_n = opt.block_n;
  t.block_n = std::max(1, t.block_n);
  t.block_m = std::max(1, t.block_m);
  t.bwd_block_m = std::max(1, t.bwd_block_m);
  t.bwd_block_n = std::max(1, t.bwd_block_n);
  return t;
}

// Why a tracer is refused for this run's splits (empty: none): run_attention's refusal and
// untraced_tiles_reason's, in one place.
std::string split_tracing_refusal(const KernelModel& km, const AttentionInputs& in) {
  if (km.splitkv.enabled) {
    const int splits = fa2_splitkv_num_splits(km, in.q.batch, in.q.heads, in.k.heads, in.q.rows, in.k.rows, in.q.cols);
    if (splits > 1)
      return "tracing a row of a split-KV run (+splitkv, " + std::to_string(splits) + " splits) is not modelled";
  }
  if (km.flex_decode_sms > 0 && in.causal) return "tracing a row of a split flex decode is not modelled";
  return "";
}

template <class A, class E>
AttentionOutputs run_typed(const std::string& model_name, const KernelModel& km, const A& ar, const AttentionInputs& in,
                           const RunOptions& opt) {
  check_attention_inputs(in);
  // N query rows, Nk keys (check_attention_inputs: any Nk >= 1).
  const int B = in.q.batch, H = in.q.heads, N = in.q.rows, D = in.q.cols, Nk = in.k.rows;
  // Grouped-query attention: q head h reads k/v head h / group, as FA2 (h_h_k_ratio) does.
  const int Hk = in.k.heads, group = Hk > 0 ? H / Hk : 1;
  Geometry g;
  g.nq = N;
  g.nk = Nk;
  g.d = D;
  g.scale = applied_softmax_scale(in);
  if (const std::string refusal = softmax_scale_refusal(model_name, km, g.scale); !refusal.empty())
    throw std::invalid_argument("attention: " + refusal);
  g.causal = in.causal;
  g.top_left = in.causal_alignment == AttentionInputs::CausalAlignment::top_left;
  g.tiles = run_tiles(km, in, opt);
  g.software_exp2 = km.software_exp2_split(D, in.causal, N, group);
  if (g.software_exp2.enabled && g.software_exp2.every > 0 && g.tiles.block_n % 32 != 0) {
    throw std::invalid_argument("attention: +sw-exp2:EVERY,START splits KV tiles in 32-column fragments; block_n " +
                                std::to_string(g.tiles.block_n) + " is not a multiple of 32");
  }
  if (km.splitkv.enabled) {
    // +splitkv (attention/splitkv.hpp): the split count mha_fwd picks for this shape; with more
    // than one split the split kernel's tiles, 64 x kBlockN (flash_fwd_launch_template.h:181-191).
    g.num_splits = fa2_splitkv_num_splits(km, B, H, Hk, N, Nk, D);
    if (g.num_splits > 1) {
      if (opt.block_n <= 0) g.tiles.block_n = fa2_splitkv_block_n(D);
      if (opt.block_m <= 0) g.tiles.block_m = 64;
      if (opt.tracer) throw std::invalid_argument("attention: " + split_tracing_refusal(km, in));
    }
  }
  if ((km.scale == ScaleHandling::sqrt_prescale_qk || km.row_sum == RowSumOrder::warp_softmax) &&
      km.structure != Structure::materialised)
    throw std::invalid_argument("attention: " + model_name + ": the math backend's steps are materialised only");
  if (km.flex_decode_sms > 0 && in.causal) {
    g.flex_splits = flex_decode_split_count(km, B * Hk);
    if (opt.tracer) throw std::invalid_argument("attention: " + split_tracing_refusal(km, in));
  }
  refuse_unmodelled_shape(model_name, km, run_shape(in));
  if (quad_row_sum(km) && g.tiles.block_n % 8 != 0 && g.tiles.block_n < Nk) {
    throw std::invalid_argument("attention: FA2 tiles must be a multiple of 8 keys");
  }

  // RunOptions::forward_state: the backward alone, from a kept forward of this very run.
  const ForwardState* kept = opt.forward_state.get();
  if (kept) check_kept_state(*kept, model_name, in, opt, g);
  if (opt.keep_forward_state && !opt.only_rows.empty())
    throw std::invalid_argument("keep_forward_state: not with only_rows (the state would lack the other rows)");

  AttentionOutputs out;
  // A kept forward's O and LSE are this run's; its O before the cast and its row statistics
  // are read where they are kept.
  out.o = kept ? kept->o : Tensor4(B, H, N, D);
  out.lse = kept ? kept->lse : Tensor4(B, H, N, 1);
  Tensor4 o_pre = kept ? Tensor4() : Tensor4(B, H, N, D);
  const bool backward = in.d_o.has_value();
  std::vector<std::vector<RowStats>> stats;
  if (!kept) stats.assign(static_cast<std::size_t>(B) * H, std::vector<RowStats>(static_cast<std::size_t>(N)));

  // fp8 models: incoherent processing and quantisation of Q, K, V (attention/fp8_quant.hpp),
  // with the run's tiles as the +block-quant blocks.
  std::optional<Fp8Inputs> fp8;
  if (km.fp8.enabled) fp8 = quantise_fp8_inputs(km.fp8, in, g.tiles.block_m, g.tiles.block_n, opt.seed, A::exact);

  // Prepare operands per head.
  std::vector<HeadData<E>> heads(static_cast<std::size_t>(B) * H);
  parallel_for(B * H, opt.threads, [&](int bh) {
    const int b = bh / H, h = bh % H;
    HeadData<E>& hd = heads[static_cast<std::size_t>(bh)];
    hd.batch_head = bh;
    hd.nq = N;
    hd.nk = Nk;
    hd.d = D;
    copy_rows(fp8 ? fp8->q : in.q, b, h, hd.q, backward ? &hd.qt : nullptr);
    copy_rows(fp8 ? fp8->k : in.k, b, h / group, hd.k, &hd.kt);
    copy_rows(fp8 ? fp8->v : in.v, b, h / group, hd.v, &hd.vt);
    if (fp8) {
      // The descales of this q head and of the k/v head it reads (index b * heads + head).
      auto slice = [](const std::vector<double>& all, int slice_index, int blocks) {
        return std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(slice_index) * blocks,
                                   all.begin() + static_cast<std::ptrdiff_t>(slice_index + 1) * blocks);
      };
      const int kv_slice = b * Hk + h / group;
      hd.q_descale = slice(fp8->q_descale, bh, fp8->q_blocks);
      hd.k_descale = slice(fp8->k_descale, kv_slice, fp8->kv_blocks);
      hd.v_descale = slice(fp8->v_descale, kv_slice, fp8->kv_blocks);
      hd.q_block_rows = fp8->q_block_rows;
      hd.kv_block_rows = fp8->kv_block_rows;
    }
    if (km.scale == ScaleHandling::sqrt_prescale_qk) {
      // The math backend: query_acc * scaling_factor and key_acc.transpose(-2, -1) *
      // scaling_factor, fp32 tensor ops; every later step reads q' and k'.
      const double factor = scale_constants(km, ar, g.scale).qk_prescale;
      for (std::vector<E>* m : {&hd.q, &hd.qt, &hd.k, &hd.kt})
        for (E& x : *m) x = static_cast<E>(ar.f32(static_cast<double>(x) * factor));
    }
    if (backward) copy_rows(*in.d_o, b, h, hd.d_o, &hd.d_ot);
    if (backward && km.backward == BackwardKernel::triton_prescaled_k) {
      // _attention.backward: arg_k = k * (sm_scale * RCP_LN2), a tensor op in the input format.
      const double factor = triton_k_prescale<A>(km, g.scale);
      hd.kp.resize(hd.k.size());
      hd.kpt.resize(hd.k.size());
      for (int r = 0; r < Nk; ++r)
        for (int c = 0; c < D; ++c) {
          const std::size_t i = static_cast<std::size_t>(r) * D + c;
          hd.kp[i] = static_cast<E>(ar.op(km.input, static_cast<double>(hd.k[i]) * factor));
          hd.kpt[static_cast<std::size_t>(c) * Nk + r] = hd.kp[i];
        }
    }
    hd.prepare_panels(km);
  });

  // Traced rows, by (b, h, r).
  std::vector<int> trace_slot(static_cast<std::size_t>(B) * H * N, -1);
  if (opt.tracer) {
    opt.tracer->traces.assign(opt.tracer->rows.size(), RowTrace{});
    for (std::size_t i = 0; i < opt.tracer->rows.size(); ++i) {
      const auto& [b, h, r] = opt.tracer->rows[i];
      if (b < 0 || b >= B || h < 0 || h >= H || r < 0 || r >= N) {
        throw std::invalid_argument("tracer: row (" + std::to_string(b) + "," + std::to_string(h) + "," +
                                    std::to_string(r) + ") is outside the problem");
      }
      RowTrace& t = opt.tracer->traces[i];
      t.batch = b;
      t.head = h;
      t.row = r;
      t.plot_feature = std::clamp(opt.tracer->plot_feature, 0, std::max(0, D - 1));
      trace_slot[(static_cast<std::size_t>(b) * H + h) * N + r] = static_cast<int>(i);
    }
  }

  // RunOptions::only_rows: the rows to compute (traced rows too); empty = all.
  std::vector<char> selected;
  if (!opt.only_rows.empty()) {
    selected.assign(static_cast<std::size_t>(B) * H * N, 0);
    for (const auto& [b, h, r] : opt.only_rows) {
      if (b < 0 || b >= B || h < 0 || h >= H || r < 0 || r >= N)
        throw std::invalid_argument("only_rows: row (" + std::to_string(b) + "," + std::to_string(h) + "," +
                                    std::to_string(r) + ") is outside the problem");
      selected[(static_cast<std::size_t>(b) * H + h) * N + r] = 1;
    }
    for (std::size_t i = 0; i < trace_slot.size(); ++i)
      if (trace_slot[i] >= 0) selected[i] = 1;
  }
  auto row_selected = [&](int b, int h, int r) {
    return selected.empty() || selected[(static_cast<std::size_t>(b) * H + h) * N + r] != 0;
  };

  // Forward: (batch, head, row block) work items; none when a kept forward is given.
  const int rows_per_item = 64;
  const int row_blocks = (N + rows_per_item - 1) / rows_per_item;
  parallel_for(kept ? 0 : B * H * row_blocks, opt.threads, [&](int item) {
    const int bh = item / row_blocks, rbk = item % row_blocks;
    const int b = bh / H, h = bh % H;
    const HeadData<E>& hd = heads[static_cast<std::size_t>(bh)];
    Scratch<E> sc;
    sc.size(g.tiles.block_n, D);
    std::vector<double> s_full;
    std::vector<E> pc_full;
    // Untraced online rows are run together (online_forward_rows), after the others.
    std::vector<OnlineRowOutput> untraced;
    for (int r = rbk * rows_per_item; r < std::min(N, (rbk + 1) * rows_per_item); ++r) {
      if (!row_selected(b, h, r)) continue;
      const OnlineRowOutput row_out{r, out.o.row(b, h, r), o_pre.row(b, h, r),
                                    &stats[static_cast<std::size_t>(bh)][static_cast<std::size_t>(r)],
                                    out.o.index(b, h, r, 0)};
      const int slot = trace_slot[(static_cast<std::size_t>(b) * H + h) * N + r];
      if (km.structure != Structure::materialised && slot < 0) {
        untraced.push_back(row_out);
        continue;
      }
      check_cancel(opt);
      if (km.structure == Structure::materialised) {
        materialised_forward_row(km, ar, hd, g, r, row_out.o, row_out.o_pre, *row_out.stats, s_full, pc_full,
                                 row_out.o_position, opt);
      } else {
        online_forward_row(km, ar, hd, g, row_out, sc, opt, &opt.tracer->traces[static_cast<std::size_t>(slot)]);
      }
      out.lse.at(b, h, r, 0) = row_out.stats->lse;
      if (opt.progress) opt.progress->fetch_add(1, std::memory_order_relaxed);
    }
    check_cancel(opt);
    online_forward_rows(km, ar, hd, g, untraced.data(), static_cast<int>(untraced.size()), sc, opt);
    for (const OnlineRowOutput& row_out : untraced) {
      out.lse.at(b, h, row_out.row, 0) = row_out.stats->lse;
      if (opt.progress) opt.progress->fetch_add(1, std::memory_order_relaxed);
    }
  });
  if (kept) {
    // The kept forward's rows are done (RunOptions::progress counts them), and it is the state.
    if (opt.progress) opt.progress->fetch_add(static_cast<std::uint64_t>(B) * H * N, std::memory_order_relaxed);
    if (opt.keep_forward_state) out.forward_state = opt.forward_state;
  } else if (opt.keep_forward_state) {
    auto state = std::make_shared<ForwardState>();
    state->model = model_name;
    state->batch = B;
    state->heads = H;
    state->kv_heads = Hk;
    state->rows = N;
    state->keys = Nk;
    state->head_dim = D;
    state->dtype = in.dtype.name;
    state->scale = g.scale;
    state->causal = g.causal;
    state->top_left = g.top_left;
    state->exact_arithmetic = opt.exact_arithmetic;
    state->seed = opt.seed;
    state->tiles = g.tiles;
    state->inputs_hash = inputs_hash(in);
    state->o = out.o;
    state->lse = out.lse;
    state->o_pre = std::move(o_pre);
    state->stats = std::move(stats);
    out.forward_state = state;
    kept = state.get();
  }
  // What the backward reads of the forward: this run's, or the kept run's.
  const Tensor4& forward_o_pre = kept ? kept->o_pre : o_pre;
  const std::vector<std::vector<RowStats>>& forward_stats = kept ? kept->stats : stats;
  if (km.lse == LseFormula::log2_units || km.lse == LseFormula::log2_libdevice) {
    out.lse_log2 = Tensor4(B, H, N, 1);
    for (int bh = 0; bh < B * H; ++bh)
      for (int r = 0; r < N; ++r) {
        // A row that saw nothing: the kernel's M (-inf), not the backward's guard.
        const RowStats& st = forward_stats[static_cast<std::size_t>(bh)][static_cast<std::size_t>(r)];
        out.lse_log2->at(bh / H, bh % H, r, 0) = st.lse_kernel == kInf ? empty_row_lse(km.lse) : st.lse_kernel;
      }
  }
  if (!backward) return out;

  if (!selected.empty()) {
    // A row subset: delta of the listed rows (each from its own row's forward); no dQ, dK,
    // dV, which need every row.
    out.delta = Tensor4(B, H, N, 1);
    parallel_for(B * H, opt.threads, [&](int bh) {
      const int b = bh / H, h = bh % H;
      const HeadData<E>& hd = heads[static_cast<std::size_t>(bh)];
      const auto& st = forward_stats[static_cast<std::size_t>(bh)];
      std::vector<double> scratch;
      const bool dpp = km.delta_dpp || km.delta == DeltaFormula::softmax_backward;
      for (int r = 0; r < N; ++r) {
        if (!row_selected(b, h, r)) continue;
        check_cancel(opt);
        const double* o_used = km.o_fp32 ? forward_o_pre.row(b, h, r) : out.o.row(b, h, r);
        out.delta->at(b, h, r, 0) =
            dpp ? delta_from_dpp(km, ar, hd, g, r, st[r], scratch) : delta_from_o(km, ar, hd.do_row(r), o_used, D);
        if (opt.progress) opt.progress->fetch_add(1, std::memory_order_relaxed);
      }
    });
    return out;
  }

  // Backward: (batch, head) work items.
  out.delta = Tensor4(B, H, N, 1);
  out.dq = Tensor4(B, H, N, D);
  // dK and dV per q head, Nk rows; with grouped-query attention they are summed over each
  // group after the backward (sum_kv_groups).
  out.dk = Tensor4(B, H, Nk, D);
  out.dv = Tensor4(B, H, Nk, D);
  if (km.backward == BackwardKernel::fa2_seqk_parallel) out.dq_pre_cast = Tensor4(B, H, N, D);
  parallel_for(B * H, opt.threads, [&](int bh) {
    const int b = bh / H, h = bh % H;
    const HeadData<E>& hd = heads[static_cast<std::size_t>(bh)];
    const auto& st = forward_stats[static_cast<std::size_t>(bh)];
    std::vector<double> delta(static_cast<std::size_t>(N)), scratch;
    for (int r = 0; r < N; ++r) {
      check_cancel(opt);
      const bool dpp = km.delta_dpp || km.delta == DeltaFormula::softmax_backward;
      const double* o_used = km.o_fp32 ? forward_o_pre.row(b, h, r) : out.o.row(b, h, r);
      delta[r] = dpp ? delta_from_dpp(km, ar, hd, g, r, st[r], scratch) : delta_from_o(km, ar, hd.do_row(r), o_used, D);
      out.delta->at(b, h, r, 0) = delta[r];
      const int slot = trace_slot[(static_cast<std::size_t>(b) * H + h) * N + r];
      if (slot >= 0) {
        // Decomposition of delta's error against Σ dO·O_pre (the kernel's own unrounded O).
        long double with_pre = 0, with_cast = 0;
        for (int c = 0; c < D; ++c) {
          with_pre += static_cast<long double>(hd.do_row(r)[c]) * forward_o_pre.row(b, h, r)[c];
          with_cast += static_cast<long double>(hd.do_row(r)[c]) * out.o.row(b, h, r)[c];
        }
        RowTrace& t = opt.tracer->traces[static_cast<std::size_t>(slot)];
        t.delta_error_from_o = static_cast<double>(with_cast - with_pre);
        t.delta_error_from_reduction = static_cast<double>(static_cast<long double>(delta[r]) - with_cast);
      }
    }
    check_cancel(opt);
    // The head's backward rows count as done when its gradients are (a progress bar that
    // counted them after delta sat at 100% through the whole backward kernel).
    const auto count_backward_rows = [&] {
      if (opt.progress) opt.progress->fetch_add(static_cast<std::uint64_t>(N), std::memory_order_relaxed);
    };
    if (!km.backward_modelled) return count_backward_rows();  // forward-only recipe: delta only
    double* dq = out.dq->row(b, h, 0);
    double* dk = out.dk->row(b, h, 0);
    double* dv = out.dv->row(b, h, 0);
    switch (km.backward) {
      case BackwardKernel::fa2_seqk_parallel:
        mma_backward_head(km, ar, hd, g, st, delta, dq, dk, dv, out.dq_pre_cast->row(b, h, 0));
        break;
      case BackwardKernel::triton_prescaled_k:
        triton_backward_head(km, ar, hd, g, st, delta, dq, dk, dv);
        break;
      case BackwardKernel::flex_blocks:
        flex_backward_head(km, ar, hd, g, st, delta, dq, dk, dv);
        break;
      case BackwardKernel::tensor_ops:
        tensorop_backward_head(km, ar, hd, g, st, delta, dq, dk, dv);
        break;
    }
    count_backward_rows();
  });
  if (!km.backward_modelled) {
    out.dq.reset();
    out.dk.reset();
    out.dv.reset();
    out.dq_pre_cast.reset();
  }
  if (group > 1 && out.dk) {
    out.dk = sum_kv_groups(ar, km.output, *out.dk, Hk);
    out.dv = sum_kv_groups(ar, km.output, *out.dv, Hk);
  }
  return out;
}

}  // namespace

double applied_softmax_scale(const AttentionInputs& in) {
  const int d = in.q.cols;
  return in.softmax_scale > 0 ? in.softmax_scale : (d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0);
}

std::string softmax_scale_refusal(const std::string& model_name, const KernelModel& km, double scale) {
  if (!km.score_format || km.score_format->exp_bits < formats::fp32.exp_bits) return "";
  const double largest = to_double(formats::fp32, formats::fp32.max_finite_pattern());
  if (scale > largest)
    return "softmax scale " + shortest_decimal(scale) + " is above fp32's largest value: " + model_name +
           " computes scores in " + km.score_format->name +
           " and takes the scale as a float, where it would be inf and every output NaN";
  // Half the smallest subnormal, 2^-150, and anything below it round to 0 in fp32 (the tie
  // at 2^-150 to even, 0).
  if (scale <= std::ldexp(1.0, -150))
    return "softmax scale " + shortest_decimal(scale) + " is below fp32's smallest value: " + model_name +
           " computes scores in " + km.score_format->name +
           " and takes the scale as a float, where it would be 0 and every row a uniform average of its values";
  return "";
}

void check_attention_inputs(const AttentionInputs& in) {
  const Tensor4 &q = in.q, &k = in.k, &v = in.v;
  if (q.batch != k.batch || k.batch != v.batch || q.cols != k.cols || v.cols != q.cols)
    throw std::invalid_argument("attention: q, k, v must have the same batch and head dim");
  // The key length may differ from the query length (decoding, cross-attention): k and v share it.
  if (k.rows != v.rows)
    throw std::invalid_argument("attention: k and v must have the same length (" + std::to_string(k.rows) + " and " +
                                std::to_string(v.rows) + ")");
  if (k.heads != v.heads || (k.heads == 0 ? q.heads != 0 : q.heads % k.heads != 0))
    throw std::invalid_argument("attention: k and v must have the same heads, dividing q's (grouped-query attention)");
  if (in.d_o &&
      (in.d_o->batch != q.batch || in.d_o->heads != q.heads || in.d_o->rows != q.rows || in.d_o->cols != q.cols))
    throw std::invalid_argument("attention: dO must have the shape of O");
  if (q.cols > kMaxHeadDim)
    throw std::invalid_argument("attention: head dim above " + std::to_string(kMaxHeadDim) + " is not modelled");
}

std::optional<double> kernel_delta(const ModelHandle& model, const double* d_o, const double* o, int d) {
  const KernelModel& km = *model.recipe;
  if (km.structure == Structure::correctly_rounded) return correctly_rounded_delta(km, d_o, o, d, 0, 0);
  if (km.delta == DeltaFormula::softmax_backward) return std::nullopt;  // needs dP and P, not O
  const detail::HardwareArith ar{&km};
  return delta_from_o(km, ar, d_o, o, d);
}

std::optional<AttentionInputs> inputs_as_quantised(const KernelModel& km, const AttentionInputs& in,
                                                   const RunOptions& opt) {
  if (!km.fp8.enabled || km.structure == Structure::correctly_rounded) return std::nullopt;
  check_attention_inputs(in);
  const TileSizes tiles = run_tiles(km, in, opt);
  const Fp8Inputs fp8 = quantise_fp8_inputs(km.fp8, in, tiles.block_m, tiles.block_n, opt.seed, false);
  // value · descale of its (batch, head, block) slice: an e4m3 value (4 significant bits)
  // times an fp32 descale (24) is exact in double.
  const auto dequantise = [](const Tensor4& x8, const std::vector<double>& descale, int blocks, int block_rows,
                             Tensor4& out) {
    for (int b = 0; b < x8.batch; ++b)
      for (int h = 0; h < x8.heads; ++h)
        for (int r = 0; r < x8.rows; ++r) {
          const int block = std::min(blocks - 1, r / std::max(1, block_rows));
          const double scale = descale[static_cast<std::size_t>((b * x8.heads + h) * blocks + block)];
          for (int c = 0; c < x8.cols; ++c) out.at(b, h, r, c) = x8.at(b, h, r, c) * scale;
        }
  };
  AttentionInputs seen = in;
  dequantise(fp8.q, fp8.q_descale, fp8.q_blocks, fp8.q_block_rows, seen.q);
  dequantise(fp8.k, fp8.k_descale, fp8.kv_blocks, fp8.kv_block_rows, seen.k);
  dequantise(fp8.v, fp8.v_descale, fp8.kv_blocks, fp8.kv_block_rows, seen.v);
  return seen;
}

std::string untraced_tiles_reason(const ModelHandle& model, const AttentionInputs& in) {
  if (!model.recipe) return "no kernel model";
  const KernelModel& km = *model.recipe;
  if (km.structure == Structure::correctly_rounded)
    return model.name + " is the correctly rounded reference: it has no kernel arithmetic to trace";
  if (km.structure == Structure::materialised)
    return model.name + " is materialised (no KV tiles, no running max): a traced row records no per-key events";
  return split_tracing_refusal(km, in);
}

AttentionOutputs run_attention(const ModelHandle& model, const AttentionInputs& in, const RunOptions& opt) {
  if (!model.recipe) throw std::invalid_argument("run_attention: empty kernel model");
  const KernelModel& km = *model.recipe;
  if (!reads_inputs_of(km, in.dtype)) {
    throw std::invalid_argument("kernel model '" + model.name + "' reads " + km.input.name + " inputs, got " +
                                in.dtype.name + " (parse the model with the inputs' dtype)");
  }
  if (km.structure == Structure::correctly_rounded) {
    // It keeps no forward state (it has no forward of its own), so any state is another model's.
    if (opt.forward_state)
      throw std::invalid_argument("forward_state: kept by model " + opt.forward_state->model + ", not " + model.name +
                                  " (a kept forward runs only its own backward)");
    if (opt.exact_arithmetic) return exact_attention(in);  // its one rounding per output is the identity
    check_attention_inputs(in);
    return round_exact_outputs(km, in, exact_attention(in), opt);
  }
  if (opt.exact_arithmetic) {
    if (opt.tracer) throw std::invalid_argument("run_attention: the tracer needs the hardware arithmetic");
    return run_typed<ExactArith, double>(model.name, km, ExactArith{&km}, in, opt);
  }
  const bool fp64_model = km.score_dot.kind == DotKind::fp64_fma_chain || !km.p_cast;
  if (fp64_model) return run_typed<HardwareArith, double>(model.name, km, HardwareArith{&km}, in, opt);
  return run_typed<HardwareArith, float>(model.name, km, HardwareArith{&km}, in, opt);
}

}  // namespace fb::attn
