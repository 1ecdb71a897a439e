"""`op` call regions lowered once per signature and cloned for every later call.

Stage: lowering (`calls._op_call`). A model calls the same `op` many times
with the same argument types: `linear` 7 times in each of 22 Llama layers,
`rms_norm` twice per layer. The region of an `op` call (its canonical body,
section 19) is a function of the callee, its concrete generics (the frame's
`Env`), its block instance, and the structure and types of its arguments:
lowering it again for the next layer builds the very same ops. So the first
lowering is kept and every later call with the same signature gets a clone
(fresh values, the same ops), which costs a fraction of lowering the body
again (no checker lookups, no type inference per op).

A kept region is optimised once, on its own, and marked `settled`: the passes
skip it in every clone (`ir.core.Region`). Only closed regions are kept: a body that reads a value from outside its
region (a param or state read, which lowering places before the function
body) depends on more than the signature and is lowered every time. The
cache lives as long as one `Lowerer` (one entry at one set of sizes).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from linnet.check.decls import EnumVariant
from linnet.ir.core import Op, Region, Value
from linnet.ir.lower.values import LV, Opt, ShapeLV
from linnet.ir.regions import region_free_values

if TYPE_CHECKING:
    from linnet.ir.lower.context import Frame


def signature_key(frame: Frame, params: tuple[LV, ...]) -> Hashable:
    """What an `op` call region depends on: callee, generics, instance, argument structure."""
    env = frame.env
    return (
        frame.fn,
        frame.instance,
        tuple(_lv_key(p) for p in params),
        frozenset(env.dims.items()),
        frozenset(env.packs.items()),
        frozenset(env.dtypes.items()),
    )


def _lv_key(lv: LV) -> Hashable:
    if isinstance(lv, Value):
        return ("value", lv.type)
    if isinstance(lv, tuple):
        return ("tuple", tuple(_lv_key(x) for x in lv))
    if isinstance(lv, Opt):
        return ("opt", None if lv.value is None else _lv_key(lv.value))
    if isinstance(lv, ShapeLV):
        return ("shape", lv.dims)
    if isinstance(lv, EnumVariant):
        return ("variant", id(lv.enum), lv.name)
    if isinstance(lv, bool | int | float):
        return (type(lv).__name__, lv)
    return ("object", id(lv))  # blocks, arrays of blocks, modules: by identity


class RegionCache:
    """Closed `op` call regions by signature, with the LV their body returned."""

    def __init__(self) -> None:
        self._found: dict[Hashable, tuple[Region, LV]] = {}
        self.hits = 0

    def get(self, key: Hashable) -> tuple[Region, LV] | None:
        """A fresh clone of the region kept for `key` and its result LV, or None."""
        found = self._found.get(key)
        if found is None:
            return None
        self.hits += 1
        region, result = found
        return clone_region(region, {}), result

    def put(self, key: Hashable, region: Region, result: LV) -> Region:
        """The region to use for this call: `region` itself when it reads something from
        outside (not kept), else `region` optimised and `settled`, kept for `key`."""
        if region_free_values(region):
            return region
        settled = _settle(region)
        self._found[key] = (settled, result)
        return settled


def _settle(region: Region) -> Region:
    """A closed region brought to the passes' fixed point on its own, marked `settled`.

    On its own is the same as in place: the body of a `call` is a barrier to CSE,
    and a closed region has no operand that folding, simplification or dead code
    elimination could see from outside, so running `optimize` on the whole function
    later would leave it as it is (and now skips it).
    """
    from linnet.ir.core import Function
    from linnet.ir.passes import optimize

    inputs = tuple(("", a) for a in region.args)
    body = optimize(Function("op", inputs, region, region.results, {})).body
    return Region(body.args, body.ops, body.results, settled=True)


def clone_region(region: Region, mapping: dict[Value, Value]) -> Region:
    """`region` with fresh values (same types and names) and fresh ops; `mapping` maps the
    old values to the new (values of enclosing regions not in it are read as they are)."""
    get = mapping.get
    args = []
    for v in region.args:
        new = mapping[v] = Value(v.type, v.name)
        args.append(new)
    ops = []
    for op in region.ops:
        regions = tuple([clone_region(r, mapping) for r in op.regions]) if op.regions else ()
        made = []
        for v in op.results:
            new = mapping[v] = Value(v.type, v.name)
            made.append(new)
        operands = tuple([get(v, v) for v in op.operands])
        ops.append(Op(op.kind, operands, tuple(made), dict(op.attrs), regions))
    results = tuple([get(v, v) for v in region.results])
    return Region(tuple(args), ops, results, settled=region.settled)
