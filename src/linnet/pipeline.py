"""Every stage in order, one call each: the one place to read the whole flow.

    source text -> tokens -> syntax tree      syntax.parser.parse (lexes as it goes)
                -> module graph               check.modules.load_program / load_source
                -> checked program            check.checker.check_graph
                -> bound model                ir.bind.bind (root generics, block tree)
                -> (weights)                  which optional params and subs are present
                -> Core IR function           ir.lower (one entry, static shapes)
                -> optimised function         ir.passes.optimize (fold, CSE, DCE)
                -> backends                   ir.interp, linnet.torch, ... (or plan.build_plan)

Semantic checking runs only on a graph without lexing, parsing or loading
errors (language.md 1.3); the `CheckedProgram` then carries just those
diagnostics and empty side tables. Later stages (binding, Core IR, backends)
start from a `CheckedProgram` without errors.

`compile_entry` runs bind -> (weights) -> lower -> optimize for one entry
with every generic bound (what `linnet inspect --ir` and `linnet torch`
print); `load_entry` does the same from a file, checking it first, and
`load_model` checks and binds a file's root block.

Every heavy import is local to the function that needs it, so `linnet check`
loads neither NumPy nor any framework.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from linnet.records import record

if TYPE_CHECKING:
    from collections.abc import Mapping, Set

    from linnet.check.modules import ModuleGraph
    from linnet.check.program import CheckedProgram
    from linnet.ir.bind import BoundModel
    from linnet.ir.core import Function, TensorType
    from linnet.target import Resolved, Target
    from linnet.weights import Bindings, BoundWeights
    from linnet.weights.checkpoint import CheckpointSource


def check_paths(
    paths: Sequence[str | os.PathLike[str]],
    std_root: str | os.PathLike[str] | None = None,
    *,
    relative_to: str | os.PathLike[str] | None = None,
) -> CheckedProgram:
    """Check files and directories (searched recursively for `*.linnet`, 18.2).

    `relative_to` makes diagnostics name files relative to that directory (the
    conformance harness uses it). Unreadable or missing paths raise `LinnetError`.
    """
    from linnet.check.modules import load_program

    # 1. read, lex and parse every named file and every module it imports (sections 2-4)
    graph = load_program(
        [Path(p) for p in paths],
        _optional_path(std_root),
        relative_to=_optional_path(relative_to),
    )
    # 2. names, types, shapes and proofs (sections 5-15), only for an error-free graph
    return check_loaded(graph)


def check_source(
    text: str,
    path: str = "<input>",
    std_root: str | os.PathLike[str] | None = None,
) -> CheckedProgram:
    """Check in-memory text as the root module (tests, editors, fuzzing)."""
    from linnet.check.modules import load_source

    # 1. lex and parse the text, then load what it imports (sections 2-4)
    graph = load_source(text, path, _optional_path(std_root))
    # 2. semantic checking (sections 5-15)
    return check_loaded(graph)


def check_loaded(graph: ModuleGraph) -> CheckedProgram:
    """Run the checker on a loaded graph, or stop at its loading errors (1.3)."""
    if graph.has_errors:
        from linnet.check.program import CheckedProgram
        from linnet.diagnostics import sort_key

        return CheckedProgram(graph, sorted(graph.diagnostics, key=sort_key))
    from linnet.check.checker import check_graph

    return check_graph(graph)


def check_program(
    source: CheckedProgram | str | os.PathLike[str], std_root: str | os.PathLike[str] | None = None
) -> CheckedProgram:
    """An error-free checked program from source text (a string holding a newline), a
    file or folder path, or a program already checked (the backends' `source=`).

    Errors in the program raise one `LinnetError` carrying the diagnostics.
    """
    from linnet.check.program import CheckedProgram

    std = None if std_root is None else Path(std_root)
    if isinstance(source, CheckedProgram):
        program = source
    elif isinstance(source, str) and "\n" in source:
        program = check_source(source, "<source>", std)
    else:
        program = check_paths([Path(source)], std)
    _stop_on_errors(program)
    return program


# -- after checking: binding, Core IR, passes ------------------------------------------


def bind(
    program: CheckedProgram,
    *,
    root: str | None = None,
    generics: Mapping[str, object] | None = None,
) -> BoundModel:
    """Fix the root block's generics and instantiate its block tree (6.7 steps 1-3)."""
    from linnet.ir.bind import bind as bind_root

    # 3. root generics bound, `where` evaluated, every param/buffer/state path concrete
    return bind_root(program, root=root, generics=generics)


def bind_weights(
    model: BoundModel,
    source: CheckpointSource,
    *,
    bindings: Bindings | Mapping[str, str] | str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    strict: bool = True,
) -> BoundWeights:
    """Match a checkpoint's tensors to the model's paths (12.9); see `linnet.weights`."""
    from linnet.weights import bind_model_weights

    # (weights) names, shapes and dtypes checked from the headers, then arrays by path;
    #    which optional params and children are present follows from what is stored (12.8)
    return bind_model_weights(
        model, source, bindings=bindings, cast_dtype=cast_dtype, strict=strict
    )


def lower(
    model: BoundModel,
    entry: str,
    input_types: Sequence[TensorType],
    present: Set[str] | None = None,
    *,
    generics: Mapping[str, object] | None = None,
) -> Function:
    """One entry of the root block as a Core IR function with static shapes (6.7 step 4).

    `present` is the set of weight paths the checkpoint binds; None (as in
    `lower_entry`) means every optional param and child is present.
    """
    from linnet.ir.lower import lower_entry

    # 4. the entry's generics bound from its inputs (and `generics`); functions inlined,
    #    `static for` unrolled, ops kept as `call` regions; `present` are the weight paths
    #    the checkpoint binds, which settle optional params and children (12.8)
    return lower_entry(model, entry, input_types, present, generics=generics)


def lower_module_entry(
    program: CheckedProgram,
    module: str,
    entry: str,
    input_types: Sequence[TensorType],
    *,
    generics: Mapping[str, object] | None = None,
) -> Function:
    """A module-level entry (11.7) as a Core IR function: no weights, no state."""
    from linnet.ir.lower import lower_function

    # 4'. as `lower`, for an entry that belongs to no block
    return lower_function(program, module, entry, input_types, generics=generics)


def optimize(fn: Function, *, check: bool = False) -> Function:
    """Fold constants, merge common subexpressions, drop dead code (to a fixed point)."""
    from linnet.ir.passes import optimize as run_passes

    # 5. the passes; `check` runs the IR verifier after each (what tests do)
    return run_passes(fn, check=check)


@record(eq=False)
class Compiled:
    """One compiled entry: what was bound, its weights if given, and the Core IR function."""

    resolved: Resolved
    function: Function
    weights: BoundWeights | None = None


def load_model(
    path: str | os.PathLike[str],
    *,
    root: str | None = None,
    generics: Mapping[str, object] | None = None,
    std_root: str | os.PathLike[str] | None = None,
) -> BoundModel:
    """Check `path` and bind its root block (a program with errors raises `LinnetError`)."""
    # 1-2. read, parse and check the file and its imports
    program = check_paths([path], std_root)
    _stop_on_errors(program)
    # 3. bind the root block
    return bind(program, root=root, generics=generics)


def compile_entry(
    program: CheckedProgram,
    target: Target,
    *,
    weights: CheckpointSource | None = None,
    optimized: bool = True,
) -> Compiled:
    """bind -> lower -> optimize for the entry `target` names, every generic bound (18.3).

    >>> from linnet.target import Target
    >>> program = check_source('''module m
    ... pub entry twice<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    ...     return x * 2.0
    ... }''')
    >>> compile_entry(program, Target(generics={"N": 3})).function.results[0].type
    TensorType(shape=(3,), dtype='f32')
    """
    from linnet.target import resolve

    _stop_on_errors(program)
    # 3. bind the root, choose the entry, fix its input types
    r = resolve(program, target)
    name, generics = r.entry.fn.name, r.entry_generics
    if r.model is None:
        # 4'. a module-level entry: no weights, no state
        fn = lower_module_entry(program, r.module, name, r.input_types, generics=generics)
        return Compiled(r, optimize(fn) if optimized else fn)
    # (weights) the checkpoint, if given, settles optional members; else `target` does
    bound = bind_weights(r.model, weights) if weights is not None else None
    present = frozenset(bound.arrays) if bound is not None else r.present
    # 4. lower the entry
    fn = lower(r.model, name, r.input_types, present, generics=generics)
    # 5. optimise it
    return Compiled(r, optimize(fn) if optimized else fn, bound)


def _stop_on_errors(program: CheckedProgram) -> None:
    if program.has_errors:
        from linnet.errors import LinnetError

        raise LinnetError("the Linnet program has errors", program.diagnostics)


def load_entry(
    path: str | os.PathLike[str],
    target: Target,
    *,
    weights: CheckpointSource | None = None,
    optimized: bool = True,
) -> Compiled:
    """Check `path` (a program with errors raises `LinnetError`), then `compile_entry`."""
    # 1-2. read, parse and check the file and its imports
    program = check_paths([path], target.std)
    return compile_entry(program, target, weights=weights, optimized=optimized)


def _optional_path(path: str | os.PathLike[str] | None) -> Path | None:
    return None if path is None else Path(path)
