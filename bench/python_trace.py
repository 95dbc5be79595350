#!/usr/bin/env python3
"""bench/python_trace.py: flashbits.attention with every row traced, from Python, against the
same run untraced in the same process (one thread, one head, d 64, random bf16 inputs).

Prints the medians of the process CPU time of: the untraced run; the traced run (it returns
the records in the engine's own form, flashbits.RowTraces); and reading every traced row's
dict once (what a script that walks all rows pays on top). Each as a ratio to the untraced
run, and the growth of the peak resident memory over the whole benchmark.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_trace.py [--seqlen N] [--model M]
                                                                      [--reps R]
"""
import argparse
import resource
import statistics
import time

import numpy as np

import flashbits as fb


def cpu_median(fn, reps):
    times = []
    for _ in range(reps):
        c0 = time.process_time()  # the run itself is on a worker thread of this process
        fn()
        times.append(time.process_time() - c0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--model", default="fa2-sm80")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    q, k, v = (fb.round(rng.standard_normal((1, 1, a.seqlen, 64)), "bf16").values for _ in range(3))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    untraced = cpu_median(lambda: fb.attention(q, k, v, a.model, threads=1), a.reps)
    kept = {}

    def traced_run():
        kept.clear()  # the previous run's records go before the next is made
        kept["r"] = fb.attention(q, k, v, a.model, trace=True, threads=1)

    traced = cpu_median(traced_run, a.reps)
    traces = kept["r"].traces
    read = cpu_median(lambda: [t["summary"] for t in traces], a.reps)
    assert len(traces) == a.seqlen
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024.0
    print(f"flashbits.attention {a.model}, seqlen {a.seqlen}, d 64, one head, 1 thread "
          f"(process CPU, median of {a.reps}):")
    print(f"  untraced                         {untraced:8.3f} s")
    print(f"  every row traced                 {traced:8.3f} s  {traced / untraced:6.2f}x the untraced run")
    print(f"  reading every row's dict once    {read:8.3f} s  {read / untraced:6.2f}x the untraced run")
    print(f"  peak resident memory grew by {grown:.0f} MiB over the benchmark")


if __name__ == "__main__":
    main()
