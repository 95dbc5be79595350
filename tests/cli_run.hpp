// tests/cli_run.hpp: running the built `flashbits` binary from a CLI test suite.
//
// Contract: the including test defines FLASHBITS_BINARY (tests/CMakeLists.txt). run(args)
// runs `flashbits ARGS` through /bin/sh (after `shell`, e.g. a ulimit, in the same shell) with
// stdout and stderr sent to files in the test's scratch directory (one per process, under the
// system temp directory), and returns the exit code (-1 if the process did not exit) and both
// outputs.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifndef FLASHBITS_BINARY
#error "FLASHBITS_BINARY must name the flashbits executable"
#endif

namespace fb_test {

struct Run {
  int code;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::filesystem::path scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("fb_cli_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);  // an earlier run's, whose pid this one reuses: start empty
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline Run run(const std::string& args, const std::string& shell = "") {
  static int counter = 0;
  const std::string base = (scratch() / ("run" + std::to_string(counter++))).string();
  const std::string cmd =
      shell + std::string("'") + FLASHBITS_BINARY + "' " + args + " > " + base + ".out 2> " + base + ".err";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(base + ".out"), slurp(base + ".err")};
}

}  // namespace fb_test
