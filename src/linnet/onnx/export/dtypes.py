"""Which dtype each op runs in under ONNX Runtime, per execution provider.

Stage: a table the exporter's lowering rules consult (architecture.md, "which
dtype runs where ... the backend, documented in its module docstring"). In: an
IR dtype, the kind of computation and the provider. Out: the dtype the ONNX
node computes in; the rule casts its operands there and the result back, so
every ONNX value that stands for an IR value always holds exactly the IR type.

The choices, each one measured on onnxruntime 1.32 or stated by its docs
(field-notes.md "ONNX and ONNX Runtime"):

- bf16: ONNX Runtime has no bf16 contractions, convolution, pooling,
  reductions or resizing, so those run in f32 with casts around them (exact
  widening; one rounding back, as the reference does). Comparisons and
  `select` also run in f32 (lossless, and `Where` lacks bf16 kernels in some
  versions); the float functions too, as the reference computes them wider.
  Plain arithmetic (`add`, `mul`, ...) stays bf16 for the CUDA provider. The
  CPU provider has no bf16 arithmetic kernels at all: `check_provider` turns
  a bf16 model on it into one clear `LinnetError`.
- 8- and 16-bit integers: arithmetic, comparisons, shifts, `max`/`min`,
  reductions and contractions run in i32 (the CPU provider lacks `Max`,
  `Min`, `Where` for 16-bit types, CUDA lacks most small-int kernels); the
  result wraps back to the width with a `Cast`, which ONNX Runtime performs
  as a two's-complement truncation, exactly the language's wrapping.
- f16: contractions and sums/products run in f32 on the CPU provider (its
  f16 kernels may accumulate in f16), natively on CUDA (f32 accumulation in
  the tensor-core kernels).
- `Where` (select) has no CPU kernel for bool, i16, u16 or u64: those are
  selected in u8, i32, i32 and i64 (a bit-preserving cast for u64).
"""

from __future__ import annotations

from linnet.errors import LinnetError

PROVIDERS = ("cpu", "cuda")
PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}

# TensorProto.DataType numbers (onnx.proto), so this table needs no onnx import.
ONNX_TYPES: dict[str, int] = {
    "f32": 1, "u8": 2, "i8": 3, "u16": 4, "i16": 5, "i32": 6, "i64": 7,
    "bool": 9, "f16": 10, "f64": 11, "u32": 12, "u64": 13, "bf16": 16,
}  # fmt: skip
LINNET_TYPES = {number: name for name, number in ONNX_TYPES.items()}

SMALL_INTS = frozenset({"i8", "i16", "u8", "u16"})
_WIDER = {"bf16": "f32"}


def check_provider_name(provider: str) -> str:
    """`provider` itself, or a `LinnetError` listing the known ones."""
    if provider not in PROVIDERS:
        raise LinnetError(
            f"unknown ONNX Runtime provider `{provider}` (known: {', '.join(PROVIDERS)})"
        )
    return provider


def arithmetic_dtype(dtype: str) -> str:
    """Elementwise arithmetic, `max`/`min` and shifts: small ints in i32, others as is."""
    return "i32" if dtype in SMALL_INTS else dtype


def compare_dtype(dtype: str) -> str:
    """Comparisons: small ints in i32, bf16 in f32 (both exact)."""
    return "i32" if dtype in SMALL_INTS else _WIDER.get(dtype, dtype)


def function_dtype(dtype: str) -> str:
    """`exp`, `log`, `sqrt`, `rsqrt`, `sin`, `cos`, `tanh`: bf16 in f32."""
    return _WIDER.get(dtype, dtype)


def accumulate_dtype(dtype: str, provider: str) -> str:
    """Contractions and `sum`/`prod` reductions (the reference accumulates wide)."""
    if dtype in SMALL_INTS:
        return "i32"
    if dtype == "bf16" or (dtype == "f16" and provider == "cpu"):
        return "f32"
    return dtype


def extremum_dtype(dtype: str) -> str:
    """`max`/`min` reductions, exact in any wider type: small ints in i32, u32 in i64
    (the CPU provider has no unsigned reductions), bf16 in f32."""
    if dtype in SMALL_INTS:
        return "i32"
    return {"u32": "i64", "bf16": "f32"}.get(dtype, dtype)


def select_dtype(dtype: str) -> str:
    """The dtype `Where` selects in (see the module docstring)."""
    return {"bool": "u8", "i16": "i32", "u16": "i32", "u64": "i64", "bf16": "f32"}.get(dtype, dtype)
