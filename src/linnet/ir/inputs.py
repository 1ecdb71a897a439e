"""Entry inputs at the Python boundary: ordered, converted and checked alike on every backend.

Stage: the first step of every backend's call (`linnet.torch`'s `LinnetModule` and
`LinnetFunction`, `linnet.onnx`'s `OnnxModel.run_entry`). In: the values a
caller passed, the entry's signature, and, once the entry is lowered for their
types, its `Function`. Out: the values in declaration order as host arrays of
the dtype the entry receives, or a `LinnetError` before anything runs.

One module for every backend so that one mistake gives one message, whichever
backend runs it:

- the inputs, by position and by name, are matched to the declaration: too
  many, a missing one (without a default), an unknown or repeated name;
- a Python number for a scalar input: a `float` for an integer input, a `bool`
  for a number, or an `int` outside the input's dtype is refused (NumPy would
  truncate `3.5` and wrap `2**31` silently);
- an integer array of another integer dtype than declared (int64 token ids,
  what every tokenizer returns, for an `i32` input) is accepted and converted
  when every value fits the declared dtype, as transformers does; otherwise
  the range error below;
- an integer input used as an index (`linnet.ir.index_ranges`: gathers, cache
  writes) must hold values in its range: "entry `decode`: input `position` 8
  is outside 0..7: the cache holds `MaxSeq` = 8 positions".

Values that live on a device (ONNX Runtime `OrtValue`s, torch tensors on a
GPU) skip the value checks, which would read them back to the host (a device
synchronisation per call); a torch tensor on a GPU of a wider integer dtype is
converted there without the check. The backends pass `None` for their host
values (`check_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from linnet.check.types import OptionalType, ScalarDType, ScalarType
from linnet.check.types import TensorType as CheckedTensor
from linnet.errors import InternalError, LinnetError
from linnet.ir.bind import BoundModel, EntrySignature, InputSpec
from linnet.ir.core import (
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    Function,
    TensorType,
    dtype_of_numpy,
    numpy_dtype,
)
from linnet.ir.index_ranges import InputRange, index_ranges, integer_range
from linnet.records import record

Array = np.ndarray[Any, Any]


def order_inputs(
    signature: EntrySignature, positional: Sequence[object], named: Mapping[str, object]
) -> list[object]:
    """The inputs in declaration order: `positional` first, then `named` by input name.

    Trailing inputs with a default may be left out; anything else that does not
    match the declaration is a `LinnetError` naming the entry and the input.
    """
    owner = f"entry `{signature.name}`"
    specs = signature.inputs
    known = ", ".join(f"`{s.name}`" for s in specs) or "none"
    if len(positional) > len(specs):
        raise LinnetError(
            f"{owner} takes {len(specs)} input{'s' if len(specs) != 1 else ''} ({known}) "
            f"but {len(positional)} were given"
        )
    by_name = dict(named)
    unknown = [name for name in by_name if all(s.name != name for s in specs)]
    if unknown:
        raise LinnetError(f"{owner} has no input `{unknown[0]}` (inputs: {known})")
    for spec in specs[: len(positional)]:
        if spec.name in by_name:
            raise LinnetError(f"{owner}: input `{spec.name}` is given by position and by name")
    ordered = list(positional)
    for spec in specs[len(positional) :]:
        if spec.name in by_name:
            ordered.append(by_name.pop(spec.name))
        elif not spec.has_default:
            raise LinnetError(f"{owner}: missing input `{spec.name}` (inputs: {known})")
        else:
            break
    if by_name:
        raise LinnetError(
            f"{owner}: input `{next(iter(by_name))}` is given but an input before it is not "
            "(only trailing inputs may be left to their defaults)"
        )
    return ordered


def declared_dtype(signature: EntrySignature, spec: InputSpec) -> str | None:
    """The input's declared dtype when it is concrete (`i32`), None for a free generic."""
    t = spec.type.inner if isinstance(spec.type, OptionalType) else spec.type
    if not isinstance(t, ScalarType | CheckedTensor):
        return None
    if isinstance(t.dtype, ScalarDType):
        return t.dtype.name
    try:
        return signature.base.dtype(t.dtype)  # a dtype generic of the root block
    except InternalError:
        return None  # the entry's own: its inputs bind it


@record(eq=False)
class HostInput:
    """An input on the host: its values as given (an integer dtype may differ from
    `dtype`, see the module docstring) and the Linnet dtype the entry receives."""

    array: Array
    dtype: str

    @property
    def type(self) -> TensorType:
        return TensorType(tuple(self.array.shape), self.dtype)


def crossing_dtype(actual: str, declared: str | None) -> str:
    """The dtype an input of `actual` dtype crosses as: the declared integer dtype for
    any integer input (its values are checked to fit), else its own."""
    if declared is not None and actual in INTEGER_DTYPES and declared in INTEGER_DTYPES:
        return declared
    return actual


def host_input(
    value: object, spec: InputSpec, signature: EntrySignature, owner: str
) -> HostInput | None:
    """A Python number or NumPy array as a `HostInput`; None for any other value
    (the backend's own tensors). LinnetError for a number the input cannot take."""
    what = f"{owner}: input `{spec.name}`"
    declared = declared_dtype(signature, spec)
    if isinstance(value, bool | int | float) and not isinstance(value, np.generic):
        t = spec.type.inner if isinstance(spec.type, OptionalType) else spec.type
        if not isinstance(t, ScalarType):
            raise LinnetError(f"{what} needs a tensor, got a Python number")
        if declared is None:
            raise LinnetError(f"{what} has a generic dtype; pass a rank-0 array or tensor instead")
        return HostInput(_number(value, declared, what), declared)
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        actual = _LINNET_DTYPES.get(array.dtype)
        if actual is None:
            try:
                actual = _LINNET_DTYPES[array.dtype] = dtype_of_numpy(array.dtype)
            except InternalError:
                raise LinnetError(
                    f"{what} has NumPy dtype {array.dtype}, which Linnet lacks"
                ) from None
        return HostInput(array, crossing_dtype(actual, declared))
    return None


_LINNET_DTYPES: dict[np.dtype[Any], str] = {}
"""`dtype_of_numpy` by NumPy dtype, as met (its name lookup is slow for a per-call path)."""


def _number(value: bool | float, dtype: str, what: str) -> Array:
    """A Python number as a rank-0 array, refusing silent conversions (module docstring)."""
    kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"
    fits = {"bool": dtype == "bool", "int": dtype != "bool", "float": dtype in FLOAT_DTYPES}[kind]
    if not fits:
        raise LinnetError(f"{what} is {dtype}; got a Python {kind} ({value!r})")
    if kind == "int" and dtype in INTEGER_DTYPES:
        number = int(value)
        low, high = integer_range(dtype)
        if not low <= number <= high:
            raise LinnetError(_outside(what, number, None, low, high, f"the input is {dtype}"))
        return np.asarray(number, dtype=numpy_dtype(dtype))
    try:
        return np.asarray(value, dtype=numpy_dtype(dtype))
    except OverflowError:
        raise LinnetError(f"{what} is {dtype}; {value!r} is out of its range") from None


@record(eq=False)
class InputChecks:
    """What `check_inputs` checks for one lowered entry: each input's name and the dtype
    it receives, and the ranges of the inputs used as indices (also by input number in
    `by_index`; `integers` holds the NumPy dtype of each integer input, None for others)."""

    names: tuple[str, ...]
    dtypes: tuple[str, ...]
    ranges: tuple[InputRange, ...]
    by_index: dict[int, InputRange]
    integers: tuple[np.dtype[Any] | None, ...]


def input_checks(fn: Function, model: BoundModel | None = None) -> InputChecks:
    """The checks of the lowered entry `fn` (`model` names the extents, when given)."""
    names = tuple(name for name, _ in fn.inputs)
    dtypes = tuple(value.type.dtype for _, value in fn.inputs)
    ranges = index_ranges(fn, model)
    integers = tuple(numpy_dtype(d) if d in INTEGER_DTYPES else None for d in dtypes)
    return InputChecks(names, dtypes, ranges, {r.index: r for r in ranges}, integers)


def check_inputs(checks: InputChecks, arrays: Sequence[Array | None], owner: str) -> None:
    """Refuse inputs outside their ranges (see the module docstring); `arrays` are the
    inputs' host values in order, as given, None for a value that lives on a device.

    Runs on every call: it only reads the extremes of the integer inputs it checks.
    """
    for index, array in enumerate(arrays[: len(checks.integers)]):
        target = checks.integers[index]
        if array is None or target is None or array.dtype.kind not in "iu":
            continue
        found = checks.by_index.get(index)
        narrowed = array.dtype != target
        if found is None and not narrowed:
            continue
        if array.ndim == 0:
            smallest = largest = int(array)
        elif array.size:
            smallest, largest = int(array.min()), int(array.max())
        else:
            continue
        what = f"{owner}: input `{checks.names[index]}`"
        if found is not None:
            low, high = found.low, found.high
            if low.value > high.value:
                raise LinnetError(
                    f"{what} can take no value (got {_show(array, smallest)}): {high.reason}"
                )
            if smallest < low.value:
                raise LinnetError(
                    _outside(what, smallest, array, low.value, high.value, low.reason)
                )
            if largest > high.value:
                raise LinnetError(
                    _outside(what, largest, array, low.value, high.value, high.reason)
                )
        if narrowed:
            dtype = checks.dtypes[index]
            low_end, high_end = integer_range(dtype)
            for bad in (smallest, largest):
                if not low_end <= bad <= high_end:
                    raise LinnetError(
                        _outside(what, bad, array, low_end, high_end, f"the input is {dtype}")
                    )


def _outside(what: str, value: int, array: Array | None, low: int, high: int, why: str) -> str:
    if array is None or array.ndim == 0:
        return f"{what} {value} is outside {low}..{high}: {why}"
    return f"{what} holds {_show(array, value)}, outside {low}..{high}: {why}"


def _show(array: Array, value: int) -> str:
    """`value`, with the position of its first occurrence when `array` has axes."""
    if array.ndim == 0:
        return str(value)
    where = np.argwhere(array == value)
    at = ", ".join(str(int(i)) for i in where[0]) if len(where) else ""
    return f"{value} at [{at}]"
