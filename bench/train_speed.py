#!/usr/bin/env python3
"""bench/train_speed.py: training steps per second of each arm of the training experiment
(flashbits.train), as a ratio to the fp32 arm measured in the same run, and where an
emulated arm's time goes (issue 35, item 5).

Contract:
- For each arm, a fresh model of the preset's configuration (default: the smoke
  configuration of CI, `--preset study` for docs/TRAINING.md's) takes `--warmup` steps, then
  `--steps` timed steps on the driver's own batches, one thread (torch.set_num_threads(1),
  kernel threads 1). Each step's CPU time is this process's, all threads (time.process_time: the kernel runs on a worker thread); the figure is
  the median step, and the ratio is the arm's median over the fp32 arm's median, both from
  this run. Arms take turns step by step (round robin), so that a change in the machine's
  load falls on all of them alike.
- The emulated arms' time is split by wrapping the calls the driver makes: the kernel
  model's forward (flashbits.attention, keeping its state), its backward (from that state:
  AttentionResult.backward), the mechanism probe's exact reference (exact_attention), and
  the rest (PyTorch: embeddings, projections, MLPs, the other layers' fp32 attention, the
  optimizer, and the op's conversions).
- Prints the CPU model, the BLAS library torch loaded, and one line per arm. Exit 2 on a bad
  argument (an unknown arm or preset). Figures depend on the machine and its load: they are
  measurements, not claims.
"""
import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

try:
    import torch
except ImportError:
    print("train_speed: skipped (no torch: apt-get install python3-torch)")
    sys.exit(0)

import flashbits  # noqa: E402
import flashbits.torch as fbt  # noqa: E402
import flashbits.train as train  # noqa: E402


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def blas_library() -> str:
    try:
        with open(f"/proc/{os.getpid()}/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line.lower() and line.split()[-1].startswith("/")}
        return ", ".join(sorted(libs)) or "none found in the process map"
    except OSError:
        return "unknown"


class Timers:
    """CPU seconds spent in the wrapped calls, by kind."""

    def __init__(self):
        self.seconds = {"forward": 0.0, "backward": 0.0, "probe": 0.0}

    def wrap(self, fn, kind_of):
        def timed(*args, **kwargs):
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[kind_of(kwargs)] += time.process_time() - t
        return timed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="smoke", choices=sorted(train.PRESETS))
    p.add_argument("--arms", default="fp32,fa-bf16acc,fa-bf16acc+dynmax,pytorch-fa2-sm90,bf16-autocast")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--corpus", default=train.DEFAULT_CORPUS_DIR)
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = train.StudyConfig(**train.PRESETS[args.preset])
    try:
        corpus = train.load_corpus(args.corpus, cfg.model.block_size)
        arms = [train.validate_arm(train.parse_arm(a), cfg, "/tmp/flashbits-train-speed-recipes")
                for a in train.split_arms(args.arms)]
    except train.UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.steps < 1 or args.warmup < 0:
        print("error: --steps must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    timers = {}
    state = {}
    for arm in arms:
        t = Timers()
        timers[arm.name] = t
        model = train.build_model(cfg, len(corpus.vocab))
        for probe in train.install_arm_attention(model, arm, cfg, threads=1).values():
            probe.active = True
        state[arm.name] = (arm, model, train.make_optimizer(model, cfg), [])
    original_attention, original_exact = fbt._attention, train._exact_attention
    original_backward = flashbits.AttentionResult.backward
    times = {a.name: [] for a in arms}
    for step in range(args.warmup + args.steps):
        x, y = train.get_batch(corpus.train, train.batch_indices((0,), step, cfg.batch_size, len(corpus.train),
                                                                 cfg.model.block_size), cfg.model.block_size)
        for arm in arms:
            _, model, optimizer, _ = state[arm.name]
            t = timers[arm.name]
            # A backward with dO through attention() would count as backward too (the op runs it
            # from the kept forward instead).
            fbt._attention = t.wrap(original_attention, lambda kw: "backward" if kw.get("do") is not None else "forward")
            flashbits.AttentionResult.backward = t.wrap(original_backward, lambda kw: "backward")
            train._exact_attention = t.wrap(original_exact, lambda kw: "probe")
            if step == args.warmup:
                t.seconds = dict.fromkeys(t.seconds, 0.0)
            start = time.process_time()
            train.train_step(model, optimizer, x, y, cfg, autocast=arm.model == train.LOW_PRECISION)
            if step >= args.warmup:
                times[arm.name].append(time.process_time() - start)
    fbt._attention, train._exact_attention = original_attention, original_exact
    flashbits.AttentionResult.backward = original_backward
    m = cfg.model
    print(f"train_speed: preset {args.preset} (n_layer {m.n_layer}, n_head {m.n_head}, n_embd {m.n_embd}, "
          f"block {m.block_size}, batch {cfg.batch_size}; emulated layers {list(cfg.emulate_layers)}; probe every "
          f"step), {args.steps} steps after {args.warmup} warm-up, one thread")
    print(f"CPU: {cpu_name()}; BLAS: {blas_library()}; torch {torch.__version__}; {time.strftime('%Y-%m-%d')}")
    base = statistics.median(times[train.CONTROL]) if train.CONTROL in times else None
    for arm in arms:
        med = statistics.median(times[arm.name])
        total = sum(times[arm.name])
        s = timers[arm.name].seconds
        split = ""
        if arm.emulated and total > 0:
            rest = total - sum(s.values())
            split = (f"; time: model forward {100 * s['forward'] / total:.0f}%, backward "
                     f"{100 * s['backward'] / total:.0f}%, probe reference {100 * s['probe'] / total:.0f}%, "
                     f"PyTorch and the rest {100 * rest / total:.0f}%")
        ratio = f", {med / base:.2f}x the fp32 arm" if base else ""
        print(f"  {arm.name}: {1 / med:.1f} steps/s (median step {1000 * med:.2f} ms{ratio}){split}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
