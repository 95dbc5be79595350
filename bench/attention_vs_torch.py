#!/usr/bin/env python3
"""bench/attention_vs_torch.py: flashbits' emulated FlashAttention forward (or, with --backward,
forward plus backward) against the approximation people use instead, a PyTorch blockwise bf16
emulation (issues 25 and 36).

Contract:
- The flashbits side is the project's own benchmark, `bench_attention --model MODEL
  --seqlen N --headdim D --threads 1` (default build/bench/bench_attention, fa2-sm80,
  4096, 64: one batch, one head, bf16 inputs), run as a subprocess; its "emulated ..."
  line gives the CPU time of the benchmark thread (and wall time).
- The torch side, in this process on the same shapes, with torch.set_num_threads(1):
  for each block of 64 keys, S = q @ k^T in fp32 from bf16 inputs (times 1/sqrt(d)),
  online softmax with running max and sum in fp32, P cast to bf16, O += P @ V
  accumulated in fp32; O = O / sum, cast to bf16 at the end. This is an approximation
  of the kernel's numerics, NOT bit-exact (fp32 matmul order is the CPU library's,
  exp is torch's, no tensor-core alignment/truncation). Timed by this thread's CPU time
  (time.thread_time) and wall time, median of --repeats runs after one warm-up run.
  --backward: both sides run forward plus backward; torch's backward is autograd through
  the same blockwise code (dO random bf16), flashbits' is `bench_attention --backward`.
- Prints both times and the ratio flashbits / torch (from the CPU times); issue 36's
  targets are <= 5 (forward) and <= 6 (forward plus backward), the long-term goal 2. Also
  prints, as a sanity check of the torch emulation (untimed), its
  largest error against float64 attention on the same inputs.
- One core on the torch side also for its BLAS: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS
  default to 1 before torch is imported. Debian's torch calls whatever libblas.so.3 the
  alternatives system selects (the reference BLAS is several times slower at these
  matmuls than OpenBLAS): the script prints which BLAS library was loaded, and a faster
  one can be chosen for this run alone, e.g. with
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread (libopenblas0-pthread).
- Where `import torch` fails (Debian: apt-get install python3-torch), prints a skip
  message and exits 0; CI does not install torch. Exit 2 on a bad argument or when the
  benchmark binary is missing or fails, or its output cannot be parsed.
Timings depend on the machine and its load: they are measurements, not claims.
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time

EMULATED_LINE = re.compile(
    r"^emulated (?P<model>\S+) (?P<what>forward|forward\+backward), 1 thread: (?P<wall>[0-9.]+) s wall, "
    r"(?P<cpu>[0-9.]+) s cpu", re.M
)


def run_flashbits(binary, model, seqlen, head_dim, backward):
    """Runs bench_attention single-threaded; returns (wall s, cpu s, its full output)."""
    cmd = [binary, "--model", model, "--seqlen", str(seqlen), "--headdim", str(head_dim), "--threads", "1"]
    if backward:
        cmd.append("--backward")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(f"error: {' '.join(cmd)} exited with {proc.returncode}\n{proc.stdout}{proc.stderr}")
        sys.exit(2)
    match = EMULATED_LINE.search(proc.stdout)
    if not match:
        sys.stderr.write(f"error: no 'emulated ... forward, 1 thread' line in the output of {' '.join(cmd)}:\n"
                         f"{proc.stdout}")
        sys.exit(2)
    return float(match["wall"]), float(match["cpu"]), proc.stdout


def blockwise_bf16_attention(torch, q, k, v, block):
    """FlashAttention-style forward of one head, q k v: [seqlen, d] bf16; returns O in bf16."""
    seqlen, head_dim = q.shape
    scale = 1.0 / math.sqrt(head_dim)
    qf = q.float()
    row_max = torch.full((seqlen, 1), -math.inf, dtype=torch.float32)
    row_sum = torch.zeros((seqlen, 1), dtype=torch.float32)
    acc = torch.zeros((seqlen, head_dim), dtype=torch.float32)
    for start in range(0, k.shape[0], block):
        kb = k[start:start + block].float()
        vb = v[start:start + block].float()
        s = (qf @ kb.T) * scale
        new_max = torch.maximum(row_max, s.amax(dim=1, keepdim=True))
        p = torch.exp(s - new_max)
        correction = torch.exp(row_max - new_max)
        row_sum = row_sum * correction + p.sum(dim=1, keepdim=True)
        acc = acc * correction + p.to(torch.bfloat16).float() @ vb
        row_max = new_max
    return (acc / row_sum).to(torch.bfloat16)


def loaded_blas_libraries():
    """The BLAS/LAPACK shared libraries mapped into this process (after torch has run a matmul)."""
    names = set()
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if any(key in base for key in ("blas", "lapack", "mkl")):
                    names.add(os.path.realpath(path))
    except OSError:
        return "unknown"
    return ", ".join(sorted(names)) or "none found"


def time_torch(torch, q, k, v, block, repeats, d_o=None):
    """Median (wall, cpu) of the blockwise forward, or with d_o of forward plus backward
    (autograd through the same blockwise code into bf16 gradients of q, k and v)."""
    def run():
        if d_o is None:
            return blockwise_bf16_attention(torch, q, k, v, block)
        leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
        out = blockwise_bf16_attention(torch, *leaves, block)
        out.backward(d_o)
        return out.detach()

    run()  # warm-up
    walls, cpus = [], []
    out = None
    for _ in range(repeats):
        c0, w0 = time.thread_time(), time.perf_counter()
        out = run()
        cpus.append(time.thread_time() - c0)
        walls.append(time.perf_counter() - w0)
    return statistics.median(walls), statistics.median(cpus), out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench_attention", nargs="?", default="build/bench/bench_attention",
                        help="path of the bench_attention binary (default: %(default)s)")
    parser.add_argument("--model", default="fa2-sm80")
    parser.add_argument("--seqlen", type=int, default=4096)
    parser.add_argument("--headdim", type=int, default=64)
    parser.add_argument("--block", type=int, default=64, help="keys per block of the torch emulation")
    parser.add_argument("--repeats", type=int, default=3, help="timed torch runs (median)")
    parser.add_argument("--backward", action="store_true",
                        help="time forward plus backward on both sides (torch: autograd of the blockwise code)")
    args = parser.parse_args()
    if min(args.seqlen, args.headdim, args.block, args.repeats) < 1:
        parser.error("--seqlen, --headdim, --block and --repeats must be positive")

    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    try:
        import torch
    except ImportError:
        print(f"skip: PyTorch cannot be imported by {sys.executable} (Debian: apt-get install python3-torch, "
              "then run this script with /usr/bin/python3); nothing was measured")
        return 0
    if not os.access(args.bench_attention, os.X_OK):
        sys.stderr.write(f"error: {args.bench_attention} is not an executable (build the bench_attention target "
                         "or pass its path)\n")
        return 2

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(25)
    q, k, v = (torch.randn(args.seqlen, args.headdim, generator=generator).to(torch.bfloat16) for _ in range(3))

    d_o = torch.randn(args.seqlen, args.headdim, generator=generator).to(torch.bfloat16) if args.backward else None
    fb_wall, fb_cpu, fb_output = run_flashbits(args.bench_attention, args.model, args.seqlen, args.headdim,
                                               args.backward)
    t_wall, t_cpu, out = time_torch(torch, q, k, v, args.block, args.repeats, d_o)
    what = "forward plus backward" if args.backward else "forward"

    # Untimed sanity check of the torch emulation against float64 attention.
    q64, k64, v64 = q.double(), k.double(), v.double()
    reference = torch.softmax((q64 @ k64.T) / math.sqrt(args.headdim), dim=1) @ v64
    max_error = (out.double() - reference).abs().max().item()

    print(f"attention {what}, seqlen {args.seqlen}, head dim {args.headdim}, one head, bf16 inputs, one thread")
    for line in fb_output.splitlines():
        print(f"  bench_attention: {line}")
    print(f"flashbits {args.model} (bench_attention, bit-exact emulation): {fb_cpu:.3f} s cpu, {fb_wall:.3f} s wall")
    print(f"torch {torch.__version__} blockwise bf16 emulation ({what}), block {args.block}, 1 thread (NOT bit-exact; median "
          f"of {args.repeats}): {t_cpu:.3f} s cpu, {t_wall:.3f} s wall; max |O - O_float64| = {max_error:.3g}")
    blas = loaded_blas_libraries()
    print(f"  torch's BLAS: {blas}")
    if "/blas/libblas" in blas and "openblas" not in blas and "mkl" not in blas:
        print("  note: that is the reference BLAS, several times slower than an optimised one at these matmuls, "
              "so the ratio flatters flashbits; for the honest ratio run with an optimised BLAS, e.g. "
              "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread (Debian: libopenblas0-pthread)")
    target = "<= 6 (issue 36; long-term 2)" if args.backward else "<= 5 (issue 36; long-term 2)"
    print(f"ratio flashbits / torch (cpu), {what}: {fb_cpu / t_cpu:.2f} (target {target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
