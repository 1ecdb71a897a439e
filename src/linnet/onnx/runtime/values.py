"""Tensors at the ONNX Runtime boundary: dtypes, devices and `OrtValue` conversions.

Stage: shared by the runtime side of `linnet.onnx` (`model`, `session`). In:
NumPy arrays (bf16 through ml_dtypes) and the execution providers a model was
loaded with. Out: `OrtValue`s on the providers' device, and host arrays back.

Why a module of its own: ONNX Runtime's Python API handles most dtypes through
NumPy but not bf16 (`ortvalue_from_numpy` refuses ml_dtypes' `bfloat16`, and
`OrtValue.numpy()` has "no corresponding Numpy type"). bf16 therefore crosses
as the same bits viewed as `uint16`, tagged with ONNX's BFLOAT16 element type,
in both directions; every other dtype crosses as itself.

On the CPU device `ortvalue_from_numpy` wraps the array's memory without a copy
(ONNX Runtime keeps a reference), so memory-mapped SafeTensors weights reach
every session without ever being read into the process, and a state buffer
made from a NumPy array is that array: the runtime writes into it in place.
Callers keep the backing arrays alive next to the `OrtValue`s all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort  # type: ignore[import-untyped]

from linnet.errors import LinnetError
from linnet.ir.core import TensorType, numpy_dtype
from linnet.records import record

ONNX_ELEMENT_TYPES: dict[str, int] = {
    "f32": 1, "u8": 2, "i8": 3, "u16": 4, "i16": 5, "i32": 6, "i64": 7,
    "bool": 9, "f16": 10, "f64": 11, "u32": 12, "u64": 13, "bf16": 16,
}  # fmt: skip
"""`onnx.TensorProto.DataType` of each Linnet dtype (the numbers are fixed by onnx.proto)."""

_ORT_TYPE_NAMES: dict[str, str] = {
    "tensor(float)": "f32", "tensor(uint8)": "u8", "tensor(int8)": "i8",
    "tensor(uint16)": "u16", "tensor(int16)": "i16", "tensor(int32)": "i32",
    "tensor(int64)": "i64", "tensor(bool)": "bool", "tensor(float16)": "f16",
    "tensor(double)": "f64", "tensor(uint32)": "u32", "tensor(uint64)": "u64",
    "tensor(bfloat16)": "bf16",
}  # fmt: skip

_GPU_PROVIDERS = {"CUDAExecutionProvider": "cuda", "TensorrtExecutionProvider": "cuda"}
"""Providers whose tensors live in CUDA memory (TensorRT runs on the CUDA device)."""

Provider = str | tuple[str, dict[str, Any]]
"""What `InferenceSession(providers=...)` takes: a name, or (name, options)."""


@record(frozen=True)
class Device:
    """Where a model's tensors live: ONNX Runtime's `device_type` and `device_id`."""

    kind: str = "cpu"
    id: int = 0


def provider_name(provider: Provider) -> str:
    return provider if isinstance(provider, str) else provider[0]


def device_for(providers: Sequence[Provider]) -> Device:
    """The device of the first provider: CUDA for CUDA and TensorRT, else the CPU.

    The first provider is the one ONNX Runtime prefers, so weights and state go
    where most nodes will run; nodes it leaves to a later provider get their
    inputs copied by the runtime itself.
    """
    if not providers:
        return Device()
    first = providers[0]
    kind = _GPU_PROVIDERS.get(provider_name(first))
    if kind is None:
        return Device()
    options = first[1] if isinstance(first, tuple) else {}
    return Device(kind, int(options.get("device_id", 0)))


def require(device: Device) -> None:
    """A LinnetError when this onnxruntime build cannot hold tensors on `device`."""
    if device.kind == "cpu":
        return
    available = ort.get_available_providers()
    if not any(_GPU_PROVIDERS.get(p) == device.kind for p in available):
        raise LinnetError(
            f"this onnxruntime has no {device.kind.upper()} provider (available: "
            f"{', '.join(available)}); install onnxruntime-gpu, or load the model with "
            "providers=['CPUExecutionProvider']"
        )


def dtype_of_ortvalue(value: ort.OrtValue) -> str:
    """The Linnet dtype of an `OrtValue` (LinnetError for sequences, maps, strings)."""
    if not value.is_tensor():
        raise LinnetError("an entry input must be a tensor OrtValue, not a sequence or map")
    name = value.data_type()
    dtype = _ORT_TYPE_NAMES.get(name)
    if dtype is None:
        raise LinnetError(f"an OrtValue of {name} has no Linnet dtype")
    return dtype


def type_of_ortvalue(value: ort.OrtValue) -> TensorType:
    return TensorType(tuple(int(d) for d in value.shape()), dtype_of_ortvalue(value))


def host_array(array: np.ndarray[Any, Any], dtype: str) -> np.ndarray[Any, Any]:
    """`array` as a C-contiguous array of `dtype` (a no-op when it already is one).

    NOTE: not `np.ascontiguousarray` alone, which turns a rank-0 array into rank 1.
    """
    value = np.asarray(array, dtype=numpy_dtype(dtype))
    return value if value.flags.c_contiguous else np.ascontiguousarray(value)


def ortvalue(array: np.ndarray[Any, Any], dtype: str, device: Device) -> ort.OrtValue:
    """`array` (already of `dtype`, C-contiguous) on `device`; shares memory on the CPU."""
    if dtype == "bf16":
        bits = array.view(np.uint16)
        value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, ONNX_ELEMENT_TYPES["bf16"])
        # NOTE: unlike `ortvalue_from_numpy`, this factory keeps no reference to the
        # array; the attribute `ortvalue_from_numpy` itself uses keeps it alive.
        value._numpy_obj = bits
        return value
    if device.kind == "cpu":
        return ort.OrtValue.ortvalue_from_numpy(array)
    require(device)
    return ort.OrtValue.ortvalue_from_numpy(array, device.kind, device.id)


def placed(array: np.ndarray[Any, Any], dtype: str, device: Device) -> ort.OrtValue:
    """`array` converted to `dtype` and put on `device` once (bf16 reaches a GPU via the host)."""
    host = host_array(array, dtype)
    value = ortvalue(host, dtype, Device())
    if device.kind == "cpu":
        return value
    out = empty(TensorType(host.shape, dtype), device)
    out.update_inplace(value)
    return out


def empty(t: TensorType, device: Device) -> ort.OrtValue:
    """An uninitialised tensor of `t` on `device`, allocated by ONNX Runtime."""
    require(device)
    return ort.OrtValue.ortvalue_from_shape_and_type(
        list(t.shape), ONNX_ELEMENT_TYPES[t.dtype], device.kind, device.id
    )


class Buffer:
    """A tensor the runtime writes into: an `OrtValue`, and on the CPU its NumPy array.

    On the CPU the array IS the tensor's memory (see the module docstring), so
    reading it back needs no copy and bf16 needs no special path; on a GPU the
    tensor is allocated there and read back through a host `Buffer`.
    """

    def __init__(self, t: TensorType, device: Device, *, zero: bool = False) -> None:
        self.type = t
        self.device = device
        self.array: np.ndarray[Any, Any] | None = None
        if device.kind == "cpu":
            make = np.zeros if zero else np.empty
            self.array = make(t.shape, dtype=numpy_dtype(t.dtype))
            self.value = ortvalue(self.array, t.dtype, device)
        else:
            self.value = empty(t, device)
            if zero:
                self.zero()

    def zero(self) -> None:
        """Fill with zeros where the tensor lives (its address does not change)."""
        if self.array is not None:
            self.array.fill(0)
        else:
            zeros = np.zeros(self.type.shape, dtype=numpy_dtype(self.type.dtype))
            self.value.update_inplace(ortvalue(zeros, self.type.dtype, Device()))

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """A host copy of the current contents."""
        if self.array is not None:
            return self.array.copy()
        return to_numpy(self.value, self.type.dtype)

    @property
    def address(self) -> int:
        """The device address of the data (what in-place updates keep fixed)."""
        return int(self.value.data_ptr())


def to_numpy(value: ort.OrtValue, dtype: str) -> np.ndarray[Any, Any]:
    """A host copy of any tensor `OrtValue` of `dtype` (bf16 and device memory included)."""
    shape = tuple(int(d) for d in value.shape())
    if dtype != "bf16" and value.device_name().lower() == "cpu":
        return np.array(value.numpy(), copy=True)
    host = Buffer(TensorType(shape, dtype), Device())
    host.value.update_inplace(value)
    assert host.array is not None
    return host.array
