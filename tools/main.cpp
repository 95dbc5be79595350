// tools/main.cpp: the `flashbits` command line; subcommands register themselves.
//
// Exit codes (tools/cli_common.hpp): 0 ok, 1 a check failed, 2 bad input -- a usage error
// (one `error: ...` line naming the option, with "did you mean" for a misspelt subcommand
// or option), a bad file, or output that could not be written (stdout is flushed and
// checked before every exit: `flashbits formats > /dev/full` is exit 2) -- and 3 an
// internal error (a flashbits bug).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <iostream>
#include <new>
#include <stdexcept>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tools/cli_common.hpp"
#include "traces/safetensors.hpp"

#include "flashbits_version.hpp"  // FLASHBITS_VERSION, generated at each build (tools/CMakeLists.txt)

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'X'?)" for the nearest candidate within a few edits, else "".
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::vector<std::string> long_options(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
  return names;
}

std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// CLI11's wording of common mistakes in the project's: an option given twice ("--model: At
// Most 1 required but received 2"), surplus words after the subcommand's own ("The following
// arguments were not expected: word extra", listed last first) and a number beyond the
// option's type ("Could not convert: --jobs = 18446744073709551617").
std::string plain_parse_message(const std::string& message) {
  const std::string twice = ": At Most 1 required but received ";
  if (const auto at = message.find(twice); at != std::string::npos)
    return message.substr(0, at) + ": given " + message.substr(at + twice.size()) + " times (give it once)";
  // "Could not convert: --jobs = 18446744073709551617": a number beyond the option's type.
  const std::string convert = "Could not convert: ";
  if (message.rfind(convert, 0) == 0) {
    const std::string rest = message.substr(convert.size());
    if (const auto eq = rest.find(" = "); eq != std::string::npos)
      return rest.substr(0, eq) + ": '" + rest.substr(eq + 3) + "' is outside the range the option takes";
  }
  // "--jobs: 1 required INT:1..1024 missing": an option given no value (`--jobs=`, or last on
  // the line), in words that read like a count of requirements.
  if (const auto colon = message.find(": "); colon != std::string::npos && message.ends_with(" missing")) {
    const std::string rest = message.substr(colon + 2, message.size() - colon - 2 - std::string(" missing").size());
    if (const auto required = rest.find(" required"); required != std::string::npos && required > 0 &&
                                                      std::all_of(rest.begin(), rest.begin() + required, ::isdigit)) {
      const std::string type = rest.substr(required + std::string(" required").size());
      return message.substr(0, colon) + ": needs a value" + (type.size() > 1 ? " (" + type.substr(1) + ")" : "") +
             ", none given";
    }
  }
  // CLI11 lists the surplus words last first; they are named in the order typed. (A word
  // before the subcommand never gets here: run() names it first.)
  for (const std::string surplus :
       {"The following argument was not expected: ", "The following arguments were not expected: "})
    if (message.rfind(surplus, 0) == 0) {
      std::vector<std::string> words;
      std::istringstream list(message.substr(surplus.size()));
      for (std::string word; list >> word;) words.insert(words.begin(), word);
      std::string typed;
      for (const std::string& word : words) typed += (typed.empty() ? "" : " ") + word;
      return "unexpected word(s) '" + typed + "' (no option or argument of this subcommand takes them)";
    }
  return message;
}

// What CLI11 lets through and every subcommand refuses: an option given an empty value ('':
// every option takes a non-empty one, and a command that reads "" as "not given" (--csv,
// --against, --scale, --model) would silently ignore it), and a flag given twice.
void refuse_empty_values_and_repeated_flags(const CLI::App& sub) {
  for (const CLI::Option* option : sub.get_options()) {
    // A flag given twice (`--json --json`) is the same mistake as an option given twice, which
    // CLI11 refuses (in the same words); it counted flags instead, silently.
    if (option->nonpositional() && option->get_expected_min() == 0 && option->count() > 1)
      throw fb::cli::InputError(sub.get_name() + ": " + option->get_name() + ": given " +
                                std::to_string(option->count()) + " times (give it once)");
    if (!option->nonpositional() || option->get_type_size() == 0 || option->count() == 0) continue;
    for (const std::string& value : option->results())
      if (value.empty())
        throw fb::cli::InputError(option->get_name() + ": an empty value (give one, or leave the option out)");
  }
}

int run(int argc, char** argv) {
  CLI::App app{
      "flashbits: bit-exact low-precision floating point and FlashAttention rounding-bias "
      "simulator"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.set_version_flag("--version", std::string("flashbits ") + FLASHBITS_VERSION, "Print the version and exit");
  std::vector<std::pair<CLI::App*, fb::cli::Runner>> runners;
  std::vector<std::string> names;
  for (const auto& sub : fb::cli::subcommand_registry()) {
    CLI::App* s = app.add_subcommand(sub.name, sub.description);
    runners.emplace_back(s, sub.setup(*s));
    names.push_back(sub.name);
  }
  // --version takes nothing else: CLI11 printed the version for `--version extra` and
  // `--version --help` and dropped the rest without a word.
  if (argc > 2 && std::string_view(argv[1]) == "--version") {
    fb::cli::print_error_line(std::string("--version takes no other word, got '") + argv[2] + "'");
    return fb::cli::kExitBadInput;
  }
  // `flashbits --help WORD` (or --help-all WORD): the help of subcommand WORD, as `flashbits WORD --help` (CLI11
  // printed the top-level help and dropped WORD without a word, whatever WORD was).
  if (argc > 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h" ||
                   std::string_view(argv[1]) == "--help-all")) {
    const auto sub = std::find(names.begin(), names.end(), argv[2]);
    if (argc > 3 || sub == names.end()) {
      const char* word = argc > 3 && sub != names.end() ? argv[3] : argv[2];
      fb::cli::print_error_line(std::string(argv[1]) + " takes at most one subcommand name, got '" + word + "'" +
                                (sub == names.end() ? suggestion(word, names) : std::string()) +
                                " (see `flashbits --help`)");
      return fb::cli::kExitBadInput;
    }
    std::swap(argv[1], argv[2]);
  }
  // A first word that is an option of no top-level meaning (`--jobs 2 sweep`, `-- sweep`):
  // options belong after their subcommand. CLI11 said "--model is required" or "A subcommand
  // is required", naming neither the word nor the order.
  if (argc >= 2 && argv[1][0] == '-') {
    const std::string_view first = argv[1];
    if (first != "--help" && first != "-h" && first != "--help-all" && first != "--version") {
      fb::cli::print_error_line(std::string("unexpected word '") + argv[1] +
                                "' before the subcommand (the subcommand comes first: flashbits SUBCOMMAND [OPTIONS]; "
                                "see `flashbits --help`)");
      return fb::cli::kExitBadInput;
    }
  }
  // A first word that is no subcommand: name it (CLI11 would only say one is required).
  if (argc >= 2 && argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end()) {
    fb::cli::print_error_line(std::string("unknown subcommand '") + argv[1] + "'" + suggestion(argv[1], names) +
                              " (see `flashbits --help`)");
    return fb::cli::kExitBadInput;
  }
  try {
    // Operand words such as -inf reach op and dot as typed (shield_operand_words).
    const std::vector<std::string> words = fb::cli::shield_operand_words(argc, argv);
    std::vector<char*> shielded;
    for (const std::string& w : words) shielded.push_back(const_cast<char*>(w.c_str()));
    app.parse(static_cast<int>(shielded.size()), shielded.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const CLI::App* sub = nullptr;
    for (auto& [s, run] : runners)
      if (s->parsed()) sub = s;
    std::string where = sub ? sub->get_name() + ": " : "";
    std::string message = plain_parse_message(one_line(e.what()));
    // A number beyond the option's type: the range its help shows (INT:1..1024).
    if (const std::string range = "is outside the range the option takes"; sub && message.ends_with(range)) {
      const CLI::Option* option = sub->get_option_no_throw(message.substr(0, message.find(':')));
      if (option && !option->get_type_name().empty()) message += " (" + option->get_type_name() + ")";
    }
    if (!sub && argc < 2) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      message = "a subcommand is required (" + list + ")";
    } else if (sub && (dynamic_cast<const CLI::ExtrasError*>(&e) || dynamic_cast<const CLI::RequiredError*>(&e))) {
      // A missing positional reads as its synopsis word ("missing TRACE"), not CLI11's "trace
      // is required".
      if (dynamic_cast<const CLI::RequiredError*>(&e) && !message.empty() && message.front() != '-') {
        const auto space = message.find(' ');
        if (space != std::string::npos && message.substr(space) == " is required") {
          std::string word = message.substr(0, space);
          for (char& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          message = "missing " + word;
        }
      }
      // Name the first word the subcommand does not take, and the nearest option: a misspelt
      // option comes before the required one it may have been meant as (--modle, --model).
      const std::vector<std::string> options = long_options(*sub);
      for (int i = 2; i < argc; ++i) {
        const std::string word = argv[i];
        if (word == "--") break;  // operands follow
        if (word.rfind("--", 0) != 0) continue;
        const std::string name = word.substr(0, word.find('='));
        if (std::find(options.begin(), options.end(), name) != options.end()) continue;
        message = "unknown option '" + name + "'" + suggestion(name, options);
        break;
      }
    }
    fb::cli::print_error_line(where + message + " (see `flashbits " + (sub ? sub->get_name() + " " : "") + "--help`)");
    return fb::cli::kExitBadInput;
  }
  try {
    for (auto& [s, run] : runners) {
      if (!s->parsed()) continue;
      refuse_empty_values_and_repeated_flags(*s);
      return run();
    }
  } catch (const fb::cli::InputError& e) {
    fb::cli::print_error_line(e.what());
    return fb::cli::kExitBadInput;
  } catch (const fb::FileReadError& e) {
    // An input file that cannot be read or is larger than its kind's cap.
    fb::cli::print_error_line(e.what());
    return fb::cli::kExitBadInput;
  } catch (const fb::TraceError& e) {
    // A bad trace file is bad input: one line naming file, tensor and field.
    fb::cli::print_error_line(e.what());
    return fb::cli::kExitBadInput;
  } catch (const std::invalid_argument& e) {
    // The library reports an impossible combination of user choices (a model variant
    // with a head dim it cannot take, say) this way; it is bad input, not a crash.
    fb::cli::print_error_line(e.what());
    return fb::cli::kExitBadInput;
  } catch (const std::bad_alloc&) {
    // The input needs more memory than the machine (or its ulimit) gives: a compressed capture
    // can hold gigabytes within every size limit. The input's size, not a bug.
    fb::cli::print_error_line(
        "out of memory: the input needs more than this machine (or its memory limit) allows; give a smaller one");
    return fb::cli::kExitBadInput;
  } catch (const std::exception& e) {
    // Anything else is a flashbits bug; say so in one line rather than abort.
    fb::cli::print_error_line(e.what(), "internal error: ");
    return fb::cli::kExitInternalError;
  }
  return fb::cli::kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  const int code = run(argc, argv);
  // Output that never reached stdout (a full disk, /dev/full, a closed pipe) is a failed run.
  std::string reason;
  if (!fb::cli::flush_stdout(reason)) {
    fb::cli::print_error_line("cannot write standard output: " + reason);
    return code == fb::cli::kExitInternalError ? code : fb::cli::kExitBadInput;
  }
  return code;
}
