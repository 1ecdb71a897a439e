"""Entries to Core IR functions and programs (language.md 6.7, 11.7, 12.6, 12.10).

Stage: lowering, the last step before the passes. In: a `BoundModel` (or a
checked program, for module-level entries), an entry name, the concrete input
types of one call, and the parameter paths the checkpoint provides. Out: a
Core IR `Function`: inputs in parameter order (scalars as rank-0 tensors),
the body, results (a tuple result flattened in order) and the final value of
every state member the entry assigns.

`present` is the set of param/buffer paths the weights provide (12.9); it
decides optional params and optional children (12.8). None means every
tensor is there (a plan or IR dump without weights). Mandatory tensors are
read whether or not they are in it: a missing one is the weight loader's
error, not the lowering's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from linnet.check.program import CheckedProgram
from linnet.check.types import OptionalType, ScalarType, StructType, TupleType, Type
from linnet.check.types import TensorType as CheckedTensor
from linnet.errors import InternalError, LinnetError
from linnet.ir.bind import (
    BoundModel,
    EntryBinding,
    EntrySignature,
    bind_entry_generics,
    module_entry,
)
from linnet.ir.core import Builder, Function, Program, Region, TensorType
from linnet.ir.lower.context import Frame, Lowerer, local_value
from linnet.ir.lower.stmts import lower_body
from linnet.ir.lower.values import Opt, element_types, flatten


def lower_entry(
    bound: BoundModel,
    name: str,
    input_types: Sequence[TensorType],
    present: Set[str] | None = None,
    *,
    generics: Mapping[str, object] | None = None,
) -> Function:
    """One call signature of a root-block entry as a Core IR function (6.7 step 4).

    `generics` supplies entry generics that no input determines.
    """
    sig = bound.entries.get(name)
    if sig is None:
        listed = ", ".join(f"`{n}`" for n in bound.entries) or "none"
        raise LinnetError(
            f"block `{bound.root.info.name}` has no entry `{name}` (its entries are {listed})"
        )
    binding = bind_entry_generics(sig, input_types, generics)
    available = frozenset(bound.tensors if present is None else present)
    return _lower(bound.program, bound, sig, binding, input_types, available)


def lower_function(
    program: CheckedProgram,
    module: str,
    name: str,
    input_types: Sequence[TensorType],
    *,
    generics: Mapping[str, object] | None = None,
) -> Function:
    """A module-level entry or function (11.7): no weights, no state.

    `module` is a module key (its file path) or its dotted name (`std.nn.loss`).
    """
    if program.has_errors:
        raise LinnetError("cannot lower a program with errors", program.diagnostics)
    sig = module_entry(program, module, name)
    binding = bind_entry_generics(sig, input_types, generics)
    return _lower(program, None, sig, binding, input_types, frozenset())


def lower_program(
    bound: BoundModel,
    inputs: Mapping[str, Sequence[TensorType]],
    present: Set[str] | None = None,
) -> Program:
    """A `Program` with the entries named in `inputs`, each for the given input types.

    Its params, buffers and state are the tensors that exist with `present`
    (12.8), in tree order; `generics` are the root block's.
    """
    available = frozenset(bound.tensors if present is None else present)
    entries = {name: lower_entry(bound, name, types, available) for name, types in inputs.items()}
    return Program(
        params=bound.live_tensors(available, "param"),
        buffers=bound.live_tensors(available, "buffer"),
        state=bound.live_tensors(available, "state"),
        entries=entries,
        generics=dict(bound.generics),
    )


def _lower(
    program: CheckedProgram,
    bound: BoundModel | None,
    sig: EntrySignature,
    binding: EntryBinding,
    input_types: Sequence[TensorType],
    present: frozenset[str],
) -> Function:
    fn = sig.fn
    names = [spec.name for spec in sig.inputs[: len(input_types)]]
    builder = Builder.for_function(list(zip(names, input_types, strict=True)))
    lw = Lowerer(program, bound, present, builder)
    frame = Frame(fn, binding.env, sig.instance)
    for param, value in zip(fn.params, builder.args, strict=False):
        # A supplied optional input is `some(value)`; an omitted one takes its default.
        frame.locals[param] = Opt(value) if isinstance(param.type, OptionalType) else value
    for param in fn.params[len(input_types) :]:
        from linnet.ir.lower.exprs import lower_expr

        assert param.default is not None
        frame.locals[param] = local_value(
            lw, frame, lower_expr(lw, frame, param.default), param.type
        )
    result = lower_body(lw, frame, fn.decl.body)
    results = []
    if fn.result is not None:
        if result is None:
            raise InternalError(f"{fn!r} returned no value")
        lv = lw.materialize(result, fn.result, frame.env)
        results = flatten(lv)
        expected = _result_types(fn.result, frame)
        if expected is None or [v.type for v in results] != expected:
            raise LinnetError(
                f"entry `{fn.name}` returns a value that cannot cross the entry boundary "
                "(optionals and blocks are not supported yet)"
            )
    state_updates = {p: lw.state_values[p] for p in lw.state_written}
    body = Region(builder.args, lw.prefix.ops + builder.ops, tuple(results))
    return Function(
        fn.name, tuple(zip(names, builder.args, strict=True)), body, tuple(results), state_updates
    )


def _result_types(t: Type | None, frame: Frame) -> list[TensorType] | None:
    """The flattened IR types of an entry result, or None if it cannot cross (an optional...).

    Tuples and structs flatten depth first (a struct in field declaration order).
    """
    if isinstance(t, (TupleType, StructType)):
        out: list[TensorType] = []
        for e in element_types(t, len(t.elems if isinstance(t, TupleType) else t.info.fields)):
            part = _result_types(e, frame)
            if part is None:
                return None
            out.extend(part)
        return out
    if isinstance(t, (ScalarType, CheckedTensor)):
        return [frame.env.tensor_type(t)]
    return None
