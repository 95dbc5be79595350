# Type stubs of the flashbits package (python/flashbits/__init__.py; the C++ part is
# flashbits._core, which is private). Arrays are numpy arrays; every array argument also
# accepts anything with __array__ (CPU torch tensors included). An unsigned integer array
# holds bit patterns of the named format, in that format's container width (uint16 for
# bf16 and fp16, uint8 for 8/6/4-bit formats, uint32 for fp32 and tf32; another width is a
# ValueError); any other array holds values. The annotations are enforced at run time: an
# argument of another kind is a TypeError naming it (bool is not taken for int, nor int
# for bool), an integer beyond the C++ type that takes it a ValueError.
from os import PathLike
from typing import Any, Iterator, Literal, Sequence, overload

import numpy as np
import numpy.typing as npt

__version__: str
INEXACT: int
UNDERFLOW: int
OVERFLOW: int
DIVBYZERO: int
INVALID: int

ArrayLike = npt.ArrayLike
Row = int | tuple[int, int] | tuple[int, int, int]

@overload
def flags_string(flags: int) -> str: ...
@overload
def flags_string(flags: np.ndarray) -> np.ndarray: ...

class ApproximateModelWarning(UserWarning): ...
class UnmeasuredShapeWarning(UserWarning): ...

class Rounded:
    bits: npt.NDArray[np.unsignedinteger[Any]]
    format: str
    flags: npt.NDArray[np.uint8] | None
    @property
    def values(self) -> npt.NDArray[np.float64]: ...
    def __iter__(self) -> Iterator[npt.NDArray[Any]]: ...
    def __len__(self) -> int: ...

def round(x: ArrayLike, fmt: str, mode: str = "rne", overflow: str = "ieee", seed: int | None = None,
          sr_bits: int | None = None, *, position: int | None = None, flags: bool = False) -> Rounded: ...
def decode(bits: ArrayLike, fmt: str) -> npt.NDArray[np.float64]: ...
def add(a: ArrayLike, b: ArrayLike, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded: ...
def sub(a: ArrayLike, b: ArrayLike, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded: ...
def mul(a: ArrayLike, b: ArrayLike, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded: ...
def div(a: ArrayLike, b: ArrayLike, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
        sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded: ...
def fma(a: ArrayLike, b: ArrayLike, c: ArrayLike, fmt: str, mode: str = "rne", overflow: str = "ieee", *,
        seed: int | None = None, sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded: ...
def sqrt(a: ArrayLike, fmt: str, mode: str = "rne", overflow: str = "ieee", *, seed: int | None = None,
         sr_bits: int | None = None, position: int | None = None, flags: bool = False) -> Rounded: ...
def dot(model: str, a: ArrayLike, b: ArrayLike, c: ArrayLike | None = None, fmt: str = "bf16", *,
        fmt_b: str | None = None, kind: str | None = None, scale_format: str | None = None, block: int | None = None,
        scale_a: ArrayLike | None = None, scale_b: ArrayLike | None = None) -> Rounded: ...
def matmul(model: str, a: ArrayLike, b: ArrayLike, c: ArrayLike | None = None, fmt: str = "bf16", *,
           fmt_b: str | None = None, kind: str | None = None, scale_format: str | None = None,
           block: int | None = None, scale_a: ArrayLike | None = None, scale_b: ArrayLike | None = None) -> Rounded: ...
def dot_model(model: str, fmt: str = "bf16", *, fmt_b: str | None = None, kind: str | None = None,
              scale_format: str | None = None, block: int | None = None) -> dict[str, Any]: ...

class RowTraces(Sequence[dict[str, Any]]):
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

class AttentionResult:
    o: npt.NDArray[np.float64]
    lse: npt.NDArray[np.float64]
    delta: npt.NDArray[np.float64] | None
    dq: npt.NDArray[np.float64] | None
    dk: npt.NDArray[np.float64] | None
    dv: npt.NDArray[np.float64] | None
    row_max: npt.NDArray[np.float64] | None
    delta_unit: npt.NDArray[np.float64] | None
    model: str
    scale: float
    dtype: str
    output_format: str
    sfu: str | None
    warning: str | None
    notes: list[str]
    traces: RowTraces | None
    def backward(self, do: ArrayLike, *, threads: int | None = None) -> AttentionResult: ...

def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, model: str, do: ArrayLike | None = None,
              causal: bool | Literal["top-left", "bottom-right", "none"] = False, scale: float | None = None,
              recipe: str | PathLike[str] | None = None, trace: bool | Sequence[Row] = False, *, dtype: str | None = None, seed: int | None = None,
              threads: int | None = None, plot_feature: int = 0, sfu: str = "model",
              keep_forward: bool = False) -> AttentionResult: ...
def exact_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, do: ArrayLike | None = None,
                    causal: bool | Literal["top-left", "bottom-right", "none"] = False, scale: float | None = None, *, dtype: str | None = None,
                    rounded_as: str | None = None, recipe: str | PathLike[str] | None = None) -> AttentionResult: ...

class BiasTestResult(dict[str, Any]):
    def __getattr__(self, name: str) -> Any: ...
    @property
    def biased(self) -> bool: ...

# scenario, trials, seqlen, headdim, dtype, seed: a model's test (None: sink, 32, 256, 64, bf16,
# 0); given with traces they are a ValueError (the traces hold their inputs).
def bias_test(model: str | None = None, scenario: str | None = None, *,
              traces: str | PathLike[str] | Sequence[str | PathLike[str]] | None = None, against: str | None = None,
              recipe: str | PathLike[str] | None = None, trials: int | None = None, seqlen: int | None = None,
              headdim: int | None = None, dtype: str | None = None, alpha: float = 1e-3, at_stake: float = 0.05,
              seed: int | None = None, by_max: bool = False, source: str | None = None, scale: float | None = None,
              causal: bool | str | None = None, layout: str | None = None) -> BiasTestResult: ...

class Trace:
    path: str
    metadata: dict[str, str]
    tensors: dict[str, npt.NDArray[np.float64]]
    formats: dict[str, str]
    hardware: bool
    def __getitem__(self, name: str) -> npt.NDArray[np.float64]: ...
    def __contains__(self, name: object) -> bool: ...
    @property
    def scale(self) -> float | None: ...
    @property
    def causal(self) -> bool: ...
    @property
    def causal_alignment(self) -> Literal["none", "bottom-right", "top-left"]: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...

def load_trace(
    path: str | PathLike[str],
    *,
    source: str | None = ...,
    model: str | None = ...,
    scale: float | None = ...,
    # True, False, "top-left" (PyTorch's is_causal) or "bottom-right" (FlashAttention >= 2.1)
    causal: bool | str | None = ...,
    dtype: str | None = ...,
    layout: str = ...,
) -> Trace: ...
# metadata must hold "source" (cuda:<gpu>, emulated or unknown): nothing is assumed.
def save_trace(path: str | PathLike[str], tensors: dict[str, ArrayLike] | None = None, *,
               metadata: dict[str, Any] | None = None, formats: dict[str, str] | None = None,
               **named: ArrayLike) -> None: ...
def format_info(fmt: str) -> dict[str, Any]: ...
def models() -> list[dict[str, str]]: ...
def dot_models() -> list[str]: ...
def scenarios() -> list[str]: ...
