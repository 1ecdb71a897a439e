"""Binding: a checked program plus concrete generics -> a concrete block tree (language.md 6.7, 12).

Stage: after checking, before lowering to Core IR (architecture.md "Binding").
In: a `CheckedProgram` without errors, the root block (found or named), and a
mapping for the root's generics (`{"H": 512, "T": "f32", "S": [2, 3]}`).
Out: a `BoundModel`: the instantiated block tree with every `param`, `buffer`
and `state` path (`layers.3.attn.qkv.weight`) and its concrete `TensorType`,
the groups of paths that decide whether each optional child is present
(12.8), and the signatures of the root's entries, whose own generics (`B`,
`S`) are bound per call by `bind_entry_generics` (6.7 step 4).

Errors a user can cause (a missing, unknown or ill-classed generic, a root
`where` clause that fails for the given values, inputs that do not fit an
entry) are `LinnetError`s naming the generic, clause or input.

>>> from linnet.pipeline import check_source
>>> checked = check_source('''module m
... pub block Scale<H: Dim> {
...     param gain: Tensor[H; f32]
...     pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
...         return x * gain
...     }
... }''')
>>> model = bind(checked, generics={"H": 4})
>>> model.tensors["gain"].type
TensorType(shape=(4,), dtype='f32')
>>> bind_entry_generics(model.entries["forward"], [TensorType((3, 4), "f32")]).values
{'B': 3}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Literal

from linnet.check.decls import BlockInfo, Constraint, FnInfo, GenericInfo, ModuleInfo
from linnet.check.dims import Dim, Symbol
from linnet.check.program import CheckedProgram
from linnet.check.types import (
    SCALAR_DTYPES,
    ArrayType,
    BlockType,
    DTypeVar,
    OptionalType,
    ScalarType,
    Subst,
    Type,
    in_class,
)
from linnet.check.types import TensorType as CheckedTensor
from linnet.errors import InternalError, LinnetError
from linnet.ir.core import TensorType, dtype_named
from linnet.ir.env import Env, GenericValue, evaluate_generic, show_value
from linnet.records import field, record

TensorKind = Literal["param", "buffer", "state"]


@record(frozen=True)
class BoundTensor:
    """One tensor of the instantiated tree (12.7).

    `optional` is the member's own `?`; `group` is the path of the innermost
    optional `sub` around it (None when none), whose presence it also needs.
    """

    path: str
    kind: TensorKind
    type: TensorType
    optional: bool = False
    group: str | None = None


@record(frozen=True)
class OptionalSub:
    """An optional child (12.8): present iff every tensor in `mandatory` is in the checkpoint.

    `mandatory` are the child's `param`/`buffer` paths declared without `?`,
    outside any optional child nested in it; `parent` is the enclosing
    optional child's path, whose presence this one also needs.
    """

    path: str
    mandatory: tuple[str, ...]
    parent: str | None = None


@record(eq=False)
class BlockInstance:
    """A block with concrete generics at one place in the tree.

    `subs` maps a `sub` member to its instance, to a list of instances (an
    array), or to an instance flagged by `BoundModel.optional_subs` (optional).
    """

    info: BlockInfo
    path: tuple[str, ...]
    env: Env
    subs: dict[str, BlockInstance | list[BlockInstance]] = field(default_factory=dict)

    def member_path(self, name: str) -> str:
        return ".".join((*self.path, name))

    def __repr__(self) -> str:
        return f"BlockInstance({self.info.name} at `{self.dotted}`)"

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


@record(frozen=True)
class InputSpec:
    """One entry parameter: its name and checker type (root generics still symbolic)."""

    name: str
    type: Type
    has_default: bool


@record(eq=False)
class EntrySignature:
    """An entry exposed by a backend: its function, block instance (None at module level),
    the concrete generics around it (`base`), and its inputs in order."""

    name: str
    fn: FnInfo
    instance: BlockInstance | None
    base: Env
    inputs: tuple[InputSpec, ...]

    @property
    def generics(self) -> tuple[GenericInfo, ...]:
        return tuple(self.fn.generics)

    def __repr__(self) -> str:
        return f"EntrySignature({self.fn.qualified_name})"


@record(eq=False)
class EntryBinding:
    """The entry's own generics after 6.7 step 4: by name, and as an `Env` with the base."""

    values: dict[str, GenericValue]
    env: Env


@record(eq=False)
class BoundModel:
    """The root block instantiated with concrete generics (architecture.md "Binding")."""

    program: CheckedProgram
    root: BlockInstance
    generics: dict[str, GenericValue]
    tensors: dict[str, BoundTensor]
    optional_subs: dict[str, OptionalSub]
    entries: dict[str, EntrySignature]

    def sub_present(self, path: str, available: Set[str]) -> bool:
        """Whether the optional child at `path` exists given the checkpoint's paths (12.8)."""
        sub = self.optional_subs[path]
        if not all(p in available for p in sub.mandatory):
            return False
        return sub.parent is None or self.sub_present(sub.parent, available)

    def tensor_live(self, path: str, available: Set[str]) -> bool:
        """Whether a tensor exists in the model: its optional children are present and,
        for an optional param/buffer, the checkpoint has it. Mandatory tensors count as
        present here (a missing one is the weight loader's error)."""
        t = self.tensors[path]
        if t.group is not None and not self.sub_present(t.group, available):
            return False
        if t.optional and t.kind != "state":
            return path in available
        return True

    def present_paths(self, available: Iterable[str]) -> frozenset[str]:
        """The param/buffer paths a checkpoint with `available` keys binds (12.8, 12.9)."""
        keys = frozenset(available)
        return frozenset(
            p
            for p, t in self.tensors.items()
            if t.kind != "state" and p in keys and self.tensor_live(p, keys)
        )

    def live_tensors(self, available: Set[str], kind: TensorKind) -> dict[str, TensorType]:
        """Tensors of one kind that exist with this checkpoint, in tree order."""
        return {
            p: t.type
            for p, t in self.tensors.items()
            if t.kind == kind and self.tensor_live(p, available)
        }


# ---------------------------------------------------------------- bind


def bind(
    program: CheckedProgram,
    *,
    root: str | None = None,
    generics: Mapping[str, object] | None = None,
) -> BoundModel:
    """Bind the root block's generics and instantiate its tree (6.7 steps 1-3)."""
    if program.has_errors:
        raise LinnetError("cannot bind a program with errors", program.diagnostics)
    block = find_root(program, root)
    env = bind_generics(block.generics, generics or {}, f"block `{block.name}`")
    check_where(block.where, env, f"block `{block.name}`")
    binder = _Binder(program)
    instance = binder.instantiate(block, env, (), None)
    entries = {
        name: entry_signature(fn, instance, env)
        for name, fn in block.methods.items()
        if fn.kind == "entry"
    }
    named = {g.name: env.value_of(g.key) for g in block.generics}
    return BoundModel(program, instance, named, binder.tensors, binder.optional_subs, entries)


def find_root(program: CheckedProgram, name: str | None) -> BlockInfo:
    """The root block (12.10): the named block, or the only block of the root file with entries."""
    blocks: list[BlockInfo] = []
    for key in program.graph.roots:
        module = program.modules.get(key)
        if module is not None:
            blocks.extend(i for i in module.items.values() if isinstance(i, BlockInfo))
    with_entries = [b for b in blocks if any(m.kind == "entry" for m in b.methods.values())]
    if name is not None:
        for b in blocks:
            if b.name == name:
                return b
        shown = ", ".join(f"`{b.name}`" for b in blocks) or "none"
        raise LinnetError(f"no block named `{name}` in the root file; its blocks are {shown}")
    if len(with_entries) == 1:
        return with_entries[0]
    if not with_entries:
        shown = ", ".join(f"`{b.name}`" for b in blocks) or "none"
        raise LinnetError(
            f"no block of the root file has an `entry`; its blocks are {shown} "
            "(name the root explicitly, e.g. --root Name)"
        )
    shown = ", ".join(f"`{b.name}`" for b in with_entries)
    raise LinnetError(f"several blocks have entries ({shown}); choose the root with --root Name")


def generics_key(generics: Mapping[str, object] | None) -> tuple[tuple[str, object], ...]:
    """A hashable, order-free form of explicitly given generics, for caches keyed by them
    (a `Shape` generic's value is a list)."""
    return tuple(sorted((name, _frozen(value)) for name, value in (generics or {}).items()))


def _frozen(value: object) -> object:
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def bind_generics(params: Sequence[GenericInfo], given: Mapping[str, object], owner: str) -> Env:
    """Generics from a user mapping, defaults left to right (6.7 step 1)."""
    known = {g.name for g in params}
    unknown = [k for k in given if k not in known]
    if unknown:
        listed = ", ".join(g.name for g in params) or "none"
        raise LinnetError(f"unknown generic `{unknown[0]}` for {owner} (its generics are {listed})")
    env = Env()
    for g in params:
        if g.name in given:
            env.bind(g.key, parse_generic(g, given[g.name], owner))
        elif g.has_default and g.default is not None:
            env.bind(g.key, evaluate_generic(env, g.kind, g.default))
        else:
            raise LinnetError(
                f"missing generic `{g.name}` for {owner}: it has no default "
                f"(bind it, e.g. --bind {g.name}=...)"
            )
    return env


def parse_generic(g: GenericInfo, raw: object, owner: str) -> GenericValue:
    """One user-supplied generic value, checked against the generic's kind and class."""
    what = f"generic `{g.name}` of {owner}"
    if g.kind == "Dim":
        value = _as_int(raw)
        if value is None or value < 0:
            raise LinnetError(f"{what} is a `Dim`: expected a non-negative integer, got {raw!r}")
        return value
    if g.kind == "Shape":
        items: list[object]
        if isinstance(raw, str):
            items = [s for s in raw.split(",") if s.strip()]
        elif isinstance(raw, (list, tuple)):
            items = list(raw)
        else:
            raise LinnetError(f"{what} is a `Shape`: expected a list of integers, got {raw!r}")
        dims = [_as_int(v) for v in items]
        if any(d is None or d < 0 for d in dims):
            raise LinnetError(f"{what} is a `Shape`: expected non-negative integers, got {raw!r}")
        return tuple(d for d in dims if d is not None)
    name = dtype_named(raw)
    if name is None or name not in SCALAR_DTYPES:
        raise LinnetError(
            f"{what} is a dtype: expected a dtype such as `f32`, `float32`, `torch.float32` "
            f"or `np.float32`, got {raw!r}"
        )
    if not in_class(SCALAR_DTYPES[name], g.kind):
        spelled = f"{raw.__module__}.{raw.__qualname__}" if isinstance(raw, type) else str(raw)
        shown = f"`{name}`" if isinstance(raw, str) else f"`{name}` ({spelled})"
        raise LinnetError(f"{what} must be {g.kind}, but {shown} is not")
    return name


def _as_int(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw.strip())
    return None


def check_where(where: Sequence[Constraint], env: Env, owner: str) -> None:
    """Evaluate `where` relations on concrete values (6.7 step 2); a false one is an error."""
    for c in where:
        lhs, rhs = env.dim(c.lhs), env.dim(c.rhs)
        if not _holds(lhs, c.rel, rhs):
            raise LinnetError(
                f"constraint {c.text()} does not hold for {_values_text(c, env)} ({owner})"
            )


def _holds(a: int, rel: str, b: int) -> bool:
    return {
        "==": a == b,
        "!=": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[rel]


def _values_text(c: Constraint, env: Env) -> str:
    symbols = sorted(c.lhs.symbols() | c.rhs.symbols(), key=lambda s: s.serial)
    parts = []
    for s in symbols:
        if s.is_pack and s in env.packs:
            parts.append(f"{s.name}={show_value(env.packs[s])}")
        elif s in env.dims:
            parts.append(f"{s.name}={env.dims[s]}")
    return ", ".join(parts) if parts else "these values"


class _Binder:
    """Walks the block tree (6.7 step 3), collecting tensors and optional groups."""

    def __init__(self, program: CheckedProgram) -> None:
        self.program = program
        self.tensors: dict[str, BoundTensor] = {}
        self.optional_subs: dict[str, OptionalSub] = {}

    def instantiate(
        self, block: BlockInfo, env: Env, path: tuple[str, ...], group: str | None
    ) -> BlockInstance:
        instance = BlockInstance(block, path, env)
        for name, member in block.members.items():
            t = member.type
            if t is None:
                raise InternalError(f"member `{name}` of block `{block.name}` has no type")
            member_path = (*path, name)
            dotted = ".".join(member_path)
            if member.kind != "sub":
                optional = isinstance(t, OptionalType)
                inner = t.inner if isinstance(t, OptionalType) else t
                self.tensors[dotted] = BoundTensor(
                    dotted, member.kind, env.tensor_type(inner), optional, group
                )
                continue
            if isinstance(t, OptionalType):
                assert isinstance(t.inner, BlockType)
                before = len(self.tensors)
                instance.subs[name] = self.child(t.inner, env, member_path, dotted)
                mandatory = tuple(
                    p
                    for p, bt in list(self.tensors.items())[before:]
                    if bt.group == dotted and not bt.optional and bt.kind != "state"
                )
                self.optional_subs[dotted] = OptionalSub(dotted, mandatory, group)
            elif isinstance(t, ArrayType):
                assert isinstance(t.elem, BlockType)
                length = env.extent(t.length)
                instance.subs[name] = [
                    self.child(t.elem, env, (*member_path, str(i)), group) for i in range(length)
                ]
            else:
                assert isinstance(t, BlockType)
                instance.subs[name] = self.child(t, env, member_path, group)
        return instance

    def child(
        self, t: BlockType, env: Env, path: tuple[str, ...], group: str | None
    ) -> BlockInstance:
        child_env = subst_env(t.info.generics, t.subst, env)
        check_where(t.info.where, child_env, f"block `{t.info.name}` at `{'.'.join(path)}`")
        return self.instantiate(t.info, child_env, path, group)


def subst_env(generics: Sequence[GenericInfo], subst: Subst, outer: Env) -> Env:
    """The concrete values of `generics` bound by `subst` (in `outer`'s terms)."""
    env = Env()
    for g in generics:
        key = g.key
        if isinstance(key, DTypeVar):
            bound_dtype = subst.dtypes.get(key)
            if bound_dtype is not None:
                env.bind(key, outer.dtype(bound_dtype))
        elif key.is_pack:
            items = subst.packs.get(key)
            if items is not None:
                env.bind(key, outer.shape(items))
        else:
            d = subst.dims.get(key)
            if d is not None:
                env.bind(key, outer.extent(d))
        if not env.has(key) and g.has_default and g.default is not None:
            env.bind(key, evaluate_generic(env, g.kind, g.default))
        if not env.has(key):
            raise InternalError(f"generic `{g.name}` is not bound by {subst!r}")
    return env


# ---------------------------------------------------------------- entries


def entry_signature(fn: FnInfo, instance: BlockInstance | None, base: Env) -> EntrySignature:
    inputs = tuple(InputSpec(p.name, p.type, p.default is not None) for p in fn.params)
    return EntrySignature(fn.name, fn, instance, base, inputs)


def module_entry(program: CheckedProgram, module: str, name: str) -> EntrySignature:
    """A module-level `entry` (or any module function) by module key or dotted name (11.7)."""
    info = find_module(program, module)
    item = info.items.get(name)
    if not isinstance(item, FnInfo):
        listed = ", ".join(
            f"`{n}`" for n, i in info.items.items() if isinstance(i, FnInfo) and i.kind == "entry"
        )
        raise LinnetError(
            f"module `{info.name}` has no function `{name}` (its entries are {listed or 'none'})"
        )
    return entry_signature(item, None, Env())


def find_module(program: CheckedProgram, module: str) -> ModuleInfo:
    found = program.modules.get(module)
    if found is not None:
        return found
    for info in program.modules.values():
        if info.name == module:
            return info
    raise LinnetError(f"no module `{module}` in this program")


def bind_entry_generics(
    entry: EntrySignature,
    input_types: Sequence[TensorType],
    generics: Mapping[str, object] | None = None,
) -> EntryBinding:
    """Bind an entry's own generics from its inputs (6.7 step 4, matching as in 5.6).

    Scalars cross as rank-0 tensors. Generics that appear in no input come from
    `generics` or their defaults; the entry's `where` is then evaluated.
    Mismatching inputs are `LinnetError`s naming the input.
    """
    fn = entry.fn
    owner = f"entry `{fn.name}`"
    if len(input_types) > len(entry.inputs):
        raise LinnetError(
            f"{owner} takes {len(entry.inputs)} inputs but {len(input_types)} were given"
        )
    missing = [s.name for s in entry.inputs[len(input_types) :] if not s.has_default]
    if missing:
        raise LinnetError(f"{owner}: missing input `{missing[0]}`")
    matcher = _InputMatcher(entry, owner)
    given = dict(generics or {})
    for g in fn.generics:
        if g.name in given:
            matcher.env.bind(g.key, parse_generic(g, given.pop(g.name), owner))
    if given:
        raise LinnetError(f"unknown generic `{next(iter(given))}` for {owner}")
    for spec, actual in zip(entry.inputs, input_types, strict=False):
        matcher.match_input(spec, actual)
    matcher.solve_deferred()
    for g in fn.generics:
        if matcher.env.has(g.key):
            continue
        if g.has_default and g.default is not None:
            full = entry.base.extended(matcher.env)
            matcher.env.bind(g.key, evaluate_generic(full, g.kind, g.default))
        else:
            raise LinnetError(
                f"{owner}: cannot bind generic `{g.name}` from the inputs; pass it explicitly"
            )
    full = entry.base.extended(matcher.env)
    matcher.check_deferred(full)
    check_where(fn.where, full, owner)
    values = {g.name: full.value_of(g.key) for g in fn.generics}
    return EntryBinding(values, full)


class _InputMatcher:
    """5.6-style matching of concrete input types against parameter types."""

    def __init__(self, entry: EntrySignature, owner: str) -> None:
        self.entry = entry
        self.owner = owner
        self.own: set[Symbol | DTypeVar] = {g.key for g in entry.fn.generics}
        self.env = Env()
        self.origin: dict[Symbol | DTypeVar, str] = {}
        self.deferred: list[tuple[str, str, int, Dim, int]] = []  # where, input, axis, dim, actual

    def match_input(self, spec: InputSpec, actual: TensorType) -> None:
        t = spec.type
        if isinstance(t, OptionalType):
            t = t.inner  # a supplied optional input is `some(value)`
        where = f"{self.owner}: input `{spec.name}`"
        if isinstance(t, ScalarType):
            shape: tuple[object, ...] = ()
            dtype = t.dtype
        elif isinstance(t, CheckedTensor):
            shape = t.shape
            dtype = t.dtype
        else:
            raise LinnetError(
                f"{where} has type `{t!r}`, which cannot cross the entry boundary (not supported yet)"
            )
        self.match_dtype(where, spec.name, dtype, actual.dtype)
        self.match_shape(where, spec.name, shape, actual.shape, t)

    def match_dtype(self, where: str, name: str, want: object, got: str) -> None:
        if isinstance(want, DTypeVar) and want in self.own:
            if self.env.has(want):
                bound = self.env.dtypes[want]
                if bound != got:
                    raise LinnetError(
                        f"{where} has dtype {got}, but `{want.name}` is {bound} "
                        f"from input `{self.origin.get(want, '?')}`"
                    )
                return
            self.env.bind(want, got)
            self.origin[want] = name
            return
        expected = self.entry.base.dtype(want)  # type: ignore[arg-type]
        if expected != got:
            raise LinnetError(f"{where} has dtype {got} but {expected} is required")

    def match_shape(
        self, where: str, name: str, items: Sequence[object], shape: tuple[int, ...], t: Type
    ) -> None:
        flat: list[object] = []  # packs bound so far expanded to constants
        origin: list[Symbol | None] = []  # the own pack an expanded axis came from
        for item in items:
            if type(item) is Symbol and (self.env.has(item) or item not in self.own):
                run = self.env.packs[item] if self.env.has(item) else self.entry.base.packs[item]
                flat.extend(Dim.const(v) for v in run)
                origin.extend([item if item in self.own else None] * len(run))
                continue
            flat.append(item)
            origin.append(None)
        open_packs = [i for i, item in enumerate(flat) if type(item) is Symbol]
        if len(open_packs) > 1:
            raise LinnetError(f"{where}: cannot bind two shape packs from one input of `{t!r}`")
        if open_packs:
            at = open_packs[0]
            fixed = len(flat) - 1
            if len(shape) < fixed:
                raise LinnetError(
                    f"{where} has rank {len(shape)} but `{t!r}` needs at least {fixed} axes"
                )
            split = len(shape) - (len(flat) - at - 1)
            pack = flat[at]
            assert isinstance(pack, Symbol)
            self.env.bind(pack, tuple(shape[at:split]))
            self.origin[pack] = name
            axes = list(range(at)) + list(range(split, len(shape)))
            del flat[at], origin[at]
        else:
            if len(flat) != len(shape):
                raise LinnetError(
                    f"{where} has rank {len(shape)} but `{t!r}` needs {len(flat)} axes"
                )
            axes = list(range(len(shape)))
        for sym in dict.fromkeys(o for o in origin if o is not None):
            run = tuple(shape[a] for a, o in zip(axes, origin, strict=True) if o is sym)
            if run != self.env.packs[sym]:
                raise LinnetError(
                    f"{where}: the axes of `*{sym.name}` are {list(run)} here but "
                    f"{list(self.env.packs[sym])} from input `{self.origin.get(sym, '?')}`"
                )
        for axis, item in zip(axes, flat, strict=True):
            assert isinstance(item, Dim)
            self.match_dim(where, name, axis, item, shape[axis])

    def match_dim(self, where: str, name: str, axis: int, d: Dim, actual: int) -> None:
        sym = d.as_symbol()
        if sym is not None and sym in self.own:
            if self.env.has(sym):
                bound = self.env.dims[sym]
                if bound != actual:
                    raise LinnetError(
                        f"{where}: dimension `{sym.name}` (axis {axis}) is {actual} here "
                        f"but {bound} from input `{self.origin.get(sym, '?')}`"
                    )
                return
            self.env.bind(sym, actual)
            self.origin[sym] = name
            return
        if any(s in self.own for s in d.symbols()):
            self.deferred.append((where, name, axis, d, actual))
            return
        expected = self.entry.base.dim(d)
        if expected != actual:
            raise LinnetError(
                f"{where}: axis {axis} is {actual} but `{d}` = {expected} is required"
            )

    def solve_deferred(self) -> None:
        """Bind a generic seen only inside linear dimensions (`2 * D`, `D + 1`) from its axis.

        Beyond 5.6 (which would ask the caller for `D`), but unambiguous: a
        dimension `a * D + b` with `a != 0` and everything else bound has at most
        one non-negative integer solution. The deferred checks confirm it.
        """
        progress = True
        while progress:
            progress = False
            for where, name, axis, d, actual in self.deferred:
                unknown = [s for s in d.symbols() if s in self.own and not self.env.has(s)]
                if len(unknown) != 1 or unknown[0].is_pack:
                    continue
                sym = unknown[0]
                at = [self._trial(d, sym, v) for v in (0, 1, 2)]
                if None in at:
                    continue
                b0, b1, b2 = at
                assert b0 is not None and b1 is not None and b2 is not None
                slope = b1 - b0
                if slope == 0 or b2 - b1 != slope:
                    continue
                value = (actual - b0) // slope
                if value < 0 or (actual - b0) % slope:
                    raise LinnetError(
                        f"{where}: axis {axis} is {actual}, which no `{sym.name}` >= 0 gives for `{d}`"
                    )
                self.env.bind(sym, value)
                self.origin[sym] = name
                progress = True

    def _trial(self, d: Dim, sym: Symbol, value: int) -> int | None:
        trial = self.entry.base.extended(self.env)
        trial.bind(sym, value)
        try:
            return d.evaluate(trial.dims, trial.packs)
        except (ValueError, ArithmeticError):
            return None

    def check_deferred(self, full: Env) -> None:
        for where, _, axis, d, actual in self.deferred:
            expected = full.dim(d)
            if expected != actual:
                raise LinnetError(
                    f"{where}: axis {axis} is {actual} but `{d}` = {expected} is required"
                )
