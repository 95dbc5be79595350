"""Replays the four FlexAttention captures in traces/hw/h200/paths/flex (PyTorch 2.11, torch.compile,
Triton 3.6, H200) with the emulation in fwd.py, dec.py and bwd.py, and prints for each capture and
tensor how many elements match the capture bit for bit. Every count is full (all match).

Run from the repo root:  PYTHONPATH=build/python python3 gpu/analysis/flex/reproduce.py [--delta tree64]
(about 3 minutes on one core; the first run also decodes the SFU tables into the temp-dir cache).
--delta picks the delta reduction the autotuner may choose (chain8 is what the 512-row capture needs).
--only NAME replays the captures whose name contains NAME; --forward-only skips the backward."""
import argparse, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cap
from common import cmp
from fwd import forward
from dec import split_partials, decode_split_ranges, combine_splits
from bwd import backward, delta_chain8, delta_tree64, finish_delta

# (capture, causal offset of the key index against the query index; None = no mask)
CAPTURES = [("flex_bf16_n256_d64", None), ("flex_bf16_n256_d64_causal", 0),
            ("flex_bf16_cross_q128_k384_d64_causal", 256), ("flex_bf16_decode_q16_k1024_d64", None)]

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delta", choices=["chain8", "tree64"], default="chain8")
    ap.add_argument("--only", default="", help="replay only the captures whose name contains this")
    ap.add_argument("--forward-only", action="store_true", help="skip the backward (dQ, dK, dV)")
    args = ap.parse_args()
    delta_fn = {"chain8": delta_chain8, "tree64": delta_tree64}[args.delta]
    for name, off in CAPTURES:
        if args.only not in name:
            continue
        t, meta = cap.load(name); sc = float(meta["softmax_scale"])
        if "decode" in name:
            # flex-decoding template: SPLIT_KV = num_SM // (B*H) * 2 = 132 (flex_decoding.py get_split_k).
            # The no-mask block mask has one 2^30-wide sparse block, so split 0 holds every KV block
            # and the other 131 splits are empty (m=-inf, l=0, acc=0); the combine kernels then run
            # over all 132 splits in their compiled order (exact here: alpha_0 = 1, the rest add +0).
            B, H = t["q"].shape[:2]; split_kv = 132 // (B * H) * 2
            ranges = decode_split_ranges(1, [0], KV_LEN=t["k"].shape[2], SPLIT_KV=split_kv,
                                         SPARSE_KV_BLOCK_SIZE=1 << 30)
            O, L2, lse = combine_splits(split_partials(t["q"], t["k"], t["v"], sc, ranges))
        else:
            O, L2, lse = forward(t["q"], t["k"], t["v"], sc, off)
        if args.forward_only:
            print(name, "|", cmp("O", O, t["o"]), "|", cmp("lse_flex", lse, t["lse_flex"]), flush=True)
            continue
        # the backward reads the stored (bf16) O, as the delta kernel does
        delta = finish_delta(delta_fn(t["o"], t["do"]))
        dq, dk, dv = backward(t["q"], t["k"], t["v"], t["do"], L2, delta, sc, off)
        print(name, "|", cmp("O", O, t["o"]), "|", cmp("lse_flex", lse, t["lse_flex"]), "|",
              cmp("dQ", dq, t["dq"]), "|", cmp("dK", dk, t["dk"]), "|", cmp("dV", dv, t["dv"]), flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main())
