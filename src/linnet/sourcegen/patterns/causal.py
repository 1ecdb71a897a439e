"""Proving that a mask subgraph computes the causal mask, element by element.

Stage: pattern recovery, called by the attention pass for each boolean mask
(`linnet.sourcegen.patterns.attention`). Exporters build causal masks in many
spellings: `Range`s compared with `LessOrEqual`, and (transformers 5) the same
comparison read through `GatherND` from broadcast position ids, and-ed with a
"packed sequence" test that is all true when the positions are `0 .. S - 1`.
Rather than one pattern per spelling, `is_causal` evaluates the subgraph
symbolically: the element at index `(i0, i1, ...)` of each value is an
integer affine expression in the indices (`Range`, `Slice` offsets,
`Unsqueeze`/`Expand` broadcasting, a `Reshape` that only adds or drops unit
axes, `Concat` pieces that agree, `GatherND`
with affine indices, `Add`/`Sub`, a `CumSum` of zeros) or a conjunction of
comparisons of such expressions. The mask is causal when its element is
exactly `k <= q` over its last two axes, of one extent.

Anything outside this vocabulary (a data-dependent value, a float, a reshape
that regroups axes, a negative index) makes the proof fail, and the mask stays
as written. The proof is exact: no value is sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linnet.sourcegen.graph import Graph, Node
from linnet.sourcegen.patterns.match import Matcher

INT_DTYPES = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool")
_DEPTH = 64  # the mask subgraphs exporters write are a few dozen nodes deep


class NotProven(Exception):
    """The subgraph uses something the evaluator does not model."""


@dataclass(frozen=True)
class Lin:
    """`sum(coef * index[axis]) + const` over the root value's index variables."""

    coefs: tuple[tuple[int, int], ...]
    const: int

    @staticmethod
    def of(coefs: dict[int, int], const: int) -> Lin:
        return Lin(tuple(sorted((a, c) for a, c in coefs.items() if c)), const)

    def __add__(self, other: Lin) -> Lin:
        coefs = dict(self.coefs)
        for a, c in other.coefs:
            coefs[a] = coefs.get(a, 0) + c
        return Lin.of(coefs, self.const + other.const)

    def scaled(self, k: int) -> Lin:
        return Lin.of({a: c * k for a, c in self.coefs}, self.const * k)

    @property
    def is_const(self) -> bool:
        return not self.coefs


@dataclass(frozen=True)
class Conj:
    """A conjunction of `lin <= 0` ("le") and `lin == 0` ("eq") atoms; `false` overrides."""

    atoms: frozenset[tuple[str, Lin]]
    false: bool = False


TRUE = Conj(frozenset())
FALSE = Conj(frozenset(), True)

Element = Lin | Conj


def _atom(kind: str, lin: Lin) -> Conj:
    if lin.is_const:
        holds = lin.const <= 0 if kind == "le" else lin.const == 0
        return TRUE if holds else FALSE
    if kind == "eq" and lin.coefs[0][1] < 0:
        lin = lin.scaled(-1)
    return Conj(frozenset({(kind, lin)}))


def _and(a: Conj, b: Conj) -> Conj:
    if a.false or b.false:
        return FALSE
    return Conj(a.atoms | b.atoms)


def _agree(pieces: list[tuple[Element, object, int]], at: Lin) -> Element:
    """The one formula that every piece of a `Concat` computes on its own range.

    A piece of extent 1 is compared at its single index only (broadcasting
    read its operands at index 0 there), so `concat([x[:1] - 1, x])` with
    `x[j] = j` is `j - 1` throughout.
    """
    wide = [f for f, extent, _ in pieces if extent != 1]
    if not pieces or not wide or any(f != wide[0] for f in wide):
        raise NotProven("concatenated pieces that differ")
    formula = wide[0]
    for f, extent, offset in pieces:
        if extent != 1:
            continue
        if not isinstance(f, Lin) or not isinstance(formula, Lin) or len(at.coefs) != 1:
            raise NotProven("concatenated pieces that differ")
        ((var, coef),) = at.coefs
        if coef != 1:
            raise NotProven("concatenated pieces that differ")
        point = offset - at.const  # the root index value where `at` is this piece's index
        if _substitute(f, var, point) != _substitute(formula, var, point):
            raise NotProven("concatenated pieces that differ")
    return formula


def _substitute(lin: Lin, var: int, value: int) -> Lin:
    coefs = dict(lin.coefs)
    c = coefs.pop(var, 0)
    return Lin.of(coefs, lin.const + c * value)


def is_causal(matcher: Matcher, mask: str, negated: bool) -> bool:
    """Whether `mask[..., q, k]` is `k <= q` (`k > q` when `negated`), Q and K one extent."""
    graph = matcher.graph
    shape = _shape(graph, mask)
    if shape is None or len(shape) < 2 or shape[-1] != shape[-2]:
        return False
    if any(d != 1 for d in shape[:-2]) and len(shape) != 4:
        return False
    rank = len(shape)
    idx = tuple(Lin.of({}, 0) if d == 1 else Lin.of({a: 1}, 0) for a, d in enumerate(shape))
    try:
        value = _Evaluator(matcher).element(mask, idx, 0)
    except NotProven:
        return False
    q, k = rank - 2, rank - 1
    expected = Lin.of({q: 1, k: -1}, 1) if negated else Lin.of({k: 1, q: -1}, 0)
    return value == Conj(frozenset({("le", expected)}))


def _affine(arr: np.ndarray) -> tuple[int, list[int]] | None:
    """`(c, [c_0, c_1, ...])` when `arr[i0, i1, ...] == c + sum(c_a * i_a)` exactly."""
    if arr.size == 0:
        return None
    ints = arr.astype(np.int64)
    const = int(ints.reshape(-1)[0])
    coefs: list[int] = []
    for axis, extent in enumerate(ints.shape):
        at = [0] * ints.ndim
        if extent > 1:
            at[axis] = 1
            coefs.append(int(ints[tuple(at)]) - const)
        else:
            coefs.append(0)
    grid = np.full(ints.shape, const, dtype=np.int64)
    for axis, c in enumerate(coefs):
        shape = [1] * ints.ndim
        shape[axis] = ints.shape[axis]
        grid = grid + c * np.arange(ints.shape[axis], dtype=np.int64).reshape(shape)
    return (const, coefs) if np.array_equal(grid, ints) else None


def _shape(graph: Graph, name: str) -> tuple[object, ...] | None:
    info = graph.value_info.get(name)
    if info is not None and info.shape is not None:
        return tuple(info.shape)
    arr = graph.constants.get(name)
    if arr is None:
        arr = graph.initializers.get(name)
    return None if arr is None else tuple(int(s) for s in arr.shape)


class _Evaluator:
    def __init__(self, matcher: Matcher) -> None:
        self.m = matcher
        self.graph = matcher.graph

    def element(self, name: str, idx: tuple[Lin, ...], depth: int) -> Element:
        """The element of `name` at index `idx` (one `Lin` per axis)."""
        if depth > _DEPTH:
            raise NotProven("too deep")
        arr = self._constant(name)
        if arr is not None:
            return self._constant_element(arr, idx)
        node = self.m.producers.get(name)
        if node is None or node.domain not in ("", "linnet"):
            raise NotProven(f"`{name}` is not computed from shapes")
        info = self.graph.value_info.get(name)
        if info is None or info.dtype not in INT_DTYPES:
            raise NotProven("not an integer or boolean value")
        prefix = "_op_" if node.domain == "" else "_linnet_"
        handler = getattr(self, f"{prefix}{node.op}", None)
        if handler is None:
            raise NotProven(f"`{node.op}` is not modelled")
        result: Element = handler(node, idx, depth + 1)
        return result

    # -- leaves --------------------------------------------------------------

    def _constant(self, name: str) -> np.ndarray | None:
        if name in self.graph.constants:
            return self.graph.constants[name]
        if name in self.graph.initializers and name not in self.graph.paths:
            return self.graph.initializers[name]
        return self.m.constant(name)

    def _constant_element(self, arr: np.ndarray, idx: tuple[Lin, ...]) -> Element:
        flat = np.asarray(arr).reshape(-1)
        if flat.size == 0 or arr.dtype.kind not in "biu":
            raise NotProven("not an integer or boolean constant")
        if np.all(flat == flat[0]):
            v = flat[0]
            return (TRUE if bool(v) else FALSE) if arr.dtype.kind == "b" else Lin.of({}, int(v))
        affine = _affine(arr) if arr.dtype.kind in "iu" and arr.ndim == len(idx) else None
        if affine is not None:  # a range along some axes (a batch index `arange(B)[:, None]`)
            const, coefs = affine
            value = Lin.of({}, const)
            for axis, c in enumerate(coefs):
                value = value + idx[axis].scaled(c)
            return value
        # A lower-triangular buffer (a registered `tril` mask) over the last two axes.
        if arr.ndim >= 2 and arr.dtype.kind == "b" and len(idx) >= 2:
            rows, cols = arr.shape[-2:]
            tril = np.tril(np.ones((rows, cols), dtype=bool))
            if np.all(arr.reshape(-1, rows, cols) == tril):
                return _atom("le", idx[-1] + idx[-2].scaled(-1))
        raise NotProven("a constant that is not uniform")

    def _linnet_index(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        """`x[:, ..., i0, i1, ..., :]` (`linnet::index`, `emit.advanced_index`): index
        tensors over the consecutive axes from `first` on, broadcast together."""
        x, tensors = node.inputs[0], node.inputs[1:]
        first = int(node.attrs.get("first", 0))
        shapes = [_shape(self.graph, t) for t in tensors]
        xshape = _shape(self.graph, x)
        if xshape is None or not tensors or any(s is None for s in shapes):
            raise NotProven("unknown shapes")
        wide = max(len(s or ()) for s in shapes)
        if len(idx) != len(xshape) - len(tensors) + wide:
            raise NotProven("unknown shapes")
        mid = idx[first : first + wide]
        at: list[Lin] = []
        for t, shape in zip(tensors, shapes, strict=True):
            assert shape is not None
            offset = wide - len(shape)
            own = tuple(Lin.of({}, 0) if d == 1 else mid[offset + a] for a, d in enumerate(shape))
            e = self.element(t, own, depth)
            if not isinstance(e, Lin) or e.const < 0 or any(k < 0 for _, k in e.coefs):
                raise NotProven("an index that may be negative")
            at.append(e)
        return self.element(x, (*idx[:first], *at, *idx[first + wide :]), depth)

    def _ints(self, node: Node, i: int, attr: str | None = None) -> list[int] | None:
        if attr is not None and attr in node.attrs:
            return [int(a) for a in node.attrs[attr]]
        if i >= len(node.inputs) or not node.inputs[i]:
            return None
        arr = self._constant(node.inputs[i])
        if arr is None:
            raise NotProven("a runtime operand where a constant is needed")
        return [int(a) for a in np.asarray(arr).reshape(-1)]

    def _broadcast(self, operand: str, out: str, idx: tuple[Lin, ...]) -> tuple[Lin, ...]:
        """`idx` of `out` as an index of `operand`, broadcast NumPy-style."""
        src, dst = _shape(self.graph, operand), _shape(self.graph, out)
        if src is None or dst is None or len(src) > len(dst) or len(dst) != len(idx):
            raise NotProven("unknown shapes")
        lead = len(dst) - len(src)
        mapped: list[Lin] = []
        for j, d in enumerate(src):
            if d == 1:
                mapped.append(Lin.of({}, 0))
            elif d == dst[lead + j] and d is not None:
                mapped.append(idx[lead + j])
            else:
                raise NotProven("a broadcast the shapes do not show")
        return tuple(mapped)

    def _operands(self, node: Node, idx: tuple[Lin, ...], depth: int) -> list[Element]:
        out = node.outputs[0]
        return [self.element(i, self._broadcast(i, out, idx), depth) for i in node.inputs]

    # -- operators -------------------------------------------------------------

    def _op_Identity(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        return self.element(node.inputs[0], idx, depth)

    def _op_Reshape(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        # Only a reshape that adds or drops unit axes (`[S]` -> `[S, 1]`): the
        # other axes keep their order and indices.
        src, dst = _shape(self.graph, node.inputs[0]), _shape(self.graph, node.outputs[0])
        if src is None or dst is None or len(dst) != len(idx):
            raise NotProven("unknown shapes")
        kept = [i for i, d in enumerate(dst) if d != 1]
        if [d for d in src if d != 1] != [dst[i] for i in kept]:
            raise NotProven("a reshape that moves elements")
        inner = iter(idx[i] for i in kept)
        mapped = tuple(Lin.of({}, 0) if d == 1 else next(inner) for d in src)
        return self.element(node.inputs[0], mapped, depth)

    def _op_Range(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        start = self._ints(node, 0)
        delta = self._ints(node, 2)
        if start is None or delta is None or len(start) != 1 or len(delta) != 1:
            raise NotProven("a range with runtime start or step")
        return idx[0].scaled(delta[0]) + Lin.of({}, start[0])

    def _op_Unsqueeze(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        axes = self._ints(node, 1, "axes") or []
        rank = len(idx)
        drop = {a + rank if a < 0 else a for a in axes}
        return self.element(
            node.inputs[0], tuple(x for a, x in enumerate(idx) if a not in drop), depth
        )

    def _op_Expand(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        x = node.inputs[0]
        return self.element(x, self._broadcast(x, node.outputs[0], idx), depth)

    def _op_Slice(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        starts, axes, steps = self._ints(node, 1), self._ints(node, 3), self._ints(node, 4)
        if starts is None or (steps is not None and any(s != 1 for s in steps)):
            raise NotProven("a slice with runtime starts or steps")
        axes = list(range(len(starts))) if axes is None else axes
        shifted = list(idx)
        for a, s in zip(axes, starts, strict=True):
            if s < 0:
                raise NotProven("a slice from the end")
            a = a + len(idx) if a < 0 else a
            shifted[a] = shifted[a] + Lin.of({}, s)
        return self.element(node.inputs[0], tuple(shifted), depth)

    def _op_Concat(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        axis = int(node.attrs.get("axis", 0))
        axis = axis + len(idx) if axis < 0 else axis
        at = idx[axis]
        pieces: list[tuple[Element, object, int]] = []  # (formula, extent, offset)
        offset = 0
        for i, part in enumerate(node.inputs):
            shape = _shape(self.graph, part)
            extent = None if shape is None else shape[axis]
            shifted = list(idx)
            shifted[axis] = at + Lin.of({}, -offset)
            if at.is_const:
                if isinstance(extent, int) and offset <= at.const < offset + extent:
                    return self.element(part, tuple(shifted), depth)
            else:
                pieces.append((self.element(part, tuple(shifted), depth), extent, offset))
            if not isinstance(extent, int):
                if i != len(node.inputs) - 1:
                    raise NotProven("a concatenated piece of runtime extent")
                break
            offset += extent
        return _agree(pieces, at)

    def _op_GatherND(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        if int(node.attrs.get("batch_dims", 0)) != 0:
            raise NotProven("GatherND with batch dimensions")
        data, indices = node.inputs[0], node.inputs[1]
        ishape = _shape(self.graph, indices)
        if ishape is None or not isinstance(ishape[-1], int):
            raise NotProven("unknown index depth")
        outer, depth_m = len(ishape) - 1, ishape[-1]
        at: list[Lin] = []
        for c in range(depth_m):
            e = self.element(indices, (*idx[:outer], Lin.of({}, c)), depth)
            # Indices are non-negative exactly when every term is (no wrap-around).
            if not isinstance(e, Lin) or e.const < 0 or any(k < 0 for _, k in e.coefs):
                raise NotProven("a gather index that may be negative")
            at.append(e)
        return self.element(data, (*at, *idx[outer:]), depth)

    def _op_Cast(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        inner = self.element(node.inputs[0], idx, depth)
        info = self.graph.value_info.get(node.outputs[0])
        if info is None or info.dtype in (None, "bool"):
            if isinstance(inner, Conj):
                return inner
            raise NotProven("an integer cast to boolean")
        if isinstance(inner, Conj):
            if inner in (TRUE, FALSE):
                return Lin.of({}, 0 if inner.false else 1)
            raise NotProven("a comparison cast to an integer")
        return inner

    def _op_Add(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        a, b = self._lins(node, idx, depth)
        return a + b

    def _op_Sub(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        a, b = self._lins(node, idx, depth)
        return a + b.scaled(-1)

    def _op_Equal(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        a, b = self._lins(node, idx, depth)
        return _atom("eq", a + b.scaled(-1))

    def _op_LessOrEqual(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        a, b = self._lins(node, idx, depth)
        return _atom("le", a + b.scaled(-1))

    def _op_Less(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        a, b = self._lins(node, idx, depth)
        return _atom("le", a + b.scaled(-1) + Lin.of({}, 1))

    def _op_GreaterOrEqual(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        a, b = self._lins(node, idx, depth)
        return _atom("le", b + a.scaled(-1))

    def _op_Greater(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        a, b = self._lins(node, idx, depth)
        return _atom("le", b + a.scaled(-1) + Lin.of({}, 1))

    def _op_And(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        a, b = self._conjs(node, idx, depth)
        return _and(a, b)

    def _op_Not(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        (a,) = self._conjs(node, idx, depth)
        if a == TRUE or a.false:
            return FALSE if a == TRUE else TRUE
        if len(a.atoms) == 1:
            ((kind, lin),) = a.atoms
            if kind == "le":  # not (lin <= 0)  <=>  -lin + 1 <= 0 over the integers
                return _atom("le", lin.scaled(-1) + Lin.of({}, 1))
        raise NotProven("the negation of a compound condition")

    def _op_Where(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        out = node.outputs[0]
        cond = self.element(node.inputs[0], self._broadcast(node.inputs[0], out, idx), depth)
        if not isinstance(cond, Conj) or not (cond == TRUE or cond.false):
            raise NotProven("a selection on a runtime condition")
        pick = node.inputs[2] if cond.false else node.inputs[1]
        return self.element(pick, self._broadcast(pick, out, idx), depth)

    def _op_CumSum(self, node: Node, idx: tuple[Lin, ...], depth: int) -> Element:
        if int(node.attrs.get("exclusive", 0)) or int(node.attrs.get("reverse", 0)):
            raise NotProven("an exclusive or reversed running sum")
        # A running sum of zeros is zero; nothing else is modelled.
        inner = self.element(node.inputs[0], idx, depth)
        if inner != Lin.of({}, 0):
            raise NotProven("a running sum of non-zero values")
        return inner

    def _lins(self, node: Node, idx: tuple[Lin, ...], depth: int) -> list[Lin]:
        values = self._operands(node, idx, depth)
        if not all(isinstance(v, Lin) for v in values):
            raise NotProven("arithmetic on a condition")
        return [v for v in values if isinstance(v, Lin)]

    def _conjs(self, node: Node, idx: tuple[Lin, ...], depth: int) -> list[Conj]:
        values = self._operands(node, idx, depth)
        if not all(isinstance(v, Conj) for v in values):
            raise NotProven("logic on an integer")
        return [v for v in values if isinstance(v, Conj)]
