"""State members: reads where the graph read the old value, writes where it made the new one.

Stage: after translation, before outlining (`linnet.sourcegen.outline`) and
module assembly. In: a `Translation` whose graph names state (`Graph.state`:
inputs holding a `state` member's value before the call, `Graph.next_state`:
outputs holding it after) and the member `Layout`, where those members are
`state` leaves at their paths. Out: the entry body with one write per
`next_state` output, the results without those outputs, and the methods
that do the writing.

Framework-neutral: a Linnet export's `state<N>` / `next_state<N>` and a
torch.export buffer mutated in place are the same thing here.

Reads need nothing: a state input is read through its member path like a
weight (`model.layers[0].self_attn.k_cache`). A write is the language's one
effect (12.6): only the block that owns a state member assigns it, so a root
member is assigned in the entry (`cache = next`), and a member of a sub block
through a method of that block, called where the new value exists:

    let _ = model.layers[0].self_attn.write_k_cache(selected)

    pub fn write_k_cache(value: Tensor[1, 2, 24, 8; f32]) -> Tensor[1, 2, 24, 8; f32] {
        k_cache = value
        return k_cache
    }

The graph's state input is the value before the call wherever it is read, so
each write goes after the last statement that reads the member (and after
the statement making the new value); a result that is (or reads) an old
state value is bound before the writes. Written this way, a layer's writes
sit among its own statements, and outlining moves them into the layer's
method with the rest.
"""

from __future__ import annotations

from typing import Any

from linnet.sourcegen import build
from linnet.sourcegen.layout import Layout, Leaf, Tree
from linnet.sourcegen.names import Namer
from linnet.sourcegen.translate import Translation, Value
from linnet.syntax import ast

__all__ = ["WRITER_PREFIX", "access_paths", "is_state_write", "restore_state"]

WRITER_PREFIX = "write_"
"""Methods that assign a state member are named `write_<member>`."""


def restore_state(t: Translation, layout: Layout) -> tuple[dict[str, list[ast.FnDecl]], list[str]]:
    """Move `next_state` results into state writes (see the module docstring).

    Returns the writer methods by block type name, and one note naming the
    restored state members (none when the graph has no state).
    """
    graph = t.graph
    if not graph.state and not graph.next_state:
        return {}, []
    leaf_names = {path: name for name, path in graph.state.items()}
    for name, path in graph.next_state.items():
        leaf_names.setdefault(path, name)
    writes: list[tuple[str, Value]] = []
    kept: list[Value] = []
    results = iter(t.results)
    for info in graph.outputs:
        if info.name not in t.values:
            continue  # the driver made no result for it
        value = next(results)
        if info.name in graph.next_state:
            writes.append((leaf_names[graph.next_state[info.name]], value))
        else:
            kept.append(value)
    t.results = kept
    written = {layout.paths[name] for name, _ in writes}
    read = {layout.paths[n] for n in graph.state if n in layout.paths and layout.leaf(n).used}
    for value in t.results:
        if value.expr is not None and access_paths(value.expr) & written:
            value.expr = _bind(t, value.expr, value, "before")  # the value before the call
    methods: dict[str, list[ast.FnDecl]] = {}
    writers: dict[tuple[str, str], str] = {}
    statements: list[tuple[int, ast.Stmt]] = []
    for name, value in writes:
        local = _local(t, layout, name, value)
        owner, leaf = layout.owner(name)
        leaf.used = True
        path = layout.paths[name]
        statements.append(
            (
                _position(t.body, path, local),
                _write(t, layout, name, owner, leaf, local, writers, methods),
            )
        )
    t.body = _merged(t.body, statements)
    return methods, [_note(layout, leaf_names, read, written)]


def access_paths(node: Any) -> set[str]:
    """The member paths an expression or statement reads (`model.layers.0.self_attn.k_cache`)."""
    from linnet.sourcegen.outline import walk

    out: set[str] = set()
    for n in walk(node):
        if isinstance(n, (ast.Name, ast.Member)):
            path = _path_of(n)
            if path is not None:
                out.add(path)
    return out


def is_state_write(stmt: ast.Stmt) -> bool:
    """An assignment of a state member, or a call of a writer method (`let _ = ...`)."""
    if isinstance(stmt, ast.AssignStmt):
        return True
    return (
        isinstance(stmt, ast.LetStmt)
        and isinstance(stmt.pattern, ast.NamePattern)
        and stmt.pattern.name.name == "_"
    )


def _path_of(node: Any) -> str | None:
    if isinstance(node, ast.Name):
        return node.ident.name
    if isinstance(node, ast.Member):
        inner = _path_of(node.target)
        return None if inner is None else f"{inner}.{node.name.name}"
    if (
        isinstance(node, ast.Index)
        and len(node.components) == 1
        and isinstance(node.components[0], ast.IntLit)
    ):
        inner = _path_of(node.target)
        return None if inner is None else f"{inner}.{node.components[0].value}"
    return None


def _bind(t: Translation, expr: ast.Expr, value: Value, hint: str) -> ast.Expr:
    """`let <fresh> = expr` at the end of the body (before any write is placed)."""
    name = t.locals.fresh(hint)
    t.body.append(
        ast.LetStmt(ast.NamePattern(build.ident(name), build.SPAN), None, expr, build.SPAN)
    )
    t.local_values[name] = Value(value.shape, value.dtype, expr=build.name(name))
    return build.name(name)


def _local(t: Translation, layout: Layout, name: str, value: Value) -> str:
    """The local (or entry input) holding a state's new value, bound if it is none."""
    assert value.expr is not None, "results are materialised by translation"
    made = {defined_name(s) for s in t.body}
    inputs = {n for n, _ in t.inputs}
    if isinstance(value.expr, ast.Name) and value.expr.ident.name in made | inputs:
        return value.expr.ident.name
    member = layout.paths[name].rsplit(".", 1)[-1]
    bound = _bind(t, value.expr, value, f"next_{member}")
    assert isinstance(bound, ast.Name)
    return bound.ident.name


def defined_name(stmt: ast.Stmt) -> str | None:
    """The name a `let` or a comprehension statement defines (None for any other)."""
    if isinstance(stmt, ast.LetStmt) and isinstance(stmt.pattern, ast.NamePattern):
        return stmt.pattern.name.name
    if isinstance(stmt, ast.ComprehensionStmt):
        return stmt.name.name
    return None


def _position(body: list[ast.Stmt], path: str, local: str) -> int:
    """Where a write goes: after the last read of the old value and after `local` is made."""
    at = 0
    for i, stmt in enumerate(body):
        if defined_name(stmt) == local or path in access_paths(stmt):
            at = i + 1
    return at


def _merged(body: list[ast.Stmt], inserts: list[tuple[int, ast.Stmt]]) -> list[ast.Stmt]:
    """`body` with each statement inserted before position `i` (ties keep their order)."""
    ordered = sorted(enumerate(inserts), key=lambda item: (item[1][0], item[0]))
    out: list[ast.Stmt] = []
    k = 0
    for i, stmt in enumerate(body):
        while k < len(ordered) and ordered[k][1][0] == i:
            out.append(ordered[k][1][1])
            k += 1
        out.append(stmt)
    out.extend(s for _, (_, s) in ordered[k:])
    return out


def _write(
    t: Translation,
    layout: Layout,
    name: str,
    owner: Tree,
    leaf: Leaf,
    local: str,
    writers: dict[tuple[str, str], str],
    methods: dict[str, list[ast.FnDecl]],
) -> ast.Stmt:
    member = layout.paths[name].rsplit(".", 1)[-1]
    value: ast.Expr = build.name(local)
    if not leaf.shape:
        # A rank-0 state is declared `Tensor[1]` (read as its only element).
        value = build.call(
            "fill", build.shape([build.int_lit(1)]), value, generics=[build.named_type(leaf.dtype)]
        )
    if owner is layout.root:
        return ast.AssignStmt(build.ident(member), value, build.SPAN)
    key = (owner.type_name, member)
    writer = writers.get(key)
    if writer is None:
        taken = Namer(
            {*owner.children, "forward", *(w for (o, _), w in writers.items() if o == key[0])}
        )
        writer = taken.fresh(f"{WRITER_PREFIX}{member}")
        writers[key] = writer
        methods.setdefault(owner.type_name, []).append(_writer(owner, member, leaf, writer))
    target = layout.expr(name)
    if not leaf.shape:
        assert isinstance(target, ast.Index)
        target = target.target
    assert isinstance(target, ast.Member)
    call = build.call(build.member(target.target, writer), value)
    return ast.LetStmt(ast.NamePattern(build.ident("_"), build.SPAN), None, call, build.SPAN)


def _writer(owner: Tree, member: str, leaf: Leaf, name: str) -> ast.FnDecl:
    """`pub fn write_<member>(value: T) -> T { <member> = value  return <member> }`."""
    param = Namer({*owner.children, name}).fresh("value")
    declared = build.tensor_type([build.int_lit(d) for d in (leaf.shape or (1,))], leaf.dtype)
    body = (
        ast.AssignStmt(build.ident(member), build.name(param), build.SPAN),
        ast.ReturnStmt(build.name(member), build.SPAN),
    )
    return ast.FnDecl(
        True,
        "fn",
        build.ident(name),
        None,
        ast.Params((ast.Param(build.ident(param), declared, None, build.SPAN),), False, build.SPAN),
        declared,
        None,
        ast.Body(body, build.SPAN),
        build.SPAN,
    )


def _note(layout: Layout, leaf_names: dict[str, str], read: set[str], written: set[str]) -> str:
    parts = []
    for name in leaf_names.values():
        path = layout.paths.get(name)
        if path is None or path not in read | written:
            continue
        how = [w for w, on in (("read", path in read), ("written", path in written)) if on]
        parts.append(f"`{path}` ({' and '.join(how)})")
    return "restored state members: " + (", ".join(parts) if parts else "none the entry uses")
