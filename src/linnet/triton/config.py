"""`config.pbtxt`: a Triton model configuration written as protobuf text.

Stage: the last step of `linnet.triton.export`. In: the model's tensors as
Triton sees them (`TritonTensor`: name, `TYPE_*`, dims without the batch axis),
the platform or backend, `max_batch_size`, the sequence batcher's controls for
a stateful model, and Linnet's own settings (one JSON string parameter,
`linnet`, that the Python-backend model reads). Out: the text of Triton's
`ModelConfig` message (`model_config.proto`). The text is written here by
hand, so exporting needs no Triton package; the tests parse it with Triton's own
`model_config_pb2` (from `tritonclient`) to hold it to the real schema.

Dtypes: every Linnet dtype has a `TYPE_*` (`TRITON_DTYPES`). A scalar travels
as dims `[1]`: the ONNX platform gets `reshape { shape: [] }` so ONNX Runtime
sees the rank-0 tensor the graph declares, and the Python backend reshapes the
`[1]` array itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from linnet.records import record

TRITON_DTYPES: dict[str, str] = {
    "bool": "TYPE_BOOL",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "f16": "TYPE_FP16",
    "bf16": "TYPE_BF16",
    "f32": "TYPE_FP32",
    "f64": "TYPE_FP64",
}
"""Linnet dtype -> Triton `DataType` name."""

ONNX_PLATFORM = "onnxruntime_onnx"
PYTHON_BACKEND = "python"


@record(frozen=True)
class TritonTensor:
    """One model input or output as `config.pbtxt` declares it.

    `dims` leave out the batch axis when the model batches (`max_batch_size > 0`);
    -1 is a size that varies per request. `scalar` marks a rank-0 Linnet value
    sent as `[1]`.
    """

    name: str
    data_type: str
    dims: tuple[int, ...]
    scalar: bool = False


@record(frozen=True)
class SequenceControls:
    """The sequence batcher of a stateful model: control input names and the idle timeout."""

    start: str = "START"
    end: str = "END"
    corrid: str = "CORRID"
    idle_microseconds: int = 60_000_000


def render(
    name: str,
    *,
    inputs: Sequence[TritonTensor],
    outputs: Sequence[TritonTensor],
    max_batch_size: int,
    platform: str | None = None,
    backend: str | None = None,
    sequence: SequenceControls | None = None,
    dynamic_batching: bool = False,
    parameters: Mapping[str, str] | None = None,
) -> str:
    """The `config.pbtxt` text (see the module docstring)."""
    lines = [f"name: {_quote(name)}"]
    if platform is not None:
        lines.append(f"platform: {_quote(platform)}")
    if backend is not None:
        lines.append(f"backend: {_quote(backend)}")
    lines.append(f"max_batch_size: {max_batch_size}")
    reshape_scalars = platform == ONNX_PLATFORM
    lines += _tensors("input", inputs, reshape_scalars)
    lines += _tensors("output", outputs, reshape_scalars)
    if sequence is not None:
        lines += _sequence(sequence)
    elif dynamic_batching:
        lines.append("dynamic_batching { }")
    lines.append("instance_group [ { kind: KIND_CPU, count: 1 } ]")
    for key, value in (parameters or {}).items():
        lines.append(
            f"parameters {{ key: {_quote(key)}, value {{ string_value: {_quote(value)} }} }}"
        )
    return "\n".join(lines) + "\n"


def _tensors(kind: str, tensors: Sequence[TritonTensor], reshape_scalars: bool) -> list[str]:
    if not tensors:
        return []
    items = []
    for t in tensors:
        fields = [
            f"name: {_quote(t.name)}",
            f"data_type: {t.data_type}",
            f"dims: [ {', '.join(str(d) for d in t.dims)} ]",
        ]
        if t.scalar and reshape_scalars:
            fields.append("reshape: { shape: [ ] }")
        items.append("  { " + ", ".join(fields) + " }")
    return [f"{kind} [", ",\n".join(items), "]"]


def _sequence(controls: SequenceControls) -> list[str]:
    def control(name: str, kind: str, value: str) -> str:
        return f"    {{ name: {_quote(name)}, control [ {{ kind: {kind}, {value} }} ] }}"

    flags = "int32_false_true: [ 0, 1 ]"
    return [
        "sequence_batching {",
        f"  max_sequence_idle_microseconds: {controls.idle_microseconds}",
        "  control_input [",
        ",\n".join(
            [
                control(controls.start, "CONTROL_SEQUENCE_START", flags),
                control(controls.end, "CONTROL_SEQUENCE_END", flags),
                control(controls.corrid, "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT64"),
            ]
        ),
        "  ]",
        "  direct { }",
        "}",
    ]


def _quote(text: str) -> str:
    """A protobuf text-format string literal: printable ASCII as is, other bytes octal."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '\\"':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'
