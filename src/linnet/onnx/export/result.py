"""`ExportedModel`: an exported ONNX model with its interface, text form and file writer.

Stage: the exporter's output. In: the `ModelProto` that `assemble`
built and the description of its inputs and outputs. Out: `.model`,
`.inputs`/`.outputs` (`GraphIO`: ONNX name, role, IR type, Linnet path),
`.text()` (the ONNX text form), `.save(path)` and `.session(provider)`.
Several entries saved with one data file: `linnet.onnx.export.together`.

Embedded weights stay out of the message until someone needs them there
(`payload`): `.model` puts them in on first use (a complete
in-memory model, what small models and tests want), while `save` with
external data writes them straight from the arrays and never builds them
into the message at all. A protobuf message cannot be serialised past 2 GB
(field-notes.md), so `save` writes the tensors to `<file>.<version>.data` beside the
model when they add up to more than `PROTOBUF_LIMIT` (or when asked to);
`.model` stays complete (or completable) either way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import onnx

from linnet.ir.core import Function, TensorType
from linnet.onnx.export.payload import (
    Payload,
    materialize,
    payload_bytes,
    write_external,
    write_inline,
)
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


def tensor_bytes(model: onnx.ModelProto, skip: Payload | None = None) -> int:
    """Payload bytes of the model's initializers and constant tensors (main graph).

    Initializers named in `skip` (data still outside the message) are not counted.
    """
    skipped = skip or {}
    total = sum(_payload(t) for t in model.graph.initializer if t.name not in skipped)
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


class ExportedModel:
    """An exported entry (see the module docstring).

    `embedded` says whether params are initializers (weights given) or graph
    inputs to bind by name; `provider` is the ONNX Runtime provider the graph's
    dtype and kernel choices were made for. `payload` holds the data of
    initializers declared in `model` without it (`payload`).
    """

    __slots__ = ("_model", "_payload", "embedded", "function", "inputs", "outputs", "provider")

    def __init__(
        self,
        model: onnx.ModelProto,
        inputs: tuple[GraphIO, ...],
        outputs: tuple[GraphIO, ...],
        function: Function,
        provider: str,
        embedded: bool,
        payload: Payload | None = None,
    ) -> None:
        self._model = model
        self._payload: dict[str, Any] = dict(payload or {})
        self.inputs = inputs
        self.outputs = outputs
        self.function = function
        self.provider = provider
        self.embedded = embedded

    def __repr__(self) -> str:
        shown = ", ".join(io.name for io in self.inputs)
        return f"ExportedModel({self._model.graph.name}({shown}), provider={self.provider!r})"

    @property
    def model(self) -> onnx.ModelProto:
        """The complete `ModelProto`; the first use puts pending weights into it (a copy)."""
        if self._payload:
            materialize(self._model, self._payload)
            self._payload = {}
        return self._model

    @property
    def graph_inputs(self) -> tuple[GraphIO, ...]:
        """The inputs a caller feeds: everything but embedded params."""
        return tuple(io for io in self.inputs if not (self.embedded and io.role == "param"))

    def by_role(self, role: Role) -> tuple[GraphIO, ...]:
        return tuple(io for io in (*self.inputs, *self.outputs) if io.role == role)

    def text(self) -> str:
        """The ONNX text form (`onnx.parser.parse_model` reads it back)."""
        from linnet.onnx.export.text import model_to_text

        return model_to_text(self.model)

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        external_data: bool | None = None,
        limit: int = PROTOBUF_LIMIT,
    ) -> Path:
        """Write the model; tensors go to a data file past `limit` bytes (or if asked).

        The data file is `<name>.<version>.data` beside the model, a new
        name for every save (`linnet.atomic`: the model and its data are replaced
        together, a kill leaves the old pair or the new one, and data files
        of earlier saves go once no model refers to them). Pending weights
        (`.model` not used yet) go from their arrays to the data file in one
        pass, without being put into the message.
        """
        target = Path(path)
        inline = tensor_bytes(self._model, self._payload)
        use_external = (
            inline + payload_bytes(self._payload) + _MARGIN > limit
            if external_data is None
            else external_data
        )
        if not use_external:
            write_inline(self.model, target)
        else:
            # pending weights alone go out when the rest fits in the message;
            # otherwise (or with none pending) every tensor of 1 KiB or more does
            alone = bool(self._payload) and inline + _MARGIN <= limit
            write_external(self._model, self._payload, target, message_tensors=not alone)
        return target

    def session(self, provider: str | None = None, **options: Any) -> onnxruntime.InferenceSession:
        """An ONNX Runtime session for this model (`check_provider` first).

        Pending weights go to ONNX Runtime as OrtValues over their arrays, not
        into the message: a model of any size gets a session without a copy.
        """
        from linnet.onnx.export.provider import inference_session

        return inference_session(self._model, provider or self.provider, self._payload, **options)
