// fuzz/fuzz_recipe.cpp: libFuzzer target for `bias-test --recipe FILE` recipe files
// (tools/recipe_file.hpp apply_recipe_file). The first input byte picks the model the
// recipe changes (online fp32-accumulator, bf16-buffer, materialised or fp8 recipes read
// different stages); the rest is the file. Properties checked on every input:
// - a bad file is refused only by fb::api::InputError whose one-line message starts with
//   the file name; any other exception, a crash, a sanitizer report or a leak is a finding;
// - an accepted recipe yields a model named "<model> with recipe ..." whose name is one
//   line, and the model it changed is left as it was.
#include <cstdint>
#include <string>

#include "attention/attention.hpp"
#include "attention/kernel_models.hpp"
#include "fuzz/fuzz_util.hpp"
#include "api/input_error.hpp"
#include "api/recipe_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fb::fuzz::TempFile file("recipe");
  static const char* const kModels[] = {"fa2-sm80",        "fa-bf16acc+dynmax", "standard-bf16", "fa3-fp8-sm90",
                                        "triton-tutorial", "golden-bf16-flash", "fa2-sm90",      "standard-fp32"};
  if (size == 0) return 0;
  const fb::attn::ModelHandle model = fb::attn::parse_kernel_model(kModels[data[0] % 8], fb::formats::bf16);
  const fb::attn::KernelModel before = *model.recipe;
  file.write(data + 1, size - 1);
  try {
    const fb::attn::ModelHandle changed = fb::api::apply_recipe_file(model, file.path());
    fb::fuzz::require(changed.name.rfind(model.name + " with recipe ", 0) == 0, "unexpected name: " + changed.name);
    fb::fuzz::require(changed.name.find('\n') == std::string::npos, "name spans lines: " + changed.name);
    fb::fuzz::require(changed.recipe != nullptr && changed.recipe != model.recipe, "recipe not copied");
  } catch (const fb::api::InputError& e) {
    fb::fuzz::check_message(e.what(), file.path());
  }
  fb::fuzz::require(model.recipe->p_cast == before.p_cast && model.recipe->o_buffer_format == before.o_buffer_format &&
                        model.recipe->sfu.ex2 == before.sfu.ex2,
                    "the recipe changed the model it was applied to");
  return 0;
}
