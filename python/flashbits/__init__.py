"""flashbits from Python: the bit-exact low-precision emulator and the FlashAttention
rounding-bias simulator of the flashbits C++ core (docs/PYTHON.md).

Arrays in, arrays out: every function takes numpy arrays or anything with ``__array__``
(CPU torch tensors included; torch.bfloat16 is widened to float32, exactly) and loops in C++
with the GIL released. Ctrl-C raises KeyboardInterrupt. Bad input raises ValueError (or
TypeError for a wrong kind of argument) with the message the ``flashbits`` CLI prints.

Values and bit patterns: an array of an unsigned integer dtype holds bit patterns of the
format the function names (``fmt``, the model's input format, a trace tensor's format), and
its width must be that format's container (uint16 for bf16 and fp16, uint8 for the 8-, 6-
and 4-bit formats, uint32 for fp32 and tf32; anything else is a ValueError); any other
array holds values, which must be exactly representable in the format wherever an operand
is expected (round them first with ``round``). Every function converts its inputs the same
way (``_operand`` here, ``operand_bits`` in the C++ part).

Arguments are checked before the C++ part sees them: a wrong kind (a string for an array
or a number, a float for an integer, None for a required array) is a TypeError naming the
argument, an integer outside what the C++ part takes a ValueError naming it.
"""
from __future__ import annotations

import atexit as _atexit
import collections.abc as _abc
import copy as _copy
import numbers as _numbers
import operator as _operator
import os as _os
import re as _re
import warnings as _warnings

try:
    import numpy as _np
except ModuleNotFoundError as _missing:
    # An interpreter without numpy (a bare venv, or a python3 on PATH other than the system's)
    # would otherwise stop at a bare "No module named 'numpy'" that names no remedy.
    if _missing.name != "numpy":
        raise
    raise ModuleNotFoundError(
        "flashbits needs numpy: install python3-numpy (or `pip install numpy`), or run with an "
        "interpreter that has it, e.g. /usr/bin/python3 on Debian", name="numpy") from _missing

from . import _core

# `annotations`, the name the __future__ import binds, is no part of the API: kept out of
# dir(flashbits) and tab completion.
del annotations

__all__ = [
    "INEXACT", "UNDERFLOW", "OVERFLOW", "DIVBYZERO", "INVALID", "flags_string",
    "Rounded", "round", "decode", "add", "sub", "mul", "div", "fma", "sqrt", "dot", "matmul",
    "ApproximateModelWarning", "UnmeasuredShapeWarning", "AttentionResult", "RowTraces", "attention", "exact_attention", "BiasTestResult", "bias_test",
    "Trace", "load_trace", "save_trace", "format_info", "models", "dot_models", "dot_model", "scenarios",
]
__version__ = "0.1.0"

# IEEE flags, as the C++ core's bit set (emu/rounding.hpp).
INEXACT, UNDERFLOW, OVERFLOW, DIVBYZERO, INVALID = 1, 2, 4, 8, 16

# Work abandoned by a Ctrl-C inside the attention engine finishes in the background; the
# interpreter waits for it before it tears down what that work uses.
_atexit.register(_core._wait_for_abandoned_work)


def flags_string(flags):
    """The CLI's spelling of a flag set: letters ``xuozv`` (inexact, underflow, overflow,
    divbyzero, invalid; the bits ``INEXACT`` 1, ``UNDERFLOW`` 2, ``OVERFLOW`` 4, ``DIVBYZERO`` 8,
    ``INVALID`` 16) in that order, or ``-`` for none. An integer gives one string; an integer
    array (``Rounded.flags``) gives a numpy array of strings of its shape."""
    if isinstance(flags, _np.ndarray):
        if flags.dtype.kind not in "ui":
            raise TypeError(f"flags: expected an integer or an integer array, got an array of {flags.dtype}")
        return _np.vectorize(lambda f: flags_string(int(f)), otypes=[str])(flags)
    f = _int_arg("flags", flags)
    if not 0 <= f < 32:  # -1 read as every flag, 64 as none
        raise ValueError(f"flags: {f} is no flag set (0..31: INEXACT 1, UNDERFLOW 2, OVERFLOW 4, DIVBYZERO 8, "
                         f"INVALID 16)")
    s = "".join(c for bit, c in ((1, "x"), (2, "u"), (4, "o"), (8, "z"), (16, "v")) if f & bit)
    return s or "-"


# ---- argument checks: every public function passes its arguments through these --------------
_UINT64_MAX = (1 << 64) - 1


def _kind(v) -> str:
    return "None" if v is None else type(v).__name__


def _refuse_unused(what: str, takes_none_of: tuple, given: dict) -> None:
    """The arguments of ``takes_none_of`` that were given (not None) are refused, not ignored:
    a call that does not use one would silently run without it."""
    unused = [name for name in takes_none_of if given[name] is not None]
    if unused:
        raise ValueError(f"{', '.join(unused)}: {what}; it takes none of {', '.join(takes_none_of)}")


def _str_arg(name: str, v, optional: bool = False):
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected a string, got {_kind(v)}")
    return v


def _path_arg(name: str, v, optional: bool = False):
    if v is None and optional:
        return None
    if isinstance(v, (str, _os.PathLike)):
        p = _os.fspath(v)
        if isinstance(p, str):
            return p
    raise TypeError(f"{name}: expected a path (str or os.PathLike), got {_kind(v)}")


def _int_arg(name: str, v, bits: int = 64, unsigned: bool = False, optional: bool = False):
    """An integer (Python or numpy; not bool) in the range of the C++ type that takes it."""
    if v is None and optional:
        return None
    if isinstance(v, (bool, _np.bool_)) or not isinstance(v, (int, _np.integer)):
        raise TypeError(f"{name}: expected an integer, got {_kind(v)}")
    v = int(v)
    lo, hi = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if not lo <= v <= hi:
        kind = "unsigned" if unsigned else "signed"
        raise ValueError(f"{name}={v}: outside the range of a {bits}-bit {kind} integer ({lo}..{hi})")
    return v


def _bool_arg(name: str, v, optional: bool = False):
    if v is None and optional:
        return None
    if not isinstance(v, (bool, _np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {_kind(v)}")
    return bool(v)


def _float_arg(name: str, v, optional: bool = False):
    if v is None and optional:
        return None
    if isinstance(v, (bool, _np.bool_)) or not isinstance(v, (int, float, _np.integer, _np.floating)):
        raise TypeError(f"{name}: expected a number, got {_kind(v)}")
    try:
        return float(v)
    except OverflowError:
        raise ValueError(f"{name}={v}: too large for a float") from None


def _torch_readable(t, name: str):
    """THE conversion of a torch tensor into one that ``.numpy()`` reads (this module and
    flashbits.torch both convert through it): detached, on the CPU, with a lazy negation or
    conjugation applied (a ``._neg_view()`` or ``.conj()`` view, which ``.numpy()`` refuses).
    A tensor without data (device ``meta``) or one the CPU cannot copy is a ValueError naming
    the argument and its device."""
    t = t.detach()
    if t.device.type == "meta":
        raise ValueError(f"{name}: a tensor on device 'meta' has a shape and a dtype but no values; pass a tensor "
                         f"that holds them")
    if t.device.type != "cpu":
        try:
            t = t.cpu()
        except (RuntimeError, NotImplementedError) as e:
            raise ValueError(f"{name}: a tensor on device '{t.device}' that cannot be copied to the CPU: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return t.resolve_conj().resolve_neg()


def _as_array(x, name: str) -> _np.ndarray:
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name}: expected an array (numpy, or anything with __array__), got {_kind(x)}")
    if isinstance(x, _np.ndarray):
        a = x
    else:
        if type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach"):
            x = _torch_readable(x, name)
            if str(x.dtype) == "torch.bfloat16":
                x = x.float()  # numpy has no bfloat16; every bf16 value is exact in fp32
        try:
            a = _np.asarray(x)
        except Exception as e:  # noqa: BLE001 - whatever __array__ raised
            raise TypeError(f"{name}: expected an array (numpy, or anything with __array__), "
                            f"got {type(x).__name__}: {e}") from None
    if a.dtype == object or a.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected a numeric array, got dtype {a.dtype}")
    if not a.dtype.isnative:
        # A big-endian array ('>u2' from a file): the C++ part reads raw memory as native
        # integers (decode), so every function takes it in native byte order, the same values.
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def _is_bits(a: _np.ndarray) -> bool:
    return a.dtype.kind == "u"


def _as_float64(a: _np.ndarray, name: str) -> _np.ndarray:
    """``a`` as float64, exactly: a 64-bit integer or a longdouble (float96/float128) element
    that float64 cannot hold is a ValueError, not narrowed (a rounding of it would round twice,
    an operand would become another value)."""
    if (a.dtype.kind in "bi" and a.dtype.itemsize >= 8) or (a.dtype.kind == "f" and a.dtype.itemsize > 8):
        with _np.errstate(over="ignore"):  # beyond float64's range: inf, refused below
            f = a.astype(_np.float64)
        same = f.astype(a.dtype) == a
        if a.dtype.kind == "f":
            same |= _np.isnan(a)  # NaN is NaN in float64 too
        bad = _np.flatnonzero(~same)
        if bad.size:
            kind = "integer" if a.dtype.kind in "bi" else f"{a.dtype} value"
            raise ValueError(f"{name}: the {kind} {a.flat[bad[0]]!s} is not exactly representable in float64")
        return _np.ascontiguousarray(f)
    return _np.ascontiguousarray(a, dtype=_np.float64)


def _operand(x, name: str) -> _np.ndarray:
    """THE conversion of an input array, for every function that takes values: bit patterns
    (an unsigned integer array, passed as it is: the C++ part checks its width against the
    format and each pattern) or values (as float64, exactly: the C++ part checks that each
    is representable). C-contiguous either way. A signed 8- or 16-bit array is refused: it is
    how bf16, fp16 and fp8 bit patterns leave torch (``.view(torch.int16)``; numpy has no
    bf16), and read as values it would silently be another tensor."""
    a = _as_array(x, name)
    _refuse_narrow_signed(a, name)
    # ascontiguousarray returns at least one dimension: a 0-d operand (a scalar c) keeps its
    # shape, or it would no longer broadcast against the batch it belongs to.
    out = _np.ascontiguousarray(a) if _is_bits(a) else _as_float64(a, name)
    return out.reshape(a.shape)


def _refuse_narrow_signed(a: _np.ndarray, name: str) -> None:
    if a.dtype.kind == "i" and a.dtype.itemsize <= 2:
        unsigned = "uint16" if a.dtype.itemsize == 2 else "uint8"
        raise ValueError(f"{name}: an {a.dtype} array is ambiguous: unsigned arrays are bit patterns, float arrays "
                         f"values; pass bit patterns as .view(numpy.{unsigned}) (from torch: "
                         f".view(torch.{a.dtype}).numpy().view(numpy.{unsigned})), values as floats")


class ApproximateModelWarning(UserWarning):
    """Raised as a warning by every run of a model that is a black-box fit, not bit-exact
    (``cudnn-sdpa-sm90``): its text says how far it was measured from the hardware."""


class UnmeasuredShapeWarning(UserWarning):
    """A ``note:`` line of a run whose shape takes something of the model that no capture
    measured (``AttentionResult.notes``, the lines ``flashbits replay`` prints). ``flashbits.torch``
    issues each as this warning, where the caller never sees the result's notes."""


class Rounded:
    """Result of a rounding: ``bits`` (stored bit patterns, uint8/16/32 by the format's
    container), ``values`` (their exact values as float64, decoded on first access),
    ``flags`` (per-element IEEE flags as uint8, or None when not asked for) and ``format``.
    Unpacks as ``bits, values = ...``."""

    __slots__ = ("bits", "format", "flags", "_values")

    def __init__(self, bits, fmt, flags=None):
        self.bits = bits
        self.format = fmt
        self.flags = flags
        self._values = None

    @property
    def values(self) -> _np.ndarray:
        if self._values is None:
            # reshape: ascontiguousarray makes a 0-d array 1-d; the values keep the bits' shape
            self._values = _core.decode(_np.ascontiguousarray(self.bits), self.format).reshape(self.bits.shape)
        return self._values

    def __iter__(self):
        yield self.bits
        yield self.values

    def __len__(self):
        return 2

    def __repr__(self):
        return f"Rounded(format={self.format!r}, shape={self.bits.shape}, flags={'yes' if self.flags is not None else 'no'})"


# Mode name -> whether it draws from the stochastic stream (the core's one list).
_ROUNDING_MODES = _core.rounding_modes()


def _rounding_args(fmt, mode, overflow, seed, sr_bits, position, flags):
    """The arguments checked. ``seed``, ``sr_bits`` and ``position`` describe the stochastic
    stream: given with another mode they would be ignored, so they are refused, as the CLI's
    ``op`` refuses ``--seed`` with rne (None: not given; the stream's defaults are 0)."""
    fmt, mode, overflow = _str_arg("fmt", fmt), _str_arg("mode", mode), _str_arg("overflow", overflow)
    seed = _int_arg("seed", seed, unsigned=True, optional=True)
    sr_bits = _int_arg("sr_bits", sr_bits, optional=True)
    position = _int_arg("position", position, unsigned=True, optional=True)
    if _ROUNDING_MODES.get(mode) is False:  # an unknown mode is the core's error, named as such
        for name, v in (("seed", seed), ("sr_bits", sr_bits), ("position", position)):
            if v is not None:
                raise ValueError(f"{name}: applies to stochastic rounding only (the mode is {mode}, not sr)")
    return (fmt, mode, overflow, 0 if seed is None else seed, sr_bits, 0 if position is None else position,
            _bool_arg("flags", flags))


def round(x, fmt: str, mode: str = "rne", overflow: str = "ieee", seed: int | None = None,
          sr_bits: int | None = None, *, position: int | None = None, flags: bool = False) -> Rounded:
    """Round every element of ``x`` once into ``fmt`` (any format of ``flashbits formats``,
    custom ``eXmY`` included) in ``mode`` (rne rna rtz rup rdn rto sr) with the ``overflow``
    policy (ieee or satfinite). float32 input runs the C++ array path (fb::round_array);
    float64 (and integer) input is rounded exactly from its fp64 value; float16 is widened
    exactly. An unsigned integer array holds bit patterns of ``fmt`` itself (its container
    width: uint16 for bf16), whose values are already in ``fmt``: they come back as they
    are, converted as ``flashbits op cvt FMT MODE FMT:0x...`` converts them (round fp32 bit
    patterns by passing ``x.view(np.float32)``). Element i uses stochastic-rounding position
    ``position + i`` (row-major), so results equal the CLI's ``op --batch`` lines.
    ``seed``, ``sr_bits`` and ``position`` (default 0, None and 0) apply to ``sr`` only:
    given with another mode they are a ``ValueError``, as ``flashbits op --seed`` with rne is.
    ``flags=True`` also returns per-element IEEE flags."""
    a = _as_array(x, "x")
    _refuse_narrow_signed(a, "x")
    fmt, mode, overflow, seed, sr_bits, position, flags = _rounding_args(fmt, mode, overflow, seed, sr_bits,
                                                                        position, flags)
    if _is_bits(a):
        bits, fl = _core.op("cvt", fmt, [_operand(a, "x")], mode, overflow, seed, sr_bits, position, flags, ["x"])
    elif a.dtype in (_np.float16, _np.float32):
        bits, fl = _core.round_f32(_np.ascontiguousarray(a, dtype=_np.float32), fmt, mode, overflow, seed, sr_bits,
                                   position, flags)
    else:
        bits, fl = _core.round_f64(_as_float64(a, "x"), fmt, mode, overflow, seed, sr_bits, position, flags)
    # The C++ part sees at least one axis (ascontiguousarray); a 0-d input gets 0-d results.
    return Rounded(bits.reshape(a.shape), _core.format_info(fmt)["name"], None if fl is None else fl.reshape(a.shape))


def decode(bits, fmt: str) -> _np.ndarray:
    """Exact values (float64) of bit patterns of ``fmt``: an unsigned integer array of the
    format's container width (uint16 for bf16, as ``Rounded.bits`` holds them), or a Python
    int or (nested) list of ints; each must be a valid pattern. An array of a signed dtype is
    refused whatever it holds, by the module's one rule: a signed 8- or 16-bit array (torch's
    ``.view(torch.int16)`` of bf16) is ambiguous, and a wider one holds values, not bit
    patterns (pass ``.view()`` or ``.astype()`` of the unsigned container dtype)."""
    python_ints = isinstance(bits, (int, list, tuple)) and not isinstance(bits, bool)
    a = _as_array(bits, "bits")
    fmt = _str_arg("fmt", fmt)
    if python_ints and a.dtype.kind in "ui":
        # Python ints have no width of their own: any non-negative int is read as a pattern,
        # checked against the format by the C++ part.
        if a.size and a.min() < 0:
            raise ValueError(f"bits: {a.min()} is not a bit pattern (negative)")
        return _core.decode(_np.ascontiguousarray(a, dtype=_np.uint64), fmt, any_width=True).reshape(a.shape)
    _refuse_narrow_signed(a, "bits")
    if a.dtype.kind == "i":
        container = _core.format_info(fmt)["container_bits"]
        raise TypeError(f"bits: an {a.dtype} array holds values (unsigned integer arrays are bit patterns); pass "
                        f"{fmt} bit patterns as numpy.uint{container} (.astype(numpy.uint{container})), or as "
                        f"Python ints")
    if a.dtype.kind != "u":
        raise TypeError(f"bits: expected an integer array of bit patterns, got dtype {a.dtype}")
    return _core.decode(_np.ascontiguousarray(a), fmt).reshape(a.shape)  # a 0-d input stays 0-d


def _op(kind, operands, fmt, mode, overflow, seed, sr_bits, position, flags):
    names = "abc"
    arrays = [_as_array(x, names[i]) for i, x in enumerate(operands)]
    fmt, mode, overflow, seed, sr_bits, position, flags = _rounding_args(fmt, mode, overflow, seed, sr_bits,
                                                                        position, flags)
    try:
        arrays = _np.broadcast_arrays(*arrays)
    except ValueError:
        raise ValueError(f"operands: shapes {', '.join(str(a.shape) for a in arrays)} do not broadcast") from None
    shape = arrays[0].shape
    inputs = [_operand(a, names[i]) for i, a in enumerate(arrays)]
    out, fl = _core.op(kind, fmt, inputs, mode, overflow, seed, sr_bits, position, flags, list(names[:len(inputs)]))
    return Rounded(out.reshape(shape), _core.format_info(fmt)["name"], None if fl is None else fl.reshape(shape))


def add(a, b, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded:
    """a + b in ``fmt``, rounded once (numpy broadcasting). Operands: values exactly
    representable in ``fmt``, or bit patterns of ``fmt`` (unsigned integer arrays of its
    container width)."""
    return _op("add", (a, b), fmt, mode, overflow, seed, sr_bits, position, flags)


def sub(a, b, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded:
    """a - b in ``fmt``, rounded once."""
    return _op("sub", (a, b), fmt, mode, overflow, seed, sr_bits, position, flags)


def mul(a, b, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded:
    """a * b in ``fmt``, rounded once."""
    return _op("mul", (a, b), fmt, mode, overflow, seed, sr_bits, position, flags)


def div(a, b, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded:
    """a / b in ``fmt``, rounded once."""
    return _op("div", (a, b), fmt, mode, overflow, seed, sr_bits, position, flags)


def fma(a, b, c, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded:
    """a * b + c in ``fmt``, rounded once."""
    return _op("fma", (a, b, c), fmt, mode, overflow, seed, sr_bits, position, flags)


def sqrt(a, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
         sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded:
    """sqrt(a) in ``fmt``, rounded once."""
    return _op("sqrt", (a,), fmt, mode, overflow, seed, sr_bits, position, flags)


def dot_model(model: str, fmt: str = "bf16", *, fmt_b: str | None = None, kind: str | None = None,
              scale_format: str | None = None, block: int | None = None) -> dict:
    """What ``dot`` would run for these arguments (the one dot-model lookup, any family):
    name, a/b formats, accumulator, k_step (products per fused step; 0: all of k), kind,
    scale_block (0: no scales) and scale_format, hardware_validated, source, note."""
    return _core.dot_model(*_dot_model_args(model, fmt, fmt_b, kind, scale_format, block))


def _dot_model_args(model, fmt, fmt_b, kind, scale_format, block):
    if block is not None and (isinstance(block, bool) or not isinstance(block, int)):
        raise TypeError(f"block: expected a positive int, got {_kind(block)}")
    if block is not None and block <= 0:  # the right kind, a wrong value
        raise ValueError(f"block: expected a positive int, got {block}")
    if block is not None and block > 2**31 - 1:  # beyond the C++ int: pybind named no argument
        raise ValueError(f"block: {block} is larger than any block size (at most 2^31 - 1)")
    return (_str_arg("model", model), _str_arg("fmt", fmt), _str_arg("fmt_b", fmt_b, True) or "",
            _str_arg("kind", kind, True) or "", _str_arg("scale_format", scale_format, True) or "", block or 0)


def _scale_bytes(s, name: str, shape):
    """Scale bytes (uint8, or ints 0..255) of shape [..., k / block], as a C-contiguous
    [n, k / block] uint8 array."""
    if s is None:
        return None
    arr = _as_array(s, name)
    if arr.dtype != _np.uint8:
        if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() > 255)):
            raise ValueError(f"{name}: expected scale bytes, integers 0..255 (uint8)")
        arr = arr.astype(_np.uint8)
    if arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} (one byte per block of k), got {arr.shape}")
    # [rows, last] with rows counted, not inferred: -1 is ambiguous for an array of size 0.
    return _np.ascontiguousarray(arr).reshape(int(_np.prod(shape[:-1], dtype=_np.int64)), shape[-1])


def _operands_named_as_given(call, info, a, b, c):
    """call(); an operand error it raises names an element of the reshaped or broadcast array
    the core was handed (a[0,2] for a 1-D a[2]): the operands as the caller gave them are then
    checked again, so that the message names their own element, and raised instead."""
    try:
        return call()
    except ValueError:
        for fmt, x, name in ((info["a_format"], a, "a"), (info["b_format"], b, "b"), (info["accumulator"], c, "c")):
            if x is not None:
                _core.check_operand(fmt, x, name)
        raise


def dot(model: str, a, b, c=None, fmt: str = "bf16", *, fmt_b: str | None = None, kind: str | None = None,
        scale_format: str | None = None, block: int | None = None, scale_a=None, scale_b=None) -> Rounded:
    """Fused dot products D = C + sum_i a[..., i] * b[..., i], as the named hardware model
    computes them (``flashbits dot``; models: ``dot_models()``, details: ``dot_model()``):
    NVIDIA tensor cores (sm70 .. sm120, exact-rne), AMD MFMA (cdna1 .. cdna3-k4) and, with
    ``kind``, the Blackwell block-scaled kinds (sm100/sm120 mxf8f6f4, mxf4, mxf4nvf4). ``a`` and
    ``b`` hold values (or bit patterns, unsigned integers of its container width) of the input
    format ``fmt`` (b: ``fmt_b`` when it differs, for AMD's mixed fp8 pairs and mxf8f6f4), shape
    [..., k]; ``c`` values (or bit patterns) of the accumulator (fp32, fp16 for the *-f16acc
    models), shape [...] (default 0). A block-scaled kind also takes ``scale_a`` and ``scale_b``,
    raw scale bytes (ue8m0 or ue4m3, chosen by ``scale_format`` and ``block`` where the kind has
    several) of shape [..., k / block]. Returns D in the accumulator format."""
    args = _dot_model_args(model, fmt, fmt_b, kind, scale_format, block)
    info = _core.dot_model(*args)
    # Shapes first, on the arrays as given: _operand copies a broadcast view into memory.
    a = _as_array(a, "a")
    b = _as_array(b, "b")
    if a.ndim < 1 or a.shape != b.shape:
        raise ValueError(f"a, b: expected arrays of one shape [..., k], got {a.shape} and {b.shape}")
    if a.shape[-1] == 0:
        raise ValueError(f"a, b: k = 0 (shape {a.shape}): a dot product needs at least one term")
    if a.shape[-1] > 2**31 - 1:  # the kernels' int k, as matmul refuses K (found by the GEMM audit)
        raise ValueError(f"a, b: k = {a.shape[-1]} is above 2^31-1 (shape {a.shape})")
    a = _operand(a, "a")
    b = _operand(b, "b")
    batch = a.shape[:-1]
    c_given = None if c is None else _operand(c, "c")
    c = _np.zeros(batch) if c is None else c_given
    try:
        c = _np.broadcast_to(c, batch)
    except ValueError:
        raise ValueError(f"c: shape {c.shape} does not match the batch shape {batch}") from None
    if 0 in batch and c_given is not None:
        # Broadcast to an empty batch, c would reach the core with no element: checked as given,
        # as matmul checks an empty D's operands.
        _core.check_operand(info["accumulator"], c_given, "c")
    k = a.shape[-1]
    if not info["scale_block"] and (scale_a is not None or scale_b is not None):
        raise ValueError(f"scale_a, scale_b: model {info['description']} takes no scales (block-scaled kinds do: "
                         "give kind)")
    if info["scale_block"] and k % info["scale_block"]:
        raise ValueError(f"k = {k} is not a multiple of the block ({info['scale_block']})")
    blocks = k // info["scale_block"] if info["scale_block"] else 0
    sa = _scale_bytes(scale_a, "scale_a", batch + (blocks,))
    sb = _scale_bytes(scale_b, "scale_b", batch + (blocks,))
    out = _operands_named_as_given(
        lambda: _core.dot(args[0], args[1], a.reshape(-1, k), b.reshape(-1, k), _np.ascontiguousarray(c).reshape(-1),
                          *args[2:], sa, sb), info, a, b, c_given)
    return Rounded(out.reshape(batch), info["accumulator"])


def matmul(model: str, a, b, c=None, fmt: str = "bf16", *, fmt_b: str | None = None, kind: str | None = None,
           scale_format: str | None = None, block: int | None = None, scale_a=None, scale_b=None) -> Rounded:
    """A tensor-core GEMM D = C + A·B, bit for bit as the named dot model computes it (models as
    ``dot``): ``a`` [..., M, K] and ``b`` [..., K, N] values (or bit patterns) of ``fmt`` (b:
    ``fmt_b``), ``c`` of the accumulator, broadcast to [..., M, N] (default 0); leading batch
    dimensions broadcast as ``numpy.matmul``'s do. Each D[..., m, n] is
    ``dot(model, a[..., m, :], b[..., :, n], c[..., m, n])``: one chain of the model's k-steps over
    k in order, as one thread block's main loop accumulates its output tile. A GEMM that splits
    k (cuBLAS's split-K and stream-K kernels, a split-KV attention) sums partial chains instead:
    model each partial with its own call and add them as that kernel does. A block-scaled kind
    also takes ``scale_a`` [..., M, K / block] and ``scale_b`` [..., K / block, N] scale bytes.
    NVIDIA models run the blocked kernel (emu/dot/tensor_core_gemm.cpp; the kernel's own speed
    in docs/PERFORMANCE.md; this call adds the conversion of the operands and B's preparation
    per call, which dominates at small sizes) on one thread; block-scaled kinds run one dot at
    a time."""
    args = _dot_model_args(model, fmt, fmt_b, kind, scale_format, block)
    info = _core.dot_model(*args)
    # Shapes first, on the arrays as given: _operand copies a broadcast view into memory.
    a = _as_array(a, "a")
    b = _as_array(b, "b")
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"a, b: expected arrays of at least two dimensions, [..., M, K] and [..., K, N]; got shapes "
                         f"{a.shape} and {b.shape} (for one dot product use dot)")
    (m, k), (k_b, n) = a.shape[-2:], b.shape[-2:]
    if k != k_b:
        raise ValueError(f"a, b: K differs: a is [..., M, K] = {a.shape}, b is [..., K, N] = {b.shape}")
    if k == 0:
        raise ValueError(f"a, b: K = 0 (shapes {a.shape} and {b.shape}): a dot product needs at least one term")
    if max(m, k, n) > 2**31 - 1:  # the kernel's int sizes (found by the GEMM audit: refused after a copy)
        raise ValueError(f"a, b: M, K and N must each be at most 2^31-1, got M = {m}, K = {k}, N = {n}")
    a = _operand(a, "a")
    b = _operand(b, "b")
    try:
        batch = _np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"a, b: batch dimensions {a.shape[:-2]} and {b.shape[:-2]} do not broadcast") from None
    if c is not None:
        c = _operand(c, "c")
        try:
            _np.broadcast_to(c, batch + (m, n))
        except ValueError:
            raise ValueError(f"c: shape {c.shape} does not broadcast to D's shape {batch + (m, n)}") from None
    if not info["scale_block"] and (scale_a is not None or scale_b is not None):
        raise ValueError(f"scale_a, scale_b: model {info['description']} takes no scales (block-scaled kinds do: "
                         "give kind)")
    if 0 in batch or m == 0 or n == 0:
        # Broadcast to an empty batch or an empty D, the operands would reach the core with no
        # element (a c of shape [1, N] broadcast to [0, N]): they are checked as given instead
        # (the scales below, before their broadcast).
        for fmt_x, x, name in ((info["a_format"], a, "a"), (info["b_format"], b, "b"),
                               (info["accumulator"], c, "c")):
            if x is not None:
                _core.check_operand(fmt_x, x, name)

    def batched(x, shape):
        # Broadcast only where the batch dimensions differ, so that an element named in an
        # error is the one of the array as given.
        return _np.ascontiguousarray(x if x.shape == batch + shape else _np.broadcast_to(x, batch + shape))

    # A b without batch dimensions of its own (a weight matrix W in A @ W) goes once, shared by
    # every batch, and an absent c as none: broadcasting either would copy it per batch.
    shared_b = int(_np.prod(b.shape[:-2], dtype=_np.int64)) == 1 and not info["scale_block"]
    b_arg = _np.ascontiguousarray(b.reshape(k, n)) if shared_b else batched(b, (k, n))
    c_arg = None if c is None else batched(c, (m, n))

    sa = sb = None
    if info["scale_block"]:
        if k % info["scale_block"]:
            raise ValueError(f"K = {k} is not a multiple of the block ({info['scale_block']})")
        blocks = k // info["scale_block"]
        for name, s, shape in (("scale_a", scale_a, (m, blocks)), ("scale_b", scale_b, (blocks, n))):
            if s is None:
                raise ValueError(f"{name}: missing: the block-scaled GEMM needs shape [..., {shape[0]}, {shape[1]}] "
                                 "of scale bytes")
            arr = _as_array(s, name)
            _scale_bytes(arr, name, arr.shape)  # its values, before a broadcast to an empty batch hides them
            if arr.ndim < 2 or arr.shape[-2:] != shape:
                raise ValueError(f"{name}: expected shape [..., {shape[0]}, {shape[1]}] (one byte per block of K), "
                                 f"got {arr.shape}")
            try:
                arr = _np.broadcast_to(arr, batch + shape)
            except ValueError:
                raise ValueError(f"{name}: batch dimensions {arr.shape[:-2]} do not broadcast to {batch}") from None
            # [batch * M, blocks] and [batch * blocks, N], as the C++ part reads them
            if name == "scale_a":
                sa = _scale_bytes(arr, name, batch + shape)
            else:
                sb = _scale_bytes(arr, name, batch + shape)
    # An empty D (M, N or a batch dimension 0) still has its operands and scales checked, as dot's.
    out = _operands_named_as_given(
        lambda: _core.matmul(args[0], args[1], batched(a, (m, k)), b_arg, c_arg, *args[2:], sa, sb), info, a, b, c)
    return Rounded(out.reshape(batch + (m, n)), info["accumulator"])


# ---- attention -------------------------------------------------------------------------------
class RowTraces(_abc.Sequence):
    """The traced rows of one ``attention`` run, in the order asked for: a read-only sequence
    (``len``, indexing, negative indices, slices, iteration) whose item i is row i's dict
    (``AttentionResult`` says what it holds). The records stay in the C++ engine's own form
    until read, and each read builds a new dict: every row's dicts at once would cost far more
    memory and time than the run itself (tracing every row of a 2048-row head: 2.2 GB and
    12.7 s of dicts, against 0.18 GB of records and a 0.6 s run). Keep the dicts you need, or
    ``list()`` it."""

    __slots__ = ("_count", "_row")

    def __init__(self, count: int, row):
        # row(i), 0 <= i < count: a new dict of row i's records.
        self._count = count
        self._row = row

    def __len__(self):
        return self._count

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        j = _operator.index(i)
        if not -n <= j < n:
            raise IndexError(f"trace row {i} out of range: {n} traced row{'s' if n != 1 else ''}")
        return self._row(j + n if j < 0 else j)

    def __repr__(self):
        return f"RowTraces({len(self)} traced row{'s' if len(self) != 1 else ''})"

    def __reduce__(self):
        # Pickled (and deep-copied) as the rows' dicts, so that a result crosses processes; each
        # read of the copy is a copy again, as a read of the engine's records is a new dict.
        return RowTraces._of_dicts, (list(self),)

    @staticmethod
    def _of_dicts(dicts):
        return RowTraces(len(dicts), lambda i: _copy.deepcopy(dicts[i]))

    @staticmethod
    def _of_engine(rows):
        return RowTraces(len(rows), rows.row)


class AttentionResult:
    """Outputs of one attention run, shaped like the inputs: ``o`` [..., N, D], ``lse`` [..., N]
    (natural log), and with ``do``: ``delta`` [..., N], ``dq``, ``dk``, ``dv`` (None when the
    model has no such output). ``model`` is the canonical model name, ``scale`` the softmax scale
    used, ``dtype`` the input format and ``output_format`` the format O's values are in (where
    the kernel keeps O: fp64 for a model that keeps it unrounded, ``golden-fp64-*``). ``traces``: the traced rows (``RowTraces``, a
    sequence whose rows become dicts as they are read), per row a dict with its KV tiles, the
    rounding events of O's final cast (``o_cast``), of the P·V accumulation (``pv_dot_steps``,
    ``pv_buffer_events``), the cumulative error along the keys, the delta decomposition and a
    ``summary``; None when nothing was traced. ``exact_attention`` also sets
    ``row_max``, and with ``rounded_as=MODEL`` and ``do``, ``delta_unit`` [..., N]: per row the
    unit ``bias_test`` measures delta in (an ulp of MODEL's output format at
    max(|delta|, sum |dO*O|)); None elsewhere. ``sfu`` describes the special-function models used; ``notes``: what this run's shape takes
    of the model that no capture measured (``replay`` prints the same lines), and with ``do`` on
    a model without a backward, that its gradients are None; ``warning`` is an approximate model's
    note (``cudnn-sdpa-sm90``, a black-box fit; also issued as an ``ApproximateModelWarning``), else None. ``backward(do)`` runs the
    model's backward from this forward when ``attention`` kept it (``keep_forward=True``)."""

    def __init__(self, d: dict, lead: tuple, kv_lead: tuple | None = None):
        def shape(x, lead=lead):
            return None if x is None else x.reshape(lead + x.shape[2:])
        self.o = shape(d["o"])
        self.lse = shape(d["lse"])
        self.delta = shape(d["delta"])
        self.dq = shape(d["dq"])
        # dK and dV have k's heads (fewer than q's under grouped-query attention).
        self.dk = shape(d["dk"], kv_lead or lead)
        self.dv = shape(d["dv"], kv_lead or lead)
        self.row_max = shape(d.get("row_max"))
        self.delta_unit = shape(d.get("delta_unit"))
        self.model = d["model"]
        self.scale = d["scale"]
        self.dtype = d["dtype"]
        self.output_format = d["output_format"]
        self.sfu = d.get("sfu")
        self.warning = d.get("warning") or None
        self.notes = list(d.get("notes") or [])
        self.traces = None if d["traces"] is None else RowTraces._of_engine(d["traces"])
        self._kept = d.get("kept_forward")
        self._lead, self._kv_lead = lead, kv_lead

    def __getstate__(self):
        # A kept forward is the engine's memory, not data: a pickled result leaves it behind
        # (its backward then says so); a deep copy in this process shares it (it never changes).
        state = dict(self.__dict__)
        state["_kept_left_behind"] = state["_kept"] is not None
        state["_kept"] = None
        return state

    def __deepcopy__(self, memo):
        copied = AttentionResult.__new__(AttentionResult)
        memo[id(self)] = copied
        for name, value in self.__dict__.items():
            setattr(copied, name, value if name == "_kept" else _copy.deepcopy(value, memo))
        return copied

    def backward(self, do, *, threads: int | None = None) -> "AttentionResult":
        """The model's backward from this forward, as a training step's backward runs from what
        its forward saved: the result (O, LSE, delta, dQ, dK, dV) is bit for bit that of
        ``attention(q, k, v, model, do=do, ...)`` with this call's arguments, without running the
        forward again. Needs ``attention(..., keep_forward=True)``; ``do`` has q's shape, values
        (or bit patterns) of the model's input format, as ``attention`` takes it. Results never
        depend on ``threads`` (default: the machine's cores)."""
        if self._kept is None:
            if getattr(self, "_kept_left_behind", False):
                raise ValueError("backward: this result was unpickled, and its kept forward (the engine's memory in "
                                 "the process that ran it) was left behind: call backward there, or run attention("
                                 "..., keep_forward=True) again here")
            raise ValueError("backward: this result kept no forward; run attention(..., keep_forward=True)")
        da = _as_array(do, "do")
        want = self._lead + self.o.shape[len(self._lead):]
        if da.shape != want:
            raise ValueError(f"do: expected the shape of q {want}, got {da.shape}")
        threads = _int_arg("threads", threads, optional=True)
        threads = (_os.cpu_count() or 1) if threads is None else threads
        d_o = _operand(da, "do").reshape((1,) * (2 - len(self._lead)) + da.shape)
        d = _core.attention_backward(self._kept, d_o, threads)
        if d.get("shape_warning"):  # as attention(..., do=do) says it (the tutorial's backward, causal off)
            _warnings.warn(d["shape_warning"], UserWarning, stacklevel=2)
        return AttentionResult(d, self._lead, self._kv_lead)

    def __repr__(self):
        extra = " with backward" if self.dq is not None or self.delta is not None else ""
        return f"AttentionResult(model={self.model!r}, o={self.o.shape}{extra})"


def _attention_inputs(q, k, v, do):
    qa, ka, va = (_as_array(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    if not 2 <= qa.ndim <= 4 or ka.ndim != qa.ndim or va.ndim != qa.ndim:
        raise ValueError(f"q, k, v: expected arrays of 2 to 4 dimensions ([batch, head,] row, col) of one rank, "
                         f"got {qa.shape}, {ka.shape}, {va.shape}")
    lead = qa.shape[:-2]
    pad = (1,) * (4 - qa.ndim)
    # The CLI's size limits, before anything is copied (a broadcast view costs nothing yet).
    _core._check_attention_size(list(pad + qa.shape))
    arrays = [_operand(a, n).reshape(pad + a.shape) for a, n in ((qa, "q"), (ka, "k"), (va, "v"))]
    d_o = None
    if do is not None:
        da = _as_array(do, "do")
        if da.shape != qa.shape:
            raise ValueError(f"do: expected the shape of q {qa.shape}, got {da.shape}")
        d_o = _operand(da, "do").reshape(pad + da.shape)
    return arrays, d_o, lead, qa.dtype, ka.shape[:-2]


def _trace_rows(trace):
    if trace is None or isinstance(trace, (bool, _np.bool_)):
        return None, bool(trace)
    if isinstance(trace, (str, bytes)) or not hasattr(trace, "__iter__"):
        raise TypeError(f"trace: expected True, False or a list of rows, got {_kind(trace)}")
    rows = []
    for r in trace:
        t = (r,) if _np.isscalar(r) else tuple(r)
        if len(t) > 3:
            raise ValueError(f"trace: row {r!r}: expected (batch, head, row), (head, row) or row")
        rows.append(tuple(_int_arg("trace", x, bits=32) for x in (0,) * (3 - len(t)) + t))
    return rows, False


# attention(causal=...): the mask and, for N != Nk, where its diagonal starts. True is
# bottom-right (FlashAttention >= 2.1; the CLI's --causal true); "none" is the trace metadata's
# word for no mask, so a trace's causal_alignment can be passed as it is.
_CAUSAL_TEXT = {"bottom-right": (True, False), "top-left": (True, True), "none": (False, False)}


def _causal_arg(causal):
    """(causal, top_left) of a ``causal=`` argument. Another string is a ValueError (the right
    kind, a wrong value: 'bottom_right'), anything else a TypeError; both name the values."""
    if isinstance(causal, (bool, _np.bool_)):
        return bool(causal), False
    if isinstance(causal, str) and causal in _CAUSAL_TEXT:
        return _CAUSAL_TEXT[causal]
    raise (ValueError if isinstance(causal, str) else TypeError)(
        f"causal: expected True, False, 'top-left', 'bottom-right' or 'none', got {_kind(causal)}"
        + (f" {causal!r}" if isinstance(causal, str) else ""))


def _warn_if_alignment_taken(causal_given, q_rows, k_rows, stacklevel=3):
    """causal=True where the lengths differ takes bottom-right, which PyTorch's is_causal (top-left)
    is not: said, as load_trace and the CLI say it of a capture's --causal true."""
    if isinstance(causal_given, (bool, _np.bool_)) and causal_given and q_rows != k_rows:
        shift = k_rows - q_rows
        _warnings.warn(f"causal=True with {q_rows} queries and {k_rows} keys takes the mask aligned bottom-right "
                       f"(FlashAttention >= 2.1: query i sees keys j <= i {'+' if shift >= 0 else '-'} {abs(shift)}); "
                       f"PyTorch's "
                       f"is_causal is top-left: say causal='bottom-right' or causal='top-left'", UserWarning,
                       stacklevel=stacklevel)


def _default_dtype(dtype, in_dtype):
    # float16 values are fp16; everything else (bit patterns included) bf16 unless told.
    dtype = _str_arg("dtype", dtype, optional=True)
    return dtype if dtype is not None else "fp16" if in_dtype == _np.float16 else "bf16"


def attention(q, k, v, model: str, do=None, causal: bool | str = False, scale: float | None = None,
              recipe: str | None = None, trace=False, *, dtype: str | None = None, seed: int | None = None,
              threads: int | None = None, plot_feature: int = 0, sfu: str = "model",
              keep_forward: bool = False) -> AttentionResult:
    """Run attention as the kernel ``model`` computes it (``models()``; ``correctly-rounded`` is
    the exact result rounded once per output). q, k and v [..., N, D] with up to two leading
    axes (batch, head); k and v [..., Nk, D] may have fewer heads than q (grouped-query) and
    another length Nk (decoding with a KV cache, cross-attention). ``causal``: False (or
    "none"), True or "bottom-right" (the mask aligned as FlashAttention >= 2.1 aligns it, the
    CLI's ``--causal true``: query row i sees keys j <= i + Nk - N; rows that see no key get
    O = 0 and the LSE the kernel writes: -inf for FA3, FA4, CK and Triton's kernels, +inf
    for FA2 and every other model, by convention where the kernel writes none), or "top-left" (row i sees keys j <= i: PyTorch's ``is_causal``); with N = Nk
    the two are one mask, and with N != Nk a bare True warns (UserWarning) that it took
    bottom-right. A trace's ``causal_alignment`` is such a value: ``causal=
    t.causal_alignment`` replays its mask. dK and dV have k's shape. Values exactly
    representable in the model's input format (``dtype``: bf16 by default, fp16 for float16
    input; models that name theirs use it; the fp8 models take bf16 and quantise it), or its
    bit patterns (unsigned integers of its container width: uint16 for bf16 and fp16, where
    ``dtype="fp16"`` says which). Problems larger than the CLI accepts (elements per tensor,
    memory) are a ValueError.
    ``do`` runs the backward. ``scale`` defaults to 1/sqrt(D). ``recipe``: a recipe file
    (``bias-test --recipe``). ``trace``: True traces every row, or a list of rows (``row``,
    ``(head, row)`` or ``(batch, head, row)``); the traced rows' records (about 45 bytes a key
    a row) are held to the same 64 GiB, a ValueError before the run. ``sfu``: the
    special-function set, ``model`` (the model's own) or a named set (``correct``, ``hw-sm90``:
    measured on an H200, what ``replay --sfu auto`` picks for a capture from compute capability
    9.0). ``keep_forward``: keep what the backward needs of this forward, for
    ``AttentionResult.backward(do)``. ``seed``: the seed of a model whose arithmetic draws from
    one (``+o-sr``'s stream, ``+hadamard``'s signs; default 0); a seed for any other model is a
    ValueError, not ignored. Results never depend on ``threads``."""
    arrays, d_o, lead, in_dtype, kv_lead = _attention_inputs(q, k, v, do)
    dtype_given = dtype is not None  # then a model naming another input format is refused
    dtype = _default_dtype(dtype, in_dtype)
    rows, trace_all = _trace_rows(trace)
    threads = _int_arg("threads", threads, optional=True)
    threads = (_os.cpu_count() or 1) if threads is None else threads
    recipe = _path_arg("recipe", recipe, optional=True)
    plot_feature = _int_arg("plot_feature", plot_feature, bits=32)
    head_dim = arrays[0].shape[-1]
    # The engine would clamp it (replay --feature refuses it too); an empty axis is the engine's error.
    if head_dim and not 0 <= plot_feature < head_dim:
        raise ValueError(f"plot_feature={plot_feature}: expected 0..{head_dim - 1} (a feature of q's head dim "
                         f"{head_dim})")
    if plot_feature != 0 and not trace_all and not rows:  # it selects what traced rows record: none here
        raise ValueError(f"plot_feature={plot_feature}: needs trace= (the traced rows record that feature's P·V steps)")
    causal_given = causal
    causal, top_left = _causal_arg(causal)
    seed = _int_arg("seed", seed, unsigned=True, optional=True)
    if seed is not None and not _core._model_formats(_str_arg("model", model), dtype, "" if recipe is None else recipe,
                                                     _str_arg("sfu", sfu), dtype_given)["seeded"]:
        raise ValueError(f"seed: model {model} draws no random bits (only +o-sr and +hadamard models read a seed); "
                         "a seed is refused rather than ignored")
    d = _core.attention(arrays[0], arrays[1], arrays[2], _str_arg("model", model), d_o, causal,
                        _float_arg("scale", scale, optional=True), "" if recipe is None else recipe, rows, trace_all,
                        dtype, 0 if seed is None else seed, threads, plot_feature, _str_arg("sfu", sfu),
                        _bool_arg("keep_forward", keep_forward), dtype_given, top_left)
    # Once the run is made: a refused one warns of nothing about itself.
    _warn_if_alignment_taken(causal_given, arrays[0].shape[-2], arrays[1].shape[-2])
    if d.get("warning"):  # an approximate model (a black-box fit) says so on every run, as the CLI does
        _warnings.warn(d["warning"], ApproximateModelWarning, stacklevel=2)
    if d.get("shape_warning"):  # a run the kernel itself gets wrong (the tutorial's backward, causal off)
        _warnings.warn(d["shape_warning"], UserWarning, stacklevel=2)
    return AttentionResult(d, lead, kv_lead)


def exact_attention(q, k, v, do=None, causal: bool | str = False, scale: float | None = None, *,
                    dtype: str | None = None, rounded_as: str | None = None, recipe=None) -> AttentionResult:
    """The exact reference (high precision, not rounded): O, LSE, and with ``do`` delta, dQ, dK,
    dV, plus each row's exact max scaled score (``row_max``). Inputs and ``causal`` as for
    ``attention`` (bit patterns are of ``dtype``). ``rounded_as=MODEL`` (with its ``recipe``)
    gives instead that model's floor, as ``bias_test`` measures it: each exact output rounded
    once to nearest even where MODEL keeps it (O in the format it stores O in; delta from that
    O, or the exact delta rounded once into fp32 where MODEL's delta reads O before its final
    cast). A kernel's output minus its floor's is the kernel's own error, not its format's."""
    arrays, d_o, lead, in_dtype, kv_lead = _attention_inputs(q, k, v, do)
    dtype = _default_dtype(dtype, in_dtype)
    causal_given = causal
    causal, top_left = _causal_arg(causal)
    rounded_as = _str_arg("rounded_as", rounded_as, optional=True)
    if rounded_as == "":  # the C++ part reads "" as not given: the exact values would come back
        raise ValueError("rounded_as: an empty model name (leave rounded_as out for the exact values)")
    recipe = _path_arg("recipe", recipe, optional=True)
    if recipe is not None and rounded_as is None:  # it would change nothing: refused, not ignored
        raise ValueError("recipe: needs rounded_as (the recipe changes that model's floor)")
    d = _core.exact_attention(arrays[0], arrays[1], arrays[2], d_o, causal, _float_arg("scale", scale, optional=True),
                              dtype, top_left, rounded_as or "", recipe or "")
    _warn_if_alignment_taken(causal_given, arrays[0].shape[-2], arrays[1].shape[-2])
    return AttentionResult(d, lead, kv_lead)


# ---- bias test -------------------------------------------------------------------------------
class BiasTestResult(dict):
    """``flashbits bias-test --json`` as a dict with the same keys (in the same order), also
    readable as attributes: ``r.excess.o.mean_ulps``, ``r.verdict``."""

    def __getattr__(self, name):
        try:
            v = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return BiasTestResult(v) if isinstance(v, dict) else v

    @property
    def biased(self) -> bool:
        """True when the kernel adds bias, False when it adds none (``less biased ...`` or ``no
        detectable added bias``); a ``ValueError`` when the test decided nothing
        (``inconclusive``, or no verdict on a non-finite output), which False would pass as unbiased;
        also a ``ValueError`` for a test run ``against=`` another model, whose verdict is relative to
        that model's own bias (False there passed fa-bf16acc against a copy of itself)."""
        verdict = self["verdict"]
        if self.get("relative_to"):
            raise ValueError(f"biased: this test compared with {self['relative_to']}, which has a bias of its own, "
                             f"not with the floor; its verdict ({verdict}) is relative to {self['relative_to']}: "
                             f"read .verdict, or run bias_test without against= for the kernel's own")
        if verdict == "adds bias":
            return True
        if verdict in ("no detectable added bias", "less biased than its format's floor"):
            return False
        raise ValueError(f"biased: the test decided nothing (verdict: {verdict}); read .verdict")


def bias_test(model: str | None = None, scenario: str | None = None, *, traces=None, against: str | None = None,
              recipe: str | None = None, trials: int | None = None, seqlen: int | None = None,
              headdim: int | None = None, dtype: str | None = None, alpha: float = 1e-3, at_stake: float = 0.05,
              seed: int | None = None, by_max: bool = False, source: str | None = None, scale: float | None = None,
              causal: bool | str | None = None, layout: str | None = None) -> BiasTestResult:
    """Statistical bias test of a kernel model on a scenario (one sample per trial), or of
    captured traces (``traces``: a path or a list of paths, read as ``bias-test --traces`` reads
    them: a folder of trace files is its *.safetensors and *.npz in sorted order, a folder of
    .npy arrays one capture; one sample per set of keys and values,
    whose rows are one cluster wherever they sit). ``verdict`` is "adds bias", "less biased than its format's
    floor", "no detectable added bias" or "inconclusive" (fewer than 8 samples, or a test that could
    not have seen a bias of ``at_stake`` ulp), as ``bias-test`` decides it; with ``against`` it is
    relative to that model (``relative_to`` names it), which has a bias of its own: no floor.
    ``units_format`` names the format whose ulps every error is in. Each output is compared with
    its floor by its signed error (``against_floor``) and by its magnitude error
    (``magnitude_against_floor``: the error times the sign of the exact value, where a rounding
    toward zero on outputs of either sign shows); ``alpha`` is the run's level, each comparison
    made at ``alpha_per_comparison`` = alpha / ``comparisons``. Returns the
    fields of ``flashbits bias-test --json`` for the same arguments. A model's test takes
    ``scenario`` (default sink), ``trials`` (32), ``seqlen`` (256), ``headdim`` (64), ``dtype``
    (bf16) and ``seed`` (0); ``trials``, ``seqlen`` and ``headdim`` are held to the CLI's
    limits (at most 2^24 trials; seqlen x headdim at most 2^31 elements and about 64 GiB of
    working memory): a ValueError beyond them. The traces hold their inputs: with ``traces``
    the first five and ``seed`` are a ValueError (``bias-test --traces``, held to its command-line
    contract, checks ``--scenario`` against the traces and notes ``--trials``/``--seed``; here
    they are refused, since a keyword that changes nothing is a mistake in a call). A bare
    capture among the traces (no flashbits metadata: an ``.npz``, a folder of ``.npy``, a bare
    ``.safetensors``) is read as ``load_trace`` reads it, with what it lacks given as that
    function's keywords: ``source``, ``scale``, ``causal``, ``layout``, and ``dtype`` for the
    format of its bit patterns (the CLI's ``--source --scale --causal --layout --dtype``);
    those keywords are for traces only. The reader's notes (a layout read) and the run's (a
    scale, causality or alignment a trace's metadata leaves unsaid and the run assumed, a shape
    no capture measured) are UserWarnings, as load_trace's; ``notes`` keeps the run's."""
    model = _str_arg("model", model, optional=True)
    if traces is not None:
        # Given with traces they would change nothing: refused (the CLI, held to its contract's
        # synopsis, checks --scenario and notes --trials and --seed instead).
        _refuse_unused("the traces hold their inputs", ("scenario", "trials", "seqlen", "headdim", "seed"),
                       {"scenario": scenario, "trials": trials, "seqlen": seqlen, "headdim": headdim, "seed": seed})
    else:
        _refuse_unused("they state what a bare capture among traces lacks", ("source", "scale", "causal", "layout"),
                       {"source": source, "scale": scale, "causal": causal, "layout": layout})
    source = _str_arg("source", source, optional=True)
    scale = _float_arg("scale", scale, optional=True)
    causal = None if causal is None else _causal_text(causal)
    layout = "auto" if layout is None else _str_arg("layout", layout)
    scenario = "sink" if scenario is None else _str_arg("scenario", scenario)
    against = _str_arg("against", against, optional=True)
    recipe = _path_arg("recipe", recipe, optional=True)
    trials, seqlen, headdim = (_int_arg(n, default if x is None else x)
                               for n, x, default in (("trials", trials, 32), ("seqlen", seqlen, 256),
                                                     ("headdim", headdim, 64)))
    dtype = "" if dtype is None else _str_arg("dtype", dtype)  # "": the model's own format, else bf16
    alpha = _float_arg("alpha", alpha)
    at_stake = _float_arg("at_stake", at_stake)
    seed = _int_arg("seed", 0 if seed is None else seed, unsigned=True)
    by_max = _bool_arg("by_max", by_max)
    files = []
    if traces is not None:
        # A folder, a file, or a list of them: the C++ side reads them by the CLI's --traces
        # rule (a folder of trace files is its files, a folder of .npy arrays one capture).
        if isinstance(traces, (str, _os.PathLike)):
            files = [_path_arg("traces", traces)]
        elif hasattr(traces, "__iter__") and not isinstance(traces, bytes):
            files = [_path_arg("traces", t) for t in traces]
            if not files:
                raise ValueError("traces: an empty list")
        else:
            raise TypeError(f"traces: expected a directory or a list of files, got {_kind(traces)}")
    try:
        d, notes = _core.bias_test(model or "", scenario, files, source, scale, causal, layout, against or "",
                                   "" if recipe is None else recipe, trials, seqlen, headdim, dtype, alpha, at_stake,
                                   seed, by_max)
    except ValueError as e:
        raise _keyword_message(e) from None
    # The reader's notes, then the report's own (what a trace's metadata left unsaid and the run
    # assumed, a shape no capture measured): `bias-test` prints every one as a note line.
    _warn_capture_notes(list(notes) + [n for n in d.get("notes", []) if n not in notes])
    return BiasTestResult(d)


# ---- traces ----------------------------------------------------------------------------------
class Trace:
    """A safetensors attention trace (docs/COMMANDS.md): ``metadata`` (every key, strings),
    ``tensors`` (name -> exact values as float64, in file order), ``formats`` (name -> format:
    bf16 fp16 fp32 e4m3 e5m2 fp64, or the safetensors dtype of integer tensors), ``hardware``
    (source is cuda:...). ``trace["q"]`` is ``trace.tensors["q"]``; ``scale``, ``causal``,
    ``causal_alignment``, ``dtype`` and ``model`` read the metadata. ``causal_alignment`` is
    what ``attention(causal=...)`` takes: ``attention(t["q"], t["k"], t["v"], t.model,
    causal=t.causal_alignment, scale=t.scale, dtype=t.dtype, sfu=S)`` replays the trace, with S
    ``"hw-sm90"`` for a capture from an sm_90 GPU (H100, H200; the SFU tables measured there, as
    ``flashbits replay`` picks them) and ``"model"`` otherwise."""

    def __init__(self, d: dict):
        self.path = d["path"]
        self.metadata = d["metadata"]
        self.tensors = d["tensors"]
        self.formats = d["formats"]
        self.hardware = d["hardware"]
        self._causal = d["causal"]
        self._causal_alignment = d["causal_alignment"]

    def __getitem__(self, name):
        return self.tensors[name]

    def __contains__(self, name):
        return name in self.tensors

    @property
    def scale(self):
        s = self.metadata.get("softmax_scale")
        return None if s is None else float(s)

    @property
    def causal(self) -> bool:
        """Whether the trace is causal, as replay reads it: its ``causal`` key, else a
        ``causal_alignment`` key (which alone states causality), else False."""
        return self._causal

    @property
    def causal_alignment(self) -> str:
        """"none" (no mask), "bottom-right" or "top-left": the mask as ``replay`` runs it (a
        causal trace without the key is bottom-right, the engine's default)."""
        return self._causal_alignment

    @property
    def dtype(self):
        return self.metadata.get("dtype") or self.formats.get("q")

    @property
    def model(self):
        return self.metadata.get("model")

    def __repr__(self):
        return f"Trace({self.path!r}, source={self.metadata.get('source')!r}, tensors={list(self.tensors)})"


# The capture reader is the CLI's (traces/capture_import.cpp): its messages name the options of
# `flashbits import` and `replay` (--scale 0.3, drop --scale), which load_trace takes as keywords.
_CAPTURE_OPTION = _re.compile(r"(?<![\w/.-])--(source|model|scale|causal|dtype|layout)\b(?: (?!\())?")


# The CLI commands the C++ messages advise, as Python does the same (before the options above
# become keywords: "flashbits import --model NAME" read as "flashbits import model=NAME").
_CLI_ADVICE = (
    ("flashbits import --model NAME records", "save_trace(..., metadata={..., 'model': NAME}) records"),
)


def _in_python_terms(text: str) -> str:
    """A message or note of the capture reader or the bias run with its CLI advice in Python's
    terms: the commands of _CLI_ADVICE as Python calls, options as keywords (scale=0.3)."""
    for cli, python in _CLI_ADVICE:
        text = text.replace(cli, python)
    return _CAPTURE_OPTION.sub(r"\1=", text)


def _keyword_message(e: ValueError) -> ValueError:
    """The reader's message with its options named as load_trace's keywords (scale=0.3)."""
    return ValueError(_in_python_terms(str(e)))


def _warn_capture_notes(notes, stacklevel=3):
    """The capture reader's notes (a layout read, an alignment or causality assumed) as
    UserWarnings, with their options named as keywords (causal='top-left', layout=bhsd)."""
    for note in notes:
        note = note.replace("--causal top-left|bottom-right", "causal='top-left' or causal='bottom-right'")
        note = note.replace("--causal states it", "causal= states it")
        note = _re.sub(r"--causal (top-left|bottom-right)", r"causal='\1'", note).replace("--causal true", "causal=True")
        _warnings.warn(_in_python_terms(note), UserWarning, stacklevel=stacklevel)


def _causal_text(causal) -> str:
    """A ``causal=`` keyword as the capture reader's --causal text."""
    is_causal, top_left = _causal_arg(causal)
    if not is_causal:
        return "false"
    return "top-left" if top_left else "true" if isinstance(causal, (bool, _np.bool_)) else "bottom-right"


def load_trace(path, *, source: str | None = None, model: str | None = None, scale: float | None = None,
               causal: bool | str | None = None, dtype: str | None = None, layout: str = "auto") -> Trace:
    """Read and validate a trace as ``flashbits replay`` does (ValueError naming the file,
    tensor or key on any defect).

    A capture without flashbits metadata (a bare ``save_file`` dump, an ``.npz``, a directory
    of ``.npy`` files) is read as ``flashbits import`` reads it: ``source`` ("cuda:<gpu>",
    "emulated" or "unknown"), ``model``, ``scale``, ``causal`` and ``dtype`` supply what the
    file lacks (its own metadata wins; a disagreement is a ValueError naming the keyword);
    ``layout`` is "bhsd" (SDPA), "bshd" (flash_attn) or "auto"; k and v may have fewer heads
    than q (GQA). ``causal`` is True, False, "top-left" (key j <= row i: PyTorch's
    ``is_causal``) or "bottom-right" (j <= i + Nk - N: FlashAttention >= 2.1), as
    ``--causal``: True leaves the alignment to the file's ``causal_alignment``, else
    bottom-right, with a UserWarning saying so when the query and key lengths differ; the
    alignment is written to the metadata's ``causal_alignment``. "none" is False (the word
    ``Trace.causal_alignment`` and ``attention(causal=)`` use). A trace whose metadata leaves
    the mask unsaid gets a UserWarning for what ``Trace.causal`` and ``causal_alignment``
    assume (non-causal; bottom-right where N != Nk), and one without a ``softmax_scale`` a
    UserWarning that 1/sqrt(D) is assumed (``Trace.scale`` is then None, which ``attention``
    reads as 1/sqrt(D)), as ``replay`` prints its notes."""
    args = (_path_arg("path", path), _str_arg("source", source, optional=True), _str_arg("model", model, optional=True),
            _float_arg("scale", scale, optional=True), None if causal is None else _causal_text(causal),
            _str_arg("dtype", dtype, optional=True), _str_arg("layout", layout))
    try:
        d = _core.load_trace(*args)
    except ValueError as e:
        raise _keyword_message(e) from None
    _warn_capture_notes(d["notes"])
    return Trace(d)


_ROW_TENSORS = ("lse", "delta", "m", "l")


def _meta_string(key, v) -> str:
    # Strings, bools and numbers only: str() wrote None as "None" (a model or scale named
    # "None") and a list as its repr.
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, _np.bool_)):
        return "true" if v else "false"
    if isinstance(v, _numbers.Integral):
        return str(int(v))
    if isinstance(v, _numbers.Real):
        return repr(float(v))
    what = "None (leave the key out)" if v is None else _kind(v)
    raise TypeError(f"metadata[{key!r}]: expected a string, bool or number, got {what}")


def _dict_arg(name: str, v) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise TypeError(f"{name}: expected a dict, got {_kind(v)}")
    return dict(v)


_SOURCES = "'cuda:<gpu>' for a hardware capture, 'emulated' for one flashbits computed, or 'unknown'"


def save_trace(path, tensors: dict | None = None, *, metadata: dict | None = None, formats: dict | None = None,
               **named) -> None:
    """Write a trace that ``flashbits replay`` and ``safetensors`` read: ``tensors`` (and
    keyword tensors: ``q=..., k=..., v=..., o=..., do=...``), each holding values exactly
    representable in its format or bit patterns (unsigned integer arrays of the format's
    container width). Formats come from ``formats`` (name -> bf16 fp16 fp32 e4m3 e5m2 fp64),
    else the metadata's ``dtype`` (default bf16) for q k v o do dq dk dv, fp32 for lse delta m
    l, fp64 for any other name. ``metadata`` (strings; bools, numbers converted) must hold
    what the schema requires, ``source`` included: nothing is assumed about where the
    tensors came from (``cuda:<gpu>`` for a hardware capture, ``emulated`` for outputs
    flashbits computed, ``unknown``), as ``flashbits import`` asks for ``--source``. A key
    that spells a schema key another way (``scale`` or ``sm_scale`` for ``softmax_scale``,
    ``is_causal`` for ``causal``, ``causalAlignment`` for ``causal_alignment``) is a ValueError
    naming the schema's key: under another name it would be kept as free text, never read.
    Tensor names are non-empty strings (a TypeError or ValueError naming ``tensors``)."""
    all_tensors = _dict_arg("tensors", tensors)
    for name in all_tensors:
        # A name 5 was written as the tensor "5", and "" as a tensor no reader can name.
        if not isinstance(name, str):
            raise TypeError(f"tensors: names are strings (q, k, v, o, ...), got {name!r}")
        if not name:
            raise ValueError("tensors: an empty name; name each tensor (q, k, v, o, ...)")
    # A tensor in both would be written from the keyword alone, the dict's silently dropped.
    twice = sorted(n for n in named if n in all_tensors)
    if twice:
        raise ValueError(f"{', '.join(twice)}: given both in tensors and as a keyword; give each tensor once")
    all_tensors.update(named)
    meta = {}
    for k, v in _dict_arg("metadata", metadata).items():
        if not isinstance(k, str):  # a key 5 or True was written as the text "5" or "True"
            raise TypeError(f"metadata: keys are strings, got {k!r}")
        meta[k] = _meta_string(k, v)
    if "source" not in meta:
        raise ValueError(f"metadata: no source: say where the tensors came from ({_SOURCES})")
    fmts = {name: _str_arg(f"formats[{name!r}]", f) for name, f in _dict_arg("formats", formats).items()}
    dtype = meta.get("dtype", "bf16")
    order = [n for n in ("q", "k", "v", "o") if n in all_tensors] + [n for n in all_tensors
                                                                   if n not in ("q", "k", "v", "o")]
    items = []
    for name in order:
        fmt = fmts.get(name) or (dtype if name in ("q", "k", "v", "o", "do", "dq", "dk", "dv")
                                 else "fp32" if name in _ROW_TENSORS else "fp64")
        items.append((name, _operand(all_tensors[name], name), fmt))
    _core.save_trace(_path_arg("path", path), items, meta)


# ---- catalogues ------------------------------------------------------------------------------
def format_info(fmt: str) -> dict:
    """A format's parameters (``flashbits formats``): exp_bits, man_bits, bias, container
    bits, specials, emin, emax, max finite."""
    return _core.format_info(_str_arg("fmt", fmt))


def models() -> list:
    """The kernel models and variant suffixes (``flashbits models``): name, description, sources."""
    return _core.models()


def dot_models() -> list:
    """The dot models' names, every family (``flashbits dot``; ``dot_model()`` for one's details)."""
    return _core.dot_models()


def scenarios() -> list:
    """The input scenarios of bias_test."""
    return _core.scenario_names()
