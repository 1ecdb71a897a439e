"""What an exported model needs from an ONNX Runtime provider, checked before a session exists.

Stage: between export and ONNX Runtime (the runtime helper's `load_model`
calls `check_provider` too). In: a `ModelProto` and a provider name
(`cpu`, `cuda`). Out: nothing, or one `LinnetError` that says what to do.

ONNX Runtime's CPU provider has no bf16 arithmetic kernels (field-notes.md):
a bf16 graph fails there with "Could not find an implementation for Add(14)
node", which names neither the cause nor the fix. Any bf16 tensor in the
graph (an input, an output, an initializer, a constant or a cast to bf16,
in any nested graph) counts as a bf16 model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from linnet.errors import LinnetError
from linnet.onnx.export.dtypes import ONNX_TYPES, PROVIDER_NAMES, check_provider_name

if TYPE_CHECKING:
    import onnxruntime  # type: ignore[import-untyped]

_BF16 = ONNX_TYPES["bf16"]


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def bf16_uses(model: onnx.ModelProto) -> list[str]:
    """Where the model holds bf16 values: graph I/O names, initializers, node outputs."""
    found: list[str] = []
    for graph in _graphs(model.graph):
        for info in (*graph.input, *graph.output):
            if info.type.tensor_type.elem_type == _BF16:
                found.append(f"`{info.name}`")
        found.extend(f"`{t.name}`" for t in graph.initializer if t.data_type == _BF16)
        for node in graph.node:
            for attr in node.attribute:
                bf16_cast = node.op_type == "Cast" and attr.name == "to" and attr.i == _BF16
                bf16_value = attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == _BF16
                if bf16_cast or bf16_value:
                    found.append(f"`{node.output[0]}` ({node.op_type})")
    return found


def check_provider(model: onnx.ModelProto, provider: str) -> None:
    """Raise a `LinnetError` if `provider` cannot run `model` (a bf16 model on the CPU)."""
    check_provider_name(provider)
    if provider != "cpu":
        return
    uses = bf16_uses(model)
    if uses:
        shown = ", ".join(uses[:3]) + (f" and {len(uses) - 3} more" if len(uses) > 3 else "")
        raise LinnetError(
            f"this model computes in bf16 ({shown}), and ONNX Runtime's CPU provider has no "
            "bf16 arithmetic kernels; export it with T=f16 or T=f32 for the CPU, or run it "
            "on the CUDA provider"
        )


def inference_session(
    model: onnx.ModelProto,
    provider: str,
    payload: Mapping[str, np.ndarray[Any, Any]] | None = None,
    **options: Any,
) -> onnxruntime.InferenceSession:
    """A session on `provider` (`cpu`/`cuda`) after `check_provider`; options go to ONNX Runtime.

    `payload` holds the data of initializers that `model` declares without it
    (`payload`): they reach ONNX Runtime as OrtValues sharing the arrays'
    memory (`SessionOptions.add_external_initializers`), so a model past protobuf's 2 GB
    limit still gets a session and no weight is copied into a message first.
    The session keeps the values alive (`_linnet_weights`).
    """
    import onnxruntime as ort

    from linnet.onnx.export.payload import pending_initializers, serialize_pending
    from linnet.onnx.runtime.values import Device, ortvalue
    from linnet.weights.safetensors import linnet_dtype_of

    check_provider(model, provider)
    available = ort.get_available_providers()
    name = PROVIDER_NAMES[provider]
    if name not in available:
        raise LinnetError(f"ONNX Runtime here has no {name} (available: {', '.join(available)})")
    session_options = options.pop("sess_options", None)
    values = []
    data = model.SerializeToString() if not payload else serialize_pending(model, payload)
    if payload:
        session_options = session_options or ort.SessionOptions()
        for _, array in pending_initializers(model, payload):
            values.append(ortvalue(array, linnet_dtype_of(array), Device()))
        names = [tensor.name for tensor, _ in pending_initializers(model, payload)]
        session_options.add_external_initializers(names, values)
    session = ort.InferenceSession(data, sess_options=session_options, providers=[name], **options)
    session._linnet_weights = values
    return session
