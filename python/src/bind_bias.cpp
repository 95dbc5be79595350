// python/src/bind_bias.cpp: bias_test(), `flashbits bias-test --json` as a function.
//
// Contract: the returned object (JSON, converted to Python dicts in the same key order) has
// exactly the fields and values `flashbits bias-test --json` prints for the same arguments
// (python/tests/test_cli_cross.py compares them field by field): both run
// studies/bias_run.hpp run_bias and render it with bias_report_json; only the checks of
// the arguments (named as Python names them) are here. Differences: `traces` is a list of
// files (the CLI's --traces DIR is the sorted *.safetensors of DIR; flashbits.bias_test
// does that listing in Python), and the run stops between trials (or traces) on Ctrl-C.
#include <algorithm>
#include <cmath>

#include "studies/bias_run.hpp"
#include "attention/problem_limits.hpp"
#include "attention/trace_inputs.hpp"
#include "common.hpp"
#include "api/models.hpp"
#include "studies/scenarios.hpp"

namespace fb::py {
namespace {

using api::InputError;

// The Python arguments, checked here with Python's names for them (the CLI's messages name
// its options); the run itself is attn::run_bias.
attn::BiasRun make_run(const std::string& model, const std::string& scenario, const std::vector<std::string>& traces,
                       const std::string& traces_label, const std::string& against, const std::string& recipe,
                       long long trials, long long seqlen, long long headdim, const std::string& dtype_name,
                       double alpha, double at_stake, std::uint64_t seed) {
  if (model.empty() == traces.empty()) throw InputError("give exactly one of model=NAME or traces=[FILES]");
  if (!against.empty() && model.empty()) throw InputError("against: needs model");
  if (!recipe.empty() && model.empty()) throw InputError("recipe: needs model (the recipe changes that model)");
  api::alpha_or_throw(alpha, "alpha");
  api::at_stake_or_throw(at_stake, "at_stake");
  attn::BiasRun run;
  run.alpha = alpha;
  run.at_stake = at_stake;
  if (model.empty()) {
    run.traces.assign(traces.begin(), traces.end());
    // bias_test takes no dtype (the traces name their format): a capture of bit patterns is
    // imported first, where its format is named.
    run.capture.dtype_remedy =
        "import it first, naming their format: flashbits import FILE --dtype bf16|fp16|e4m3|e5m2 --source ... "
        "--out T.safetensors";
    run.traces_label = traces_label;
    return run;
  }
  if (!attn::known_scenario(scenario))
    throw InputError("scenario " + scenario + ": unknown scenario (" + attn::scenario_list() + ")");
  // The CLI's limits (attention/problem_limits.hpp), named as Python names the arguments.
  if (const std::string refusal = attn::trials_refusal(trials, 2); !refusal.empty())
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
  run.model = api::resolve_model({model, dtype, "model", recipe, dtype_given}, {"model", "sfu", "dtype"});
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

pyb::object bias_test(const std::string& model, const std::string& scenario, const std::vector<std::string>& traces,
                      const std::string& traces_label, const std::string& against, const std::string& recipe,
                      long long trials, long long seqlen, long long headdim, const std::string& dtype, double alpha,
                      double at_stake, std::uint64_t seed, bool by_max) {
  const nlohmann::ordered_json j = run_interruptible<nlohmann::ordered_json>([=](const Cancel& cancel) {
    const attn::BiasRun run = make_run(model, scenario, traces, traces_label, against, recipe, trials, seqlen, headdim,
                                       dtype, alpha, at_stake, seed);
    attn::BiasHooks hooks;
    hooks.before_item = [&cancel] { check_cancel(cancel); };
    return attn::bias_report_json(attn::run_bias(run, hooks), by_max);
  });
  return to_python(j);
}

}  // namespace

void register_bias(pyb::module_& m) {
  using namespace pyb::literals;
  m.def("bias_test", &bias_test, "model"_a, "scenario"_a, "traces"_a, "traces_label"_a, "against"_a, "recipe"_a,
        "trials"_a, "seqlen"_a, "headdim"_a, "dtype"_a, "alpha"_a, "at_stake"_a, "seed"_a, "by_max"_a);
}

}  // namespace fb::py
