// python/src/bind_bias.cpp: bias_test(), `flashbits bias-test --json` as a function.
//
// Contract: the returned object (JSON, converted to Python dicts in the same key order) has
// exactly the fields and values `flashbits bias-test --json` prints for the same arguments
// (python/tests/test_cli_cross.py compares them field by field): both run
// studies/bias_run.hpp run_bias and render it with bias_report_json; only the checks of
// the arguments (named as Python names them) are here. `traces` is read by the CLI's --traces
// rule (traces/capture_import.hpp list_captures); the run stops between trials (or traces)
// on Ctrl-C.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "studies/bias_run.hpp"
#include "attention/problem_limits.hpp"
#include "attention/trace_inputs.hpp"
#include "capture_args.hpp"
#include "common.hpp"
#include "api/models.hpp"
#include "studies/scenarios.hpp"
#include "traces/capture_import.hpp"

namespace fb::py {
namespace {

using api::InputError;

// bias_test's keywords for bare captures among its traces (capture_options_from).
struct CaptureArgs {
  std::optional<std::string> source;
  std::optional<double> scale;
  std::optional<std::string> causal;
  std::string layout;
};

// The Python arguments, checked here with Python's names for them (the CLI's messages name
// its options); the run itself is attn::run_bias.
attn::BiasRun make_run(const std::string& model, const std::string& scenario, const std::vector<std::string>& traces,
                       const CaptureArgs& capture, const std::string& against, const std::string& recipe,
                       long long trials, long long seqlen, long long headdim, const std::string& dtype_name,
                       double alpha, double at_stake, std::uint64_t seed, CollectedNotes& notes) {
  if (model.empty() == traces.empty()) throw InputError("give exactly one of model=NAME or traces=[FILES]");
  if (!against.empty() && model.empty()) throw InputError("against: needs model");
  if (!recipe.empty() && model.empty()) throw InputError("recipe: needs model (the recipe changes that model)");
  api::alpha_or_throw(alpha, "alpha");
  api::at_stake_or_throw(at_stake, "at_stake");
  attn::BiasRun run;
  run.alpha = alpha;
  run.at_stake = at_stake;
  if (model.empty()) {
    // The CLI's --traces rule, in one place: folders of traces expand, a folder of .npy arrays
    // is one capture, and the label names what was given.
    CaptureListing listed = list_captures(std::vector<std::filesystem::path>(traces.begin(), traces.end()));
    run.traces = std::move(listed.captures);
    // What bare captures lack, as load_trace takes it; dtype is the format of their bit patterns.
    run.capture = capture_options_from(capture.source, std::nullopt, capture.scale, capture.causal,
                                       dtype_name.empty() ? std::nullopt : std::optional<std::string>(dtype_name),
                                       capture.layout, notes);
    run.capture.dtype_remedy = "name their format with dtype='bf16' (or fp16, e4m3, e5m2)";
    run.traces_label = std::move(listed.label);
    return run;
  }
  if (!attn::known_scenario(scenario))
    throw InputError("scenario " + scenario + ": unknown scenario (" + attn::scenario_list() + ")");
  // The CLI's limits (attention/problem_limits.hpp), named as Python names the arguments.
  if (const std::string refusal = attn::trials_refusal(trials, 1); !refusal.empty())
    throw InputError("trials=" + std::to_string(trials) + ": " + refusal);
  // The CLI checks --headdim as it parses it (tools/cli_common.hpp headdim_in): the same range.
  if (headdim > attn::kMaxHeadDim)
    throw InputError("headdim=" + std::to_string(headdim) + ": expected 1.." + std::to_string(attn::kMaxHeadDim) +
                     " (the engine models head dims up to " + std::to_string(attn::kMaxHeadDim) +
                     ", as FlashAttention)");
  if (const attn::SizeRefusal refusal = attn::problem_size_refusal(1, 1, seqlen, headdim))
    throw InputError("seqlen=" + std::to_string(seqlen) + " headdim=" + std::to_string(headdim) + ": " +
                     refusal.reason + (refusal.too_large ? "; give a smaller seqlen or headdim" : ""));
  // dtype="" is dtype=None: bf16 unless the model names its own; a dtype given that contradicts
  // the model's own format is refused (as bias-test --dtype and attention(dtype=) refuse it).
  const bool dtype_given = !dtype_name.empty();
  const Format dtype = dtype_given ? api::parse_format_or_throw(dtype_name, "dtype") : formats::bf16;
  run.model = api::resolve_model({model, dtype, "model", recipe, dtype_given}, {"model", "sfu", "dtype", "recipe"});
  if (!against.empty()) {
    try {
      run.against = api::parse_against_model(against, *run.model.recipe, dtype);
    } catch (const std::invalid_argument& e) {
      throw InputError("against " + against + ": " + e.what());
    }
  }
  run.scenario = scenario;
  run.trials = static_cast<int>(trials);  // within the limits checked above
  run.seqlen = static_cast<int>(seqlen);
  run.headdim = static_cast<int>(headdim);
  run.seed = seed;
  return run;
}

// Returns (the report, the capture reader's notes): the Python layer warns with the notes, which
// the CLI prints on stderr.
pyb::tuple bias_test(const std::string& model, const std::string& scenario, const std::vector<std::string>& traces,
                     const std::optional<std::string>& source, std::optional<double> scale,
                     const std::optional<std::string>& causal, const std::string& layout, const std::string& against,
                     const std::string& recipe, long long trials, long long seqlen, long long headdim,
                     const std::string& dtype, double alpha, double at_stake, std::uint64_t seed, bool by_max) {
  // Shared with the worker, which a Ctrl-C may leave running after this returns.
  auto notes = std::make_shared<CollectedNotes>();
  const CaptureArgs capture{source, scale, causal, layout};
  const nlohmann::ordered_json j = run_interruptible<nlohmann::ordered_json>([=](const Cancel& cancel) {
    const attn::BiasRun run = make_run(model, scenario, traces, capture, against, recipe, trials, seqlen, headdim,
                                       dtype, alpha, at_stake, seed, *notes);
    attn::BiasHooks hooks;
    hooks.before_item = [&cancel] { check_cancel(cancel); };
    return attn::bias_report_json(attn::run_bias(run, hooks), by_max);
  });
  pyb::list note_list;
  {
    std::lock_guard<std::mutex> hold(notes->lock);
    for (const std::string& line : notes->lines) note_list.append(line);
  }
  return pyb::make_tuple(to_python(j), note_list);
}

}  // namespace

void register_bias(pyb::module_& m) {
  using namespace pyb::literals;
  m.def("bias_test", &bias_test, "model"_a, "scenario"_a, "traces"_a, "source"_a, "scale"_a, "causal"_a, "layout"_a,
        "against"_a, "recipe"_a, "trials"_a, "seqlen"_a, "headdim"_a, "dtype"_a, "alpha"_a, "at_stake"_a, "seed"_a,
        "by_max"_a, InDefaultFloatingPoint());
}

}  // namespace fb::py
