"""Lowerings reused: `op` call regions and inlined method bodies, cloned for later calls.

Stage: lowering (`calls.lower_call`, `calls._op_call`). A model calls the same
`op` many times with the same argument types: `linear` 7 times in each of 22
Llama layers, `rms_norm` twice per layer. The region of an `op` call (its
canonical body, section 19) is a function of the callee, its concrete
generics (the frame's `Env`), its block instance, and the structure and types
of its arguments: lowering it again for the next layer builds the very same
ops. So the first lowering is kept (`RegionCache`) and every later call with
the same signature gets a clone (fresh values, the same ops), which costs a
fraction of lowering the body again (no checker lookups, no type inference).

A kept region is optimised once, on its own, and marked `settled`: the passes
skip it in every clone (`ir.core.Region`). Only closed regions are kept: a
body that reads a value from outside its region (a param or state read, which
lowering places before the function body) is lowered every time.

Method bodies (`layer.forward`) read their instance's weights and write its
state, so they are kept relative to the instance instead (`InlineCache`) and
replayed for another instance of the same shape. Both caches live as long as
one `Lowerer` (one entry at one set of sizes); `tests/ir/test_lower_reuse.py`
checks that a lowering with them prints the same optimised IR as one without.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING

from linnet.check.decls import EnumVariant
from linnet.errors import InternalError
from linnet.ir.core import Op, Region, Value
from linnet.ir.lower.values import LV, Opt, ShapeLV
from linnet.ir.regions import free_values, region_free_values
from linnet.ir.size_decisions import Decision, mark, replay, since
from linnet.ir.traced import dim_of, has_trace, tracing_now
from linnet.records import record

if TYPE_CHECKING:
    from linnet.ir.bind import BlockInstance
    from linnet.ir.lower.context import Frame, Lowerer


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
        _traces(frame, params),
    )


def _traces(frame: Frame, params: tuple[LV, ...]) -> Hashable:
    """While a dynamic export traces its sizes (`linnet.ir.traced`), the polynomial of every
    size the key holds: a traced `S` that is 5 at the sample is no plain 5 (None otherwise)."""
    if not tracing_now():
        return None
    ints: list[int] = [*frame.env.dims.values()]
    for pack in frame.env.packs.values():
        ints.extend(pack)
    _sizes(params, ints)
    return tuple(dim_of(d) if has_trace(d) else None for d in ints)


def _sizes(lvs: tuple[LV, ...], out: list[int]) -> None:
    for lv in lvs:
        if isinstance(lv, Value):
            out.extend(lv.type.shape)
        elif isinstance(lv, tuple):
            _sizes(lv, out)
        elif isinstance(lv, Opt) and lv.value is not None:
            _sizes((lv.value,), out)
        elif isinstance(lv, ShapeLV):
            out.extend(d for d in lv.dims if isinstance(d, int))


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
        self._noted: dict[Hashable, tuple[Decision, ...]] = {}
        self.hits = 0

    def get(self, key: Hashable) -> tuple[Region, LV] | None:
        """A fresh clone of the region kept for `key` and its result LV, or None."""
        found = self._found.get(key)
        if found is None:
            return None
        self.hits += 1
        region, result = found
        replay(self._noted.get(key, ()))
        return clone_region(region, {}), result

    def put(self, key: Hashable, region: Region, result: LV) -> Region:
        """The region to use for this call: `region` itself when it reads something from
        outside (not kept), else `region` optimised and `settled`, kept for `key`."""
        if region_free_values(region):
            return region
        settled = _settle(region)
        self._found[key] = (settled, result)
        return settled

    def keep_noted(self, key: Hashable, noted_from: int) -> None:
        """Keep the size decisions noted since `noted_from` (`size_decisions.mark`, before
        the region was lowered; `put` settling it notes the folded ones) for its clones."""
        if key in self._found:
            self._noted[key] = since(noted_from)


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
    args = []
    for v in region.args:
        new = mapping[v] = Value(v.type, v.name)
        args.append(new)
    ops = clone_ops(region.ops, mapping)
    results = tuple([mapping.get(v, v) for v in region.results])
    return Region(tuple(args), ops, results, settled=region.settled)


def clone_ops(ops: list[Op], mapping: dict[Value, Value]) -> list[Op]:
    """Fresh copies of `ops` (see `clone_region`), their results added to `mapping`."""
    get = mapping.get
    out: list[Op] = []
    append = out.append
    for op in ops:
        regions = tuple([clone_region(r, mapping) for r in op.regions]) if op.regions else ()
        results = op.results
        if len(results) == 1:  # most ops: no list to build
            v = results[0]
            new = mapping[v] = Value(v.type, v.name)
            made: tuple[Value, ...] = (new,)
        else:
            made = tuple([_fresh(v, mapping) for v in results])
        operands = tuple([get(v, v) for v in op.operands])
        append(Op(op.kind, operands, made, dict(op.attrs), regions))
    return out


def _fresh(v: Value, mapping: dict[Value, Value]) -> Value:
    new = mapping[v] = Value(v.type, v.name)
    return new


# -- inlined method bodies -------------------------------------------------------------------


@record(eq=False)
class Inlined:
    """One method body as inlined once: its ops, and how to rebind what they read.

    `free` are the values the ops read from outside, each with where it came
    from (`sources`: ("arg", index) into the flattened arguments, or
    ("read", relative path) for a member read); `reads` the relative paths it
    read first, in order; `writes` the state it assigned (relative path, value).
    """

    ops: list[Op]
    free: tuple[Value, ...]
    sources: tuple[tuple[str, int | str], ...]
    reads: tuple[str, ...]
    writes: tuple[tuple[str, Value], ...]
    result: LV


class InlineCache:
    """Inlined method bodies by signature, replayed for other instances of the same shape.

    A stack of Llama layers inlines `layer.forward` once per layer: the same
    ops each time but for the paths of the weights and cache it reads and
    writes. The body as inlined for one instance is kept with its reads and
    writes relative to the instance, and replayed for another instance whose
    members have the same kinds, types and presence (`_shape`), called with
    the same generics and argument types: its member reads and state
    assignments go through the `Lowerer` as the body's own would (same order),
    and its ops are cloned over them. A body that reads any other outside value
    or returns anything but tensors is lowered every time.
    """

    def __init__(self) -> None:
        self._found: dict[Hashable, Inlined | None] = {}
        self._noted: dict[Hashable, tuple[Decision, ...]] = {}
        self._shapes: dict[BlockInstance, Hashable] = {}
        self._under: dict[str, list[str]] | None = None
        self.hits = 0

    def key(self, lw: Lowerer, frame: Frame, params: tuple[LV, ...]) -> Hashable | None:
        instance = frame.instance
        if instance is None or not instance.path:
            return None
        env = frame.env
        return (
            frame.fn,
            instance.info,
            tuple(_lv_key(p) for p in params),
            frozenset(env.dims.items()),
            frozenset(env.packs.items()),
            frozenset(env.dtypes.items()),
            self._shape(lw, instance),
            _traces(frame, params),
        )

    def _shape(self, lw: Lowerer, instance: BlockInstance) -> Hashable:
        """The kinds, types and presence of every tensor and optional child under `instance`."""
        found = self._shapes.get(instance)
        if found is None:
            bound = lw.bound
            assert bound is not None
            if self._under is None:
                self._under = {}
                for path in [*bound.tensors, *bound.optional_subs]:
                    parts = path.split(".")
                    for n in range(1, len(parts)):
                        self._under.setdefault(".".join(parts[:n]) + ".", []).append(path)
            prefix = instance.dotted + "."
            cut = len(prefix)
            items: list[Hashable] = []
            for path in self._under.get(prefix, []):
                t = bound.tensors.get(path)
                if t is None:
                    items.append((path[cut:], "sub", bound.sub_present(path, lw.present)))
                else:
                    live = bound.tensor_live(path, lw.present)
                    items.append((path[cut:], t.kind, t.type, t.optional, live))
            found = self._shapes[instance] = tuple(items)
        return found

    def lower(self, lw: Lowerer, frame: Frame, params: tuple[LV, ...], run: Run) -> LV:
        """`run()` (the body inlined), or a replay of the body kept for this signature."""
        key = self.key(lw, frame, params)
        if key is None:
            return run()
        if key in self._found:
            kept = self._found[key]
            if kept is not None:
                self.hits += 1
                replay(self._noted.get(key, ()))
                return self._replay(lw, frame, params, kept)
            return run()
        builder, start, first_read = lw.b, len(lw.b.ops), len(lw.prefix.ops)
        before = dict(lw.state_values)
        noted_from = mark()
        result = run()
        if lw.b is not builder:
            raise InternalError("an inlined body left another builder current")
        self._found[key] = _kept(lw, frame, params, builder.ops[start:], first_read, before, result)
        self._noted[key] = since(noted_from)
        return result

    def _replay(self, lw: Lowerer, frame: Frame, params: tuple[LV, ...], kept: Inlined) -> LV:
        instance = frame.instance
        assert instance is not None
        prefix = instance.dotted + "."
        for rel in kept.reads:
            lw.read_state(prefix + rel)
        args = _values(params)
        mapping: dict[Value, Value] = {}
        for old, (kind, where) in zip(kept.free, kept.sources, strict=True):
            if kind == "arg":
                assert isinstance(where, int)
                mapping[old] = args[where]
            else:
                mapping[old] = lw.read_state(prefix + str(where))
        lw.b.ops.extend(clone_ops(kept.ops, mapping))
        for rel, value in kept.writes:
            lw.write_state(prefix + rel, mapping[value])
        return _rebind(kept.result, mapping)


Run = Callable[[], LV]


def _kept(
    lw: Lowerer,
    frame: Frame,
    params: tuple[LV, ...],
    ops: list[Op],
    first_read: int,
    before: dict[str, Value],
    result: LV,
) -> Inlined | None:
    """What `InlineCache` keeps of a body just inlined, or None when it cannot be replayed."""
    instance = frame.instance
    assert instance is not None
    prefix = instance.dotted + "."
    cut = len(prefix)
    args = {v: i for i, v in reversed(list(enumerate(_values(params))))}
    paths = {v: p for p, v in lw.reads.items()}
    paths.update({v: p for p, v in before.items()})
    defined: set[Value] = set()
    free: dict[Value, tuple[str, int | str]] = {}
    for op in ops:
        for v in free_values(op):
            if v in defined or v in free:
                continue
            if v in args:
                free[v] = ("arg", args[v])
            elif v in paths and paths[v].startswith(prefix):
                free[v] = ("read", paths[v][cut:])
            else:
                return None  # reads a value from elsewhere: lowered every time
        defined.update(op.results)
    reads = []
    for op in lw.prefix.ops[first_read:]:
        path = op.attrs["path"]
        if not isinstance(path, str) or not path.startswith(prefix):
            return None
        reads.append(path[cut:])
    writes = []
    for path in lw.state_written:
        value = lw.state_values[path]
        if before.get(path) is value:
            continue
        if not path.startswith(prefix) or not (value in defined or value in free):
            return None
        writes.append((path[cut:], value))
    if not _only_values(result, defined, free):
        return None
    return Inlined(
        list(ops), tuple(free), tuple(free.values()), tuple(reads), tuple(writes), result
    )


def _values(params: tuple[LV, ...]) -> list[Value]:
    out: list[Value] = []
    for lv in params:
        if isinstance(lv, Value):
            out.append(lv)
        elif isinstance(lv, tuple):
            out.extend(_values(lv))
        elif isinstance(lv, Opt) and lv.value is not None:
            out.extend(_values((lv.value,)))
    return out


def _only_values(lv: LV, defined: set[Value], free: Mapping[Value, object]) -> bool:
    """Whether `lv` holds nothing but values of the body (and numbers)."""
    if isinstance(lv, Value):
        return lv in defined or lv in free
    if isinstance(lv, tuple):
        return all(_only_values(x, defined, free) for x in lv)
    if isinstance(lv, Opt):
        return lv.value is None or _only_values(lv.value, defined, free)
    return isinstance(lv, bool | int | float)


def _rebind(lv: LV, mapping: Mapping[Value, Value]) -> LV:
    if isinstance(lv, Value):
        return mapping[lv]
    if isinstance(lv, tuple):
        return tuple(_rebind(x, mapping) for x in lv)
    if isinstance(lv, Opt):
        return lv if lv.value is None else Opt(_rebind(lv.value, mapping))
    return lv
