#!/usr/bin/env python3
"""bench/kept_backward.py: a backward run from a kept forward (attention(keep_forward=True), then
AttentionResult.backward(do)) against the one call that runs forward and backward together
(attention(do=...)), in the same process, for each model (one thread, causal, random bf16).

The one-call run computes the forward before its backward; the kept forward's backward does not,
which is what flashbits.torch's backward now runs. Prints, per model, the medians of the process
CPU time of: the forward that keeps its state; the backward from it; the one-call run. Then the
backward's ratio to the one-call run, and the kept path's whole step (forward + backward) against
a step that calls the forward and then the one-call run, as the op did before. Every timed
backward's outputs are checked bit for bit against the one-call run's (exit 1 on a mismatch).

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/kept_backward.py [--shape B,H,N,D]
                                                                       [--models M1,M2] [--reps R]
"""
import argparse
import statistics
import sys
import time

import numpy as np

import flashbits as fb


def cpu_seconds(fn):
    c0 = time.process_time()  # the engine runs on a worker thread of this process
    result = fn()
    return time.process_time() - c0, result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1,4,512,64")
    ap.add_argument("--models", default="fa2-sm80,pytorch-fa2-sm90,fa-bf16acc,triton-tutorial,standard-bf16")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    shape = tuple(int(x) for x in a.shape.split(","))
    rng = np.random.default_rng(0)
    q, k, v, do = (fb.round(rng.standard_normal(shape), "bf16").values for _ in range(4))
    print(f"kept_backward: shape {shape}, causal, one thread, median of {a.reps}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'model':<22} {'forward':>9} {'backward':>9} {'one call':>9} {'bwd/one call':>13} {'step kept/before':>17}")
    for model in a.models.split(","):
        fwd, bwd, one = [], [], []
        for _ in range(a.reps):
            t_f, r = cpu_seconds(lambda: fb.attention(q, k, v, model, causal=True, keep_forward=True, threads=1))
            t_b, g = cpu_seconds(lambda: r.backward(do, threads=1))
            t_o, ref = cpu_seconds(lambda: fb.attention(q, k, v, model, do=do, causal=True, threads=1))
            for name in ("o", "lse", "delta", "dq", "dk", "dv"):
                got, want = getattr(g, name), getattr(ref, name)
                if (got is None) != (want is None) or (got is not None and got.tobytes() != want.tobytes()):
                    print(f"error: {model}: {name} of the kept forward's backward differs from the one-call run's",
                          file=sys.stderr)
                    return 1
            fwd.append(t_f)
            bwd.append(t_b)
            one.append(t_o)
        f, b, o = (statistics.median(x) for x in (fwd, bwd, one))
        print(f"{model:<22} {f:9.4f} {b:9.4f} {o:9.4f} {b / o:12.2f}x {(f + b) / (f + o):16.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
