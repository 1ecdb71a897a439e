"""`ExportedModel`: an exported ONNX model with its interface, text form and file writer.

Stage: the exporter's output. In: the `ModelProto` that `export_assemble`
built and the description of its inputs and outputs. Out: `.model`,
`.inputs`/`.outputs` (`GraphIO`: ONNX name, role, IR type, Linnet path),
`.text()` (the ONNX text form), `.save(path)` and `.session(provider)`.

A protobuf message cannot be serialised past 2 GB (field-notes.md), so
`save` writes the tensors to `<file>.data` beside the model when they add
up to more than `PROTOBUF_LIMIT` (or when asked to), and puts the data back
into the in-memory model afterwards so that `.model` stays complete.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import onnx

from linnet.errors import LinnetError
from linnet.ir.core import Function, TensorType
from linnet.records import record

if TYPE_CHECKING:
    import onnxruntime  # type: ignore[import-untyped]

PROTOBUF_LIMIT = 2**31 - 1
"""Bytes a protobuf message may have when serialised whole."""
_MARGIN = 64 * 2**20  # nodes, names and metadata besides the tensor payload

Role = Literal["input", "param", "state", "output", "next_state"]


@record(frozen=True)
class GraphIO:
    """One graph input or output: its ONNX name, its role, its IR type and its Linnet path.

    Roles: `input` (an entry input, `path` None), `param` (a param or buffer:
    a graph input, or an initializer when weights are embedded), `state`
    (a state member the entry reads), `output` (`output<N>`, the N-th result)
    and `next_state` (the new value of a state member the entry assigns).
    """

    name: str
    role: Role
    type: TensorType
    path: str | None = None


def tensor_bytes(model: onnx.ModelProto) -> int:
    """Payload bytes of the model's initializers and constant tensors (main graph)."""
    total = sum(_payload(t) for t in model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant":
            total += sum(_payload(a.t) for a in node.attribute if a.name == "value")
    return total


def _payload(tensor: onnx.TensorProto) -> int:
    if tensor.raw_data:
        return len(tensor.raw_data)
    count = 1
    for d in tensor.dims:
        count *= d
    return count * 8  # typed fields hold at most 8 bytes per element


def needs_external_data(model: onnx.ModelProto, limit: int = PROTOBUF_LIMIT) -> bool:
    """Whether `model` must keep its tensors in a separate file to be saved."""
    return tensor_bytes(model) + _MARGIN > limit


@record(eq=False)
class ExportedModel:
    """An exported entry (see the module docstring).

    `embedded` says whether params are initializers (weights given) or graph
    inputs to bind by name; `provider` is the ONNX Runtime provider the graph's
    dtype and kernel choices were made for.
    """

    model: onnx.ModelProto
    inputs: tuple[GraphIO, ...]
    outputs: tuple[GraphIO, ...]
    function: Function
    provider: str
    embedded: bool

    @property
    def graph_inputs(self) -> tuple[GraphIO, ...]:
        """The inputs a caller feeds: everything but embedded params."""
        return tuple(io for io in self.inputs if not (self.embedded and io.role == "param"))

    def by_role(self, role: Role) -> tuple[GraphIO, ...]:
        return tuple(io for io in (*self.inputs, *self.outputs) if io.role == role)

    def text(self) -> str:
        """The ONNX text form (`onnx.parser.parse_model` reads it back)."""
        from linnet.onnx.text import model_to_text

        return model_to_text(self.model)

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        external_data: bool | None = None,
        limit: int = PROTOBUF_LIMIT,
    ) -> Path:
        """Write the model; tensors go to `<name>.data` past `limit` bytes (or if asked)."""
        target = Path(path)
        use_external = (
            needs_external_data(self.model, limit) if external_data is None else external_data
        )
        try:
            if not use_external:
                onnx.save_model(self.model, target)
                return target
            onnx.save_model(
                self.model,
                target,
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=f"{target.name}.data",
                size_threshold=1024,
            )
            # save_model moved the payload out of the message; read it back in.
            onnx.load_external_data_for_model(self.model, str(target.parent))
        except OSError as exc:
            raise LinnetError(f"cannot write `{target}`: {exc.strerror or exc}") from None
        return target

    def session(self, provider: str | None = None, **options: Any) -> onnxruntime.InferenceSession:
        """An ONNX Runtime session for this model (`check_provider` first)."""
        from linnet.onnx.export_runtime import inference_session

        return inference_session(self.model, provider or self.provider, **options)
