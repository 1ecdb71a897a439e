"""`export_model` and `export_function`: Linnet source to an ONNX model in one call.

Stage: the ONNX exporter's front door; it runs the pipeline in order
(architecture.md "The pipeline", `linnet.pipeline`):

    check (pipeline.check_source / check_paths)
      -> bind the root block's generics and the entry's (linnet.target.resolve, 6.7)
      -> bind the weights by path (pipeline.bind_weights, 12.9), if given
      -> lower the entry (pipeline.lower / lower_module_entry) -> optimize
      -> ONNX graph (assemble.export_ir)

Every generic must be bound (language.md 18.3): an export has static shapes,
except the entry generics named in `dynamic` (`linnet.ir.dynamic`): those
stay symbolic, as ONNX `dim_param`s with every shape computed in the graph.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from linnet.check.program import CheckedProgram
from linnet.collector import collector_paused
from linnet.errors import LinnetError
from linnet.ir.bind import EntrySignature, module_entry
from linnet.ir.core import Function, TensorType
from linnet.ir.dynamic import CANDIDATES, check_dynamic_names, lower_entry_dynamic
from linnet.ir.grad import differentiate_entry
from linnet.onnx.export.assemble import export_ir
from linnet.onnx.export.result import ExportedModel
from linnet.pipeline import check_program

Source = CheckedProgram | str | os.PathLike[str]
PLACEHOLDER = CANDIDATES[0]
"""A value for a dynamic generic while the target is resolved (the sampling replaces it)."""


def export_model(
    source: Source,
    *,
    generics: Mapping[str, object],
    weights: Any = None,
    entry: str | None = None,
    root: str | None = None,
    bindings: Any = None,
    std_root: str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    provider: str = "cpu",
    fused: bool = False,
    natives: bool = True,
    grad: bool = False,
    dynamic: Sequence[str] = (),
    optionals: bool = True,
) -> ExportedModel:
    """One entry of a model as ONNX, with every generic bound (but those in `dynamic`).

    `generics` binds the root block's generics and the entry's own (`B`, `S`);
    `weights` (a SafeTensors file or folder, an index, or arrays by name) is
    bound by path (`bindings` maps paths to checkpoint names) and embedded as
    initializers, converted to the declared dtypes with `cast_dtype` (an f32
    checkpoint for a `T=bf16` model). Without weights the params are graph
    inputs `param<N>`, bound by name at run time. `entry` and `root` pick the
    entry and the root block as `linnet onnx --entry/--root` do; an `entry`
    that is a module-level entry of the root module (and no block's) is
    exported as `export_function` does. See
    `export_ir` for `provider`, `fused` and `natives`. `dynamic` names entry
    generics (`["B", "S"]`) left symbolic: one graph for every size, their
    values read from the inputs, the `where` clauses on them checked at run
    time (`linnet.onnx.runtime.exported`); no value is needed for them in
    `generics`. The `ExportedModel`'s `inputs`, `outputs` and `function`
    are then those of the first sizes sampled; the graph's `dim_param`s give
    the sizes for every call. Without weights, `optionals` says whether
    optional members count as present (`linnet onnx --optionals`). `grad=True`
    exports the entry's loss and its gradient with respect to every floating `param`
    (language-extensions 6: outputs `loss`, `grad<N>`, then the new state), computed by
    `linnet.ir.grad`.

    >>> exported = export_model('''module doc
    ... pub block Scale<H: Dim> {
    ...     param gain: Tensor[H; f32]
    ...     pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
    ...         return x * gain
    ...     }
    ... }''', generics={"H": 2, "B": 1})
    >>> [(io.name, io.role, io.path) for io in exported.inputs]
    [('x', 'input', None), ('param0', 'param', 'gain')]
    """
    from linnet.pipeline import bind_weights, lower, optimize
    from linnet.target import Target, entry_info, resolve

    program = check_program(source, std_root)
    std = None if std_root is None else Path(std_root)
    module_level = root is None and entry is not None and _is_module_entry(program, entry)
    if dynamic and not module_level:
        picked = Target(root=root, entry=entry)
        check_dynamic_names(entry_info(program, picked), dynamic)
    given = {**generics, **{name: PLACEHOLDER for name in dynamic}}
    resolved = (
        None
        if module_level
        else resolve(
            program,
            Target(root=root, entry=entry, generics=given, optionals_present=optionals, std=std),
        )
    )
    if resolved is None or resolved.model is None:
        name = entry if resolved is None else resolved.entry.fn.name
        assert name is not None
        if weights is not None:
            raise LinnetError(f"entry `{name}` belongs to no block and takes no weights")
        return export_function(
            program,
            name,
            generics=generics,
            provider=provider,
            fused=fused,
            natives=natives,
            grad=grad,
            dynamic=dynamic,
        )
    name = resolved.entry.fn.name
    bound = None
    if weights is not None:
        bound = bind_weights(resolved.model, weights, bindings=bindings, cast_dtype=cast_dtype)
    present = frozenset(bound.arrays) if bound is not None else resolved.present
    model = resolved.model
    dims = None
    gradients: list[str] | None = None

    def lower_at(types: Sequence[TensorType], values: Mapping[str, object]) -> Function:
        nonlocal gradients
        fn = optimize(lower(model, name, types, present, generics=values))
        if grad:
            fn, gradients = differentiate_entry(fn, model, present)
            fn = optimize(fn)
        return fn

    with collector_paused():  # the lowering and the graph only allocate: see linnet.collector
        if dynamic:
            fn, dims = lower_entry_dynamic(
                resolved.entry, dynamic, resolved.entry_generics, lower_at
            )
        else:
            fn = lower_at(resolved.input_types, resolved.entry_generics)
        return export_ir(
            fn,
            weights=bound.arrays if bound is not None else None,
            provider=provider,
            fused=fused,
            natives=natives,
            gradients=gradients,
            dynamic=dims,
        )


def export_function(
    source: Source,
    name: str,
    *,
    generics: Mapping[str, object],
    std_root: str | os.PathLike[str] | None = None,
    module: str | None = None,
    provider: str = "cpu",
    fused: bool = False,
    natives: bool = True,
    grad: bool = False,
    dynamic: Sequence[str] = (),
) -> ExportedModel:
    """A module-level entry (or function, 11.7) as a complete ONNX model: no params, no state.

    `generics` binds every generic of the entry but those in `dynamic` (see
    `export_model`); `module` picks the module (by key or dotted name,
    `std.nn.loss`), by default the root module. `grad=True` exports the loss and its
    gradient with respect to every floating input, in order.

    >>> exported = export_function('''module doc
    ... pub entry spread<N: Dim>(x: Tensor[N; f32]) -> f32 {
    ...     return max[i] x[i] - min[i] x[i]
    ... }''', "spread", generics={"N": 3})
    >>> [(io.name, str(io.type)) for io in exported.outputs]
    [('output0', 'f32[]')]
    """
    from linnet.pipeline import lower_module_entry, optimize
    from linnet.target import entry_input_types

    program = check_program(source, std_root)
    if module is None:
        if not program.graph.roots:
            raise LinnetError("the program has no root module")
        module = program.graph.roots[0]
    signature = module_entry(program, module, name)
    own = _own_generics(signature, generics)
    dims = None
    target = module
    gradients: list[str] | None = None

    def lower_at(types: Sequence[TensorType], values: Mapping[str, object]) -> Function:
        nonlocal gradients
        fn = optimize(lower_module_entry(program, target, name, types, generics=values))
        if grad:
            fn, gradients = differentiate_entry(fn)
            fn = optimize(fn)
        return fn

    with collector_paused():
        if dynamic:
            fn, dims = lower_entry_dynamic(signature, dynamic, own, lower_at)
        else:
            fn = lower_at(entry_input_types(signature, own), own)
        return export_ir(
            fn, provider=provider, fused=fused, natives=natives, gradients=gradients, dynamic=dims
        )


def _is_module_entry(program: CheckedProgram, name: str) -> bool:
    """Whether the root module has a module-level entry `name` and no block entry of that name."""
    from linnet.check.decls import BlockInfo, FnInfo

    module = program.modules.get(program.graph.roots[0]) if program.graph.roots else None
    if module is None:
        return False
    item = module.items.get(name)
    in_blocks = any(
        isinstance(block, BlockInfo)
        and name in block.methods
        and block.methods[name].kind == "entry"
        for block in module.items.values()
    )
    return isinstance(item, FnInfo) and item.kind == "entry" and not in_blocks


def _own_generics(signature: EntrySignature, generics: Mapping[str, object]) -> dict[str, object]:
    declared = [g.name for g in signature.fn.generics]
    for given in generics:
        if given not in declared:
            raise LinnetError(
                f"unknown generic `{given}` (entry `{signature.fn.name}` has "
                f"{', '.join(declared) or 'none'})"
            )
    return dict(generics)
