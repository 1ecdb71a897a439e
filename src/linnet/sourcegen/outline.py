"""Outlining: the statements of each element of a sub array become one method.

Stage: after translation, before module assembly. In: the entry body of a
`Translation` (one flat list of statements reading `layers[0].attn.q.weight`,
`layers[1].attn.q.weight`, ...) and the member layout. Out, when the body has
that shape: a `forward` method on the array's element block, and the entry
body rewritten to

    var hidden = embedded
    static for layer in layers {
        hidden = layer.forward(hidden, mask, cos_table)
    }

which is how a person writes a stack of layers (13.1). Nothing changes when
the layers are not copies of one another.

How: statements that read no element's members and do not depend on any
that do are hoisted above the first layer (loop invariants: masks, rotary
tables). What remains must split into one run of statements per element, in
order, each reading only its own element's members; every run must be the
first one with its element index and local names changed, reading one value
the previous run made (the carried hidden state) plus values made before the
first run (the method's other parameters), and making the one value the next
run reads. The method's parameter and result types are the types translation
recorded; its generics are the entry generics its types and body mention,
and its `where` clause the entry facts about them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from linnet.check.dims import Dim
from linnet.sourcegen import build
from linnet.sourcegen.layout import Layout, Leaf, Tree, _singular, element_type
from linnet.sourcegen.state import is_state_write
from linnet.sourcegen.translate import Translation, Value
from linnet.syntax import ast


class Outlined:
    """One outlined array: the method to add to its element block."""

    def __init__(self, type_name: str, method: ast.FnDecl) -> None:
        self.type_name = type_name
        self.method = method


def outline(t: Translation, layout: Layout) -> list[Outlined]:
    """Outline every root sub array whose elements' statements allow it (see above)."""
    out: list[Outlined] = []
    _CACHE.append({})
    _ELEMENTS.append({})
    try:
        for member, tree in _arrays(layout.root, ""):
            if len(tree.children) >= 2:
                done = _outline_one(t, member, tree)
                if done is not None:
                    out.append(done)
    finally:
        _CACHE.pop()
        _ELEMENTS.pop()
    return out


def _arrays(tree: Tree, prefix: str) -> list[tuple[str, Tree]]:
    """Sub arrays reachable from the root through plain subs, by dotted path (`model.layers`)."""
    found: list[tuple[str, Tree]] = []
    for key, child in tree.children.items():
        if isinstance(child, Tree):
            path = f"{prefix}{key}"
            if child.array:
                found.append((path, child))
            else:
                found.extend(_arrays(child, path + "."))
    return found


def _dotted(expr: Any) -> str | None:
    """`model.layers` for the expression `model.layers`; None for anything else."""
    parts: list[str] = []
    while isinstance(expr, ast.Member):
        parts.append(expr.name.name)
        expr = expr.target
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.ident.name)
    return ".".join(reversed(parts))


def _is_element(node: Any, member: str) -> bool:
    return (
        isinstance(node, ast.Index)
        and len(node.components) == 1
        and isinstance(node.components[0], ast.IntLit)
        and _dotted(node.target) == member
    )


# ---------------------------------------------------------------- syntax helpers


def transform(node: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuild `node` bottom-up; `fn` may return a replacement for any node (or None)."""
    replaced = fn(node)
    if replaced is not None:
        return replaced
    if isinstance(node, tuple):
        return tuple(transform(x, fn) for x in node)
    if not ast.is_node(node):
        return node
    fields = ast.node_fields(node)
    values = {f: getattr(node, f) for f in fields}
    new = {
        f: transform(v, fn) if (ast.is_node(v) or isinstance(v, tuple)) else v
        for f, v in values.items()
    }
    if all(new[f] is values[f] for f in fields):
        return node
    return type(node)(**new)


def walk(node: Any) -> list[Any]:
    out: list[Any] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, tuple):
            stack.extend(n)
        elif ast.is_node(n):
            out.append(n)
            stack.extend(getattr(n, f) for f in ast.node_fields(n))
    return out


def defined(stmt: ast.Stmt) -> str:
    if isinstance(stmt, ast.AssignStmt):
        return stmt.target.name  # a root `state` member (linnet.sourcegen.state)
    if isinstance(stmt, ast.VarStmt):
        return stmt.name.name  # a value an imported `for` carries
    if isinstance(stmt, ast.ForLoop):
        return stmt.var.name  # an imported `for` statement (kept: `holds_loop`)
    if isinstance(stmt, ast.LetStmt):
        if isinstance(stmt.pattern, ast.TuplePattern):  # an imported scan's stacks
            first = stmt.pattern.elems[0]
            assert isinstance(first, ast.NamePattern)
            return first.name.name
        assert isinstance(stmt.pattern, ast.NamePattern)
        return stmt.pattern.name.name
    assert isinstance(stmt, ast.ComprehensionStmt)
    return stmt.name.name


def holds_loop(stmt: ast.Stmt) -> bool:
    """An imported runtime `for` (a statement, or a scan bound by `let`): never dropped."""
    return isinstance(stmt, ast.ForLoop) or (
        isinstance(stmt, ast.LetStmt) and isinstance(stmt.value, ast.ForLoop)
    )


def assigned(stmt: ast.Stmt) -> set[str]:
    """The locals a statement assigns (`x = ...`, at any depth of a loop body)."""
    return {n.target.name for n in walk(stmt) if isinstance(n, ast.AssignStmt)}


def names_read(node: Any) -> set[str]:
    """Every name an expression or statement reads (memoised per node while outlining)."""
    cache = _CACHE[-1] if _CACHE else None
    if cache is not None:
        hit = cache.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
    found = {n.ident.name for n in walk(node) if isinstance(n, ast.Name)}
    if cache is not None:
        cache[id(node)] = (node, found)
    return found


_CACHE: list[dict[int, tuple[Any, set[str]]]] = []


def element_reads(node: Any, member: str) -> set[int]:
    """The element indices `i` of `member[i]` that `node` reads (memoised per node
    while outlining, like `names_read`)."""
    cache = _ELEMENTS[-1] if _ELEMENTS else None
    if cache is not None:
        hit = cache.get((id(node), member))
        if hit is not None and hit[0] is node:
            return hit[1]
    out: set[int] = set()
    for n in walk(node):
        if _is_element(n, member):
            component = n.components[0]
            assert isinstance(component, ast.IntLit)
            out.add(component.value)
    if cache is not None:
        cache[(id(node), member)] = (node, out)
    return out


_ELEMENTS: list[dict[tuple[int, str], tuple[Any, set[int]]]] = []


def names_outside_elements(node: Any, member: str) -> set[str]:
    """The names `node` reads apart from inside `member[i]` (`layers[0].attn` reads none)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, tuple):
            stack.extend(n)
        elif ast.is_node(n):
            if _is_element(n, member):
                continue
            if isinstance(n, ast.Name):
                found.add(n.ident.name)
            stack.extend(getattr(n, f) for f in ast.node_fields(n))
    return found


# ---------------------------------------------------------------- the pass


def _outline_one(t: Translation, member: str, tree: Tree) -> Outlined | None:
    body = list(t.body)
    count = len(tree.children)
    reads = [element_reads(s, member) for s in body]
    if any(len(r) > 1 for r in reads):
        return None
    first = next((i for i, r in enumerate(reads) if r), None)
    if first is None:
        return None
    # Loop invariants: hoist what depends on no element above the first element.
    # State writes stay where they are: moved above a read, the read would see the new value.
    tainted: set[str] = set()
    pinned: set[int] = set()
    for k, (s, r) in enumerate(zip(body, reads, strict=True)):
        if r or names_read(s) & tainted or is_state_write(s):
            tainted.add(defined(s))
        if is_state_write(s):
            pinned.add(k)
    last_read = max(i for i, r in enumerate(reads) if r)
    window = range(first, last_read + 1)
    hoisted = [body[i] for i in window if defined(body[i]) not in tainted and i not in pinned]
    kept = [body[i] for i in window if defined(body[i]) in tainted or i in pinned]
    bound, kept = _bind_root_params(t, kept)
    body = body[:first] + hoisted + bound + kept + body[last_read + 1 :]
    reads = [element_reads(s, member) for s in body]
    starts: list[int] = []
    for index in range(count):
        at = next((i for i, r in enumerate(reads) if index in r), None)
        if at is None:
            return None
        starts.append(at)
    if starts != sorted(starts):
        return None
    length = starts[1] - starts[0]
    if length <= 0 or any(b - a != length for a, b in itertools.pairwise(starts)):
        return None
    if starts[-1] + length > len(body):
        return None
    segments = [body[s : s + length] for s in starts]
    members = set(t.layout.root.children)
    for index, seg in enumerate(segments):
        for stmt in seg:
            if isinstance(stmt, ast.AssignStmt):
                return None  # assigns a root state member, which the method cannot
            r = element_reads(stmt, member)
            if r and r != {index}:
                return None
            if names_outside_elements(stmt, member) & members:
                return None  # the method could not see another member of the root
    return _rewrite(t, member, tree, body, starts[0], length, segments)


def _bind_root_params(
    t: Translation, kept: list[ast.Stmt]
) -> tuple[list[ast.Stmt], list[ast.Stmt]]:
    """Root `param` members the layers read (a stored constant such as a rotary
    table) bound to locals above the layers, so the method takes them as
    arguments: `let table = constant`, and the layers read `table`."""
    root = t.layout.root.children
    params = {
        name for name, leaf in root.items() if isinstance(leaf, Leaf) and leaf.kind == "param"
    }
    read = sorted(set().union(*(names_read(s) for s in kept)) & params) if kept else []
    if not read:
        return [], kept
    renames: dict[str, str] = {}
    bound: list[ast.Stmt] = []
    for name in read:
        leaf = root[name]
        assert isinstance(leaf, Leaf)
        local = t.locals.fresh(f"{name}_value")
        renames[name] = local
        t.local_values[local] = Value(
            tuple(Dim.const(d) for d in leaf.shape), leaf.dtype, expr=build.name(local)
        )
        bound.append(
            ast.LetStmt(ast.NamePattern(build.ident(local), build.SPAN), None,
                        build.name(name), build.SPAN)
        )  # fmt: skip

    def rename(node: Any) -> Any:
        if isinstance(node, ast.Member):  # `x.name` names a member, never the root param
            return ast.Member(transform(node.target, rename), node.name, node.span)
        if isinstance(node, ast.Name) and node.ident.name in renames:
            return build.name(renames[node.ident.name])
        return None

    return bound, [transform(s, rename) if names_read(s) & renames.keys() else s for s in kept]


def _rewrite(
    t: Translation,
    member: str,
    tree: Tree,
    body: list[ast.Stmt],
    start: int,
    length: int,
    segments: list[list[ast.Stmt]],
) -> Outlined | None:
    local = set(t.local_values)
    after = body[start + length * len(segments) :]
    # Names read after each segment: suffix unions, built from the end.
    tail: set[str] = set(_result_names(t))
    for s in after:
        tail |= names_read(s)
    uses_after: list[set[str]] = [set() for _ in segments]
    for i in range(len(segments) - 1, -1, -1):
        uses_after[i] = set(tail)
        for s in segments[i]:
            tail |= names_read(s)
    outputs: list[str] = []
    frees: list[list[str]] = []
    for i, seg in enumerate(segments):
        made = [defined(s) for s in seg]
        escaping = [n for n in made if n in uses_after[i]]
        if len(escaping) != 1:
            return None
        outputs.append(escaping[0])
        free: list[str] = []
        for s in seg:
            for n in sorted(names_read(s)):
                if n in local and n not in made and n not in free:
                    free.append(n)
        frees.append(free)
    # Segment i > 0 reads segment i - 1's output; the rest of its free names are invariants.
    carried: list[str] = []
    for i, free in enumerate(frees):
        if i == 0:
            candidates = [n for n in free if n not in frees[1]]
        else:
            candidates = [outputs[i - 1]] if outputs[i - 1] in free else []
        if len(candidates) != 1:
            return None
        carried.append(candidates[0])
    invariants = [n for n in frees[0] if n != carried[0]]
    for i, free in enumerate(frees):
        if sorted(n for n in free if n != carried[i]) != sorted(invariants):
            return None
    # Every segment is the first one renamed.
    canon = [_canonical(seg, member, i, carried[i]) for i, seg in enumerate(segments)]
    if any(c != canon[0] for c in canon[1:]):
        return None
    v_in, v_out = t.local_values.get(carried[0]), t.local_values.get(outputs[-1])
    if v_in is None or v_out is None or not _same_type(v_in, v_out):
        return None
    for i in range(len(segments)):
        a, b = t.local_values.get(carried[i]), t.local_values.get(outputs[i])
        if a is None or b is None or not _same_type(a, v_in) or not _same_type(b, v_in):
            return None
    return _emit(t, member, tree, body, start, length, segments, carried, outputs, invariants)


def _result_names(t: Translation) -> set[str]:
    out: set[str] = set()
    for v in t.results:
        if v.expr is not None:
            out |= names_read(v.expr)
    return out


def _same_type(a: Value, b: Value) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape


def _canonical(seg: list[ast.Stmt], member: str, index: int, carried: str) -> str:
    renames = {defined(s): f"v{k}" for k, s in enumerate(seg)}
    renames[carried] = "carried"

    def fn(node: Any) -> Any:
        if isinstance(node, ast.Member):  # `x.q_proj`: a member's name, never a local
            return ast.Member(transform(node.target, fn), node.name, node.span)
        if isinstance(node, ast.Name) and node.ident.name in renames:
            return build.name(renames[node.ident.name])
        if isinstance(node, ast.Ident) and node.name in renames:
            return build.ident(renames[node.name])
        if _is_element(node, member):
            return build.name("element")
        return None

    from linnet.syntax.format import format_file

    items = tuple(transform(s, fn) for s in seg)
    fake = ast.FnDecl(
        False, "fn", build.ident("f"), None, ast.Params((), False, build.SPAN), None, None,
        ast.Body(items, build.SPAN), build.SPAN,
    )  # fmt: skip
    file = ast.File((build.ident("m"),), build.SPAN, (), (fake,), (), build.SPAN)
    return format_file(file, build.SPAN.file)


def _emit(
    t: Translation,
    member: str,
    tree: Tree,
    body: list[ast.Stmt],
    start: int,
    length: int,
    segments: list[list[ast.Stmt]],
    carried: list[str],
    outputs: list[str],
    invariants: list[str],
) -> Outlined:
    elem = element_type(tree)
    seg = segments[0]
    hidden_param = (
        "hidden"
        if "hidden" not in {defined(s) for s in seg} and "hidden" not in invariants
        else "hidden_in"
    )

    def strip(node: Any) -> Any:
        # `layers[0].attn.q.weight` -> `attn.q.weight` inside the element's method.
        if isinstance(node, ast.Member):
            chain: list[str] = []
            cur: Any = node
            while isinstance(cur, ast.Member):
                chain.append(cur.name.name)
                cur = cur.target
            if _is_element(cur, member):
                chain.reverse()
                return build.path(".".join(chain))
        if isinstance(node, ast.Name) and node.ident.name == carried[0]:
            return build.name(hidden_param)
        return None

    method_body = [transform(s, strip) for s in seg]
    result_name = outputs[0]
    v_in = t.local_values[carried[0]]
    params = [(hidden_param, v_in)] + [(n, t.local_values[n]) for n in invariants]
    generics = _method_generics(t, params, method_body)
    where = _method_where(t, generics)
    fn = ast.FnDecl(
        True,
        "fn",
        build.ident("forward"),
        None
        if not generics
        else ast.Generics(
            tuple(
                ast.GenericParam(build.ident(g), False, "Dim", build.SPAN, None, build.SPAN)
                for g in generics
            ),
            False,
            build.SPAN,
        ),
        ast.Params(
            tuple(ast.Param(build.ident(n), _type(v), None, build.SPAN) for n, v in params),
            False,
            build.SPAN,
        ),
        _type(t.local_values[result_name]),
        where,
        ast.Body((*method_body, ast.ReturnStmt(build.name(result_name), build.SPAN)), build.SPAN),
        build.SPAN,
    )
    # The entry: `var hidden = x` and the loop over the array.
    var = t.locals.fresh("hidden")
    last_segment = member.rsplit(".", 1)[-1]
    loop_var = t.locals.fresh(
        _singular(last_segment) if _singular(last_segment) != last_segment else "element"
    )
    inferable = _inferable(t, params)
    call_generics = (
        None if all(g in inferable for g in generics) else [build.name(g) for g in generics]
    )
    call = build.call(
        build.member(build.name(loop_var), "forward"),
        build.name(var),
        *[build.name(n) for n in invariants],
        generics=call_generics,
    )
    loop = ast.StaticForStmt(
        ast.NamePattern(build.ident(loop_var), build.SPAN),
        build.path(member),
        None,
        ast.Body((ast.AssignStmt(build.ident(var), call, build.SPAN),), build.SPAN),
        build.SPAN,
    )
    init = ast.VarStmt(build.ident(var), None, build.name(carried[0]), build.SPAN)
    last = outputs[-1]

    def rename_last(node: Any) -> Any:
        if isinstance(node, ast.Name) and node.ident.name == last:
            return build.name(var)
        return None

    rest = [transform(s, rename_last) for s in body[start + length * len(segments) :]]
    t.body = [*body[:start], init, loop, *rest]
    for v in t.results:
        if v.expr is not None:
            v.expr = transform(v.expr, rename_last)
    t.local_values[var] = t.local_values[last]
    return Outlined(elem.type_name, fn)


def _type(v: Value) -> ast.Type:
    return build.tensor_type([build.dim(d) for d in v.shape], v.dtype)


def _symbols_of(v: Value) -> set[str]:
    out: set[str] = set()
    for d in v.shape:
        out |= {s.name for s in d.symbols()}
    return out


def _method_generics(
    t: Translation, params: list[tuple[str, Value]], body: list[ast.Stmt]
) -> list[str]:
    used: set[str] = set()
    for _, v in params:
        used |= _symbols_of(v)
    for s in body:
        used |= names_read(s) & set(t.generics)
        name = defined(s)
        if name in t.local_values:
            used |= _symbols_of(t.local_values[name])
    # Facts tie generics together: a fact about a used generic brings its others along.
    changed = True
    while changed:
        changed = False
        for lhs, _, rhs in t.where:
            syms = {s.name for s in (lhs - rhs).symbols()}
            if syms & used and not syms <= used:
                used |= syms
                changed = True
    return [g for g in t.generics if g in used]


def _method_where(t: Translation, generics: list[str]) -> ast.Where | None:
    keep = set(generics)
    rels = [
        ast.Binary(rel, build.dim(lhs), build.dim(rhs), build.SPAN, build.SPAN)  # type: ignore[arg-type]
        for lhs, rel, rhs in t.where
        if {s.name for s in (lhs - rhs).symbols()} <= keep
    ]
    return ast.Where(tuple(rels), False, build.SPAN) if rels else None


def _inferable(t: Translation, params: list[tuple[str, Value]]) -> set[str]:
    out: set[str] = set()
    for _, v in params:
        for d in v.shape:
            sym = d.as_symbol()
            if sym is not None:
                out.add(sym.name)
    return out


_unused = Dim
