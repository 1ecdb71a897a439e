"""Which integer entry inputs index which extents: the ranges every backend checks.

Stage: between lowering and the backends' entry boundary (`linnet.ir.inputs`).
In: a lowered, optimised `Function` and, where there is one, the `BoundModel`
it came from. Out: an `InputRange` per integer input that is used as an
index, with the values it may hold and why.

Why: an out-of-range runtime index is backend-defined (language.md 9.2), and
the backends do differ: PyTorch raises an `IndexError` from deep inside a
kernel, ONNX Runtime reads the last row for `-1` and fails in `Gather` for
others, and the KV-cache writes of `std.nn.cache` drop a write outside the
cache silently everywhere. Checking the inputs once, on the host, before
anything runs, gives one message on every backend.

What counts as an index (the Core IR after lowering; calls are followed into
their bodies, `while` and `if` regions are not, since they may guard the use):

- `gather x, idx {axis}`: every element of `idx` is in `0 .. x.shape[axis] - 1`;
- `take x, idx_0, ..., idx_r`: every element of `idx_k` is in `0 .. x.shape[k] - 1`;
- a `call` of a cache write of `std.nn.cache` (stdlib.md 10) into a `state`
  member: `write_at` needs `at` in `0 .. S - 1`; `write_span`, `write_slot`
  and `write_slots` write `N` positions from `at`, so `at` is in `0 .. S - N`
  (`start + N <= S`). The canonical bodies clip a write that leaves the cache
  (and so index nothing themselves): into a state that loses a token for every
  later call without a sign, so the boundary refuses it. A write into a cache
  the caller passed in and gets back keeps stdlib's clipping, unchecked.
  Per-row indices are not checked: `write_rows`' positions and the `slot` /
  `slots` of `write_slot(s)` name one row each, and a row index outside the
  cache is how a batching engine leaves an idle row untouched (stdlib: "rows
  not listed are unchanged"; `linnet.serve` marks padding rows with -1).

An index may be an input after value-preserving ops (`reshape`, `broadcast`,
`permute`, widening integer `cast`) and the addition or subtraction of
constants and `iota`s: `iota(S) + start` holds `start + 0 .. start + S - 1`.
The derived range is exact: it refuses a value only when some index then
really falls outside its extent. Where it cannot be exact (an input tensor
plus a range of offsets, two inputs added, `min`/`max` clamps, slices,
products) the use is not checked at all rather than guessed. The arithmetic
is taken over the integers: an offset that wraps the input's dtype is not
modelled (the wrapped value would be a nonsense index anyway).

An extent is named by the generic it comes from when the indexed tensor is a
param, buffer or state member whose declared shape names one there
(`Tensor[Batch, KvHeads, MaxSeq, D; T]` -> `MaxSeq`), else by its number.
"""

from __future__ import annotations

from collections.abc import Iterator

from linnet.check.dims import Dim
from linnet.check.types import OptionalType
from linnet.check.types import TensorType as CheckedTensor
from linnet.ir.bind import BlockInstance, BoundModel
from linnet.ir.core import INTEGER_DTYPES, Function, Op, Region, Value, numpy_dtype
from linnet.records import record

CACHE_WRITES = {
    # callee: (index of `at`, index of the row operand or None)
    "std.nn.cache::write_at": (2, None),
    "std.nn.cache::write_span": (2, None),
    "std.nn.cache::write_slot": (3, None),
    "std.nn.cache::write_slots": (3, None),
}
"""The cache writes of stdlib.md 10, by callee: the operand positions of `at` and the row."""


def integer_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype."""
    import numpy as np

    info = np.iinfo(numpy_dtype(dtype))
    return int(info.min), int(info.max)


@record(frozen=True)
class Bound:
    """One side of an input's range, with the reason it holds (a clause for a message)."""

    value: int
    reason: str


@record(frozen=True)
class InputRange:
    """The values entry input number `index` (`name`) may hold: `low.value .. high.value`."""

    index: int
    name: str
    low: Bound
    high: Bound


@record(frozen=True)
class _Term:
    """What an integer value holds: `input + offset`, offset in `low..high` (`input` None:
    just the offsets). Every offset in the range occurs; a range of several offsets is
    only kept on a scalar input, so the extremes are exact."""

    input: int | None
    low: int
    high: int


@record(frozen=True)
class _Use:
    """An input indexing an extent: it must satisfy `input + low >= 0` and
    `input + high <= last`."""

    term: _Term
    last: int
    reason: str


def index_ranges(fn: Function, model: BoundModel | None = None) -> tuple[InputRange, ...]:
    """The range of every integer input of `fn` used as an index (see the module docstring)."""
    walker = _Walker(fn, model)
    walker.region(fn.body)
    ranges: dict[int, InputRange] = {}
    for use in walker.uses:
        index = use.term.input
        assert index is not None
        low = Bound(-use.term.low, use.reason)
        high = Bound(use.last - use.term.high, use.reason)
        found = ranges.get(index)
        if found is not None:
            low = found.low if found.low.value >= low.value else low
            high = found.high if found.high.value <= high.value else high
        ranges[index] = InputRange(index, fn.inputs[index][0], low, high)
    return tuple(ranges[i] for i in sorted(ranges))


class _Walker:
    """Follows values from the inputs through straight-line code and calls."""

    def __init__(self, fn: Function, model: BoundModel | None) -> None:
        self.fn = fn
        self.model = model
        self.terms: dict[Value, _Term] = {}
        self.origins: dict[Value, str] = {}  # what a value is, for messages
        self.states: set[Value] = set()  # the values of state members
        self.uses: list[_Use] = []
        for number, (name, value) in enumerate(fn.inputs):
            self.origins[value] = f"input `{name}`"
            if value.type.dtype in INTEGER_DTYPES:
                self.terms[value] = _Term(number, 0, 0)

    def region(self, region: Region) -> None:
        for op in region.ops:
            self.op(op)

    def op(self, op: Op) -> None:
        if op.kind in ("param", "buffer", "state"):
            self.origins[op.result] = f"`{op.attrs['path']}`"
            if op.kind == "state":
                self.states.add(op.result)
        elif op.kind == "call":
            self.call(op)
        elif op.kind == "gather":
            x, idx = op.operands
            self.index(idx, x, int(str(op.attrs["axis"])))
        elif op.kind == "take":
            x, *indices = op.operands
            for axis, idx in enumerate(indices):
                self.index(idx, x, axis)
        if op.kind != "call" and len(op.results) == 1:
            term = self.term(op)
            if term is not None:
                self.terms[op.result] = term

    def call(self, op: Op) -> None:
        callee = str(op.attrs.get("callee", ""))
        write = CACHE_WRITES.get(callee)
        if write is not None:
            self.cache_write(op, *write)
            return
        if not op.regions:
            return
        body = op.regions[0]  # not the gradient clause
        for arg, operand in zip(body.args, op.operands, strict=True):
            if operand in self.terms:
                self.terms[arg] = self.terms[operand]
            if operand in self.origins:
                self.origins[arg] = self.origins[operand]
            if operand in self.states:
                self.states.add(arg)
        self.region(body)
        for result, value in zip(op.results, body.results, strict=True):
            if value in self.terms:
                self.terms[result] = self.terms[value]
            if value in self.origins:
                self.origins[result] = self.origins[value]

    # -- uses ------------------------------------------------------------------------------

    def index(self, idx: Value, x: Value, axis: int) -> None:
        extent = x.type.shape[axis]
        described = f"it indexes axis {axis} of {self.origins.get(x, 'a tensor')}, of length "
        described += self.extent(x, axis, extent)
        self.use(idx, extent - 1, described)

    def cache_write(self, op: Op, at_index: int, row_index: int | None) -> None:
        cache, value = op.operands[0], op.operands[1]
        if cache not in self.states or cache.type.rank != 4 or value.type.rank != 4:
            return
        size, count = cache.type.shape[2], value.type.shape[2]
        positions = f"the cache holds {self.extent(cache, 2, size)} positions"
        if count > 1:
            positions = f"{count} positions are written from it and {positions}"
        self.use(op.operands[at_index], size - count, positions)
        if row_index is not None:
            batch = cache.type.shape[0]
            rows = f"the cache has {self.extent(cache, 0, batch)} rows"
            self.use(op.operands[row_index], batch - 1, rows)

    def use(self, idx: Value, last: int, reason: str) -> None:
        term = self.terms.get(idx)
        if term is None or term.input is None or idx.type.size == 0:
            return
        self.uses.append(_Use(term, last, reason))

    def extent(self, x: Value, axis: int, size: int) -> str:
        """`MaxSeq` = 8 when a member's declared shape names the extent, else 8."""
        origin = self.origins.get(x, "")
        if self.model is not None and origin.startswith("`"):
            name = declared_dim(self.model, origin.strip("`"), axis)
            if name is not None:
                return f"`{name}` = {size}"
        return str(size)

    # -- what values hold ------------------------------------------------------------------

    def term(self, op: Op) -> _Term | None:
        result = op.result
        if result.type.dtype not in INTEGER_DTYPES:
            return None
        if op.kind == "const":
            array = op.attrs["value"]
            size = getattr(array, "size", 0)
            if not size:
                return None
            return _Term(None, int(array.min()), int(array.max()))  # type: ignore[attr-defined]
        if op.kind == "iota":
            return _Term(None, 0, result.type.shape[0] - 1) if result.type.size else None
        operands = [self.terms.get(v) for v in op.operands]
        if op.kind in ("reshape", "broadcast", "permute"):
            return operands[0]
        if op.kind == "cast":
            source = op.operands[0].type.dtype
            if source not in INTEGER_DTYPES:
                return None
            low, high = integer_range(source)
            new_low, new_high = integer_range(result.type.dtype)
            return operands[0] if new_low <= low and high <= new_high else None
        if op.kind in ("add", "sub") and len(operands) == 2:
            a, b = operands
            if a is None or b is None:
                return None
            if op.kind == "sub":
                if b.input is not None:
                    return None
                b = _Term(None, -b.high, -b.low)
            return self.sum(a, b)
        return None

    def sum(self, a: _Term, b: _Term) -> _Term | None:
        if a.input is not None and b.input is not None:
            return None
        if a.low != a.high and b.low != b.high:
            return None  # the extremes of a sum of two ranges need not occur
        total = _Term(a.input if a.input is not None else b.input, a.low + b.low, a.high + b.high)
        index = total.input
        if index is not None and total.low != total.high and self.fn.inputs[index][1].type.rank:
            return None  # an input tensor plus several offsets: not every pair occurs
        return total


def declared_dim(model: BoundModel, path: str, axis: int) -> str | None:
    """The declared extent of `axis` of the member at `path`, as source text, when it is
    not a literal (`MaxSeq`, `H / Heads`); None otherwise."""
    *parents, leaf = path.split(".")
    instance = _instance(model.root, iter(parents))
    if instance is None:
        return None
    member = instance.info.members.get(leaf)
    t = None if member is None else member.type
    if isinstance(t, OptionalType):
        t = t.inner
    if not isinstance(t, CheckedTensor) or axis >= len(t.shape):
        return None
    dims = t.shape
    if not all(isinstance(d, Dim) for d in dims):
        return None  # a pack shifts the axes
    dim = dims[axis]
    return str(dim) if isinstance(dim, Dim) and dim.symbols() else None


def _instance(node: BlockInstance, segments: Iterator[str]) -> BlockInstance | None:
    for segment in segments:
        sub = node.subs.get(segment)
        if isinstance(sub, list):
            position = next(segments, None)
            if position is None or not position.isdigit() or int(position) >= len(sub):
                return None
            sub = sub[int(position)]
        if sub is None:
            return None
        node = sub
    return node
