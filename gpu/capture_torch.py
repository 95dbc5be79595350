#!/usr/bin/env python3
"""gpu/capture_torch.py: capture PyTorch's flash SDPA backend, forward and backward, as traces.

Contract:
- Runs torch.nn.functional.scaled_dot_product_attention restricted to the flash backend
  (torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION): it raises instead of
  falling back to another backend), forward and backward with the given dO, and
  torch.ops.aten._scaled_dot_product_flash_attention for the log-sum-exp (kept only when
  its O equals the autograd path's O bit for bit).
- Split-KV is avoided, not modelled: PyTorch's mha_fwd picks num_splits with FA2's
  num_splits_heuristic(batch*heads*ceil(seqlen_q/64), 2*SMs, ceil(seqlen_k/block_n), 128),
  which returns 1 once batch*heads*m_blocks >= 0.8 * 2 * SMs. The run therefore tiles the
  input heads up to --run-heads (default: the smallest count that provably avoids a split
  on this GPU, at least 64) and saves only the input's own heads: FA2 computes every
  (batch, head) in its own thread blocks, so a head's outputs do not depend on the others.
  The kernels that actually ran are listed from the profiler and a split kernel is
  reported (metadata num_splits, kernels).
- dQ is accumulated by FA2's backward with fp32 atomics over KV blocks in hardware order;
  with at most two KV blocks of the backward tile (seqlen_k <= 2 * bwd block_n) the sum
  is order-independent (a + b == b + a; the accumulator starts at 0). Each capture runs
  twice and records whether every output was bit-identical (metadata repeat_identical).
- Scale: the softmax scale is passed as an fp32 value (the kernel's Flash_fwd_params
  stores a float), so the metadata holds exactly the scale the kernel used.
- Modes:
  * single: --input FILE --out FILE [--causal] [--dtype bf16|fp16]
  * plan:   --plan --inputs-dir DIR --out-dir DIR: every (dtype, head dim, causal,
    scenario) of the device session; each trace is written the moment it is captured,
    and one line per capture is appended to DIR/capture_log.jsonl (kernels, splits,
    timings, errors). A failing capture is logged and the plan goes on.
- Output trace (flashbits' schema, traces/trace.hpp): q, k, v, do, o, lse, dq, dk, dv in
  [B,H,N,D] / [B,H,N] and __metadata__: source cuda:<device>, device, compute capability,
  versions, kernel (the profiler's kernel names), model pytorch-fa2-sm90 / -sm80, block
  sizes parsed from the kernel names, softmax scale, causal, dtype, scenario, seed.
- Exit 0 on success; 2 on bad input, no CUDA device, or a capture that failed (single
  mode); plan mode exits 0 when at least one capture succeeded.
Only torch and safetensors are needed.
"""
import argparse
import json
import math
import os
import re
import sys
import time
import traceback

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_common import kernel_names, predicted_splits  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def run_heads_needed(batch, seq_q, sms, minimum):
    m_blocks = (seq_q + 63) // 64
    heads = minimum
    while batch * heads * m_blocks < 0.8 * 2 * sms:
        heads *= 2
    return heads


TRAITS = re.compile(r"Flash_(fwd|bwd)_kernel_traits<\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)")


def tiles_from_kernels(names):
    """block sizes from the kernel template arguments: fwd (hdim, block_m, block_n, warps)."""
    out = {}
    for n in names:
        for kind, hdim, bm, bn, warps in TRAITS.findall(n):
            key = "" if kind == "fwd" else "bwd_"
            out.setdefault(key + "block_m", bm)
            out.setdefault(key + "block_n", bn)
            out.setdefault(key + "warps", warps)
    return out


def tile_heads(t, heads_run):
    h = t.shape[1]
    reps = (heads_run + h - 1) // h
    return t.repeat(1, reps, 1, 1)[:, :heads_run].contiguous()


def capture(q, k, v, do, scale, causal, heads_run):
    """Runs fwd+bwd on heads tiled to heads_run; returns the input heads' tensors."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    h = q.shape[1]
    qr, kr, vr, dor = (tile_heads(t, heads_run) for t in (q, k, v, do))

    def fwd_bwd():
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (qr, kr, vr))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
            o.backward(dor)
        torch.cuda.synchronize()
        return {"o": o.detach(), "dq": qg.grad, "dk": kg.grad, "dv": vg.grad}

    first = fwd_bwd()
    second = fwd_bwd()
    identical = {n: bool(torch.equal(first[n].view(torch.int16), second[n].view(torch.int16))) for n in first}
    names, prof_err = kernel_names(fwd_bwd)
    res = torch.ops.aten._scaled_dot_product_flash_attention(qr, kr, vr, 0.0, causal, False, scale=scale)
    torch.cuda.synchronize()
    out = {n: t[:, :h].contiguous() for n, t in first.items()}
    lse_ok = bool(torch.equal(res[0].view(torch.int16), first["o"].view(torch.int16)))
    if lse_ok:
        out["lse"] = res[1][:, :h].float().contiguous()
    return out, identical, names, prof_err, lse_ok


def device_metadata(device):
    import safetensors
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    props = torch.cuda.get_device_properties(device)
    meta = {
        "source": f"cuda:{name}",
        "device": name,
        "compute_capability": f"{major}.{minor}",
        "versions": f"torch={torch.__version__} cuda={torch.version.cuda} cudnn={cudnn} "
                    f"safetensors={getattr(safetensors, '__version__', 'unknown')}",
        "torch": torch.__version__,
        "cuda_runtime": str(torch.version.cuda),
        "multiprocessors": str(props.multi_processor_count),
        "backend": "FLASH_ATTENTION",
    }
    # The model replay reads: flashbits models PyTorch's FA2 on sm_8x and sm_90 only; on another
    # GPU (sm_100's SFUs are unmeasured) the capture names none, and replay asks for --model.
    model = {8: "pytorch-fa2-sm80", 9: "pytorch-fa2-sm90"}.get(major)
    if model is not None:
        meta["model"] = model
    return meta, props.multi_processor_count


def load_inputs(path, dtype, device):
    """q, k, v, do of one input trace, or of several stacked as heads (path: a list)."""
    if isinstance(path, (list, tuple)):
        parts = [load_inputs(p, dtype, device) for p in path]
        meta = dict(parts[0][1])
        meta["seed"] = ",".join(p[1].get("seed", "?") for p in parts)
        return [torch.cat([p[0][i] for p in parts], dim=1) for i in range(4)], meta
    tensors = load_file(path)
    for name in ("q", "k", "v", "do"):
        t = tensors.get(name)
        if t is None or t.dim() != 4 or not t.dtype.is_floating_point:
            raise ValueError(f"{path}: {name}: missing or not a floating [B,H,N,D] tensor")
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    out = []
    for n in ("q", "k", "v", "do"):
        t = tensors[n]
        if t.dtype != dtype:
            # only exact conversions are accepted: the trace must hold what the kernel read
            c = t.to(dtype)
            if not torch.equal(c.to(t.dtype), t):
                raise ValueError(f"{path}: {n}: not exactly representable in {dtype}")
            t = c
        out.append(t.to(device).contiguous())
    return out, meta


def one_capture(path, dtype_name, causal, out_path, dev_meta, sms, heads_min, extra_meta, keep=None):
    device = torch.device("cuda")
    dtype = DTYPES[dtype_name]
    (q, k, v, do), meta_in = load_inputs(path, dtype, device)
    hdim = q.shape[-1]
    scale_in = float(meta_in["softmax_scale"]) if "softmax_scale" in meta_in else 1.0 / math.sqrt(hdim)
    scale = float(torch.tensor(scale_in, dtype=torch.float32).item())  # the kernel's fp32 scale
    batch, _, seq_q, _ = q.shape
    seq_k = k.shape[2]
    heads_run = run_heads_needed(batch, seq_q, sms, heads_min)
    t0 = time.time()
    out, identical, names, prof_err, lse_ok = capture(q, k, v, do, scale, causal, heads_run)
    elapsed = time.time() - t0
    splits_pred = predicted_splits(batch, heads_run, seq_q, seq_k, hdim, sms)
    split_kernel = any("splitkv" in n.lower() for n in names)
    meta = dict(dev_meta)
    meta.update({
        "kernel": "; ".join(names) if names else f"unknown (profiler: {prof_err})",
        "softmax_scale": repr(scale),
        "softmax_scale_requested": repr(scale_in),
        "causal": "true" if causal else "false",
        "dtype": dtype_name,
        "scenario": meta_in.get("scenario", "input-trace"),
        "input_trace": (os.path.basename(path) if isinstance(path, str)
                        else f"{len(path)} traces stacked as heads: {os.path.basename(path[0])} ..."),
        "run_heads": str(heads_run),
        "saved_heads": f"0..{q.shape[1] - 1} (the input's heads; the run tiled them to {heads_run} heads)",
        "num_splits_predicted": str(splits_pred),
        "num_splits": ("split-kv kernel ran" if split_kernel else "1") if names else f"{splits_pred} (predicted)",
        "repeat_identical": json.dumps(identical),
        "lse": "captured" if lse_ok else "not captured (flash op's O differed from the autograd path)",
        "sdpa_call": f"scaled_dot_product_attention(q, k, v, is_causal={causal}, scale={scale!r}) "
                     "under sdpa_kernel(FLASH_ATTENTION), then o.backward(do)",
    })
    if "seed" in meta_in:
        meta["seed"] = meta_in["seed"]
    if "source" in meta_in:
        meta["input_source"] = meta_in["source"]  # e.g. emulated: the inputs came from flashbits
    meta.update(tiles_from_kernels(names))
    meta.update(extra_meta)
    tensors = {"q": q, "k": k, "v": v, "do": do}
    tensors.update(out)
    if keep is not None:
        tensors = {n: t for n, t in tensors.items() if n in keep}
    save_file({n: t.detach().contiguous().cpu() for n, t in tensors.items()}, out_path, metadata=meta)
    return {"file": os.path.basename(out_path), "seconds": round(elapsed, 3), "kernels": names,
            "profiler_error": prof_err, "num_splits_predicted": splits_pred, "split_kernel_ran": split_kernel,
            "run_heads": heads_run, "repeat_identical": identical, "lse": lse_ok,
            "tiles": tiles_from_kernels(names)}


def eager_capture(path, dtype_name, out_path, dev_meta):
    """PyTorch eager materialised attention (what flashbits' standard-<dtype> models): S = (Q Kᵀ) *
    scale, P = softmax(S) (fp32 inside, stored in dtype), O = P V; backward by autograd."""
    device = torch.device("cuda")
    (q, k, v, do), meta_in = load_inputs(path, DTYPES[dtype_name], device)
    hdim = q.shape[-1]
    scale_in = float(meta_in["softmax_scale"]) if "softmax_scale" in meta_in else 1.0 / math.sqrt(hdim)
    scale = float(torch.tensor(scale_in, dtype=torch.float32).item())

    def run():
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        s = torch.matmul(qg, kg.transpose(-2, -1)) * scale
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p, vg)
        o.backward(do)
        torch.cuda.synchronize()
        return {"o": o.detach(), "dq": qg.grad, "dk": kg.grad, "dv": vg.grad}

    first, second = run(), run()
    identical = {n: bool(torch.equal(first[n].view(torch.int16), second[n].view(torch.int16))) for n in first}
    names, prof_err = kernel_names(run)
    meta = dict(dev_meta)
    meta.update({
        "backend": "eager (torch.matmul, torch.softmax)",
        "model": f"standard-{dtype_name}",
        "kernel": "; ".join(names) if names else f"unknown (profiler: {prof_err})",
        "softmax_scale": repr(scale), "causal": "false", "dtype": dtype_name,
        "scenario": meta_in.get("scenario", "input-trace"), "input_trace": os.path.basename(path),
        "repeat_identical": json.dumps(identical),
        "torch_call": "o = softmax((q @ k^T) * scale, -1) @ v; o.backward(do)",
        "allow_bf16_reduced_precision_reduction":
            str(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
        "allow_fp16_reduced_precision_reduction":
            str(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
    })
    if "seed" in meta_in:
        meta["seed"] = meta_in["seed"]
    tensors = {"q": q, "k": k, "v": v, "do": do}
    tensors.update(first)
    save_file({n: t.detach().contiguous().cpu() for n, t in tensors.items()}, out_path, metadata=meta)
    return {"file": os.path.basename(out_path), "kernels": names, "profiler_error": prof_err,
            "repeat_identical": identical}


def plan(args, dev_meta, sms):
    log_path = os.path.join(args.out_dir, "capture_log.jsonl")
    ok = 0
    jobs = []
    for dtype_name in args.dtypes.split(","):
        for hdim in (int(h) for h in args.hdims.split(",")):
            for causal in (False, True):
                for scenario in args.scenarios.split(","):
                    jobs.append((dtype_name, hdim, causal, scenario))
    for dtype_name, hdim, causal, scenario in jobs:
        base = f"{scenario}_d{hdim}"
        # inputs made in the capture's own dtype when present (make-trace --dtype), else the bf16 ones
        candidates = [f"{base}_{dtype_name}.safetensors", f"{base}.safetensors"]
        path = next((os.path.join(args.inputs_dir, c) for c in candidates
                     if os.path.exists(os.path.join(args.inputs_dir, c))), None)
        name = f"torch_{dtype_name}_{base}{'_causal' if causal else ''}.safetensors"
        record = {"capture": name, "dtype": dtype_name, "hdim": hdim, "causal": causal, "scenario": scenario}
        t0 = time.time()
        try:
            if path is None:
                raise FileNotFoundError(f"no input among {candidates} in {args.inputs_dir}")
            record.update(one_capture(path, dtype_name, causal, os.path.join(args.out_dir, name), dev_meta, sms,
                                      args.run_heads, {}))
            record["status"] = "ok"
            ok += 1
        except Exception as exc:  # noqa: BLE001 - one failed capture must not lose the others
            record["status"] = "error"
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc()[-2000:]
        record["wall_seconds"] = round(time.time() - t0, 3)
        with open(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{name}: {record['status']}" + (f" ({record.get('error')})" if record["status"] != "ok" else
              f" splits={record.get('num_splits_predicted')} tiles={record.get('tiles')}"), flush=True)
    if args.bias_dir and os.path.isdir(args.bias_dir):
        # The hardware bias test's trials: one input trace per seed, stacked as the heads of
        # one run (bf16, non-causal). Only what the O and delta bias need is saved.
        paths = sorted(os.path.join(args.bias_dir, f) for f in os.listdir(args.bias_dir) if f.endswith(".safetensors"))
        name = f"torch_bf16_sink_d64_x{len(paths)}.safetensors"
        record = {"capture": name, "dtype": "bf16", "hdim": 64, "causal": False, "scenario": "sink",
                  "stacked_inputs": len(paths)}
        t0 = time.time()
        try:
            os.makedirs(os.path.join(args.out_dir, "bias"), exist_ok=True)
            record.update(one_capture(paths, "bf16", False, os.path.join(args.out_dir, "bias", name), dev_meta, sms,
                                      args.run_heads, {}, keep=("q", "k", "v", "do", "o", "lse")))
            record["status"] = "ok"
            ok += 1
        except Exception as exc:  # noqa: BLE001
            record["status"] = "error"
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc()[-2000:]
        record["wall_seconds"] = round(time.time() - t0, 3)
        with open(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{name}: {record['status']}", flush=True)
    for dtype_name in args.dtypes.split(","):
        for scenario in ("random", "sink"):
            name = f"eager_{dtype_name}_{scenario}_d64.safetensors"
            path = os.path.join(args.inputs_dir, f"{scenario}_d64_{dtype_name}.safetensors")
            record = {"capture": name, "dtype": dtype_name, "hdim": 64, "causal": False, "scenario": scenario}
            try:
                os.makedirs(os.path.join(args.out_dir, "eager"), exist_ok=True)
                record.update(eager_capture(path, dtype_name, os.path.join(args.out_dir, "eager", name), dev_meta))
                record["status"] = "ok"
            except Exception as exc:  # noqa: BLE001
                record["status"] = "error"
                record["error"] = f"{type(exc).__name__}: {exc}"
            with open(log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{name}: {record['status']}", flush=True)
    return 0 if ok else 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", help="input trace with q, k, v, do ([B,H,N,D]), e.g. from flashbits make-trace")
    ap.add_argument("--out", help="output trace (single mode)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--plan", action="store_true", help="capture the device session's whole set")
    ap.add_argument("--inputs-dir", default="gpu/inputs")
    ap.add_argument("--out-dir")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--hdims", default="64,128")
    ap.add_argument("--scenarios", default="random,sink,fa3-outliers")
    ap.add_argument("--bias-dir", default=None, help="input traces to stack as heads (the bias test's trials)")
    ap.add_argument("--run-heads", type=int, default=64, help="minimum heads of the run (split-KV avoidance)")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    dev_meta, sms = device_metadata(torch.device("cuda"))
    if args.plan:
        if not args.out_dir:
            print("error: --plan needs --out-dir", file=sys.stderr)
            return 2
        os.makedirs(args.out_dir, exist_ok=True)
        return plan(args, dev_meta, sms)
    if not args.input or not args.out:
        print("error: single mode needs --input and --out", file=sys.stderr)
        return 2
    try:
        rec = one_capture(args.input, args.dtype, args.causal, args.out, dev_meta, sms, args.run_heads, {})
    except Exception as exc:  # noqa: BLE001
        print(f"error: {args.input}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
