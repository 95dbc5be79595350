#!/usr/bin/env python3
"""gpu/capture_paths.py: capture the attention paths PyTorch users run besides FA2 (issue 38).

Contract:
- One path per process (--path), so that a fault in one cannot lose another's results:
  * splitkv:  PyTorch's bundled FA2 forward where its num_splits heuristic splits the keys
              (batch*heads*row blocks small, seqlen_k long; decoding with seqlen_q = 1 or 4
              and a KV cache): torch.ops.aten._scaled_dot_product_flash_attention, forward
              only (FA2 has no split-KV backward), O and LSE. Proof in the log: the profiler
              names flash_fwd_splitkv_kernel and flash_fwd_splitkv_combine_kernel.
  * flex:     torch.nn.attention.flex_attention.flex_attention compiled by torch.compile (the
              Triton template kernels; uncompiled flex runs a reference, not the kernel),
              forward + backward, causal through a block mask (bottom-right where
              seqlen_q != seqlen_k), return_lse. Proof: Triton kernel names (triton_*).
  * tutorial: the Triton tutorial's fused attention (python/tutorials/06-fused-attention.py,
              the file given by --tutorial-file; NOT shipped in this repo, see gpu/README.md
              "Attention paths"), fp16, forward + backward, its autotuner restricted to the
              BLOCK_M 128 x BLOCK_N 64 configuration flashbits models. Proof: _attn_fwd*
              and _attn_bwd* kernel names.
  * math:     F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.MATH) (cuBLAS GEMMs,
              softmax), forward + backward; is_causal (top-left) and causal_lower_right
              (bottom-right) where seqlen_q != seqlen_k. Proof: GEMM kernel names, no fused
              attention kernel.
  * cudnn:    the same under SDPBackend.CUDNN_ATTENTION (black box: seqlen, head dim, causal
              varied), forward + backward, LSE from aten._scaled_dot_product_cudnn_attention
              when its O equals the autograd path's bit for bit. Proof: cudnn kernel names.
- Inputs: q, k, v, dO drawn per capture with a seeded CPU generator (torch.randn, fp32,
  rounded to the dtype by .to(); seed in the metadata), so the trace holds exactly what the
  kernel read. Each capture runs twice; repeat_identical records whether every output was
  bit-identical. The softmax scale is 1/sqrt(d) rounded to fp32 and passed explicitly.
- Output: DIR/<capture>.safetensors in flashbits' trace schema (traces/trace.hpp): q, k, v,
  o [, do, dq, dk, dv] as [B,H,N,D], lse as [B,H,Nq] where its convention is FA2's (natural
  log of the sum of exp(scale*s)); a path's own statistics under their own names (flex:
  lse_flex, as flex_attention(return_lse=True) returns it; tutorial: m_log2_tutorial, the
  tutorial's M = m + log2(l) in scaled log2 units). __metadata__ follows capture_torch.py
  (source cuda:<device>, device, compute_capability, versions, kernel = the profiler's
  names, softmax_scale, causal, dtype, seed, repeat_identical) plus: path, seqlen_q,
  seqlen_k, causal_alignment (none | top-left | bottom-right), backward, path_taken (the
  kernel evidence), model only where flashbits has a model of that kernel (splitkv:
  pytorch-fa2-sm90+splitkv:auto,sms=<the GPU's SMs> (-sm80 below sm_90); tutorial:
  triton-tutorial-sm90 (triton-tutorial below sm_90)).
  DIR/capture_log.jsonl: one line per capture (status, kernels, proof, timings, errors).
- flex and tutorial: the Triton kernels' SASS and PTX from the Triton/Inductor cache
  (--cache-dir, set before torch is imported): DIR/sass/<kernel>.sass and .ptx, and
  DIR/sass/triton_summary.tsv (per kernel: MUFU.EX2/RCP/LG2, FFMA, FMUL, FADD, FCHK, CALL in
  the SASS; ex2.approx(.ftz).f32, div.full.f32, div.rn.f32, rcp.approx, fma.rn.f32,
  lg2.approx in the PTX), which settle FMA contraction, the tl.exp2 lowering and the
  division lowering.
- --stand-in: no GPU. Every capture of the plan is computed on the CPU by a plain float32
  formula (S = q k^T * scale, the path's mask, softmax, P v, autograd; what the math
  backend computes), written through the same writer with source "emulated", kernel
  "none", path_taken "no: CPU stand-in" and stand_in saying it is NOT a hardware capture.
  It needs only torch (>= 1.13) and numpy; safetensors is not needed in either mode (the
  writer below lays the file out as safetensors.torch.save_file does).
- --list: print the plan (one capture per line) and exit. --dump-sass-from CACHE_DIR: only
  the SASS/PTX step, on the cubins under CACHE_DIR (exit 1 when there is none): the CPU
  rehearsal runs it on cubins nvcc made, so the step cannot rot.
- Exit 0 when every capture of the plan succeeded, 1 when some failed (each failure is in
  the log and on stdout), 2 on bad usage, no CUDA device without --stand-in, or a
  missing tutorial file.
"""
import argparse
import ast
import hashlib
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_common import kernel_names, predicted_splits  # noqa: E402

PATHS = ("splitkv", "flex", "tutorial", "math", "cudnn")


class Shape:
    def __init__(self, name, dtype, batch, heads, seq_q, seq_k, hdim, causal, backward=True):
        self.name, self.dtype, self.batch, self.heads = name, dtype, batch, heads
        self.seq_q, self.seq_k, self.hdim = seq_q, seq_k, hdim
        # causal: None (full), "top-left" (row i sees keys <= i) or "bottom-right" (row i sees
        # keys <= i + seq_k - seq_q); the two coincide when seq_q == seq_k.
        self.causal, self.backward = causal, backward


# The plans. Sizes keep every path's captures to a few MiB (the device tool returns 8 files of
# 16 MiB) and each path's device time to seconds (flex and tutorial: compilation).
PLANS = {
    # H200: 132 SMs, 2*SMs = 264; FA2 splits when batch*heads*ceil(seq_q/64) < 0.8*264 and
    # seq_k spans >= 2 blocks (block_n 256 for d <= 64, 128 for d <= 128).
    "splitkv": [
        # predicted splits on 132 SMs: 8, 4, 4, 8, 2
        Shape("splitkv_bf16_decode_q1_k1024_d128", "bf16", 1, 2, 1, 1024, 128, None, False),
        Shape("splitkv_fp16_decode_q4_k1024_d64_causal", "fp16", 1, 2, 4, 1024, 64, "bottom-right", False),
        Shape("splitkv_bf16_cross_q128_k1024_d64_causal", "bf16", 1, 2, 128, 1024, 64, "bottom-right", False),
        Shape("splitkv_bf16_n1024_d128_causal", "bf16", 1, 1, 1024, 1024, 128, "bottom-right", False),
        Shape("splitkv_bf16_n512_d64", "bf16", 1, 1, 512, 512, 64, None, False),
    ],
    "flex": [
        Shape("flex_bf16_n256_d64", "bf16", 1, 2, 256, 256, 64, None),
        Shape("flex_bf16_n256_d64_causal", "bf16", 1, 2, 256, 256, 64, "bottom-right"),
        Shape("flex_bf16_cross_q128_k384_d64_causal", "bf16", 1, 2, 128, 384, 64, "bottom-right"),
        Shape("flex_bf16_decode_q16_k1024_d64", "bf16", 1, 2, 16, 1024, 64, None),
        # Open questions for flashbits' models (each is refused or ASSUMED there today):
        # lengths that are not multiples of 128 (Inductor's IS_DIVISIBLE false: the bounds
        # tl.where before the exponent, measured on the decode kernel, assumed on the template);
        Shape("flex_bf16_n200_d64", "bf16", 1, 2, 200, 200, 64, None),
        # and under a causal block mask, whose blocks holding padding are never full (the order);
        Shape("flex_bf16_n200_d64_causal", "bf16", 1, 1, 200, 200, 64, "bottom-right"),
        # a causal decode, whose block mask spreads the keys over several splits (the combine's
        # order);
        Shape("flex_bf16_decode_q16_k1024_d64_causal", "bf16", 1, 2, 16, 1024, 64, "bottom-right"),
        # and with 8 heads, SPLIT_KV = 132 // 8 * 2 = 32 splits: the combine Inductor compiles for
        # another split count (gpu/analysis/flex/FINDINGS.md read only the one for 132);
        Shape("flex_bf16_decode_q8_k256_d64_causal_h8", "bf16", 1, 8, 8, 256, 64, "bottom-right"),
        # a head dimension that is not a power of two (Triton pads it to 128 in registers).
        Shape("flex_bf16_n256_d96", "bf16", 1, 2, 256, 256, 96, None),
    ],
    # The tutorial takes one N_CTX (seq_q == seq_k), a multiple of 128 (its backward asserts
    # it), fp16 (its P and dS casts are to fp16); its backward always applies the causal mask.
    "tutorial": [
        Shape("tutorial_fp16_n256_d64", "fp16", 1, 2, 256, 256, 64, None),
        Shape("tutorial_fp16_n256_d64_causal", "fp16", 1, 2, 256, 256, 64, "top-left"),
        Shape("tutorial_fp16_n256_d128_causal", "fp16", 1, 2, 256, 256, 128, "top-left"),
    ],
    "math": [
        Shape("math_bf16_n256_d64", "bf16", 1, 2, 256, 256, 64, None),
        Shape("math_fp16_n256_d64_causal", "fp16", 1, 2, 256, 256, 64, "top-left"),
        Shape("math_bf16_cross_q64_k256_d64_causal_tl", "bf16", 1, 2, 64, 256, 64, "top-left"),
        Shape("math_bf16_cross_q64_k256_d64_causal_br", "bf16", 1, 2, 64, 256, 64, "bottom-right"),
        # Rows over 1024 keys, where PyTorch's softmax kernels change (SoftMax.cu, read from the
        # source, unmeasured): 2048 keys, the warp forward's longest row and the shared-memory
        # block backward; 3001 keys, the register block forward and the plain block backward,
        # whose order follows each row's alignment (3001 is odd: all four shifts).
        Shape("math_bf16_cross_q64_k2048_d64", "bf16", 1, 1, 64, 2048, 64, None),
        Shape("math_bf16_cross_q16_k3001_d32_causal_br", "bf16", 1, 1, 16, 3001, 32, "bottom-right"),
    ],
    "cudnn": [
        Shape("cudnn_bf16_n256_d64", "bf16", 1, 2, 256, 256, 64, None),
        Shape("cudnn_bf16_n256_d64_causal", "bf16", 1, 2, 256, 256, 64, "top-left"),
        Shape("cudnn_fp16_n384_d64", "fp16", 1, 2, 384, 384, 64, None),
        Shape("cudnn_bf16_n512_d128_causal", "bf16", 1, 1, 512, 512, 128, "top-left"),
        Shape("cudnn_bf16_n200_d96", "bf16", 1, 2, 200, 200, 96, None),
        Shape("cudnn_bf16_cross_q128_k512_d64", "bf16", 1, 2, 128, 512, 64, None),
        Shape("cudnn_bf16_cross_q128_k512_d64_causal_br", "bf16", 1, 2, 128, 512, 64, "bottom-right"),
    ],
}

# The captures that ask what flashbits' models leave open (the rest repeat the first run's):
# gpu/open_questions_device.sh runs only these (--open-questions).
OPEN_QUESTIONS = {
    "flex": ["flex_bf16_n200_d64", "flex_bf16_n200_d64_causal", "flex_bf16_decode_q16_k1024_d64_causal",
             "flex_bf16_decode_q8_k256_d64_causal_h8", "flex_bf16_n256_d96"],
    "math": ["math_bf16_cross_q64_k2048_d64", "math_bf16_cross_q16_k3001_d32_causal_br"],
}

# What the profiler must show for the capture to count as the path.
PROOF = {
    "splitkv": "flash_fwd_splitkv_kernel and flash_fwd_splitkv_combine_kernel",
    "flex": "a Triton kernel (triton_*)",
    "tutorial": "_attn_fwd* (and _attn_bwd* with the backward)",
    "math": "a GEMM kernel (gemm, nvjet, cutlass, xmma, cublas) and no fused attention kernel",
    "cudnn": "a cuDNN kernel (cudnn*)",
}


def path_taken(path, names, backward):
    low = [n.lower() for n in names]
    has = lambda s: any(s in n for n in low)  # noqa: E731
    if path == "splitkv":
        return has("flash_fwd_splitkv_kernel") and has("flash_fwd_splitkv_combine_kernel")
    if path == "flex":
        return any(n.startswith("triton") or "triton_" in n for n in low)
    if path == "tutorial":
        return has("_attn_fwd") and (has("_attn_bwd") or not backward)
    if path == "math":
        gemm = any(re.search(r"gemm|nvjet|cutlass|xmma|cublas", n) for n in low)
        fused = any(re.search(r"flash|fmha|cudnn|attention", n) for n in low)
        return gemm and not fused
    if path == "cudnn":
        return has("cudnn")
    return False


# ---- the trace writer: safetensors laid out as safetensors.torch.save_file does ------------
ST_DTYPES = {"bfloat16": ("BF16", 2), "float16": ("F16", 2), "float32": ("F32", 4)}


def tensor_bytes(t):
    """The tensor's little-endian element bytes (numpy when present, else through uint8)."""
    import torch
    t = t.detach().contiguous().cpu()
    try:
        import numpy  # noqa: F401
        return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
    except ImportError:  # torch without numpy: reinterpret as bytes (torch >= 2.0)
        return bytes(t.reshape(-1).view(torch.uint8).tolist())


def save_trace(path, tensors, metadata):
    """Writes tensors (name -> torch tensor of bf16/fp16/fp32) and string metadata."""
    entries = []
    for name, t in tensors.items():
        code, size = ST_DTYPES[str(t.dtype).replace("torch.", "")]
        entries.append((name, code, size, list(t.shape), tensor_bytes(t)))
    entries.sort(key=lambda e: (-e[2], e[0]))
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    offset = 0
    for name, code, _, shape, raw in entries:
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for e in entries:
            f.write(e[4])
    os.replace(tmp, path)


# ---- inputs, masks, the CPU formula ---------------------------------------------------------
def fp32_scale(hdim):
    return struct.unpack("<f", struct.pack("<f", 1.0 / math.sqrt(hdim)))[0]


def make_inputs(shape, seed):
    import torch
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[shape.dtype]
    g = torch.Generator().manual_seed(seed)
    dims_q = (shape.batch, shape.heads, shape.seq_q, shape.hdim)
    dims_k = (shape.batch, shape.heads, shape.seq_k, shape.hdim)
    q = torch.randn(dims_q, generator=g).to(dt)
    k = torch.randn(dims_k, generator=g).to(dt)
    v = torch.randn(dims_k, generator=g).to(dt)
    do = torch.randn(dims_q, generator=g).to(dt)
    return q, k, v, do


def allowed(shape):
    """[seq_q, seq_k] bool: which keys each row sees."""
    import torch
    i = torch.arange(shape.seq_q).unsqueeze(1)
    j = torch.arange(shape.seq_k).unsqueeze(0)
    if shape.causal is None:
        return torch.ones(shape.seq_q, shape.seq_k, dtype=torch.bool)
    if shape.causal == "top-left":
        return j <= i
    return j <= i + (shape.seq_k - shape.seq_q)


def stand_in(shape, q, k, v, do, scale):
    """The plain float32 formula on the CPU (what the math backend computes), with autograd."""
    import torch
    qf, kf, vf = (t.float().requires_grad_(True) for t in (q, k, v))
    s = torch.matmul(qf, kf.transpose(-2, -1)) * scale
    s = s.masked_fill(~allowed(shape), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.softmax(s, dim=-1), vf)
    out = {"o": o.detach().to(q.dtype), "lse": lse.detach()}
    if shape.backward:
        o.backward(do.float())
        out.update({"dq": qf.grad.to(q.dtype), "dk": kf.grad.to(q.dtype), "dv": vf.grad.to(q.dtype)})
    return out


# ---- the GPU paths ---------------------------------------------------------------------------
def bits_equal(a, b):
    import torch
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = torch.int16 if a.element_size() == 2 else torch.int32
    return bool(torch.equal(a.contiguous().view(view), b.contiguous().view(view)))


def autograd_run(shape, q, k, v, do, fwd):
    """fwd(qg, kg, vg) -> o (and extras); runs the backward with do where the shape has one."""
    import torch
    qg, kg, vg = (t.detach().clone().requires_grad_(shape.backward) for t in (q, k, v))
    res = fwd(qg, kg, vg)
    o, extra = (res if isinstance(res, tuple) else (res, {}))
    out = {"o": o.detach()}
    out.update(extra)
    if shape.backward:
        o.backward(do)
        out.update({"dq": qg.grad, "dk": kg.grad, "dv": vg.grad})
    torch.cuda.synchronize()
    return out


class Runner:
    """Per path: the forward (and backward) on the GPU, returning the output tensors."""

    def __init__(self, path, args):
        self.path, self.args = path, args
        self.compiled = None
        self.tutorial = None
        self.notes = {}

    def setup(self):
        import torch
        if self.path == "flex":
            from torch.nn.attention.flex_attention import flex_attention
            # Each shape (and block mask) is one more compile of this one function, and Dynamo
            # runs a function eagerly, with a warning only, once it passes its recompile limit
            # (8 by default; the full flex plan has 9 shapes): eager flex is a reference, not
            # the kernel. The limit is raised, and where this torch has the switch, passing it
            # is an error rather than an eager run.
            import torch._dynamo  # lazily loaded by some torch versions: named, so it is there
            dynamo = torch._dynamo.config
            for names in (("recompile_limit", "cache_size_limit"),  # the new name, else the old one
                          ("accumulated_recompile_limit", "accumulated_cache_size_limit")):
                limit = next((n for n in names if hasattr(dynamo, n)), None)
                if limit:
                    setattr(dynamo, limit, max(getattr(dynamo, limit), 256))
            if hasattr(dynamo, "fail_on_recompile_limit_hit"):
                dynamo.fail_on_recompile_limit_hit = True
            self.compiled = torch.compile(flex_attention, dynamic=False)
            self.notes["flex_compile"] = ("torch.compile(flex_attention, dynamic=False), default options but "
                                          "Dynamo's recompile limit raised to 256")
        if self.path == "tutorial":
            self.tutorial = load_tutorial(self.args.tutorial_file, self.notes)
        if self.path == "math":
            fn = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", None)
            self.notes["fp16_bf16_reduction_math_sdp_allowed"] = str(fn()) if fn else "unknown (no such flag)"
            self.notes["allow_bf16_reduced_precision_reduction"] = str(
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
            self.notes["allow_fp16_reduced_precision_reduction"] = str(
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
            self.notes["allow_tf32"] = str(torch.backends.cuda.matmul.allow_tf32)

    def run(self, shape, q, k, v, do, scale):
        import torch
        import torch.nn.functional as F
        causal = shape.causal is not None
        if self.path == "splitkv":
            def fwd():
                with torch.no_grad():
                    r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
                torch.cuda.synchronize()
                return {"o": r[0], "lse": r[1].float()}
            return fwd
        if self.path in ("math", "cudnn"):
            from torch.nn.attention import SDPBackend, sdpa_kernel
            backend = SDPBackend.MATH if self.path == "math" else SDPBackend.CUDNN_ATTENTION
            mask = None
            if shape.causal == "bottom-right" and shape.seq_q != shape.seq_k:
                from torch.nn.attention.bias import causal_lower_right
                mask = causal_lower_right(shape.seq_q, shape.seq_k)

            def sdpa(qg, kg, vg):
                with sdpa_kernel(backend):
                    if mask is not None:
                        return F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, scale=scale)
                    return F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
            return lambda: autograd_run(shape, q, k, v, do, sdpa)
        if self.path == "flex":
            from torch.nn.attention.flex_attention import create_block_mask
            block_mask = None
            if causal:
                off = shape.seq_k - shape.seq_q

                def bottom_right(b, h, qi, ki):
                    return qi + off >= ki
                block_mask = create_block_mask(bottom_right, None, None, shape.seq_q, shape.seq_k, device="cuda")

            def flex(qg, kg, vg):
                try:
                    o, lse = self.compiled(qg, kg, vg, block_mask=block_mask, scale=scale, return_lse=True)
                except TypeError:  # a torch whose flex_attention took return_lse away: return_aux
                    from torch.nn.attention.flex_attention import AuxRequest
                    o, aux = self.compiled(qg, kg, vg, block_mask=block_mask, scale=scale,
                                           return_aux=AuxRequest(lse=True))
                    lse = aux.lse
                return o, {"lse_flex": lse.detach().float()}
            return lambda: autograd_run(shape, q, k, v, do, flex)
        if self.path == "tutorial":
            def tut(qg, kg, vg):
                o = self.tutorial.attention(qg, kg, vg, causal, scale)
                saved = getattr(o.grad_fn, "saved_tensors", ())
                extra = {"m_log2_tutorial": saved[4].detach().float()} if len(saved) >= 5 else {}
                return o, extra
            return lambda: autograd_run(shape, q, k, v, do, tut)
        raise ValueError(self.path)

    def lse_extra(self, shape, q, k, v, scale, o):
        """cudnn: the LSE from the aten op, kept when its O equals the autograd path's."""
        import torch
        if self.path != "cudnn" or shape.causal == "bottom-right" and shape.seq_q != shape.seq_k:
            return {}, "not captured (this path's LSE is not reachable here)"
        try:
            r = torch.ops.aten._scaled_dot_product_cudnn_attention(
                q, k, v, None, True, 0.0, shape.causal is not None, False, scale=scale)
            torch.cuda.synchronize()
            if bits_equal(r[0], o):
                lse = r[1].float()
                if lse.dim() == 4 and lse.shape[-1] == 1:
                    lse = lse[..., 0]
                return {"lse": lse.contiguous()}, "captured (aten._scaled_dot_product_cudnn_attention, same O)"
            return {}, "not captured (the aten op's O differed from the autograd path's)"
        except Exception as exc:  # noqa: BLE001
            return {}, f"not captured ({type(exc).__name__}: {str(exc)[:200]})"


def load_tutorial(path, notes):
    """Imports the tutorial file as a module; its autotuners restricted to BLOCK_M 128 x
    BLOCK_N 64 (the configuration flashbits' triton-tutorial model reads)."""
    import importlib.util
    import types
    if "pytest" not in sys.modules:
        try:
            import pytest  # noqa: F401
        except ImportError:  # the tutorial imports pytest for its test only
            stub = types.ModuleType("pytest")
            stub.mark = types.SimpleNamespace(parametrize=lambda *a, **k: (lambda f: f))
            sys.modules["pytest"] = stub
    spec = importlib.util.spec_from_file_location("fb_triton_tutorial_06", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    chosen = []
    for name in dir(mod):
        obj = getattr(mod, name)
        configs = getattr(obj, "configs", None)
        if isinstance(configs, list) and configs and hasattr(configs[0], "kwargs"):
            pick = [c for c in configs if c.kwargs.get("BLOCK_M") == 128 and c.kwargs.get("BLOCK_N") == 64]
            keep = pick[:1] or configs[:1]
            obj.configs = keep
            chosen.append(f"{name}: {keep[0]}")
    notes["tutorial_autotune"] = "; ".join(chosen) if chosen else "no autotuner found"
    return mod


def tutorial_file_facts(path):
    """sha256, size and whether it parses and defines attention (no triton needed)."""
    data = open(path, "rb").read()
    facts = {"tutorial_file": os.path.basename(path), "tutorial_sha256": hashlib.sha256(data).hexdigest(),
             "tutorial_bytes": str(len(data))}
    tree = ast.parse(data.decode("utf-8"), filename=path)
    names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assigned = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = [n for n in ("_attention",) if n not in names] + [n for n in ("attention",) if n not in assigned]
    if missing:
        raise ValueError(f"{path}: not the fused-attention tutorial (no {', '.join(missing)})")
    facts["tutorial_kernels"] = ",".join(sorted(n for n in names if n.startswith("_attn")))
    return facts


# ---- Triton SASS/PTX from the cache ----------------------------------------------------------
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
SASS_COUNTS = ("MUFU.EX2", "MUFU.RCP", "MUFU.LG2", "FFMA", "FMUL", "FADD", "FCHK", "CALL")
PTX_COUNTS = ("ex2.approx.f32", "ex2.approx.ftz.f32", "div.full.f32", "div.rn.f32", "div.approx",
              "rcp.approx", "rcp.rn", "fma.rn.f32", "lg2.approx")


def count_sass(text):
    counts = dict.fromkeys(SASS_COUNTS, 0)
    total = 0
    for m in INSN.finditer(text):
        op = m.group(2)
        total += 1
        for key in SASS_COUNTS:
            if op == key or op.startswith(key + "."):
                counts[key] += 1
    counts["instructions"] = total
    return counts


def count_ptx(text):
    return {key: len(re.findall(re.escape(key) + r"(?![\w])", text)) for key in PTX_COUNTS}


def find_tool(name):
    found = shutil.which(name)
    if found:
        return found
    for cand in (f"/usr/local/cuda/bin/{name}",):
        if os.path.exists(cand):
            return cand
    try:
        import triton
        cand = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
        if os.path.exists(cand):
            return cand
    except Exception:  # noqa: BLE001
        pass
    return None


def dump_triton_sass(cache_dir, out_dir, log):
    """Every cubin under cache_dir: SASS (cuobjdump -sass), its PTX beside it, one summary line."""
    os.makedirs(out_dir, exist_ok=True)
    cubins = []
    for root, _, files in os.walk(cache_dir or ""):
        cubins += [os.path.join(root, f) for f in files if f.endswith(".cubin")]
    tool = find_tool("cuobjdump")
    lines = ["kernel\tcubin\t" + "\t".join(SASS_COUNTS) + "\tinstructions\t" + "\t".join(PTX_COUNTS)]
    for cubin in sorted(cubins):
        base = os.path.splitext(os.path.basename(cubin))[0]
        tag = hashlib.sha256(cubin.encode()).hexdigest()[:8]
        name = f"{base}_{tag}"
        sass = ""
        if tool:
            r = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True, timeout=60)
            sass = r.stdout if r.returncode == 0 else f"cuobjdump exit {r.returncode}: {r.stderr[:500]}"
        else:
            sass = "no cuobjdump found"
        with open(os.path.join(out_dir, name + ".sass"), "w") as f:
            f.write(sass)
        ptx_path = os.path.splitext(cubin)[0] + ".ptx"
        ptx = open(ptx_path).read() if os.path.exists(ptx_path) else ""
        if ptx:
            shutil.copy(ptx_path, os.path.join(out_dir, name + ".ptx"))
        s, p = count_sass(sass), count_ptx(ptx)
        lines.append("\t".join([base, os.path.relpath(cubin, cache_dir)] + [str(s[k]) for k in SASS_COUNTS] +
                               [str(s["instructions"])] + [str(p[k]) for k in PTX_COUNTS]))
    with open(os.path.join(out_dir, "triton_summary.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    log(f"sass: {len(cubins)} Triton cubins under {cache_dir}, cuobjdump {tool or 'missing'} -> {out_dir}")
    return len(cubins)


# ---- metadata and the plan -------------------------------------------------------------------
def device_metadata(stand_in_mode):
    import torch
    if stand_in_mode:
        return {
            "source": "emulated",
            "device": "none (CPU stand-in)",
            "compute_capability": "none",
            "versions": f"torch={torch.__version__} (CPU)",
            "torch": torch.__version__,
        }, 0
    name = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
        triton_version = "none"
    props = torch.cuda.get_device_properties(0)
    return {
        "source": f"cuda:{name}",
        "device": name,
        "compute_capability": f"{major}.{minor}",
        "versions": f"torch={torch.__version__} cuda={torch.version.cuda} cudnn={cudnn} triton={triton_version}",
        "torch": torch.__version__,
        "cuda_runtime": str(torch.version.cuda),
        "multiprocessors": str(props.multi_processor_count),
    }, major


def model_for(path, shape, major, sms):
    """The flashbits model that replays the path's capture of `shape` (the metadata's model, which
    replay and bias-test --traces read): split-KV with the heuristic's SM count, the tutorial as
    Triton compiles it for sm_90 (its TMA forward) or the sm80 recipe, and on sm_90 the math
    backend, FlexAttention's template or its decoding kernel (queries under 128 rows,
    _use_flex_decoding) and the cuDNN black-box fit; None where flashbits has no model of the
    kernel on this GPU. A model may still refuse a shape it does not cover, naming why."""
    if major not in (8, 9):  # sm_100 and later: no model measured there
        return None
    if path == "splitkv":
        return f"pytorch-fa2-sm{major}0+splitkv:auto,sms={sms}"
    if path == "tutorial":
        return "triton-tutorial-sm90" if major == 9 else "triton-tutorial"
    if major != 9:
        return None
    if path == "flex":
        return "flex-decoding-sm90" if shape.seq_q < 128 else "flex-attention-sm90"
    return {"math": "pytorch-math-sm90", "cudnn": "cudnn-sdpa-sm90"}.get(path)


def num_splits_predicted(shape, sms):
    """FA2's heuristic (gpu/capture_common.py), for the record."""
    return str(predicted_splits(shape.batch, shape.heads, shape.seq_q, shape.seq_k, shape.hdim, sms))


def capture_one(path, shape, index, args, runner, dev_meta, major, sms):
    import torch
    seed = args.seed + index
    scale = fp32_scale(shape.hdim)
    q, k, v, do = make_inputs(shape, seed)
    record = {"capture": shape.name + ".safetensors", "path": path, "dtype": shape.dtype, "seqlen_q": shape.seq_q,
              "seqlen_k": shape.seq_k, "head_dim": shape.hdim, "causal": shape.causal or "none",
              "backward": shape.backward}
    t0 = time.time()
    if args.stand_in:
        out = stand_in(shape, q, k, v, do, scale)
        # the stand-in keeps the statistics the path's capture keeps, under the same names
        if path == "flex":
            out["lse_flex"] = out.pop("lse")
        elif path == "tutorial":
            out["m_log2_tutorial"] = out.pop("lse") / math.log(2.0)  # M = m + log2(l), scaled log2 units
        elif path == "math" or (path == "cudnn" and shape.causal == "bottom-right" and shape.seq_q != shape.seq_k):
            out.pop("lse")
        names, prof_err, identical, lse_note = [], "CPU stand-in: no kernels", {}, "stand-in: float32 logsumexp"
        taken = "no: CPU stand-in (the plain float32 formula on the CPU), not this path's kernel"
    else:
        dev = torch.device("cuda")
        q, k, v, do = (t.to(dev) for t in (q, k, v, do))
        fn = runner.run(shape, q, k, v, do, scale)
        first = fn()
        second = fn()
        identical = {n: bits_equal(first[n], second[n]) for n in first}
        names, prof_err = kernel_names(fn)
        out = dict(first)
        extra, lse_note = runner.lse_extra(shape, q, k, v, scale, out["o"])
        out.update(extra)
        if path == "splitkv":
            lse_note = "captured (aten._scaled_dot_product_flash_attention)"
        elif path in ("flex", "tutorial"):
            lse_note = "not as lse: the path's own statistic is saved under its own name"
        ok = path_taken(path, names, shape.backward)
        taken = ("yes: " if ok else "NO: ") + "; ".join(names) if names else f"unknown (profiler: {prof_err})"
        record["path_taken"] = ok
    elapsed = time.time() - t0
    meta = dict(dev_meta)
    meta.update({
        "path": path,
        "kernel": "; ".join(names) if names else ("none (CPU stand-in)" if args.stand_in else f"unknown ({prof_err})"),
        "path_taken": taken,
        "path_proof": PROOF[path],
        "softmax_scale": repr(scale),
        "causal": "true" if shape.causal else "false",
        "causal_alignment": shape.causal or "none",
        "dtype": shape.dtype,
        "batch": str(shape.batch), "heads": str(shape.heads), "head_dim": str(shape.hdim),
        "seqlen_q": str(shape.seq_q), "seqlen_k": str(shape.seq_k),
        "backward": "captured" if shape.backward else "not captured (forward-only path)",
        "lse": lse_note,
        "scenario": "random",
        "seed": str(seed),
        "input_generator": "torch.Generator().manual_seed(seed); q, k, v, do = torch.randn (float32) in that order, "
                           ".to(dtype)",
        "repeat_identical": json.dumps(identical),
        "capture_program": "gpu/capture_paths.py",
    })
    meta.update(runner.notes)
    if path == "splitkv":
        meta["num_splits_predicted"] = num_splits_predicted(shape, sms) if sms else "unknown (no GPU)"
        meta["note"] = ("FA2 split-KV: partial O and LSE per split, combined in fp32; flashbits models it with "
                        "+splitkv (the split count from the heuristic with this GPU's SMs)")
    model = model_for(path, shape, major, sms or 132)
    if model and not args.stand_in:
        meta["model"] = model
    if args.stand_in:
        meta["stand_in"] = (f"EMULATED CPU stand-in for the {path} path: NOT a hardware capture and not this "
                            "path's kernel (float32 q k^T * scale, mask, softmax, P v, autograd; torch on the CPU)")
    tensors = {"q": q, "k": k, "v": v}
    if shape.backward:
        tensors["do"] = do
    tensors.update(out)
    save_trace(os.path.join(args.out_dir, shape.name + ".safetensors"), tensors, meta)
    record.update({"status": "ok", "seconds": round(elapsed, 3), "kernels": names, "profiler_error": prof_err,
                   "repeat_identical": identical, "lse": lse_note, "path_taken_text": taken[:300]})
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", choices=PATHS, required=True)
    ap.add_argument("--out-dir")
    ap.add_argument("--stand-in", action="store_true", help="no GPU: CPU stand-ins (source emulated)")
    ap.add_argument("--tutorial-file", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor",
                                                            "triton_06_fused_attention.py"))
    ap.add_argument("--cache-dir", help="Triton/Inductor cache for this run (flex, tutorial): the SASS source")
    ap.add_argument("--seed", type=int, default=38000)
    ap.add_argument("--only", help="comma-separated capture names of the plan")
    ap.add_argument("--open-questions", action="store_true",
                    help="only the plan's captures that ask what the models leave open (OPEN_QUESTIONS)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dump-sass-from", metavar="CACHE_DIR",
                    help="only the SASS/PTX step on the cubins under CACHE_DIR (a CPU check of it), into OUT_DIR/sass")
    args = ap.parse_args()
    if args.dump_sass_from:
        if not args.out_dir:
            print("error: --dump-sass-from needs --out-dir", file=sys.stderr)
            return 2
        n = dump_triton_sass(args.dump_sass_from, os.path.join(args.out_dir, "sass"), print)
        return 0 if n else 1
    plan = PLANS[args.path]
    if args.only:
        wanted = set(args.only.split(","))
        plan = [s for s in plan if s.name in wanted]
    if args.open_questions:
        plan = [s for s in plan if s.name in OPEN_QUESTIONS.get(args.path, [])]
    if args.list:
        for s in plan:
            print(f"{s.name} {s.dtype} B={s.batch} H={s.heads} Nq={s.seq_q} Nk={s.seq_k} d={s.hdim} "
                  f"causal={s.causal or 'none'} backward={s.backward}")
        return 0
    if not args.out_dir:
        print("error: --out-dir is required", file=sys.stderr)
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    if args.cache_dir and args.path in ("flex", "tutorial"):
        os.makedirs(args.cache_dir, exist_ok=True)
        os.environ["TRITON_CACHE_DIR"] = os.path.join(args.cache_dir, "triton")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(args.cache_dir, "inductor")
    log_path = os.path.join(args.out_dir, "capture_log.jsonl")

    def log(msg):
        print(f"[{args.path}] {msg}", flush=True)

    t_start = time.time()
    extra_facts = {}
    if args.path == "tutorial" and not os.path.exists(args.tutorial_file) and args.stand_in:
        # A CPU rehearsal without the file: the stand-ins are still written, and say so.
        log(f"warning: no tutorial file {args.tutorial_file}: stand-ins only, its checks skipped")
        extra_facts = {"tutorial_file": "absent (CPU stand-in run)"}
    elif args.path == "tutorial":
        if not os.path.exists(args.tutorial_file):
            log(f"error: no tutorial file {args.tutorial_file} (gpu/README.md 'Attention paths': where it comes from)")
            with open(log_path, "a") as f:
                f.write(json.dumps({"path": "tutorial", "status": "error", "error": "no tutorial file"}) + "\n")
            return 2
        try:
            extra_facts = tutorial_file_facts(args.tutorial_file)
        except Exception as exc:  # noqa: BLE001
            log(f"error: {exc}")
            return 2
        log(f"tutorial file {args.tutorial_file}: sha256 {extra_facts['tutorial_sha256']}, kernels "
            f"{extra_facts['tutorial_kernels']}")
    import torch
    if not args.stand_in and not torch.cuda.is_available():
        log("error: no CUDA device (use --stand-in on a CPU)")
        return 2
    dev_meta, major = device_metadata(args.stand_in)
    sms = int(dev_meta.get("multiprocessors", "0"))
    dev_meta.update(extra_facts)
    runner = Runner(args.path, args)
    if not args.stand_in:
        t0 = time.time()
        try:
            runner.setup()
        except Exception as exc:  # noqa: BLE001
            log(f"error: setup failed: {type(exc).__name__}: {exc}")
            with open(log_path, "a") as f:
                f.write(json.dumps({"path": args.path, "status": "error", "error": f"setup: {exc}",
                                    "traceback": traceback.format_exc()[-2000:]}) + "\n")
            return 1
        log(f"setup {time.time() - t0:.1f}s: {json.dumps(runner.notes)}")
    failed = 0
    for shape in plan:
        # The seed follows the shape's place in the whole plan, so a run of a few (--only,
        # --open-questions) draws the inputs the whole plan draws.
        index = PLANS[args.path].index(shape)
        t0 = time.time()
        try:
            record = capture_one(args.path, shape, index, args, runner, dev_meta, major, sms)
        except Exception as exc:  # noqa: BLE001 - one failed capture must not lose the others
            failed += 1
            record = {"capture": shape.name + ".safetensors", "path": args.path, "status": "error",
                      "error": f"{type(exc).__name__}: {str(exc)[:500]}", "traceback": traceback.format_exc()[-2000:]}
        record["wall_seconds"] = round(time.time() - t0, 3)
        with open(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        taken = record.get("path_taken")
        log(f"{shape.name}: {record['status']} in {record['wall_seconds']}s" +
            (f" ({record.get('error')})" if record["status"] != "ok" else
             f", path taken: {'stand-in' if args.stand_in else ('yes' if taken else 'NO')}, "
             f"kernels: {'; '.join(record.get('kernels', []))[:400]}"))
    if args.path in ("flex", "tutorial"):
        if args.stand_in:
            log("sass: CPU stand-in, no Triton kernels compiled")
        else:
            try:
                dump_triton_sass(args.cache_dir, os.path.join(args.out_dir, "sass"), log)
            except Exception as exc:  # noqa: BLE001
                log(f"sass: failed: {type(exc).__name__}: {exc}")
    log(f"done: {len(plan) - failed} of {len(plan)} captures in {time.time() - t_start:.1f}s")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
