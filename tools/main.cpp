// tools/main.cpp: the `flashbits` command line; subcommands register themselves.
#include <iostream>
#include <stdexcept>

#include "tools/cli_common.hpp"
#include "traces/safetensors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"flashbits: bit-exact low-precision floating point and FlashAttention rounding-bias "
               "simulator"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  std::vector<std::pair<CLI::App*, fb::cli::Runner>> runners;
  for (const auto& sub : fb::cli::subcommand_registry()) {
    CLI::App* s = app.add_subcommand(sub.name, sub.description);
    runners.emplace_back(s, sub.setup(*s));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return fb::cli::kExitBadInput;
  }
  try {
    for (auto& [s, run] : runners) {
      if (s->parsed()) return run();
    }
  } catch (const fb::cli::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return fb::cli::kExitBadInput;
  } catch (const fb::TraceError& e) {
    // A bad trace file is bad input: one line naming file, tensor and field.
    std::cerr << "error: " << e.what() << "\n";
    return fb::cli::kExitBadInput;
  } catch (const std::invalid_argument& e) {
    // The library reports an impossible combination of user choices (a model variant
    // with a head dim it cannot take, say) this way; it is bad input, not a crash.
    std::cerr << "error: " << e.what() << "\n";
    return fb::cli::kExitBadInput;
  } catch (const std::exception& e) {
    // Anything else is a flashbits bug; say so in one line rather than abort.
    std::cerr << "internal error: " << e.what() << "\n";
    return 3;
  }
  return fb::cli::kExitBadInput;
}
