"""flashbits.torch: a flashbits kernel model as a PyTorch attention op (README "Training").

``scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
scale=None, enable_gqa=False, *, model, ...)`` has the call shape of
``torch.nn.functional.scaled_dot_product_attention`` (PyTorch 2.5's, ``enable_gqa`` included),
so a model swaps one call. It is a ``torch.autograd.Function``: the forward runs the kernel
model (``flashbits.attention``) and keeps what the kernel keeps for its backward (the rounded
inputs, O, LSE and the engine's per-row state: ``keep_forward=True``); the backward runs the
model's own backward from it (``AttentionResult.backward``), without a second forward. For every
model, O, dQ, dK and dV are bit for bit what ``flashbits.attention(q, k, v, model, do=dO)``
returns for the same rounded inputs.

Rounding: each of q, k, v (and the incoming gradient dO) is rounded ONCE, round to nearest
even, from the caller's values to the model's input format (bf16 unless the model names
another, or fp16 for float16 tensors; ``dtype=`` overrides) by flashbits' own rounding, never
through an intermediate type. float16 or bfloat16 tensors given to a model that reads another
narrow format (float16 into ``fa-bf16acc``'s bf16) are refused unless ``dtype=`` names that
format: that rounding would lose bits the caller's tensors hold. A tensor already in that format (bf16 or fp16, contiguous) is
read in place, without a copy. Outputs are rounded once into the caller's dtype (exact
whenever the model's output format fits in it, as bf16 into float32 does); gradients come back
in the dtype of the input they belong to.

Models: every name of ``flashbits.models()`` with its variants (``fa-bf16acc+dynmax``), a
``recipe`` file, an ``sfu`` set; ``correctly-rounded`` (exact attention rounded once per
output); ``exact`` (the exact reference, inputs rounded once to ``dtype``, default fp32 and at
most fp32; its float64 results rounded once to the caller's dtype, so float32 inputs get
float32 outputs; finite-difference checks need inputs and steps that fp32 holds exactly, since
the input rounding removes any other step; ``fp64`` takes arbitrary float64 inputs); and
two controls that are NOT emulations of any kernel: ``fp32`` and ``fp64``, PyTorch's own math
attention (softmax(q kᵀ·scale) v) in that precision with PyTorch's autograd.

Supported: CPU tensors of any floating dtype, shapes [L, E], [H, L, E] or [B, H, L, E]; k and v
with fewer heads than q dividing them (grouped-query attention: query head h reads kv head h //
(Hq/Hk)), with or without ``enable_gqa=True`` (PyTorch refuses most such shapes without it;
here they have the one meaning they can have); ``is_causal`` (PyTorch's mask, aligned top-left:
query i sees keys 0..i, for every model, also when the key length differs from the query
length: ``flashbits.attention(causal="top-left")``; PyTorch's own SDPA does not dispatch its
flash kernel for ``is_causal`` with unequal lengths, so an FA2 model there is a what-if);
``attn_mask=torch.nn.attention.bias.causal_lower_right(L, S)`` (PyTorch's ``CausalBias``: the
mask aligned bottom-right, key j <= i + S - L, as FlashAttention runs a decoding step;
``causal_upper_left`` is ``is_causal``; rows without a key are 0, gradients too);
``scale`` (default 1/sqrt(E)). Refused with a ValueError naming the
argument, never a silent fallback: an ``attn_mask`` other than a ``CausalBias``, ``dropout_p`` other than 0, tensors not on
the CPU, a ``scale`` above fp32's largest value for a model that takes it as a float (its kernel's
would be inf), a key head dim
other than the query's, a value head dim other than the query's (PyTorch allows it; the kernel
models have one head dim), query, key and value of different dtypes or of batch dimensions or
ranks that differ (PyTorch broadcasts a batch of 1; expand the tensors first), float16 or bfloat16
tensors for a model reading another narrow format without ``dtype=`` naming it, an empty axis, a ``dtype=``
that the model's own input format contradicts (``fa-bf16acc`` reads bf16), a model without a
backward when a gradient is needed, a model whose backward is not the gradient of its forward
when a gradient is needed (``triton-tutorial-sm90`` with ``is_causal=False``: the tutorial's
backward always masks causally, ``model_formats(...)["backward_always_causal"]``; forward-only
calls and ``is_causal=True`` run), an argument the model does not use (the controls take
none of recipe, sfu, dtype, seed, threads, observe, trace; ``exact`` none of recipe, sfu,
seed, threads, trace; ``exact``'s ``dtype`` is at most fp32; ``seed`` for a model whose
arithmetic draws no random bits, ``model_formats(...)["seeded"]`` False; ``sfu`` for a model
that evaluates no special function, as ``correctly-rounded`` and ``standard-fp32``: the
engine's refusal); a wrong kind of argument is a TypeError naming it. ``threads`` is taken by
every kernel model and changes only the speed, never a result (``correctly-rounded`` does not
use it: its exact computation splits its heads over the machine's threads). q, k or v changed
in place between the forward and its backward is PyTorch's own RuntimeError ("... modified by
an inplace operation"; the op saves them with ``save_for_backward``), never a gradient of other
inputs; a second
derivative (the backward returns the model's gradients as values, not a graph) is a
RuntimeError when it is taken, whatever the loss. The key length may differ from the query
length (cross-attention, decoding).

Stochastic rounding: a model whose arithmetic draws from a seed (``+o-sr``; the fp8 models'
``+hadamard`` signs; ``model_formats(...)["seeded"]``) given ``seed=None`` draws a fresh seed
for each call from torch's default CPU generator (``torch.randint(0, 2**63 - 1, (1,))``), so
calls, layers and steps round independently and ``torch.manual_seed`` makes a run
reproducible; the call's backward uses its forward's seed. Other models leave the generator
alone. ``seed=s`` uses s on every call.

Notes: a shape that takes something of the model no capture measured (the ``note:`` lines of
``flashbits.attention(...).notes``) is a ``flashbits.UnmeasuredShapeWarning`` per note. These
and a black-box model's ``flashbits.ApproximateModelWarning`` are attributed to the caller's
line (the call, or ``loss.backward()`` for a note of the backward), not to a line of flashbits
or torch, so the default warnings filter shows each text once per place in the caller's code.
The
GIL is released while the model runs. Works with PyTorch 1.13 (Debian's python3-torch) and 2.x:
only public APIs.
"""
from __future__ import annotations

import hashlib as _hashlib
import math as _math
import numbers as _numbers
import os as _os
import sys as _sys

import numpy as _np
import torch as _torch

import warnings as _warnings

from . import _core
from . import _int_arg, _path_arg, _refuse_unused, _str_arg  # the package's argument checks, so messages name the argument
from . import _torch_readable
from . import ApproximateModelWarning, UnmeasuredShapeWarning
from . import attention as _attention
from . import exact_attention as _exact_attention
from . import round as _round

# `annotations`, the name the __future__ import binds, is no part of the API: kept out of
# dir(flashbits.torch) and tab completion.
del annotations

__all__ = ["scaled_dot_product_attention", "CONTROL_MODELS", "model_formats"]

# Not emulations: PyTorch's math attention in this precision (the training experiment's control).
CONTROL_MODELS = {"fp32": _torch.float32, "fp64": _torch.float64}
_EXACT = "exact"

_TORCH_FORMAT = {_torch.bfloat16: "bf16", _torch.float16: "fp16", _torch.float32: "fp32"}
_NUMPY_BITS = {"bf16": _np.uint16, "fp16": _np.uint16}
_TORCH_BITS_VIEW = {_torch.bfloat16: _torch.int16, _torch.float16: _torch.int16}


def model_formats(model: str, dtype: str | None = None, recipe: str | None = None, sfu: str = "model") -> dict:
    """The canonical name of ``model`` (with ``dtype``, ``recipe``, ``sfu``), the format it
    reads its inputs in (``input``), the format of its outputs (``output``: fp64 for a model
    that never rounds O, ``golden-fp64-*``), whether it
    has a backward (``backward``), whether its arithmetic draws from the run's seed
    (``seeded``: ``+o-sr``, ``+hadamard``) and whether its backward masks causally whatever its
    forward did (``backward_always_causal``: ``triton-tutorial-sm90``, whose gradients without
    the causal mask are not those of its O). ValueError for an unknown model, recipe or SFU set
    (an SFU set for a model that evaluates no special function included);
    TypeError naming the argument for a wrong kind of one. ``dtype``: the input format of a model
    that does not name one (left out: bf16, or the one format the model runs); a ``dtype`` that
    contradicts the model's own is a ValueError, as in scaled_dot_product_attention. The
    controls ``fp32`` and ``fp64`` (PyTorch's math attention in that precision: input and output
    in it) take no recipe, sfu or dtype; ``exact`` (inputs rounded once to ``dtype``, fp32 by
    default; outputs exact, fp64) no recipe or sfu."""
    model = _str_arg("model", model)
    if model in CONTROL_MODELS or model == _EXACT:
        # The controls and the exact reference are models of scaled_dot_product_attention too
        # (the training study's arms list them beside the kernels); they take what it lets them.
        given = {"recipe": recipe, "sfu": None if sfu == "model" else sfu, "dtype": dtype}
        if model in CONTROL_MODELS:
            _refuse_unused(f"the control '{model}' is PyTorch's math attention", ("recipe", "sfu", "dtype"), given)
            fmt = "fp32" if model == "fp32" else "fp64"
            return {"model": model, "input": fmt, "output": fmt, "backward": True, "seeded": False,
                    "backward_always_causal": False}
        _refuse_unused("the exact reference is no kernel model", ("recipe", "sfu"), given)
        fmt = _exact_input_format(None if dtype is None else _str_arg("dtype", dtype))
        return {"model": _EXACT, "input": fmt, "output": "fp64", "backward": True, "seeded": False,
                "backward_always_causal": False}
    recipe = _path_arg("recipe", recipe, optional=True)
    dtype_given = dtype is not None
    return _kernel_model_formats(model, "bf16" if dtype is None else _str_arg("dtype", dtype),
                                 "" if recipe is None else recipe, _str_arg("sfu", sfu), dtype_given)


def _exact_input_format(dtype):
    """The format the exact reference rounds its inputs to: ``dtype``, fp32 when None. fp64 is
    refused (the reference rounds once to at most 32 bits), and an unknown name by the
    reference's own check, named ``dtype``, before any input is rounded (flashbits.round would
    call a bad format "fmt")."""
    fmt = "fp32" if dtype is None else dtype
    if fmt.lower() in ("fp64", "f64", "float64", "double"):
        raise ValueError(f"dtype: '{fmt}': the exact reference rounds its inputs once to a format of at most "
                         f"32 bits (fp32, the default, or a narrower one: tf32, bf16, fp16, e4m3, ...); for "
                         f"float64 inputs unrounded use the control model=\"fp64\" (PyTorch's float64 math "
                         f"attention)")
    _exact_attention(_np.zeros((1, 1)), _np.zeros((1, 1)), _np.zeros((1, 1)), dtype=fmt)
    return fmt


def _kernel_model_formats(model, dtype, recipe, sfu, dtype_given):
    """The engine's facts of a kernel model; an unknown name's message lists the controls beside
    the kernel models it knows (they are this module's models too)."""
    try:
        return _core._model_formats(model, dtype, recipe, sfu, dtype_given)
    except ValueError as e:
        text = str(e)
        if "unknown kernel model" not in text or not text.endswith(")"):
            raise
        raise ValueError(text[:-1] + "; and the controls fp32, fp64, exact)") from None


def _check_tensor(name: str, t) -> None:
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name}: a tensor on device '{t.device}'; flashbits.torch computes on the CPU "
                         f"(pass {name}.cpu())")
    if not t.is_floating_point():
        raise ValueError(f"{name}: dtype {t.dtype} is not a floating-point dtype")
    if not 2 <= t.dim() <= 4:
        raise ValueError(f"{name}: expected [L, E], [H, L, E] or [B, H, L, E], got shape {tuple(t.shape)}")


def _check_arguments(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, model):
    if not isinstance(model, str):
        raise TypeError(f"model: expected a model name (str), got {type(model).__name__}")
    for name, t in (("query", q), ("key", k), ("value", v)):
        _check_tensor(name, t)
    if attn_mask is not None:
        if not _is_causal_bias(attn_mask):
            raise ValueError("attn_mask: a general mask is not modelled by the kernel models; use is_causal=True "
                             "for the causal mask aligned top-left, torch.nn.attention.bias.causal_lower_right(L, S) "
                             "for the one aligned bottom-right, or attn_mask=None")
        _check_causal_bias(attn_mask, is_causal, q, k)
    # numbers.Real: a numpy scalar (np.float32(0.0) from a config array) is a number too.
    if isinstance(dropout_p, _torch.Tensor) and dropout_p.dim() == 0 and not dropout_p.is_complex() \
            and dropout_p.dtype != _torch.bool:
        dropout_p = dropout_p.item()  # a 0-d tensor (a scheduled rate) is its number
    dropout_is_number = isinstance(dropout_p, _numbers.Real) and not isinstance(dropout_p, bool)
    if not dropout_is_number or dropout_p != 0:
        # float(): numpy 2's repr of a scalar is np.float32(...), not the number
        shown = float(dropout_p) if dropout_is_number else dropout_p
        raise ValueError(f"dropout_p: {shown!r}; the kernel models have no dropout (give 0.0)")
    for name, flag in (("is_causal", is_causal), ("enable_gqa", enable_gqa)):
        # numpy's bool (a config array's flag) too, as flashbits.attention takes it.
        if not isinstance(flag, (bool, _np.bool_)):
            raise TypeError(f"{name}: expected True or False, got {type(flag).__name__}")
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, _numbers.Real):
            raise TypeError(f"scale: expected a number or None, got {type(scale).__name__}")
        if not (_math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale: {scale!r} is not a finite positive number")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"query, key, value: dtypes {q.dtype}, {k.dtype}, {v.dtype} differ; give one dtype "
                         f"(as torch.nn.functional.scaled_dot_product_attention requires)")
    for name, t in (("query", q), ("key", k), ("value", v)):
        if 0 in t.shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} has an empty axis; the kernel models need at least "
                             f"one row and one feature")
    if k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"key, value: expected the rank of query ({q.dim()}), got shapes {tuple(k.shape)} "
                         f"and {tuple(v.shape)}")
    if k.shape != v.shape[:-1] + k.shape[-1:] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"key, value: expected one shape but the last axis, got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"key: head dim {k.shape[-1]} differs from query's {q.shape[-1]}; q·kᵀ needs one head dim "
                         f"(PyTorch refuses it too)")
    if v.shape[-1] != q.shape[-1]:
        # PyTorch's math attention takes it; the kernel models tile one head dim for q, k and v.
        raise ValueError(f"value: head dim {v.shape[-1]} differs from query's {q.shape[-1]}; PyTorch allows a value "
                         f"head dim of its own, but the kernel models have one head dim for query, key and value, "
                         f"so it is not supported")
    if q.dim() == 4 and k.shape[0] != q.shape[0]:
        raise ValueError(f"key: batch {k.shape[0]} differs from query's {q.shape[0]}")
    if q.dim() >= 3:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk < 1 or hq % hk:
            raise ValueError(f"key: {hk} heads do not divide query's {hq} (grouped-query attention)")


def _is_causal_bias(attn_mask) -> bool:
    """Whether attn_mask is PyTorch's ``torch.nn.attention.bias.CausalBias`` (PyTorch >= 2.2),
    recognised by its class name and attributes so that older PyTorch, which has none, loads."""
    return type(attn_mask).__name__ == "CausalBias" and all(
        hasattr(attn_mask, name) for name in ("variant", "seq_len_q", "seq_len_kv"))


def _check_causal_bias(bias, is_causal, q, k):
    # PyTorch's own refusal (CausalBias with is_causal=True), and lengths that are this call's:
    # PyTorch would materialise a mask of another shape and fail or broadcast it.
    if is_causal is True:
        raise ValueError("attn_mask: a CausalBias with is_causal=True; give one of them (PyTorch refuses it too)")
    variant = getattr(bias.variant, "name", None)
    if variant not in _CAUSAL_BIAS_ALIGNMENT:
        raise ValueError(f"attn_mask: CausalBias variant {bias.variant!r} is neither UPPER_LEFT nor LOWER_RIGHT")
    if (bias.seq_len_q, bias.seq_len_kv) != (q.shape[-2], k.shape[-2]):
        raise ValueError(f"attn_mask: CausalBias for {bias.seq_len_q} queries and {bias.seq_len_kv} keys, but query "
                         f"has {q.shape[-2]} rows and key {k.shape[-2]}")


# PyTorch's CausalVariant names and flashbits.attention's words for the same masks:
# UPPER_LEFT keeps key j <= i (is_causal); LOWER_RIGHT keeps j <= i + S - L (its tril with
# diagonal S - L), the mask FlashAttention >= 2.1 applies when L and S differ.
_CAUSAL_BIAS_ALIGNMENT = {"UPPER_LEFT": "top-left", "LOWER_RIGHT": "bottom-right"}


def _causal_alignment(attn_mask, is_causal):
    """False, "top-left" or "bottom-right": the mask of a checked call (_check_arguments)."""
    if attn_mask is not None:
        return _CAUSAL_BIAS_ALIGNMENT[attn_mask.variant.name]
    return "top-left" if is_causal else False


# ---- the controls: PyTorch's own math attention -----------------------------------------------
def _math_attention(q, k, v, causal, scale, dtype, *, under_autocast=False):
    """softmax(q kᵀ·scale) v computed by PyTorch in ``dtype``, kv heads repeated for GQA;
    ``causal`` False, "top-left" or "bottom-right". A row the mask leaves without keys is 0
    with zero gradients, as PyTorch's math path (its _safe_softmax) writes it. CPU autocast is
    turned off, so that a control computes in ``dtype`` inside an autocast region too (it would
    run the matmuls in bf16); ``under_autocast=True`` leaves it as the caller set it (the
    training study's bf16-autocast arm: PyTorch's attention in a model under autocast)."""
    if under_autocast:
        return _math_attention_as_set(q, k, v, causal, scale, dtype)
    with _torch.autocast(device_type="cpu", enabled=False):
        return _math_attention_as_set(q, k, v, causal, scale, dtype)


def _math_attention_as_set(q, k, v, causal, scale, dtype):
    qc, kc, vc = q.to(dtype), k.to(dtype), v.to(dtype)
    if qc.dim() >= 3 and kc.shape[-3] != qc.shape[-3]:
        group = qc.shape[-3] // kc.shape[-3]
        kc = kc.repeat_interleave(group, dim=-3)
        vc = vc.repeat_interleave(group, dim=-3)
    s = _torch.matmul(qc, kc.transpose(-2, -1)) * scale
    if not causal:
        return _torch.matmul(_torch.softmax(s, dim=-1), vc).to(q.dtype)
    rows, keys = s.shape[-2], s.shape[-1]
    # top-left: query i sees keys j <= i; bottom-right: j <= i + keys - rows.
    offset = 0 if causal == "top-left" else keys - rows
    hidden = _torch.ones(rows, keys, dtype=_torch.bool).triu(offset + 1)
    has_key = ~hidden.all(dim=-1, keepdim=True)
    # A keyless row's scores are set to 0 before the softmax (no NaN enters the graph) and
    # its weights to 0 after it, so its output and its gradients are 0.
    s = s.masked_fill(hidden & has_key, float("-inf")).masked_fill(~has_key, 0.0)
    p = _torch.softmax(s, dim=-1) * has_key
    return _torch.matmul(p, vc).to(q.dtype)


# ---- rounding in and out ----------------------------------------------------------------------
def _as_operand(t: _torch.Tensor, fmt: str, name: str = "tensor") -> _np.ndarray:
    """``t`` as an operand of ``fmt`` for flashbits.attention: its bit patterns read in place
    when ``t`` already holds ``fmt`` contiguously (no copy), else its values rounded once
    (round to nearest even) into ``fmt`` by flashbits, never through an intermediate type.
    A negated or conjugated view is resolved first (_torch_readable), into a copy."""
    t = _torch_readable(t, name)
    if _TORCH_FORMAT.get(t.dtype) == fmt and fmt in _NUMPY_BITS:
        return t.contiguous().view(_TORCH_BITS_VIEW[t.dtype]).numpy().view(_NUMPY_BITS[fmt])
    if t.dtype == _torch.bfloat16:
        t = t.float()  # numpy has no bfloat16; every bf16 value is exact in float32
    a = t.contiguous().numpy()
    if fmt == "fp32" and a.dtype == _np.float32:
        return a
    return _round(a, fmt).bits


def _to_torch(values: _np.ndarray, dtype: _torch.dtype) -> _torch.Tensor:
    """float64 values rounded once (RNE) into a torch dtype: exact when they fit."""
    fmt = _TORCH_FORMAT.get(dtype)
    if dtype == _torch.float64 or fmt is None:
        # A copy: a view would share memory with the engine's result (the O the backward checks,
        # the gradients handed to observe=), so an in-place edit of the output would reach them.
        return _torch.tensor(values, dtype=dtype)
    return _torch.from_numpy(_round(values, fmt).values).to(dtype)


def _digest(o: _np.ndarray, lse: _np.ndarray) -> bytes:
    """O's and LSE's bits, hashed: what a backward checks its forward against, without keeping
    O and LSE for as long as the graph lives."""
    h = _hashlib.blake2b(digest_size=32)
    for a in (o, lse):
        a = _np.ascontiguousarray(a)
        h.update(repr((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.digest()


class _EmulatedAttention(_torch.autograd.Function):
    """The kernel model's forward and backward (see the module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, config):  # noqa: D401 - autograd's protocol
        # Traced rows (for an observer) change no result: the engine records, it does not alter.
        operands, r = _run_forward(config, (q, k, v),
                                   config["trace"] if config.get("observe") is not None else None)
        if getattr(r, "warning", None):  # flashbits.attention's, issued at the caller's line
            _warn_at_caller(r.warning, ApproximateModelWarning)
        config["forward_traces"] = r.traces
        config["forward_result"] = r
        config["forward_operands"] = operands
        ctx.config = config
        # What the kernel keeps for its backward (the rounded operands; O, LSE and the engine's
        # state), until the first backward releases it: a graph kept after its backward (a
        # logged loss tensor) must not hold every call's state. A second backward through a
        # retained graph computes it again (_kept_forward).
        ctx.kept = (operands, r)
        ctx.forward_digest = _digest(r.o, r.lse)
        ctx.dtypes = (q.dtype, k.dtype, v.dtype)
        # The operands may be views of q, k and v (read in place: bf16, fp16, or fp32 for
        # exact), and every backward reads its forward's inputs again (the kept state is checked
        # against them; exact recomputes from them). Saved so that PyTorch's version counter
        # refuses an in-place change between forward and backward with its own error ("...
        # modified by an inplace operation"), as it does for its own ops, rather than a
        # gradient of other inputs; PyTorch frees them after the backward.
        ctx.save_for_backward(q, k, v)
        return _to_torch(r.o, q.dtype)

    @staticmethod
    def backward(ctx, grad_o):
        config = ctx.config
        # Raises PyTorch's error if q, k or v changed in place since the forward, or if the graph
        # was freed by an earlier backward (retain_graph=False).
        inputs = ctx.saved_tensors
        if not config["backward"]:
            raise RuntimeError(f"flashbits.torch: model {config['model']} has no backward modelled")
        operands, forward = _kept_forward(ctx, inputs)
        d_o = _as_operand(grad_o, config["input"], "grad_output")
        # The model's backward from its forward's kept state (the engine checks that the state is
        # this run's); the exact reference has none and computes its forward again.
        if getattr(forward, "_kept", None) is not None:
            r = forward.backward(d_o, threads=config["threads"])
        else:
            r = config["run"](*operands, d_o)
        # Were the backward's O and LSE ever not the forward's, the gradients would belong to
        # another forward: refuse rather than return them.
        if _digest(r.o, r.lse) != ctx.forward_digest:
            raise RuntimeError(f"flashbits.torch: model {config['model']}'s backward recomputed an O or LSE "
                               f"that differs from its forward's")
        grads = (_to_torch(r.dq, ctx.dtypes[0]), _to_torch(r.dk, ctx.dtypes[1]), _to_torch(r.dv, ctx.dtypes[2]))
        _warn_notes(r.notes, config)
        if config.get("observe") is not None:
            _observe(config, operands, d_o, r)
        # Grad mode is on inside a backward exactly when its graph is built (create_graph=True):
        # then the gradients hang off a node that refuses a second derivative. Off q, k and v
        # themselves, not only off grad_o: a loss linear in O gives a grad_o that needs no
        # grad, and a node off it alone would be left out of the second derivative silently.
        if _torch.is_grad_enabled():
            grads = _NoSecondDerivative.apply(*inputs, grad_o, *grads)
        return grads + (None,)


def _kept_forward(ctx, inputs):
    """The forward's rounded operands and result for this backward, released from ``ctx``: the
    first backward takes what the forward kept; a later one (through a graph retained with
    ``retain_graph=True``) rounds the saved inputs and runs the forward again, keeping its
    state (the same seed: the run's closure), and the caller checks O and LSE against the
    forward's digest."""
    kept, ctx.kept = ctx.kept, None
    # Again: the forward's warning was issued once, at its call.
    return kept if kept is not None else _run_forward(ctx.config, inputs, None)


def _run_forward(config, inputs, trace):
    """q, k and v rounded to the model's input format, and the model's forward on them (its
    state kept where a backward can follow), with flashbits.attention's ApproximateModelWarning
    left to the caller, which issues it at the caller's line."""
    operands = tuple(_as_operand(t, config["input"], name) for t, name in zip(inputs, ("query", "key", "value")))
    with _ApproximateModelWarningLeftOut():
        r = config["run"](*operands, None, trace, keep_forward=config["keep_forward"])
    return operands, r


def _observe(config, operands, d_o, result) -> None:
    """Hand ``observe=`` one call: after its backward (``do`` and the backward's result), or
    after its forward when no backward can follow (``do`` None, the forward's O and LSE)."""
    config["observe"]({"q": operands[0], "k": operands[1], "v": operands[2], "do": d_o, "format": config["input"],
                       "model": config["model"], "result": result, "backward": d_o is not None,
                       "traces": config.get("forward_traces"), "scale": config["scale"], "causal": config["causal"]})


def _warn_notes(notes, config) -> None:
    """Each note of a run not issued yet for this call, as an UnmeasuredShapeWarning."""
    issued = config.setdefault("notes_issued", set())
    for note in notes or ():
        if note not in issued:
            issued.add(note)
            _warn_at_caller(note, UnmeasuredShapeWarning)


# Frames of these files are the library's: a warning is attributed to the first frame outside
# them (the caller's scaled_dot_product_attention(...) or loss.backward() line), so that the
# default filter shows it once per place in the caller's code, not once per process at a
# library line. torch's own frames (autograd's Function.apply, Tensor.backward) are skipped too.
_LIBRARY_FILES = (_os.path.abspath(__file__), _os.path.join(_os.path.dirname(_os.path.abspath(__file__)),
                                                            "__init__.py"))
_TORCH_DIR = _os.path.dirname(_os.path.abspath(_torch.__file__)) + _os.sep


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in this function's caller point at the
    first frame outside flashbits.torch, flashbits and torch (2 when every frame is theirs)."""
    frame, level = _sys._getframe(1), 1  # level 1: the caller (stacklevel=1 names its line)
    while frame is not None:
        name = _os.path.abspath(frame.f_code.co_filename)
        if name not in _LIBRARY_FILES and not name.startswith(_TORCH_DIR):
            return level
        frame, level = frame.f_back, level + 1
    return 2


def _warn_at_caller(message, category) -> None:
    _warnings.warn(message, category, stacklevel=_caller_stacklevel())


class _ApproximateModelWarningLeftOut:
    """flashbits.attention's ApproximateModelWarning (issued at this module's line) left out
    while the forward runs; the op issues the result's ``warning`` at the caller's line instead.
    Not ``warnings.catch_warnings``: leaving it marks the filters changed, which resets every
    module's record of what it showed, so the default filter would repeat every warning of the
    program on every call. An "ignore" entry records nothing."""

    _ENTRY = ("ignore", None, ApproximateModelWarning, None, 0)

    def __enter__(self):
        self._filters = _warnings.filters  # the list warn() reads (catch_warnings replaces it)
        self._filters.insert(0, self._ENTRY)

    def __exit__(self, *exc):
        self._filters.remove(self._ENTRY)


def _draw_seed() -> int:
    """A fresh stochastic-rounding seed from torch's default CPU generator (module docstring)."""
    return int(_torch.randint(0, 2 ** 63 - 1, (1,), dtype=_torch.int64).item())


class _NoSecondDerivative(_torch.autograd.Function):
    """The model's gradients, made the outputs of a node whose own backward refuses: they are
    values computed by the model, not a graph, so a second derivative through the op (a
    gradient penalty) would silently leave out attention's part. (PyTorch's
    ``once_differentiable`` raised nothing here under torch 1.13 when a residual path joined
    the gradient, tried 2026-12-04.) The node hangs off q, k, v and the incoming gradient:
    its inputs are those and then the three gradients it passes on unchanged."""

    @staticmethod
    def forward(ctx, q, k, v, grad_o, *grads):  # noqa: D401 - autograd's protocol
        return tuple(g.clone() for g in grads)

    @staticmethod
    def backward(ctx, *unused):
        raise RuntimeError("flashbits.torch: a second derivative through the emulated attention is not modelled "
                           "(its backward returns the kernel model's gradients as values, not a graph)")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, model: str, recipe=None, sfu: str | None = None,
                                 dtype: str | None = None, seed: int | None = None, threads: int | None = None,
                                 observe=None, trace=None):
    """Attention as the flashbits kernel ``model`` computes it, differentiable (module
    docstring). ``recipe``: a recipe file (``bias-test --recipe``); ``sfu``: an SFU set
    (``correct``, ``hw-sm90``) replacing the model's own; ``dtype``: the input format of a
    model that does not name its own (default bf16, fp16 for float16 query); ``seed``: the
    seed of a model whose arithmetic draws from one (``+o-sr``, ``+hadamard``); None (the
    default) draws a fresh one per call from torch's default generator (module docstring);
    ``threads``: worker threads (default 1; results never depend on it).

    ``observe`` (for measurements, as the training experiment takes them): a callable given
    once per call a dict with the rounded operands ``q k v`` (arrays of ``format``),
    ``model``, ``scale``, ``causal`` (False, "top-left" or "bottom-right"), ``backward``, ``do``, ``result``
    and ``traces``. A call whose backward can follow (grad mode on, an input that requires
    grad, a model with a backward) is observed after that backward: ``backward`` True, the
    rounded ``do`` and the backward run's ``result`` (a ``flashbits.AttentionResult`` with o,
    lse, delta, dq, dk, dv); another call right after its forward: ``backward`` False, ``do``
    None and the forward's ``result`` (o, lse; delta and the gradients None). ``traces``: with
    ``trace`` (rows as ``flashbits.attention`` takes them) the forward's traces of those rows
    (tracing never changes a result). ``trace`` without ``observe`` is a ValueError: nothing
    would receive the traces.

    An argument the model does not use is a ValueError naming it: the controls ``fp32`` and
    ``fp64`` take none of recipe, sfu, dtype, seed, threads, observe, trace; ``exact`` none of
    recipe, sfu, seed, threads, trace; a model whose arithmetic draws no random bits no
    ``seed``; a model that evaluates no special function no ``sfu``. ``threads`` changes only
    the speed (``correctly-rounded`` does not use it)."""
    _check_arguments(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, model)
    is_causal, enable_gqa = bool(is_causal), bool(enable_gqa)
    if observe is not None and not callable(observe):  # else a TypeError only at backward time
        raise TypeError(f"observe: expected a callable or None, got {type(observe).__name__}")
    if trace is not None and observe is None and model not in CONTROL_MODELS and model != _EXACT:
        # The traces reach the caller only through observe: without it they were dropped silently.
        raise ValueError("trace: the traced rows are handed to observe=, which is not given (pass observe=, or "
                         "leave trace out)")
    e = query.shape[-1]
    scale = 1.0 / _math.sqrt(e) if scale is None else float(scale)
    causal = _causal_alignment(attn_mask, is_causal)  # is_causal is top-left, whatever the lengths
    given = {"recipe": recipe, "sfu": sfu, "dtype": dtype, "seed": seed, "threads": threads, "observe": observe,
             "trace": trace}
    if model in CONTROL_MODELS:
        _refuse_unused(f"the control '{model}' is PyTorch's math attention",
                       ("recipe", "sfu", "dtype", "seed", "threads", "observe", "trace"), given)
        return _math_attention(query, key, value, causal, scale, CONTROL_MODELS[model])
    if model == _EXACT:
        _refuse_unused("the exact reference is no kernel model", ("recipe", "sfu", "seed", "threads", "trace"), given)
    recipe = _path_arg("recipe", recipe, optional=True)
    sfu, dtype = _str_arg("sfu", sfu, optional=True), _str_arg("dtype", dtype, optional=True)
    seed = None if seed is None else _int_arg("seed", seed, unsigned=True)
    threads = 1 if threads is None else _int_arg("threads", threads)
    if model == _EXACT:
        fmt = _exact_input_format(dtype)

        def run(q, k, v, d_o, trace=None, keep_forward=False):
            return _exact_attention(q, k, v, do=d_o, causal=causal, scale=scale, dtype=fmt)

        config = {"model": _EXACT, "input": fmt, "backward": True, "run": run}
    else:
        dtype_given = dtype is not None  # then a model naming another input format is refused
        if dtype is None:
            dtype = "fp16" if query.dtype == _torch.float16 else "bf16"
        sfu_set = "model" if sfu is None else sfu
        formats = _kernel_model_formats(model, dtype, recipe or "", sfu_set, dtype_given)
        held = _TORCH_FORMAT.get(query.dtype)
        # float16 and bfloat16 tensors already are a kernel input format; rounding them into
        # another narrow one (fp16 into a bf16-only model's bf16) would lose bits silently, as
        # flashbits.attention refuses to. Widening into fp32 is exact; dtype= asks for the rounding.
        if not dtype_given and held in ("fp16", "bf16") and formats["input"] not in (held, "fp32"):
            raise ValueError(f"query, key, value: dtype {query.dtype} holds {held}, but model {formats['model']} "
                             f"reads {formats['input']} inputs; they are not rounded silently (pass "
                             f"dtype=\"{formats['input']}\" to round them once, to nearest even, to "
                             f"{formats['input']})")

        if seed is not None and not formats["seeded"]:
            # Accepted, it would change nothing: a caller varying it would think it did.
            raise ValueError(f"seed: model {formats['model']}'s arithmetic draws no random bits (only a seeded "
                             f"model, model_formats(...)['seeded']: +o-sr, the fp8 models' +hadamard, uses a "
                             f"seed); a seed would change nothing (leave it out)")
        if seed is None:
            # A fresh seed per call where the arithmetic draws from one (else every call, layer
            # and step would round with the same bits); the backward reuses it (run's closure).
            seed = _draw_seed() if formats["seeded"] else None

        def run(q, k, v, d_o, trace=None, keep_forward=False):
            return _attention(q, k, v, model, do=d_o, causal=causal, scale=scale, recipe=recipe,
                              dtype=formats["input"], seed=seed, threads=threads, sfu=sfu_set,
                              trace=False if trace is None else trace, keep_forward=keep_forward)

        config = {"model": formats["model"], "input": formats["input"], "backward": formats["backward"], "run": run}
        gradient_needed = _torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if not config["backward"] and gradient_needed:
            raise ValueError(f"model: {formats['model']} has no backward modelled; a gradient was asked for "
                             f"(run it under torch.no_grad(), or pick a model with a backward)")
        if formats["backward_always_causal"] and not causal and gradient_needed:
            # The op's gradients must be those of its output: these would be another function's.
            raise ValueError(f"model: {formats['model']}'s backward always masks causally (the kernel's backward "
                             f"takes no causal flag), so with is_causal=False its dQ, dK, dV are not the gradients "
                             f"of its O; a gradient was asked for (pass is_causal=True, run it under "
                             f"torch.no_grad(), or pick another model)")
    # Keep the forward's state only where a backward can follow (autograd turns grad mode off
    # inside forward(), so it is decided here).
    keep = config["backward"] and _torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    config.update({"scale": scale, "causal": causal, "observe": observe, "threads": threads, "keep_forward": keep,
                   "trace": trace})
    o = _EmulatedAttention.apply(query, key, value, config)
    # Taken out of config, which the graph's node keeps: the node holds what its backward needs
    # only until that backward (_kept_forward).
    forward_result, forward_operands = config.pop("forward_result"), config.pop("forward_operands")
    _warn_notes(forward_result.notes, config)
    if observe is not None and not keep:
        # No backward can follow this call: its observation is its forward's.
        _observe(config, forward_operands, None, forward_result)
    return o
