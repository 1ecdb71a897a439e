"""Translation: importer graph nodes to Linnet statements, one translator per operator.

Stage: after pattern recovery, before module assembly (`linnet.sourcegen.module`).
In: a `Graph` (topologically ordered nodes) and a `Registry` of translators
keyed by `(domain, op)`. Out: a `Translation`: the statements of the entry
body, the values it returns, the stored tensors it reads (future `param`
members), the standard-library items it calls, the `where` facts its shapes
rely on, and notes. Nothing is executed: constants are folded with NumPy only
where an operator's meaning is plain arithmetic on known arrays.

The translator interface (what `linnet.onnx.importer.ops` builds on):

    from linnet.onnx.importer.graph import translator

    @translator("Relu")
    def relu(ctx: Context) -> None:
        x = ctx.input(0)
        fn = ctx.std("nn.activations", "relu")          # adds `use std.nn.activations::{relu}`
        ctx.output(0, ctx.let(build.call(fn, ctx.ref(x)), x.shape, x.dtype, "relu"))

- `ctx.node` is the `Node` (`op`, `domain`, `attrs`, `opset`); `ctx.attr(k, d)`.
- `ctx.input(i)` is a `Value` (symbolic `shape`, `dtype`, compile-time `const`
  / `elements`) or None for an omitted optional input; `ctx.const(i)`,
  `ctx.ints(i)`, `ctx.elements(i)` read compile-time inputs and refuse the
  node (raise `Unsupported`) when the input is only known at run time.
- `ctx.ref(v)` is the expression that reads `v` (constants are materialised
  on first use: a literal, a `fill`, an `iota`, or a stored tensor).
- `ctx.let(expr, shape, dtype, hint)` binds a statement and returns its
  `Value`; `ctx.comprehension(...)` binds `let t[i, j] = body`;
  `ctx.constant(array)` / `ctx.symbolic(elements)` make compile-time results
  (shape subgraphs fold to dimension expressions this way).
- `ctx.output(i, value)` sets the node's i-th output.
- `ctx.require(lhs, rel, rhs)` adds a `where` fact the generated entry
  states (say `seq <= 1024` for a position table); `ctx.equal`,
  `ctx.simplify`, `ctx.broadcast` reason under the facts so far.
- Raise `Unsupported(reason)` for an attribute or input the translator does
  not handle: the import stops with one error listing every such node.

A registry is keyed by operator, not by opset version: a translator reads
`ctx.node.opset` where versions differ (field-notes: importers keyed on exact
opset versions fail on every new version of a known operator).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from linnet.check.dims import Dim, Symbol
from linnet.check.prover import Facts
from linnet.errors import InternalError
from linnet.ir.core import DTYPES, dtype_of_numpy, numpy_dtype
from linnet.sourcegen import build
from linnet.sourcegen.graph import DimLike, Graph, Node
from linnet.sourcegen.layout import Layout, method_scope_members, type_names
from linnet.sourcegen.names import Namer, sanitize
from linnet.sourcegen.values import FLOAT_DTYPES, INT_DTYPES, Value
from linnet.syntax import ast

__all__ = [
    "Context",
    "Registry",
    "Translation",
    "Translator",
    "Unsupported",
    "Value",
]

Translator = Callable[["Context"], None]
_F = TypeVar("_F", bound=Translator)

_MISSING: Any = object()


class Unsupported(Exception):
    """Raised by a translator that cannot map this node; the message says why."""


class Registry:
    """Translators keyed by `(domain, op)`; `""` is the default domain (ONNX `ai.onnx`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._table: dict[tuple[str, str], Translator] = {}

    def register(self, *ops: str, domain: str = "") -> Callable[[_F], _F]:
        """Decorator: `fn` translates every operator in `ops` of `domain`."""

        def add(fn: _F) -> _F:
            for op in ops:
                self._table[(domain, op)] = fn
            return fn

        return add

    def add(self, domain: str, op: str, fn: Translator) -> None:
        self._table[(domain, op)] = fn

    def lookup(self, domain: str, op: str) -> Translator | None:
        return self._table.get((domain, op))

    def operators(self, domain: str | None = None) -> list[tuple[str, str]]:
        """Every registered `(domain, op)`, sorted; only `domain`'s when given."""
        return sorted(k for k in self._table if domain is None or k[0] == domain)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._table


class Refusal:
    """One node the import cannot translate: its label, operator and the reason."""

    __slots__ = ("node", "reason")

    def __init__(self, node: Node, reason: str) -> None:
        self.node = node
        self.reason = reason

    @property
    def name(self) -> str:
        """The node's name (its first output when it has none)."""
        return self.node.label

    @property
    def domain(self) -> str:
        return self.node.domain

    @property
    def op(self) -> str:
        return self.node.op

    def __str__(self) -> str:
        where = self.node.attrs.get("_where")
        at = f" at {where}" if where else ""
        return f"`{self.node.label}` ({self.node.qualified_op}){at}: {self.reason}"


class StoredUse:
    """A stored tensor (initializer) that generated code reads: a future `param`.

    `array` is None for a weight the model takes as a graph input (no data).
    """

    __slots__ = ("array", "name", "value")

    def __init__(self, name: str, array: np.ndarray | None, value: Value) -> None:
        self.name = name
        self.array = array
        self.value = value


class Translation:
    """Everything translation produced for one graph (see the module docstring)."""

    def __init__(self, graph: Graph, layout: Layout) -> None:
        self.graph = graph
        self.layout = layout
        self.body: list[ast.Stmt] = []
        self.values: dict[str, Value] = {}
        self.generics: dict[str, Symbol] = {}  # generic name -> symbol, in declaration order
        self.dim_params: dict[str, Symbol] = {}  # framework extent name -> symbol
        self.inputs: list[tuple[str, Value]] = []  # entry parameter name, value
        self.results: list[Value] = []
        self.stored: dict[str, StoredUse] = {}  # stored tensor name -> use
        self.uses: dict[str, dict[str, str]] = {}  # std module -> item -> local name
        self.facts = Facts.EMPTY
        self.where: list[tuple[Dim, str, Dim]] = []
        self.notes: list[str] = []
        self.refusals: list[Refusal] = []
        # Names a local must not shadow: the members of every block a body lives in.
        self.member_names = method_scope_members(layout)
        self.locals = Namer(self.member_names)  # locals (and std imports) never shadow them
        self.local_values: dict[str, Value] = {}  # every bound local and entry input, by name
        self.const_exprs: dict[tuple[object, ...], ast.Expr] = {}  # materialised constants
        self.index_namer = Namer()
        # Readable names for values whose model names carry meaning (`names.plan_local_names`).
        self.preferred: dict[str, str] = {}
        self.opaque_dims = 0
        self._types: frozenset[str] | None = None  # block type names, once asked

    # -- generic dimensions --------------------------------------------------

    def generic(self, raw: str) -> Dim:
        """The entry generic for a symbolic extent named `raw` (an ONNX `dim_param`)."""
        sym = self.dim_params.get(raw)
        if sym is None:
            sym = Symbol(self.locals.fresh(sanitize(raw, "d")))
            self.dim_params[raw] = sym
            self.generics[sym.name] = sym
        return Dim.symbol(sym)

    def dim_of(self, d: DimLike) -> Dim | None:
        """A framework extent as a `Dim`: sizes, known generics; None otherwise."""
        if isinstance(d, int):
            return Dim.const(d) if d >= 0 else None
        if isinstance(d, str) and d in self.dim_params:
            return Dim.symbol(self.dim_params[d])
        return None

    def std(self, module: str, item: str) -> str:
        """The local name of `std.<module>::<item>`, imported once.

        A bare call finds a local, parameter or member of that name first (4.4),
        and an import named like a block type collides with it (E1204), so the
        item is imported under an alias (`attention as attention_fn`) where its
        own name is taken; the name is then reserved so no later local takes it.
        """
        items = self.uses.setdefault(module, {})
        local = items.get(item)
        if local is None:
            local = item
            if self.locals.taken(local) or self._item_clash(local):
                local = self.locals.fresh(f"{item}_fn")  # reserved by `fresh`
                while self._item_clash(local):
                    local = self.locals.fresh(f"{item}_fn")
            self.locals.reserve(local)
            items[item] = local
        return local

    def _item_clash(self, name: str) -> bool:
        """A block type or another import is already called `name`."""
        if self._types is None:
            self._types = type_names(self.layout)
        return name in self._types or any(name in items.values() for items in self.uses.values())

    def require(self, lhs: Dim, rel: str, rhs: Dim) -> None:
        lhs, rhs = self.facts.simplify(lhs), self.facts.simplify(rhs)
        if self.facts.prove(lhs, rel, rhs):
            return
        # State the simplest facts that imply the relation: `8 * B * S > 0` is
        # `B > 0` and `S > 0`; `S + 1 <= S + min(1, S)` is `S > 0`.
        for facts in _simpler(lhs, rel, rhs):
            trial = self.facts
            for f in facts:
                trial = trial.assume(*f)
            if trial.prove(lhs, rel, rhs):
                for f in facts:
                    if not self.facts.prove(*f):
                        self.where.append(f)
                        self.facts = self.facts.assume(*f)
                return
        self.where.append((lhs, rel, rhs))
        self.facts = self.facts.assume(lhs, rel, rhs)


def _simpler(lhs: Dim, rel: str, rhs: Dim) -> list[list[tuple[Dim, str, Dim]]]:
    """Candidate sets of simpler facts for `lhs rel rhs`, simplest first."""
    zero = Dim.const(0)
    out: list[list[tuple[Dim, str, Dim]]] = []
    symbols = sorted((lhs - rhs).symbols(), key=lambda s: s.serial)
    if rel in (">", ">=", "<", "<=", "=="):
        # Every extent positive: the usual reason a product or a slice is non-empty.
        out.append([(Dim.symbol(s), ">", zero) for s in symbols if not s.is_pack])
    return out


class Context:
    """What a translator sees of one node (see the module docstring for the interface)."""

    def __init__(self, translation: Translation, node: Node) -> None:
        self.t = translation
        self.node = node
        self._outputs: dict[int, Value] = {}

    # -- the node --------------------------------------------------------------

    def attr(self, key: str, default: Any = _MISSING) -> Any:
        """An attribute's value; without `default`, a missing attribute refuses the node."""
        if key in self.node.attrs:
            return self.node.attrs[key]
        if default is _MISSING:
            raise Unsupported(f"attribute `{key}` is required")
        return default

    @property
    def n_inputs(self) -> int:
        return len(self.node.inputs)

    @property
    def n_outputs(self) -> int:
        return len(self.node.outputs)

    def input(self, i: int) -> Value | None:
        """The i-th input, or None when it is omitted (optional inputs, 1-based gaps)."""
        if i >= len(self.node.inputs) or not self.node.inputs[i]:
            return None
        return self.t.values[self.node.inputs[i]]

    def need(self, i: int) -> Value:
        """The i-th input, which must be present."""
        v = self.input(i)
        if v is None:
            raise Unsupported(f"input {i} is missing")
        return v

    def const(self, i: int) -> np.ndarray | None:
        """The i-th input's value when known at import time; None when the input is omitted.

        Refuses the node when the input exists but is only known at run time.
        """
        v = self.input(i)
        if v is None:
            return None
        if v.const is None:
            raise Unsupported(f"input {i} must be a constant")
        return v.const

    def ints(self, i: int) -> list[int] | None:
        """A constant integer input as a list (axes, pads, sizes), or None when omitted."""
        arr = self.const(i)
        return None if arr is None else [int(x) for x in arr.reshape(-1)]

    def elements(self, i: int) -> tuple[Dim, ...] | None:
        """The elements of an integer input as dimensions (a folded shape computation).

        None when omitted; refuses the node when the values are only known at run time.
        """
        v = self.input(i)
        if v is None:
            return None
        if v.elements is None:
            raise Unsupported(f"input {i} must be known when importing (a constant or a shape)")
        return v.elements

    def output_info(self, i: int) -> tuple[tuple[Dim | None, ...] | None, str | None]:
        """The shape inference result for output `i`: extents as `Dim` (None unknown), dtype."""
        if i >= len(self.node.outputs):
            return None, None
        info = self.t.graph.value_info.get(self.node.outputs[i])
        if info is None:
            return None, None
        shape = None if info.shape is None else tuple(self.t.dim_of(d) for d in info.shape)
        return shape, info.dtype

    # -- building code -----------------------------------------------------------

    def ref(self, v: Value) -> ast.Expr:
        """The expression reading `v`; constants are materialised on first use."""
        if v.expr is None:
            v.expr = self._materialise(v)
        return v.expr

    def let(self, expr: ast.Expr, shape: Sequence[Dim], dtype: str, hint: str = "") -> Value:
        """`let <fresh> = expr`; returns the new local's value."""
        name = self.t.locals.fresh(hint or _hint(self.node))
        annotation = build.named_type(dtype) if _is_literal(expr) else None
        self.t.body.append(
            ast.LetStmt(
                ast.NamePattern(build.ident(name), build.SPAN), annotation, expr, build.SPAN
            )
        )
        value = Value(tuple(self.simplify(d) for d in shape), dtype, expr=build.name(name))
        self.t.local_values[name] = value
        return value

    def comprehension(
        self,
        indices: Sequence[str],
        body: ast.Expr,
        shape: Sequence[Dim],
        dtype: str,
        hint: str = "",
        packs: Iterable[str] = (),
    ) -> Value:
        """`let <fresh>[i, j, *s] = body` (8.1); `packs` are the pack indices among `indices`."""
        name = self.t.locals.fresh(hint or _hint(self.node))
        pack_set = set(packs)
        outs = tuple(ast.OutIndex(build.ident(i), i in pack_set, build.SPAN) for i in indices)
        self.t.body.append(ast.ComprehensionStmt(build.ident(name), outs, body, build.SPAN))
        value = Value(tuple(self.simplify(d) for d in shape), dtype, expr=build.name(name))
        self.t.local_values[name] = value
        return value

    def indices(self, count: int, hints: str = "ijklmnpqrstuvwxyz") -> list[str]:
        """`count` index variable names that no local, member or generic uses."""
        out: list[str] = []
        for n in range(count):
            base = hints[n] if n < len(hints) else f"i{n}"
            name = base
            k = 2
            while self.t.locals.taken(name) or name in out:
                name = f"{base}{k}"
                k += 1
            out.append(name)
        return out

    def output(self, i: int, value: Value) -> None:
        self._outputs[i] = value

    def constant(self, array: np.ndarray, dtype: str | None = None) -> Value:
        """A compile-time result (folded); materialised only if code reads it."""
        arr = np.asarray(array)
        dt = dtype or numpy_dtype_name(arr.dtype)
        return Value(tuple(Dim.const(int(s)) for s in arr.shape), dt, const=arr)

    def symbolic(self, elements: Sequence[Dim], dtype: str = "i64", scalar: bool = False) -> Value:
        """A compile-time integer tensor whose elements are dimensions (a folded shape)."""
        elems = tuple(self.simplify(e) for e in elements)
        shape: tuple[Dim, ...] = () if scalar else (Dim.const(len(elems)),)
        const = None
        if all(e.as_int() is not None for e in elems):
            values = [e.as_int() for e in elems]
            const = np.array(values, dtype=numpy_dtype(dtype) if dtype in DTYPES else np.int64)
            if scalar:
                const = const.reshape(())
        return Value(shape, dtype, const=const, elements=elems)

    def std(self, module: str, item: str) -> str:
        """Import `std.<module>::<item>` (once) and return the name to call it by."""
        return self.t.std(module, item)

    def dim(self, d: Dim | int) -> ast.Expr:
        return build.dim(self.simplify(d) if isinstance(d, Dim) else d)

    def shape_lit(self, dims: Sequence[Dim | int]) -> ast.Expr:
        return build.shape([self.dim(d) for d in dims])

    def literal(self, value: float | int | bool, dtype: str) -> ast.Expr:
        """A scalar of `dtype` with this value, as a literal where one exists.

        Infinities and NaN have no literal (2.8): they are written as the
        largest finite value times 2 (inf) and that times 0 (NaN), computed in
        the dtype at run time.
        """
        if dtype == "bool":
            return build.bool_lit(bool(value))
        if dtype in INT_DTYPES:
            return build.int_lit(int(value))
        f = float(value)
        if math.isfinite(f):
            # The shortest spelling that rounds to the same value in the dtype
            # (`1e-05`, not `9.999999747378752e-06` for an f32 epsilon).
            if dtype in _SHORT:
                short = float(str(_SHORT[dtype](f)))
                # Near the largest finite value the short spelling reads back (as
                # f64) just beyond it, which the checker rejects (E2105).
                if abs(short) <= _FLOAT_MAX[dtype]:
                    f = short
            return build.float_lit(f)
        big = build.call(
            "cast", build.float_lit(_FLOAT_MAX[dtype]), generics=[build.named_type(dtype)]
        )
        inf = build.binary("*", big, build.float_lit(2.0))
        if math.isnan(f):
            return build.paren(build.binary("*", inf, build.float_lit(0.0)))
        return build.unary("-", build.paren(inf)) if f < 0 else build.paren(inf)

    def typed(self, value: float | int | bool, dtype: str) -> ast.Expr:
        """A typed scalar (not a contextual literal): `cast<T>(lit)` where a literal would be untyped."""
        lit = self.literal(value, dtype)
        if dtype == "bool" or not _is_literal(lit):
            return lit
        return build.call("cast", lit, generics=[build.named_type(dtype)])

    # -- shapes and facts ----------------------------------------------------------

    def simplify(self, d: Dim) -> Dim:
        return self.t.facts.simplify(d)

    def equal(self, a: Dim, b: Dim) -> bool:
        """Whether `a == b` is provable under the facts so far."""
        return self.t.facts.prove(a, "==", b)

    def prove(self, a: Dim, rel: str, b: Dim) -> bool:
        return self.t.facts.prove(a, rel, b)

    def require(self, lhs: Dim, rel: str, rhs: Dim) -> None:
        """State `lhs rel rhs` in the entry's `where` clause (unless already provable)."""
        self.t.require(lhs, rel, rhs)

    def broadcast(self, *shapes: Sequence[Dim]) -> tuple[Dim, ...]:
        """The broadcast shape (7.6, ONNX multidirectional broadcasting).

        Two extents neither provably equal nor provably 1 are assumed equal: the
        fact is added to the entry's `where` clause so the checker can prove it
        (a call with other sizes is then rejected when the entry is bound).
        """
        rank = max((len(s) for s in shapes), default=0)
        out: list[Dim] = []
        one = Dim.const(1)
        for axis in range(rank):
            dims = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
            chosen = one
            for d in dims:
                d = self.simplify(d)
                if self.equal(d, one):
                    continue
                if self.equal(chosen, one):
                    chosen = d
                elif not self.equal(chosen, d):
                    self._assume_equal(chosen, d)
            out.append(chosen)
        return tuple(out)

    def _assume_equal(self, a: Dim, b: Dim) -> None:
        ai, bi = a.as_int(), b.as_int()
        if ai is not None and bi is not None:
            raise Unsupported(f"cannot broadcast extents {ai} and {bi}")
        self.require(a, "==", b)

    def note(self, text: str) -> None:
        self.t.notes.append(text)

    def fail(self, reason: str) -> Unsupported:
        """`raise ctx.fail("...")`: refuse this node with a reason."""
        return Unsupported(reason)

    # -- materialising constants ---------------------------------------------------

    def _materialise(self, v: Value) -> ast.Expr:
        if v.source is not None and (v.source in self.t.layout.paths or v.const is None):
            return self._stored(v.source, v)
        if v.const is None:
            if v.elements is not None:
                return self._from_elements(v)
            raise AssertionError("a value without an expression or a compile-time value")
        arr = v.const
        if v.is_scalar:
            return self.literal(arr.reshape(()).item(), v.dtype)
        # Equal constants (one causal mask per layer, say) are written once.
        key = (v.dtype, arr.shape, arr.tobytes()) if arr.size <= _FOLD_LIMIT else None
        if key is not None and key in self.t.const_exprs:
            return self.t.const_exprs[key]
        expr = self._materialise_array(v, arr)
        if key is not None:
            self.t.const_exprs[key] = expr
        return expr

    def _materialise_array(self, v: Value, arr: np.ndarray) -> ast.Expr:
        flat = arr.reshape(-1)
        if flat.size > 0 and bool(np.all(flat == flat[0])):
            dims = self.shape_lit(v.shape)
            return build.call(
                "fill", dims, self.literal(flat[0].item(), v.dtype),
                generics=[build.named_type(v.dtype)],
            )  # fmt: skip
        if (
            arr.ndim == 1
            and v.dtype in INT_DTYPES | FLOAT_DTYPES
            and flat.size > 1
            and np.array_equal(flat, np.arange(flat.size))
        ):
            return build.call(
                "iota", build.int_lit(int(flat.size)), generics=[build.named_type(v.dtype)]
            )
        if v.dtype == "bool" and arr.ndim >= 2:
            mask = self._triangle(v)
            if mask is not None:
                return mask
        name = self._const_name(v)
        return self._stored(name, v)

    def _triangle(self, v: Value) -> ast.Expr | None:
        """A boolean band `m[i, j] = j <= i + k` (a causal mask), possibly with leading
        axes of size 1, written as a comprehension over `iota` instead of stored."""
        assert v.const is not None
        arr = v.const
        if any(s != 1 for s in arr.shape[:-2]):
            return None
        rows, cols = arr.shape[-2:]
        plane = arr.reshape(rows, cols)
        if rows == 0 or cols == 0:
            return None
        for lower in (True, False):
            k = int(plane[0].sum()) - 1 if lower else cols - int(plane[0].sum())
            band = (
                np.tri(rows, cols, k, dtype=bool)
                if lower
                else ~np.tri(rows, cols, k - 1, dtype=bool)
            )
            if not np.array_equal(plane, band):
                continue
            pos = self.let(
                build.call(
                    "iota", build.int_lit(max(rows, cols)), generics=[build.named_type("i64")]
                ),
                (Dim.const(max(rows, cols)),),
                "i64",
                "position",
            )
            i, j = self.indices(2)
            row = build.index(ctx_ref := self.ref(pos), [build.name(i)])
            col = build.index(ctx_ref, [build.name(j)])
            shifted = (
                row if k == 0 else build.binary("+" if k > 0 else "-", row, build.int_lit(abs(k)))
            )
            body = build.binary("<=" if lower else ">=", col, shifted)
            mask = self.comprehension(
                [i, j], body, (Dim.const(rows), Dim.const(cols)), "bool", "band"
            )
            expr = self.ref(mask)
            if arr.ndim > 2:
                expr = build.call("reshape", expr, self.shape_lit(v.shape))
            return expr
        return None

    def _const_name(self, v: Value) -> str:
        assert v.const is not None
        hint = "constant"
        name = f"const::{len(self.t.graph.initializers)}"
        self.t.graph.initializers[name] = v.const
        self.t.layout.add(
            name, tuple(int(s) for s in v.const.shape), v.dtype, self.t.locals.fresh(hint)
        )
        v.source = name
        return name

    def _stored(self, name: str, v: Value) -> ast.Expr:
        layout = self.t.layout
        if name not in layout.paths:
            shape = v.static_shape()
            if shape is None:
                raise Unsupported(f"stored tensor `{name}` has a symbolic shape")
            layout.add(name, shape, v.dtype, self.t.locals.fresh(sanitize(name, "w")))
        if name not in self.t.stored:
            self.t.stored[name] = StoredUse(name, self.t.graph.initializers.get(name), v)
        layout.leaf(name).used = True
        return layout.expr(name)

    def _from_elements(self, v: Value) -> ast.Expr:
        assert v.elements is not None
        dt = build.named_type(v.dtype)
        items = [build.call("cast", self.dim(e), generics=[dt]) for e in v.elements]
        if v.is_scalar:
            return items[0]
        parts = [build.call("fill", build.shape([build.int_lit(1)]), it) for it in items]
        if len(parts) == 1:
            return parts[0]
        return build.call("concat", *parts, named=[("axis", build.int_lit(0))])


_SHORT: dict[str, Any] = {"f32": np.float32, "f16": np.float16}

_FLOAT_MAX = {
    "f16": 65504.0,
    "bf16": 3.3895313892515355e38,
    "f32": 3.4028234663852886e38,
    "f64": 1.7976931348623157e308,
}


def numpy_dtype_name(dtype: np.dtype[Any]) -> str:
    """The Linnet dtype of a NumPy dtype (bf16 via ml_dtypes); `Unsupported` if none."""
    try:
        return dtype_of_numpy(dtype)
    except InternalError:
        raise Unsupported(f"dtype {dtype} has no Linnet counterpart") from None


def _is_literal(expr: ast.Expr) -> bool:
    if isinstance(expr, ast.Unary):
        return _is_literal(expr.operand)
    if isinstance(expr, ast.Paren):
        return _is_literal(expr.inner)
    if isinstance(expr, ast.Binary):
        return _is_literal(expr.left) and _is_literal(expr.right)
    return isinstance(expr, (ast.IntLit, ast.FloatLit, ast.BoolLit))


def _hint(node: Node) -> str:
    from linnet.sourcegen.names import snake

    return snake(node.op)


_FOLD_LIMIT = 1 << 16
"""Stored tensors up to this many elements are also known as constants (folding)."""


def translate(
    graph: Graph,
    registry: Registry,
    layout: Layout,
    prepare: Callable[[Translation], None] | None = None,
) -> Translation:
    """Translate every node of `graph` in order (`linnet.sourcegen.driver`); `prepare`
    runs once the inputs are read, before the first node (to state facts)."""
    from linnet.sourcegen.driver import run

    return run(graph, registry, layout, prepare)
