#!/usr/bin/env python3
"""bench/python_round.py: flashbits.round of 10^7 fp32 values to bf16 (rne), against the C++
array path (fb::round_array) timed in the same process on the same input (issue 24's target:
within 1.5x). Prints the medians of both, per element, and their ratio; also the cost of
decoding the values (Rounded.values) and of per-element flags, which the target does not cover.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_round.py [--n N] [--reps R] [--fmt F]
Exit status 1 when the ratio (thread CPU time) exceeds --limit (default 1.5).
"""
import argparse
import statistics
import sys
import time

import numpy as np

import flashbits as fb
from flashbits import _core


def timed(fn, reps):
    wall, cpu = [], []
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        c1, w1 = time.thread_time(), time.perf_counter()
        wall.append(w1 - w0)
        cpu.append(c1 - c0)
    return statistics.median(wall), statistics.median(cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--fmt", default="bf16")
    ap.add_argument("--mode", default="rne")
    ap.add_argument("--limit", type=float, default=1.5)
    a = ap.parse_args()
    x = np.random.default_rng(0).standard_normal(a.n).astype(np.float32)
    # The same bits both ways (a check that the timed calls compute the same thing).
    r = fb.round(x, a.fmt, a.mode)
    assert np.array_equal(r.bits[:100000], fb.round(x[:100000], a.fmt, a.mode, flags=True).bits)
    fb.round(x, a.fmt, a.mode)  # warm-up
    cpp = _core._time_round_array(x, a.fmt, a.mode, a.reps)
    cpp_wall = statistics.median(t[0] for t in cpp)
    cpp_cpu = statistics.median(t[1] for t in cpp)
    py_wall, py_cpu = timed(lambda: fb.round(x, a.fmt, a.mode), a.reps)
    dec_wall, _ = timed(lambda: fb.round(x, a.fmt, a.mode).values, max(3, a.reps // 3))
    fl_wall, _ = timed(lambda: fb.round(x, a.fmt, a.mode, flags=True), 3)
    ns = 1e9 / a.n
    print(f"flashbits.round vs fb::round_array: {a.n} fp32 values -> {a.fmt} {a.mode}, median of {a.reps}, "
          f"vector ISA {_core.lane_instruction_set()}")
    print(f"  C++ round_array          {cpp_wall * ns:7.3f} ns/element wall, {cpp_cpu * ns:7.3f} CPU")
    print(f"  flashbits.round (bits)   {py_wall * ns:7.3f} ns/element wall, {py_cpu * ns:7.3f} CPU")
    ratio_cpu, ratio_wall = py_cpu / cpp_cpu, py_wall / cpp_wall
    print(f"  ratio                    {ratio_cpu:.2f}x (CPU), {ratio_wall:.2f}x (wall); target <= {a.limit}x")
    print(f"  with .values (decode)    {dec_wall * ns:7.3f} ns/element wall (bits + float64 values)")
    print(f"  with flags=True          {fl_wall * ns:7.3f} ns/element wall (per-element fb::convert)")
    return 0 if ratio_cpu <= a.limit else 1


if __name__ == "__main__":
    sys.exit(main())
