// tests/test_cli_jobs.cpp: `--jobs` of make-trace, replay, bias-test and deviation (issue 25
// item 5, docs/CLI.md Conventions), run as the built `flashbits` binary.
//
// The reference is the same command on one thread: with --jobs 3 (more threads than the
// 2-core CI machine has, so the threads also interleave under oversubscription) every
// command's stdout, and make-trace's file, must be the same bytes as with --jobs 1, on
// problems with several batches, heads, row blocks, trials or trace files. The exit code
// must be the same too (replay under another model exits 1 with a long mismatch list, whose
// order is part of what is compared). A bad --jobs (0, 1025, abc) is exit 2 with one
// `error:` line naming --jobs, as sweep's (tools/cli_common.hpp jobs_or_throw). When
// trace files are bad, the error names the first bad one in sorted order whatever the
// thread count (bias-test's items are joined in order, errors included).
// Stochastic rounding is keyed by the seed and the element, never by the thread: every
// variant that rounds stochastically (+o-sr on an online, a materialised and the correctly
// rounded model; sweep's --round sr) gives the same bytes on 1 and 3 threads, in make-trace's
// file, replay, bias-test, deviation and sweep. The engine hands out (batch, head, 64-row
// block) items one at a time to whichever thread asks next, so these problems have 16-32
// items of some milliseconds each: far more than 3, and long enough that the threads
// started after the first item have items left to take.
// FLASHBITS_TEST_SCALE=sanitizer shrinks the problems (an ASan build runs this too).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "tests/cli_run.hpp"
#include "tests/test_scale.hpp"

namespace {

using fb_test::sanitizer_scale;

// Sizes: several row blocks per head (block_m is 64 or 128 for these models at head dim 32)
// and several heads and batches, small enough for a sanitizer build.
std::string seqlen() { return sanitizer_scale() ? "80" : "200"; }
std::string trials() { return sanitizer_scale() ? "5" : "12"; }

using fb_test::run;
using fb_test::Run;
using fb_test::scratch;
using fb_test::slurp;

std::string path(const std::string& name) { return (scratch() / name).string(); }

int lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// `args` with --jobs 1 and with --jobs 3: the same exit code and stdout, byte for byte.
// expected_code: the exit code where the test knows it (else 0, 1 or 4: a finished run).
Run same_output_for_jobs(const std::string& args, std::optional<int> expected_code = std::nullopt) {
  const Run one = run(args + " --jobs 1");
  const Run three = run(args + " --jobs 3");
  INFO(args);
  INFO("stderr --jobs 1: " << one.err);
  INFO("stderr --jobs 3: " << three.err);
  if (expected_code)
    CHECK(one.code == *expected_code);
  else
    CHECK((one.code == 0 || one.code == 1 || one.code == 4));
  CHECK(three.code == one.code);
  CHECK(!one.out.empty());
  CHECK(three.out == one.out);
  return one;
}

// A bad --jobs is exit 2 with one error line naming the option, before any work.
void refuses_bad_jobs(const std::string& args) {
  for (const char* bad : {"0", "1025", "abc", "-2"}) {
    const Run r = run(args + " --jobs " + bad);
    INFO(args << " --jobs " << bad << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.rfind("error: ", 0) == 0);
    CHECK(r.err.find("--jobs") != std::string::npos);
    CHECK(r.out.empty());
  }
}

// make-trace's trace of fa2-sm80 with the backward, 2 batches x 4 heads over 2 kv heads.
std::string make_trace_args(const std::string& out) {
  return "make-trace --model fa2-sm80 --scenario random --batch 2 --heads 4 --kv-heads 2 --seqlen " + seqlen() +
         " --headdim 32 --seed 5 --backward --out " + out;
}

}  // namespace

TEST_CASE("make-trace: the trace and stdout are the same bytes with --jobs 1 and --jobs 3") {
  const std::string a = path("mt_a.safetensors"), b = path("mt_b.safetensors");
  const Run one = run(make_trace_args(a) + " --jobs 1");
  const Run three = run(make_trace_args(b) + " --jobs 3");
  REQUIRE(one.code == 0);
  REQUIRE(three.code == 0);
  const std::string bytes = slurp(a);
  CHECK(bytes.size() > 10000);  // q, k, v, o, lse, do, delta, dq, dk, dv of 8 heads
  CHECK(slurp(b) == bytes);
  // stdout names the file: the same line once the file names are swapped.
  std::string three_out = three.out;
  three_out.replace(three_out.find(b), b.size(), a);
  CHECK(three_out == one.out);
  refuses_bad_jobs(make_trace_args(path("mt_bad.safetensors")));
  CHECK(!std::filesystem::exists(path("mt_bad.safetensors")));
}

TEST_CASE("replay: text and --json the same with --jobs 1 and --jobs 3, matching and mismatching") {
  const std::string trace = path("replay.safetensors");
  REQUIRE(run(make_trace_args(trace) + " --jobs 1").code == 0);
  // Under its own model every tensor matches; under fa-bf16acc (a bf16 P·V accumulator) many
  // values of o, delta, dq, dk, dv differ, and --json lists every one in order.
  const Run matching = same_output_for_jobs("replay " + trace, 0);
  CHECK(matching.out.find("result: all compared values match") != std::string::npos);
  same_output_for_jobs("replay " + trace + " --json", 0);
  const Run differing = same_output_for_jobs("replay " + trace + " --model fa-bf16acc", 1);
  CHECK(differing.out.find("result: MISMATCH") != std::string::npos);
  const Run listed = same_output_for_jobs("replay " + trace + " --model fa-bf16acc --json", 1);
  CHECK(listed.out.find("\"ulps\"") != std::string::npos);
  // One row traced (--explain) and one row recomputed (--row).
  same_output_for_jobs("replay " + trace + " --explain --batch 1 --head 3", 0);
  same_output_for_jobs("replay " + trace + " --row 7 --batch 1 --head 2 --json", 0);
  refuses_bad_jobs("replay " + trace);
}

TEST_CASE("bias-test: model trials, paired trials and trace files the same with --jobs 1 and --jobs 3") {
  const std::string model = "bias-test --model fa-bf16acc --scenario sink --seqlen " + seqlen() +
                            " --headdim 32 --seed 3 --trials " + trials();
  const Run text = same_output_for_jobs(model + " --by-max");
  CHECK(text.out.find("n=" + trials()) != std::string::npos);
  same_output_for_jobs(model + " --json --by-max");
  same_output_for_jobs("bias-test --model fa2-sm80 --against fa-bf16acc --scenario random --seqlen " + seqlen() +
                       " --headdim 32 --trials " + trials() + " --json");
  refuses_bad_jobs(model);

  // --traces: three files, one sample per row of each, joined in sorted order.
  const std::filesystem::path dir = scratch() / "traces";
  std::filesystem::create_directories(dir);
  for (const char* name : {"a", "b", "c"}) {
    const std::string seed = std::to_string(name[0]);
    REQUIRE(run("make-trace --model fa-bf16acc --scenario sink --heads 2 --seqlen " + seqlen() +
                " --headdim 32 --backward --seed " + seed + " --out " +
                (dir / (std::string(name) + ".safetensors")).string())
                .code == 0);
  }
  const Run traces = same_output_for_jobs("bias-test --traces " + dir.string() + " --by-max");
  CHECK(traces.out.find("3 traces") != std::string::npos);
  same_output_for_jobs("bias-test --traces " + dir.string() + " --json");

  // Two bad files among good ones: the first bad one (sorted) is named, whatever --jobs.
  const std::filesystem::path bad = scratch() / "bad_traces";
  std::filesystem::create_directories(bad);
  std::filesystem::copy_file(dir / "a.safetensors", bad / "a.safetensors");
  std::filesystem::copy_file(dir / "b.safetensors", bad / "d.safetensors");
  for (const char* name : {"b.safetensors", "c.safetensors"}) {
    std::ofstream f(bad / name, std::ios::binary);
    f << "not a safetensors file";
  }
  for (const char* jobs : {"1", "3"}) {
    const Run r = run("bias-test --traces " + bad.string() + " --jobs " + jobs);
    INFO("--jobs " << jobs << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("b.safetensors") != std::string::npos);
    CHECK(r.err.find("c.safetensors") == std::string::npos);
  }
}

TEST_CASE("deviation: several models, sizes, heads and tiles the same with --jobs 1 and --jobs 3") {
  const std::string args = "deviation --models fa2-sm80,standard-bf16,fa-bf16acc --seqlen 64," + seqlen() +
                           " --heads 3 --headdim 32 --tiles 16x32,64x64 --inputs sink --seed 2";
  const Run text = same_output_for_jobs(args, 0);
  CHECK(lines(text.out) >= 1 + 3 * 2 * 2);
  same_output_for_jobs(args + " --json", 0);
  refuses_bad_jobs(args);
}

TEST_CASE("stochastic rounding does not depend on the thread: +o-sr and --round sr with --jobs 1 and --jobs 3") {
  // make-trace: 2 batches x 4 heads x (seqlen / 64) row blocks of forward items (16 or 32),
  // on the online loop, the materialised path and the correctly rounded reference (whose sr
  // also rounds dQ, dK, dV; it rounds on the calling thread here, but on the trial threads in
  // bias-test and sweep, where it is the excess's reference for +o-sr and --round sr).
  for (const std::string model : {"fa2-sm80+o-sr", "standard-bf16+o-sr", "correctly-rounded+o-sr"}) {
    CAPTURE(model);
    const bool reference = model.rfind("correctly-rounded", 0) == 0;
    const std::string name = model.substr(0, model.find('+'));
    const auto args = [&](const std::string& out, int seed) {
      return std::string("make-trace --model ") + model + " --scenario random --batch 2 --heads 4 --kv-heads 2" +
             " --seqlen " + seqlen() + " --headdim 32 --seed " + std::to_string(seed) +
             (reference ? " --backward" : "") + " --out " + out;
    };
    const std::string a = path("sr_" + name + "_a.safetensors"), b = path("sr_" + name + "_b.safetensors");
    const Run one = run(args(a, 9) + " --jobs 1");
    const Run three = run(args(b, 9) + " --jobs 3");
    INFO("stderr --jobs 1: " << one.err);
    INFO("stderr --jobs 3: " << three.err);
    REQUIRE(one.code == 0);
    REQUIRE(three.code == 0);
    const std::string bytes = slurp(a);
    CHECK(bytes.size() > 10000);
    CHECK(slurp(b) == bytes);
    if (model == "fa2-sm80+o-sr") {
      // The stream is live: O differs from the same run's RNE cast (replay under fa2-sm80
      // reports mismatches, exit 1).
      CHECK(run("replay " + a + " --model fa2-sm80 --jobs 1").code == 1);
      // Replay recomputes O with the trace's seed, on 1 and 3 threads: every value matches.
      const Run replayed = same_output_for_jobs("replay " + a, 0);
      CHECK(replayed.out.find("result: all compared values match") != std::string::npos);
    }
  }
  // bias-test: trials on threads (each seeded by its index), alone and paired.
  same_output_for_jobs("bias-test --model fa2-sm80+o-sr --scenario random --seqlen 64 --headdim 32 --seed 4 --trials " +
                       trials() + " --json");
  same_output_for_jobs(
      "bias-test --model fa2-sm80+o-sr --against fa2-sm80 --scenario sink --seqlen 64 --headdim 32 --trials " +
      trials() + " --json");
  // deviation: the engine's threads over each model's rows.
  same_output_for_jobs("deviation --models fa2-sm80+o-sr,standard-bf16+o-sr --seqlen " + seqlen() +
                           " --heads 4 --headdim 32 --inputs random --seed 6 --json",
                       0);
  // sweep --round sr (with --sr-bits, which changes the recipe): configurations x trials.
  same_output_for_jobs(
      "sweep --model fa2-sm80,standard-bf16 --round sr --sr-bits 8 --scenario random --seqlen 64 --headdim 32 "
      "--trials 3 --seed 8 --json");
}
