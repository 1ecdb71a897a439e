"""The Run entry node's check: the tensors a user wired in against the entry's declared types.

Stage: before any entry runs in ComfyUI (issue 19). In: the bound model, the entry
name, the tensors in order, optionally the entry input each one is for, and the
entry generics. Out: nothing, or a `LinnetError` whose message says what is wrong
and shows the entry's declaration, so that the ComfyUI user sees which input to
rewire without reading source:

    entry `forward`: input `image`: axis 1 is 4 but `C` = 3 is required
    the entry: entry forward(image: Tensor[B, C, H, W; f32]) -> Tensor[B, K; f32]
    with C = 3, K = 10

Names, counts and input dtypes are matched as every backend matches them
(`linnet.ir.inputs`: an int64 tensor for an `i32` input crosses as `i32`),
shapes and generics as the entry binding does (`linnet.ir.bind.bind_entry_generics`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from linnet.check.calls import signature_text
from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel, EntrySignature, bind_entry_generics
from linnet.ir.core import TensorType
from linnet.ir.inputs import crossing_dtype, declared_dtype, order_inputs
from linnet.torch.dtypes import linnet_dtype


def entry_text(signature: EntrySignature) -> str:
    """`entry forward(image: Tensor[B, C, H, W; f32]) -> Tensor[B, K; f32]`, with the
    entry's own generics: `entry repeat<N>(...)`."""
    text = signature_text(signature.fn)
    own = [g.name for g in signature.generics]
    if own:
        head = f"{signature.fn.kind} {signature.fn.name}"
        text = f"{head}<{', '.join(own)}>{text[len(head) :]}"
    return text


def declaration(model: BoundModel, signature: EntrySignature) -> str:
    """The entry's declaration and the model's generic values, for error messages."""
    lines = [f"the entry: {entry_text(signature)}"]
    if model.generics:
        lines.append("with " + ", ".join(f"{k} = {v}" for k, v in model.generics.items()))
    return "\n".join(lines)


def check_call(
    model: BoundModel,
    entry: str,
    inputs: Sequence[torch.Tensor],
    names: Sequence[str] = (),
    generics: Mapping[str, object] | None = None,
) -> None:
    """A `LinnetError` (see the module docstring) unless `inputs` fit `entry`."""
    signature = model.entries.get(entry)
    if signature is None:
        listed = ", ".join(f"`{n}`" for n in model.entries) or "none"
        raise LinnetError(f"the model has no entry `{entry}` (entries: {listed})")
    if names and len(names) != len(inputs):
        raise LinnetError(
            f"entry `{entry}`: {len(names)} input names for {len(inputs)} connected inputs"
        )
    try:
        if names:
            ordered = order_inputs(signature, (), dict(zip(names, inputs, strict=True)))
        else:
            ordered = order_inputs(signature, inputs, {})
        types: list[TensorType] = []
        for value, spec in zip(ordered, signature.inputs, strict=False):
            assert isinstance(value, torch.Tensor)
            dtype = linnet_dtype(value.dtype)
            if dtype is None:
                raise LinnetError(
                    f"entry `{entry}`: input `{spec.name}` has dtype {value.dtype}, which "
                    "Linnet lacks"
                )
            target = crossing_dtype(dtype, declared_dtype(signature, spec))
            types.append(TensorType(tuple(value.shape), target))
        bind_entry_generics(signature, types, generics)
    except LinnetError as exc:
        raise LinnetError(f"{exc.message}\n{declaration(model, signature)}") from None
