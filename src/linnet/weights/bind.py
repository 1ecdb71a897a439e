"""Weights: bind a checkpoint's stored tensors to a model's parameter paths (language.md 12.9).

Stage: after `bind` (every param/buffer path has a concrete shape and dtype)
and before `lower` (which needs to know which optional params and subs are
present). In: a `TensorSpec` per path, a checkpoint source (a SafeTensors
file, a sharded folder, an index, or arrays in memory) and optionally a
`bindings.json`. Out: `BoundWeights`: NumPy arrays by path (memory-mapped
from the files, never copied unless a dtype is converted) and the set of
optional paths and optional subs that are present.

Every name, shape and dtype is compared using the headers alone, before any
tensor byte is read, and every problem found is listed in one `LinnetError`,
each line naming the Linnet path and the checkpoint name: fixing a
checkpoint one error at a time is what users of other loaders complain about.

Files and their formats live in `safetensors` (reading and writing
SafeTensors), `checkpoint` (files, shards, indexes) and
`bindings` (`bindings.json`); `linnet.weights` re-exports their public API.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from linnet.errors import InternalError, LinnetError
from linnet.progress import track
from linnet.records import field, record
from linnet.spelling import edit_distance
from linnet.weights.bindings import Bindings, load_bindings
from linnet.weights.checkpoint import IN_MEMORY, Checkpoint, CheckpointSource, open_checkpoint
from linnet.weights.safetensors import (
    NUMPY_DTYPES,
    SafeTensorsFile,
    StoredTensor,
    read_safetensors,
    save_safetensors,
)

if TYPE_CHECKING:
    from linnet.ir.bind import BoundModel

__all__ = [
    "BINDINGS_NAME",
    "Bindings",
    "BoundWeights",
    "Checkpoint",
    "SafeTensorsFile",
    "StoredTensor",
    "TensorSpec",
    "bind_model_weights",
    "bind_weights",
    "load_bindings",
    "open_checkpoint",
    "read_safetensors",
    "save_safetensors",
    "specs_from_model",
    "weight_problems",
]

BINDINGS_NAME = "bindings.json"

_FLOATS = frozenset({"f16", "bf16", "f32", "f64"})
_INTEGERS = frozenset({"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"})


@record(frozen=True)
class TensorSpec:
    """What the model expects at one param/buffer path (state has no payload, 12.6).

    - `shape`, `dtype`: the concrete declared type after binding generics
      (`dtype` a Linnet name: `f32`, `bf16`, `i64` ...).
    - `optional`: the member itself is declared `T?` (12.2), so it may be
      absent on its own.
    - `group`: the canonical path of the innermost optional `sub` holding the
      tensor (`"extra"`, `"layers.2.adapter"`), None outside any optional sub.
      A group is present iff its enclosing group is present and every
      tensor of the group that is not itself `optional` is stored (12.8);
      tensors of nested optional subs belong to the nested group only.
    """

    shape: tuple[int, ...]
    dtype: str
    optional: bool = False
    group: str | None = None


@record(eq=False)
class BoundWeights:
    """The result of `bind_weights`.

    - `arrays`: every bound param/buffer path -> its array (tied paths share one).
    - `present`: the optional paths that are bound (declared `?`, or inside a
      present optional sub).
    - `present_groups`: the optional subs that are present.
    - `groups`: every optional sub named by a spec, present or not.
    - `names`: path -> the checkpoint name it was read from.
    """

    arrays: dict[str, np.ndarray]
    present: frozenset[str]
    present_groups: frozenset[str]
    groups: frozenset[str]
    names: dict[str, str] = field(default_factory=dict)

    def sub_present(self, path: str) -> bool:
        """Whether the optional `sub` at `path` is `some` (12.8).

        An optional sub that declares no tensor of its own (so no spec names it)
        is present exactly when the optional subs around it are.
        """
        if path in self.groups:
            return path in self.present_groups
        return all(
            group in self.present_groups for group in self.groups if path.startswith(group + ".")
        )


def specs_from_model(model: BoundModel) -> dict[str, TensorSpec]:
    """The `TensorSpec` of every param/buffer path of a bound model (`ir.bind`), in tree order.

    State members carry no payload (12.6) and are left out; `optional` and
    `group` mean the same in `BoundTensor` as here.
    """
    return {
        path: TensorSpec(tuple(t.type.shape), t.type.dtype, t.optional, t.group)
        for path, t in model.tensors.items()
        if t.kind != "state"
    }


def require_no_weights(model: BoundModel, fix: str = "") -> None:
    """Raise unless `model` runs without a checkpoint (no mandatory param or buffer).

    Backends call this for `weights=None`; the error names the first paths a
    checkpoint would have to provide. `fix` adds a backend's own way out.
    """
    missing = [
        path
        for path, t in model.tensors.items()
        if t.kind != "state" and not t.optional and t.group is None
    ]
    if missing:
        shown = ", ".join(f"`{p}`" for p in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise LinnetError(
            f"no weights given, but the model needs {shown}{more}; pass weights= "
            f"(a SafeTensors file or folder, or arrays by path){fix}"
        )


def bind_model_weights(
    model: BoundModel,
    source: CheckpointSource,
    *,
    bindings: Bindings | Mapping[str, str] | str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    strict: bool = True,
) -> BoundWeights:
    """`bind_weights` for a `BoundModel`: the paths lowering then takes as present are
    `set(result.arrays)` (what `BoundModel.present_paths` and `sub_present` expect)."""
    return bind_weights(
        specs_from_model(model), source, bindings=bindings, cast_dtype=cast_dtype, strict=strict
    )


def bind_weights(
    specs: Mapping[str, TensorSpec],
    source: CheckpointSource,
    *,
    bindings: Bindings | Mapping[str, str] | str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    strict: bool = True,
) -> BoundWeights:
    """Bind every spec path to a stored tensor, checking everything before loading.

    `bindings` maps paths to checkpoint names (a `Bindings`, a mapping, or a
    `bindings.json` path); when None and the checkpoint sits in a folder with a
    `bindings.json`, that file is used. `cast_dtype=True` converts a stored
    dtype to the declared one within floats or within integers (an integer
    value that does not fit, or a finite float that overflows, is still an
    error). `strict=True` also reports stored tensors no path binds, binding
    keys that match no path, and optional subs that are only partly stored.

    >>> import numpy as np
    >>> spec = {"w": TensorSpec((2,), "f32"), "b": TensorSpec((2,), "f32", optional=True)}
    >>> bound = bind_weights(spec, {"w": np.ones(2, np.float32)})
    >>> sorted(bound.arrays), sorted(bound.present)
    (['w'], [])
    """
    checkpoint = open_checkpoint(source)
    bound, groups, problems = _match(specs, checkpoint, bindings, cast_dtype, strict)
    _raise_if_any(problems, checkpoint)
    arrays = _load(specs, bound, checkpoint)
    return BoundWeights(
        arrays=arrays,
        present=frozenset(p for p in bound if specs[p].optional or specs[p].group is not None),
        present_groups=frozenset(g for g, ok in groups.items() if ok),
        groups=frozenset(groups),
        names=dict(bound),
    )


def weight_problems(
    specs: Mapping[str, TensorSpec],
    source: CheckpointSource,
    *,
    bindings: Bindings | Mapping[str, str] | str | os.PathLike[str] | None = None,
    cast_dtype: bool = False,
    strict: bool = True,
) -> list[str]:
    """Every problem `bind_weights` would raise for, as a list, reading headers only
    (no tensor is loaded); empty when the weights bind. A checkpoint or bindings file
    that cannot be opened still raises `LinnetError`."""
    checkpoint = open_checkpoint(source)
    return _match(specs, checkpoint, bindings, cast_dtype, strict)[2]


def _match(
    specs: Mapping[str, TensorSpec],
    checkpoint: Checkpoint,
    bindings: Bindings | Mapping[str, str] | str | os.PathLike[str] | None,
    cast_dtype: bool,
    strict: bool,
) -> tuple[dict[str, str], dict[str, bool], list[str]]:
    """(path -> the checkpoint name it binds, optional sub presence, every problem)."""
    rules = _bindings_for(bindings, checkpoint)
    names = {path: rules.resolve(path) for path in specs}
    for path, spec in specs.items():
        if spec.dtype not in NUMPY_DTYPES:
            raise InternalError(f"spec for `{path}` has unknown dtype {spec.dtype!r}")
    groups = _group_presence(specs, names, checkpoint)
    bound = {
        path: names[path]
        for path, spec in specs.items()
        if names[path] in checkpoint.tensors and (spec.group is None or groups[spec.group])
    }
    renamed = _renamed_keys(specs, names, bound, checkpoint, strict)
    problems = _problems(specs, names, bound, checkpoint, cast_dtype, renamed)
    if strict:
        problems += _strict_problems(specs, names, groups, checkpoint, rules, set(renamed.values()))
    return bound, groups, problems


def _bindings_for(
    bindings: Bindings | Mapping[str, str] | str | os.PathLike[str] | None,
    checkpoint: Checkpoint,
) -> Bindings:
    if isinstance(bindings, Bindings):
        return bindings
    if isinstance(bindings, Mapping):
        return Bindings.from_mapping(bindings)
    if bindings is not None:
        return load_bindings(bindings)
    if checkpoint.folder is not None and (checkpoint.folder / BINDINGS_NAME).is_file():
        return load_bindings(checkpoint.folder / BINDINGS_NAME)
    return Bindings("bindings", {}, [])


def _group_presence(
    specs: Mapping[str, TensorSpec], names: dict[str, str], checkpoint: Checkpoint
) -> dict[str, bool]:
    """Presence of every optional sub named by a spec, outermost first (12.8)."""
    members: dict[str, list[str]] = {}
    for path, spec in specs.items():
        if spec.group is not None:
            members.setdefault(spec.group, [])
            if not spec.optional:
                members[spec.group].append(path)
    presence: dict[str, bool] = {}
    for group in sorted(members, key=lambda g: g.count(".")):
        enclosing = [g for g in presence if group.startswith(g + ".")]
        presence[group] = all(presence[g] for g in enclosing) and all(
            names[p] in checkpoint.tensors for p in members[group]
        )
    return presence


def _where(name: str, checkpoint: Checkpoint) -> str:
    stored = checkpoint.tensors.get(name)
    if stored is None or stored.file == IN_MEMORY:
        return f"checkpoint name `{name}`"
    return f"checkpoint name `{name}` in {stored.file}"


def _renamed_keys(
    specs: Mapping[str, TensorSpec],
    names: dict[str, str],
    bound: dict[str, str],
    checkpoint: Checkpoint,
    strict: bool,
) -> dict[str, str]:
    """Missing paths whose checkpoint name is one edit from a stored tensor nothing binds.

    One renamed (or misspelt) key is one mistake: it is reported once, as the
    missing path with the stored name it most likely is, not also as an
    unexpected tensor. Each stored name is linked to one path at most. With
    `strict`, optional params count too (a misspelt `bias` would silently be
    absent); without it, stored tensors nothing binds are allowed, so only
    required paths are linked.
    """
    used = set(names.values())
    unclaimed = sorted(n for n in checkpoint.tensors if n not in used)
    if not unclaimed:
        return {}
    out: dict[str, str] = {}
    for path, spec in specs.items():
        if path in bound or spec.group is not None or (spec.optional and not strict):
            continue
        near = [n for n in unclaimed if edit_distance(names[path], n) == 1]
        if len(near) == 1 and near[0] not in out.values():
            out[path] = near[0]
    return out


def _problems(
    specs: Mapping[str, TensorSpec],
    names: dict[str, str],
    bound: dict[str, str],
    checkpoint: Checkpoint,
    cast_dtype: bool,
    renamed: Mapping[str, str],
) -> list[str]:
    problems: list[str] = []
    for path, spec in specs.items():
        name = names[path]
        if path not in bound:
            if path in renamed:
                near = renamed[path]
                problems.append(
                    f"missing: `{path}` ({_where(name, checkpoint)}): the checkpoint stores "
                    f"`{near}`, one edit away; did you mean it? Rename the tensor, or bind the "
                    f'path to it in bindings.json: {{"{path}": "{near}"}}'
                )
            elif not spec.optional and spec.group is None:
                problems.append(f"missing: `{path}` ({_where(name, checkpoint)})")
            continue
        stored = checkpoint.tensors[name]
        where = _where(name, checkpoint)
        if not _shapes_bind(tuple(stored.shape), spec.shape):
            problems.append(
                f"wrong shape: `{path}` ({where}): stored {list(stored.shape)}, "
                f"declared {list(spec.shape)}{_shape_hint(tuple(stored.shape), spec.shape)}"
            )
        found = stored.linnet_dtype
        if found is None:
            problems.append(
                f"unsupported dtype: `{path}` ({where}): stored {stored.dtype}, "
                f"declared {spec.dtype}; Linnet has no {stored.dtype} type"
            )
        elif found != spec.dtype and not (cast_dtype and _castable(found, spec.dtype)):
            hint = (
                "; pass cast_dtype=True to convert"
                if _castable(found, spec.dtype)
                else "; cast_dtype converts only between floats or between integers"
            )
            problems.append(
                f"wrong dtype: `{path}` ({where}): stored {found}, declared {spec.dtype}{hint}"
            )
    return problems


def _shape_hint(stored: tuple[int, ...], declared: tuple[int, ...]) -> str:
    """Why two shapes with the same axes differ: a transposed matrix, permuted axes."""
    if len(stored) != len(declared) or sorted(stored) != sorted(declared):
        return ""
    if len(stored) == 2:
        return (
            "; the stored tensor is the declared one transposed: store its transpose "
            "(`.T` when converting)"
        )
    return "; the stored axes are the declared ones in another order: permute them when converting"


def _strict_problems(
    specs: Mapping[str, TensorSpec],
    names: dict[str, str],
    groups: dict[str, bool],
    checkpoint: Checkpoint,
    rules: Bindings,
    linked: set[str],
) -> list[str]:
    problems: list[str] = []
    for group, present in groups.items():
        if present or not all(groups[g] for g in groups if group.startswith(g + ".")):
            continue  # reported once, at the outermost absent group
        inside = [p for p, s in specs.items() if s.group == group or _within(s.group, group)]
        stored = [p for p in inside if names[p] in checkpoint.tensors]
        if stored:
            lacking = [
                p
                for p in inside
                if specs[p].group == group and not specs[p].optional and p not in stored
            ]
            problems.append(
                f"incomplete optional sub `{group}`: "
                + ", ".join(f"`{p}` ({_where(names[p], checkpoint)})" for p in lacking)
                + " missing while "
                + ", ".join(f"`{p}`" for p in stored)
                + " stored; strict=False treats the sub as absent"
            )
    used = set(names.values()) | linked  # a linked name was reported with its missing path
    for name, stored_tensor in checkpoint.tensors.items():
        if name not in used:
            where = "" if stored_tensor.file == IN_MEMORY else f" in {stored_tensor.file}"
            hint = (
                f" (the path `{name}` reads `{names[name]}` through the bindings)"
                if name in names
                else ""
            )
            problems.append(f"unexpected tensor `{name}`{where}: no parameter path binds it{hint}")
    keys = {rules.rule_for(path) for path in specs}
    for key in [*rules.exact, *(p.key for p in rules.patterns)]:
        if key not in keys:
            problems.append(
                f"unused binding: key `{key}` of {rules.source} matches no parameter path"
            )
    return problems


def _within(group: str | None, outer: str) -> bool:
    return group is not None and group.startswith(outer + ".")


def _castable(stored: str, declared: str) -> bool:
    return (stored in _FLOATS and declared in _FLOATS) or (
        stored in _INTEGERS and declared in _INTEGERS
    )


def _raise_if_any(problems: list[str], checkpoint: Checkpoint) -> None:
    if problems:
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise LinnetError(
            f"weights from {checkpoint.label} do not match the model ({count}):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


def _load(
    specs: Mapping[str, TensorSpec], bound: dict[str, str], checkpoint: Checkpoint
) -> dict[str, np.ndarray]:
    """Read every bound tensor; converted copies are shared between tied paths."""
    arrays: dict[str, np.ndarray] = {}
    converted: dict[tuple[str, str], np.ndarray] = {}
    problems: list[str] = []
    for path, name in track(bound.items(), "reading weights", total=len(bound)):
        declared = specs[path].dtype
        array = checkpoint.load(name)
        if checkpoint.tensors[name].linnet_dtype != declared:
            key = (name, declared)
            if key not in converted:
                converted[key] = _convert(array, declared, path, name, problems)
            array = converted[key]
        if array.shape != specs[path].shape:  # a stored scalar for a declared [1]
            array = array.reshape(specs[path].shape)
        arrays[path] = array
    _raise_if_any(problems, checkpoint)
    return arrays


def _shapes_bind(stored: tuple[int, ...], declared: tuple[int, ...]) -> bool:
    """Stored and declared shapes agree exactly, or a stored scalar meets `[1]`.

    Linnet has no rank-0 tensor types (language.md 5.1), so a `param` that a
    framework stores as a 0-d tensor (CLIP's `logit_scale`) is declared
    `Tensor[1; T]`; it binds the same single value.
    """
    return stored == declared or (stored == () and declared == (1,))


def _convert(
    array: np.ndarray, declared: str, path: str, name: str, problems: list[str]
) -> np.ndarray:
    """`cast_dtype`: floats round to nearest even; integers must fit exactly."""
    from linnet.ir.convert import convert  # imports ml_dtypes, which only casts need

    target = NUMPY_DTYPES[declared]
    if declared in _INTEGERS:
        info = np.iinfo(target)  # type: ignore[type-var]
        if array.size and (int(array.min()) < info.min or int(array.max()) > info.max):
            problems.append(
                f"cast_dtype: `{path}` (checkpoint name `{name}`): values "
                f"[{int(array.min())}, {int(array.max())}] do not fit {declared}"
            )
        return array.astype(target)
    with np.errstate(over="ignore"):
        result = convert(array, target)
    overflow = np.isinf(result) & np.isfinite(array)
    if overflow.any():
        problems.append(
            f"cast_dtype: `{path}` (checkpoint name `{name}`): {int(overflow.sum())} finite "
            f"value(s) overflow {declared}"
        )
    return result
