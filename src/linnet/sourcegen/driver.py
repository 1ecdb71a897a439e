"""The translation driver: every node of a graph through its translator, in order.

Stage: translation (see `linnet.sourcegen.translate` for the translator
interface). In: a `Graph`, a `Registry`, the member `Layout`. Out: a
`Translation`. Per node: shape subgraphs fold first (`linnet.sourcegen.fold`);
otherwise the node's translator runs; a recovered pattern whose translator
refuses falls back to the chain as written; a node without a translator, or
whose translator refuses, is recorded as a refusal and the nodes reading its
results are skipped (and reported only if they are unmapped themselves).
Statements nothing reads are dropped at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from linnet.check.dims import Dim
from linnet.progress import track
from linnet.sourcegen import build
from linnet.sourcegen.graph import Graph, Node, TensorInfo
from linnet.sourcegen.layout import Layout
from linnet.sourcegen.names import clean_exporter_name, plan_local_names, sanitize, shorter_name
from linnet.sourcegen.outline import defined, names_read, transform
from linnet.sourcegen.translate import (
    _FOLD_LIMIT,
    Context,
    Refusal,
    Registry,
    Translation,
    Unsupported,
    Value,
    numpy_dtype_name,
)
from linnet.syntax import ast


def run(
    graph: Graph,
    registry: Registry,
    layout: Layout,
    prepare: Callable[[Translation], None] | None = None,
) -> Translation:
    """Translate every node of `graph` in order (see the module docstring).

    Nodes without a translator, and nodes whose translator raises
    `Unsupported`, are collected in `Translation.refusals`; nodes that read
    their outputs are skipped, not reported (their cause already is).
    """
    t = Translation(graph, layout)
    t.preferred = plan_local_names(graph.nodes, [o.name for o in graph.outputs])
    stored_inputs = {name for name in graph.paths if name not in graph.initializers}
    for info in graph.inputs:
        if info.name in graph.initializers:
            continue  # an input with a default (an initializer) is a stored tensor
        if info.name in stored_inputs:
            # Weights left as graph inputs (`param<N>` of an export without weights).
            t.values[info.name] = _stored_input(t, info)
            continue
        t.values[info.name] = _input_value(t, info)
    for name, arr in graph.initializers.items():
        if name in t.values:
            continue
        dtype = numpy_dtype_name(arr.dtype)
        t.values[name] = Value(
            tuple(Dim.const(int(s)) for s in arr.shape),
            dtype,
            const=arr if arr.size <= _FOLD_LIMIT or name not in graph.paths else None,
            source=None if arr.ndim == 0 and name not in graph.paths else name,
        )
        if arr.ndim == 0 and name not in graph.paths:
            t.values[name].const = arr
    for name, arr in graph.constants.items():
        t.values[name] = Value(
            tuple(Dim.const(int(s)) for s in arr.shape), numpy_dtype_name(arr.dtype), const=arr
        )
    if prepare is not None:
        prepare(t)  # facts the translation may rely on (`stated_where`)
    translate_nodes(t, registry, graph.nodes, progress=True)
    for info in graph.outputs:
        if info.name in t.values:
            value = t.values[info.name]
            if value.expr is None:
                Context(t, Node("Output", "", info.name, (), (info.name,))).ref(value)
            t.results.append(value)
    dropped = drop_unused_statements(t)
    if dropped:
        t.notes.append(f"dropped {dropped} computed values nothing reads")
    return t


def translate_nodes(
    t: Translation, registry: Registry, nodes: Sequence[Node], *, progress: bool = False
) -> int:
    """Translate `nodes` in order into `t` (a graph's, or a subgraph body's whose
    formal inputs are already bound in `t.values`); returns how many refusals
    they added. A node reading a refused node's result is skipped (see `run`).
    `progress` shows a bar (`linnet.progress`) over the nodes."""
    before = len(t.refusals)
    dead: set[str] = set()
    for node in track(nodes, "translating nodes") if progress else nodes:
        _translate_node(t, registry, node, dead)
    return len(t.refusals) - before


def drop_unused_statements(t: Translation) -> int:
    """Remove `let` statements nothing reads (values only a `Shape` looked at, a mask
    recovered into a std call): generated code has no unused locals."""
    from linnet.sourcegen.outline import _CACHE

    _CACHE.append({})
    try:
        removed = _drop_unused(t)
        _drop_unread_constants(t)
        return removed
    finally:
        _CACHE.pop()


def _drop_unread_constants(t: Translation) -> None:
    """Constants materialised as members (`const::N`) for statements since dropped
    (a mask a recovered `causal_mask` replaced) are no members: nothing reads them."""
    from linnet.sourcegen.outline import names_read

    read: set[str] = set()
    for v in t.results:
        if v.expr is not None:
            read |= names_read(v.expr)
    for stmt in t.body:
        read |= names_read(stmt)
    for name in [n for n in t.stored if n.startswith("const::")]:
        if t.layout.paths.get(name) not in read:
            t.layout.leaf(name).used = False
            del t.stored[name]


def _drop_unused(t: Translation) -> int:
    from linnet.sourcegen.outline import assigned, defined, holds_loop, names_read

    removed = 0
    while True:
        read: set[str] = set()
        for v in t.results:
            if v.expr is not None:
                read |= names_read(v.expr)
        for stmt in t.body:
            read |= names_read(stmt)
            if holds_loop(stmt):
                read |= assigned(stmt)  # a carried `var` the loop assigns stays declared
        kept = [s for s in t.body if defined(s) in read or holds_loop(s)]
        if len(kept) == len(t.body):
            return removed
        removed += len(t.body) - len(kept)
        t.body = kept


def _translate_node(t: Translation, registry: Registry, node: Node, dead: set[str]) -> None:
    fn = registry.lookup(node.domain, node.op)
    if any(i in dead for i in node.inputs if i):
        # Downstream of a refused node: reported only if it is unmapped itself.
        if fn is None:
            t.refusals.append(Refusal(node, "no translation for this operator"))
        dead.update(o for o in node.outputs if o)
        return
    missing = [i for i in node.inputs if i and i not in t.values]
    if fn is None:
        t.refusals.append(Refusal(node, "no translation for this operator"))
        dead.update(o for o in node.outputs if o)
        return
    if missing:
        t.refusals.append(Refusal(node, f"reads `{missing[0]}`, which nothing defines"))
        dead.update(o for o in node.outputs if o)
        return
    from linnet.sourcegen.fold import fold_symbolic

    folded = fold_symbolic(t, node)
    if folded is not None and len(folded) >= len([o for o in node.outputs if o]):
        for out, value in zip(node.outputs, folded, strict=False):
            if out:
                t.values[out] = value
        return
    ctx = Context(t, node)
    mark = len(t.body)
    try:
        fn(ctx)
        for i, out in enumerate(node.outputs):
            if out and i not in ctx._outputs:
                raise Unsupported(f"output {i} is not produced")
    except Unsupported as exc:
        del t.body[mark:]
        fallback = node.attrs.get("_fallback")
        if fallback:
            # A recovered pattern the standard op cannot express: as written.
            t.notes.append(
                f"kept as written: `{node.op}` at `{node.outputs[0]}` ({exc or 'not supported'})"
            )
            for inner in fallback:
                _translate_node(t, registry, inner, dead)
            return
        t.refusals.append(Refusal(node, str(exc) or "not supported"))
        dead.update(o for o in node.outputs if o)
        return
    for i, out in enumerate(node.outputs):
        if out:
            t.values[out] = ctx._outputs[i]
    rename_outputs(ctx, mark)
    note = node.attrs.get("_note")
    if note:
        t.notes.append(str(note))


def _input_value(t: Translation, info: TensorInfo) -> Value:
    if info.dtype is None:
        raise Unsupported(f"graph input `{info.name}` has a dtype Linnet lacks")
    dims: list[Dim] = []
    if info.shape is None:
        raise Unsupported(f"graph input `{info.name}` has no known rank")
    for axis, d in enumerate(info.shape):
        dim = t.generic(d) if isinstance(d, str) and d else t.dim_of(d)
        if dim is None:
            t.opaque_dims += 1
            dim = t.generic(f"{sanitize(info.name, 'x')}_{axis}".lower())
        dims.append(dim)
    name = t.locals.fresh(sanitize(clean_exporter_name(info.name), "x"))
    value = Value(tuple(dims), info.dtype, expr=build.name(name))
    t.inputs.append((name, value))
    t.local_values[name] = value
    return value


def _stored_input(t: Translation, info: TensorInfo) -> Value:
    dims: list[Dim] = []
    for d in info.shape or ():
        dim = t.dim_of(d)
        if dim is None:
            raise Unsupported(f"weight input `{info.name}` has a symbolic shape")
        dims.append(dim)
    if info.dtype is None:
        raise Unsupported(f"weight input `{info.name}` has a dtype Linnet lacks")
    return Value(tuple(dims), info.dtype, source=info.name)


def rename_outputs(ctx: Context, mark: int) -> None:
    """Give the locals holding a node's results the names planned for them.

    Translators name locals after what they compute (`product`, `reshaped`);
    where the model's names say more (`q_proj`, `logits`; `Translation.preferred`),
    each local bound to one of the node's results by the statements from
    `mark` on is renamed, in those statements and in every value and cached
    constant expression the node touched (nothing else can read it yet).
    """
    t, node = ctx.t, ctx.node
    made = {defined(s) for s in t.body[mark:]}
    renames: dict[str, str] = {}
    for i, out in enumerate(node.outputs):
        want = t.preferred.get(out) if out else None
        value = ctx._outputs.get(i)
        if not want or value is None or not isinstance(value.expr, ast.Name):
            continue
        old = value.expr.ident.name
        if old not in made or old in renames or old == want:
            continue
        if want in t.member_names:
            # A local named like a member of the block whose body it may end up in
            # would shadow that member (4.4 lookup order): `q_proj` -> `q`, else as is.
            want = shorter_name(want)
            if not want or want in t.member_names:
                continue
        t.locals.release(old)
        renames[old] = t.locals.fresh(want)
    if not renames:
        return
    rename = _renamer(renames)
    t.body[mark:] = [transform(s, rename) for s in t.body[mark:]]
    touched = [*ctx._outputs.values(), *(v for v in map(ctx.input, range(ctx.n_inputs)) if v)]
    for value in touched:
        if value.expr is not None:
            value.expr = transform(value.expr, rename)
    for key, expr in t.const_exprs.items():
        if names_read(expr) & renames.keys():
            t.const_exprs[key] = transform(expr, rename)
    for old, new in renames.items():
        t.local_values[new] = t.local_values.pop(old)


def _renamer(renames: dict[str, str]) -> Callable[[Any], Any]:
    """A `transform` callback renaming locals where they are read and defined (member
    names and labels, also identifiers, are left alone)."""

    def fn(node: Any) -> Any:
        if isinstance(node, ast.Name) and node.ident.name in renames:
            return build.name(renames[node.ident.name])
        if isinstance(node, ast.NamePattern) and node.name.name in renames:
            return ast.NamePattern(build.ident(renames[node.name.name]), node.span)
        if isinstance(node, ast.VarStmt) and node.name.name in renames:
            value = transform(node.value, fn)
            return ast.VarStmt(build.ident(renames[node.name.name]), node.type, value, node.span)
        if isinstance(node, ast.AssignStmt) and node.target.name in renames:
            value = transform(node.value, fn)
            return ast.AssignStmt(build.ident(renames[node.target.name]), value, node.span)
        if isinstance(node, ast.ComprehensionStmt) and node.name.name in renames:
            return ast.ComprehensionStmt(
                build.ident(renames[node.name.name]),
                node.indices,
                transform(node.value, fn),
                node.span,
            )
        return None

    return fn
