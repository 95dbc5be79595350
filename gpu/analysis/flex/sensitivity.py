"""Sensitivity check on the n256 causal flex capture: swaps one ingredient of the forward emulation
at a time for a plausible alternative and prints how many O and lse_flex elements still match.
A drop below full shows the capture itself confirms that ingredient (see FINDINGS.md, Sensitivity).

Run from the repo root:  PYTHONPATH=build/python python3 gpu/analysis/flex/sensitivity.py"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import cap, fwd
from common import f32, cmp

t, meta = cap.load("flex_bf16_n256_d64_causal")
def run(label):
    O, L2, lse = fwd.forward(t["q"], t["k"], t["v"], float(meta["softmax_scale"]), 0)
    print(f"{label:60s}", cmp("O", O, t["o"]), "|", cmp("lse_flex", lse, t["lse_flex"]), flush=True)
orig_ex2, orig_rs, orig_div, orig_fma = fwd.ex2, fwd.rowsum_wgmma, fwd.div_full, fwd.fma
run("as found")
fwd.rowsum_wgmma = lambda p: np.add.reduce(p.astype(np.float32), axis=-1, dtype=np.float32)  # numpy pairwise
run("row sum: numpy pairwise instead of wgmma lane order"); fwd.rowsum_wgmma = orig_rs
fwd.div_full = lambda a, b: (f32(a) / f32(b)).astype(np.float32)
run("O = acc / l correctly rounded (div.rn) instead of a*rcp(l)"); fwd.div_full = orig_div
fwd.ex2 = lambda x: np.exp2(f32(x).astype(np.float64)).astype(np.float32)
run("ex2 correctly rounded instead of H200 MUFU.EX2 table"); fwd.ex2 = orig_ex2
fwd.fma = lambda a, b, c: ((f32(a) * f32(b)).astype(np.float32) + f32(c)).astype(np.float32)
run("no FMA contraction anywhere (p and l)"); fwd.fma = orig_fma
