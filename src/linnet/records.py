"""`record`: a small, fast stand-in for `dataclasses.dataclass`.

Why it exists: every `linnet check` imports the front end, and building classes
with `dataclasses` (which also imports `inspect`) cost a third of the process
start-up. `record` builds the same kind of class (slots, a generated `__init__`,
value or identity equality, a readable `__repr__`) with one small `exec` per
class. It is marked with `dataclass_transform`, so mypy type-checks records as
dataclasses, including `frozen=True`: assigning a field of a frozen record is a
type error. At run time frozen records are not guarded by a slow `__setattr__`.

Supported: defaults, `field(default_factory=..., compare=..., repr=..., kw_only=...)`,
`kw_only=True` on the class, inheritance between records, `eq=False` (identity).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T")
_C = TypeVar("_C", bound=type)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class _FieldSpec:
    __slots__ = ("compare", "default", "default_factory", "kw_only", "repr")

    def __init__(
        self,
        default: Any,
        default_factory: Callable[[], Any] | None,
        compare: bool,
        repr: bool,
        kw_only: bool | None,
    ) -> None:
        self.default = default
        self.default_factory = default_factory
        self.compare = compare
        self.repr = repr
        self.kw_only = kw_only


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | None = None,
    compare: bool = True,
    repr: bool = True,
    kw_only: bool | None = None,
) -> Any:
    """Per-field options, as `dataclasses.field` (the subset linnet uses)."""
    return _FieldSpec(default, default_factory, compare, repr, kw_only)


class _Field:
    __slots__ = ("compare", "default", "factory", "kw_only", "name", "repr")

    def __init__(self, name: str, spec: _FieldSpec, kw_only: bool) -> None:
        self.name = name
        self.default = spec.default
        self.factory = spec.default_factory
        self.compare = spec.compare
        self.repr = spec.repr
        self.kw_only = kw_only if spec.kw_only is None else spec.kw_only


_NO_OPTIONS = _FieldSpec(MISSING, None, True, True, None)


def _collect(cls: type, kw_only: bool) -> tuple[list[_Field], tuple[str, ...]]:
    """Fields of `cls`: the bases' record fields first, then its own annotations."""
    fields: dict[str, _Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for inherited in getattr(base, "__record_fields__", ()):
            fields[inherited.name] = inherited
    own: list[str] = []
    # NOTE: not inspect.get_annotations: importing inspect is what this module avoids.
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
        if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = cls.__dict__.get(name, MISSING)
        if isinstance(value, _FieldSpec):
            spec = value
        elif value is MISSING:
            spec = _NO_OPTIONS
        else:
            spec = _FieldSpec(value, None, True, True, None)
        fields[name] = _Field(name, spec, kw_only)
        own.append(name)
    return list(fields.values()), tuple(own)


def _init_source(fields: list[_Field], scope: dict[str, Any]) -> str:
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        if f.factory is not None:
            scope[f"_factory_{f.name}"] = f.factory
            param = f"{f.name}=_MISSING"
            body.append(
                f"    self.{f.name} = _factory_{f.name}() if {f.name} is _MISSING else {f.name}\n"
            )
        else:
            if f.default is not MISSING:
                scope[f"_default_{f.name}"] = f.default
                param = f"{f.name}=_default_{f.name}"
            else:
                param = f.name
            body.append(f"    self.{f.name} = {f.name}\n")
        (keyword if f.kw_only else positional).append(param)
    params = ["self", *positional]
    if keyword:
        params += ["*", *keyword]
    return f"def __init__({', '.join(params)}):\n" + ("".join(body) or "    pass\n")


def _build(cls: type, *, eq: bool, frozen: bool, kw_only: bool) -> type:
    fields, own = _collect(cls, kw_only)
    namespace = {
        k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__") and k not in own
    }
    namespace["__slots__"] = own
    namespace["__record_fields__"] = tuple(fields)
    namespace["__match_args__"] = tuple(f.name for f in fields if not f.kw_only)
    built = type(cls)(cls.__name__, cls.__bases__, namespace)
    built.__qualname__ = cls.__qualname__
    scope: dict[str, Any] = {"_MISSING": MISSING}
    exec(_init_source(fields, scope), scope)  # our own generated code, never user input
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    built.__init__ = init  # type: ignore[misc]
    shown = tuple(f.name for f in fields if f.repr)
    if "__repr__" not in cls.__dict__:
        built.__repr__ = _make_repr(shown)  # type: ignore[method-assign,assignment]
    if eq and "__eq__" not in cls.__dict__:
        compared = tuple(f.name for f in fields if f.compare)
        built.__eq__ = _make_eq(compared)  # type: ignore[method-assign,assignment]
        built.__hash__ = _make_hash(compared) if frozen else None  # type: ignore[method-assign,assignment]
    return built


def _make_repr(names: tuple[str, ...]) -> Callable[[object], str]:
    def __repr__(self: object) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__name__}({inner})"

    return __repr__


def _make_eq(names: tuple[str, ...]) -> Callable[[object, object], bool]:
    def __eq__(self: object, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in names)

    return __eq__


def _make_hash(names: tuple[str, ...]) -> Callable[[object], int]:
    if len(names) < 2:  # `attrgetter` of one name gives the value, of none fails

        def __hash__(self: object) -> int:
            return hash(tuple(getattr(self, n) for n in names))

        return __hash__
    fields = operator.attrgetter(*names)  # the same tuple, made in C (types hash often)

    def __hash_fields__(self: object) -> int:
        return hash(fields(self))

    __hash_fields__.__name__ = "__hash__"
    return __hash_fields__


@overload
def record(cls: _C, /) -> _C: ...
@overload
def record(
    *, frozen: bool = False, eq: bool = True, kw_only: bool = False, slots: bool = True
) -> Callable[[_C], _C]: ...


@dataclass_transform(field_specifiers=(field,))
def record(
    cls: _C | None = None,
    /,
    *,
    frozen: bool = False,
    eq: bool = True,
    kw_only: bool = False,
    slots: bool = True,
) -> _C | Callable[[_C], _C]:
    """Decorate a class as a record; the options mean what `dataclass`'s do.

    Records always have `__slots__` (`slots` is accepted for symmetry only).
    """

    def wrap(target: _C) -> _C:
        return _build(target, eq=eq, frozen=frozen, kw_only=kw_only)  # type: ignore[return-value]

    return wrap if cls is None else wrap(cls)


def record_fields(value: object) -> tuple[str, ...]:
    """Field names of a record instance or class, in `__init__` order."""
    fields: tuple[_Field, ...] = getattr(value, "__record_fields__", ())
    return tuple(f.name for f in fields)
