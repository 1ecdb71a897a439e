"""`linnet.torch.load`: source + generics + weights -> a ready `LinnetModule`.

Stage: the PyTorch backend's front door; it runs the stages in order
(architecture.md "The pipeline"):

    check (pipeline.check_source / check_paths)
      -> bind the root block's generics (ir.bind.bind, 6.7 steps 1-3)
      -> bind the weights by path (weights.bind_model_weights, 12.9): which
         optional params and subs are present
      -> LinnetModule (lowering and passes run per entry and input shapes, on first call)

Weights may be a SafeTensors file, a sharded folder or index, or a mapping of
path (or checkpoint name, with `bindings`) to NumPy arrays or torch tensors.
`weights=None` is allowed when the model declares no mandatory param or
buffer, or with `trainable=True`, where the mandatory ones start as zeros for
the caller to initialise (`torch.nn.init`, `load_state_dict`); otherwise it is
an error naming the missing paths, since running on uninitialised weights
would give meaningless numbers silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from linnet.check.program import CheckedProgram
from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel
from linnet.pipeline import check_program
from linnet.torch.dtypes import linnet_dtype, to_numpy
from linnet.torch.module import LinnetModule

Source = CheckedProgram | str | os.PathLike[str]
WeightsSource = Mapping[str, Any] | str | os.PathLike[str]


def numpy_weights(weights: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A mapping of torch tensors and/or arrays as NumPy arrays (bf16 via ml_dtypes)."""
    out: dict[str, np.ndarray] = {}
    for name, value in weights.items():
        if isinstance(value, torch.Tensor):
            dtype = linnet_dtype(value.dtype)
            if dtype is None:
                raise LinnetError(f"weight `{name}` has dtype {value.dtype}, which Linnet lacks")
            out[name] = to_numpy(value, dtype)
        else:
            out[name] = np.asarray(value)
    return out


def bind_weights(
    model: BoundModel,
    weights: WeightsSource | None,
    *,
    bindings: Any = None,
    cast_dtype: bool = False,
    strict: bool = True,
    trainable: bool = False,
) -> dict[str, np.ndarray]:
    """The bound arrays by path (see the module docstring for `weights=None`)."""
    from linnet.weights import bind_model_weights, require_no_weights

    if weights is None:
        if not trainable:
            require_no_weights(model, ", or trainable=True to start from zeros")
        return {}
    source = numpy_weights(weights) if isinstance(weights, Mapping) else weights
    bound = bind_model_weights(
        model, source, bindings=bindings, cast_dtype=cast_dtype, strict=strict
    )
    return dict(bound.arrays)


def load(
    source: Source,
    *,
    generics: Mapping[str, object] | None = None,
    weights: WeightsSource | None = None,
    root: str | None = None,
    bindings: Any = None,
    std_root: str | os.PathLike[str] | None = None,
    device: torch.device | str = "cpu",
    compile: bool = False,
    trainable: bool = False,
    cast_dtype: bool = False,
    strict: bool = True,
    tensor_parallel: bool = False,
    int8_activations: bool = False,
) -> LinnetModule:
    """Load a Linnet model as an `nn.Module` (see `LinnetModule`).

    `source` may also be a model card folder (`linnet.card`): its source,
    generics, weights, root and bindings fill what the caller leaves out.
    `generics` binds the root block's generics (`{"H": 512, "T": "bf16"}`);
    `root` names the root block when the file has several with entries;
    `bindings` maps paths to checkpoint names (a `bindings.json` path or a
    mapping); `cast_dtype` converts stored floats/ints to the declared dtype;
    `strict` reports unexpected tensors. `compile=True` generates Python source
    per entry and input shapes instead of interpreting the IR; `trainable=True`
    makes params `nn.Parameter`s. `tensor_parallel=True`, under an initialised
    `torch.distributed` process group, splits a model with a `Shards` generic over the
    ranks: `Shards` is the world size, each rank holds its slices of the one-shard
    checkpoint, and `std.nn.parallel` ops run as collectives (`linnet.torch.parallel`).
    `int8_activations=True` lets the native CPU kernels of `std.quant`'s int8 and int4
    linears (f32, no autograd, up to 32 rows of `x`) round `x` to int8 per block and
    multiply integers, as `load_model(int8_activations=True)` and llama.cpp do: faster,
    another function (`linnet.torch.natives_quant`); elsewhere the exact function runs.

    >>> import torch
    >>> m = load('''module doc
    ... pub block Scale<H: Dim> {
    ...     param gain: Tensor[H; f32]
    ...     pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
    ...         return x * gain
    ...     }
    ... }''', generics={"H": 2}, weights={"gain": torch.tensor([2.0, 3.0])})
    >>> m(torch.ones(1, 2))
    tensor([[2., 3.]])
    """
    from linnet.card import loader_arguments
    from linnet.ir.bind import bind

    source, generics, weights, root, bindings = loader_arguments(
        source, generics, weights, root, bindings
    )

    program = check_program(source, std_root)
    if tensor_parallel:
        return _load_sharded(
            program, root, dict(generics or {}), weights, bindings, cast_dtype, strict,
            device=device, compile=compile, trainable=trainable,
            int8_activations=int8_activations,
        )  # fmt: skip
    from linnet.torch.parallel import warn_unsharded

    warn_unsharded(dict(generics or {}), tensor_parallel)
    model = bind(program, root=root, generics=generics)
    arrays = bind_weights(
        model,
        weights,
        bindings=bindings,
        cast_dtype=cast_dtype,
        strict=strict,
        trainable=trainable,
    )
    return LinnetModule(
        model, arrays, device=device, compile=compile, trainable=trainable,
        int8_activations=int8_activations,
    )  # fmt: skip


def _load_sharded(
    program: CheckedProgram,
    root: str | None,
    generics: dict[str, object],
    weights: WeightsSource | None,
    bindings: Any,
    cast_dtype: bool,
    strict: bool,
    *,
    device: torch.device | str,
    compile: bool,
    trainable: bool,
    int8_activations: bool,
) -> LinnetModule:
    """This rank's part of a tensor-parallel model (`linnet.torch.parallel`)."""
    from linnet.ir.bind import bind, find_root
    from linnet.torch import parallel

    rank, world = parallel.process_group()
    names = [g.name for g in find_root(program, root).generics]
    generics = parallel.shard_generics(names, generics, world)
    whole = bind(program, root=root, generics={**generics, parallel.SHARDS: 1})
    model = bind(program, root=root, generics=generics)
    full = bind_weights(
        whole, weights, bindings=bindings, cast_dtype=cast_dtype, strict=strict, trainable=trainable
    )
    arrays = parallel.shard_weights(whole, model, full, rank, world)
    return LinnetModule(
        model, arrays, device=device, compile=compile, trainable=trainable, tensor_parallel=True,
        int8_activations=int8_activations,
    )  # fmt: skip
