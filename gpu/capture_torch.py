#!/usr/bin/env python3
"""gpu/capture_torch.py: capture PyTorch's flash SDPA backend, forward and backward, as traces.

Contract:
- Runs torch.nn.functional.scaled_dot_product_attention restricted to the flash backend
  (torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)) in bf16, non-causal, then
  backward with the given dO. Fails (exit 2) rather than fall back to another backend.
- Inputs: read from an input trace (--input FILE: a safetensors file holding q, k, v, do,
  BF16 [B,H,N,D]). The intended source is flashbits itself (`flashbits make-trace
  --backward`, see gpu/make_inputs.sh), so the hardware sees exactly the C++ scenario
  generators' inputs (sink, random, fa3-outliers as attention/scenarios.cpp defines them)
  and the scenario and seed carry over. Without --input the inputs are generated here
  (--scenario random|sink|fa3-outliers): THIS script's generators, which are NOT the C++
  ones for a given seed (the trace stores whatever was used, so a replay is exact either
  way, but only --input gives the C++ scenarios).
- Output: one safetensors trace (DESIGN.md §9) with q, k, v, do, o, lse (when the flash op
  exposes it), dq, dk, dv and __metadata__: source cuda:<device>, device, compute
  capability, versions (torch, CUDA, cuDNN, safetensors), torch version, backend, kernel,
  model, softmax scale, causal, dtype, scenario (and seed, input trace when read).
- Exit 0 on success; 2 on bad input, no CUDA device, or when the flash backend cannot run
  the problem (sdpa_kernel raises instead of falling back to another backend).
Only torch and safetensors are needed.
"""
import argparse
import math
import sys

import torch
from safetensors.torch import load_file, save_file


def generate(scenario, batch, heads, seq, hdim, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    shape = (batch, heads, seq, hdim)

    def normal():
        return torch.randn(shape, generator=g)

    if scenario == "random":
        q, k, v, do = normal(), normal(), normal(), normal()
    elif scenario == "fa3-outliers":
        # N(0,1) + N(0,100) * Bernoulli(0.001), as in the FlashAttention-3 paper (DESIGN.md §8)
        def outliers():
            mask = (torch.rand(shape, generator=g) < 0.001).float()
            return normal() + 10.0 * normal() * mask
        q, k, v, do = outliers(), outliers(), outliers(), outliers()
    elif scenario == "sink":
        # DESIGN.md §7: >= 2 keys tie exactly for each row max, the rest 8-20 below, V and dO
        # mostly negative in features 20 and 29 (head dim >= 32).
        scale = 1.0 / math.sqrt(hdim)
        q = torch.zeros(shape)
        q[..., 0] = 1.0
        k = 0.1 * normal()
        k[..., 0] = 0.0
        top = 8.0
        # scores are exactly q.k * scale = k[...,0] * scale: set k[...,0] = score / scale
        scores = top - (8.0 + 12.0 * torch.rand((batch, heads, seq), generator=g))
        scores[..., 0] = top
        scores[..., 1] = top
        extra = torch.rand((batch, heads, seq), generator=g) < 0.02
        scores[extra] = top
        k[..., 0] = scores / scale
        # q has a single non-zero feature, so the other features of k do not change scores
        v = normal()
        do = normal()
        for f in (20, 29):
            if f < hdim:
                v[..., f] = -(1.0 + 0.3 * normal()[..., f]).abs()
                do[..., f] = -(1.0 + 0.3 * normal()[..., f]).abs()
    else:
        raise SystemExit(f"error: --scenario: unknown scenario '{scenario}'")
    return [t.to(torch.bfloat16).to(device) for t in (q, k, v, do)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", help="input trace with q, k, v, do (BF16 [B,H,N,D])")
    ap.add_argument("--scenario", default="random", help="random | sink | fa3-outliers (when no --input)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--hdim", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--softmax-scale", type=float, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    meta_in = {}
    if args.input:
        tensors = load_file(args.input)
        for name in ("q", "k", "v", "do"):
            if name not in tensors or tensors[name].dtype != torch.bfloat16 or tensors[name].dim() != 4:
                print(f"error: {args.input}: {name}: missing or not BF16 [B,H,N,D]", file=sys.stderr)
                return 2
        q, k, v, do = (tensors[n].to(device).contiguous() for n in ("q", "k", "v", "do"))
        from safetensors import safe_open
        with safe_open(args.input, framework="pt") as f:
            meta_in = f.metadata() or {}
        scenario = meta_in.get("scenario", "input-trace")
    else:
        q, k, v, do = generate(args.scenario, args.batch, args.heads, args.seq, args.hdim, args.seed, device)
        scenario = args.scenario
    hdim = q.shape[-1]
    scale = args.softmax_scale
    if scale is None:
        scale = float(meta_in["softmax_scale"]) if "softmax_scale" in meta_in else 1.0 / math.sqrt(hdim)

    from torch.nn.attention import SDPBackend, sdpa_kernel
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # raises instead of falling back
            o = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=False, scale=scale)
            o.backward(do)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        print(f"error: the flash SDPA backend did not run: {exc}", file=sys.stderr)
        return 2

    out = {"q": q, "k": k, "v": v, "do": do, "o": o.detach(),
           "dq": qg.grad, "dk": kg.grad, "dv": vg.grad}
    # The flash op also returns the log-sum-exp; capture it when this torch exposes the op.
    try:
        res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)
        if torch.equal(res[0], out["o"]):
            out["lse"] = res[1].float()
    except Exception as exc:  # noqa: BLE001 - LSE is optional in a trace
        print(f"note: lse not captured ({type(exc).__name__}: {exc})", file=sys.stderr)

    import safetensors
    props = torch.cuda.get_device_properties(device)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    meta = {
        "source": f"cuda:{name}",
        "device": name,
        "compute_capability": f"{major}.{minor}",
        "versions": f"torch={torch.__version__} cuda={torch.version.cuda} cudnn={cudnn} "
                    f"safetensors={getattr(safetensors, '__version__', 'unknown')}",
        "torch": torch.__version__,
        "cuda_runtime": str(torch.version.cuda),
        "backend": "FLASH_ATTENTION",
        "kernel": "torch.nn.functional.scaled_dot_product_attention (flash backend, fwd+bwd)",
        "model": "fa2-sm90" if major >= 9 else "fa2-sm80",
        "softmax_scale": repr(float(scale)),
        "causal": "false",
        "dtype": "bf16",
        "scenario": scenario,
        "multiprocessors": str(props.multi_processor_count),
        "note": "tile sizes are chosen inside PyTorch's bundled FlashAttention-2 and are not reported",
    }
    if args.input:
        meta["input_trace"] = args.input
        if "seed" in meta_in:
            meta["seed"] = meta_in["seed"]
        if "source" in meta_in:
            meta["input_source"] = meta_in["source"]  # e.g. emulated: the inputs came from flashbits
    else:
        meta["seed"] = str(args.seed)
        meta["generator"] = "gpu/capture_torch.py (not the C++ scenario generators)"
    save_file({k: t.detach().contiguous().cpu() for k, t in out.items()}, args.out, metadata=meta)
    print(f"wrote {args.out} ({name}, scenario {scenario}, shape {tuple(q.shape)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
