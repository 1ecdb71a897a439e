"""Clean-ups of plan regions: merge identical values, drop unused ones (`linnet plan` default).

Stage: the last step of `linnet.plan`, skipped by `--no-optimize`. In: a
region of the plan (`linnet.plan.body`), rewritten in place. Out: the same
computation with fewer ops:

- common subexpressions: an op without regions and without effects whose
  kind, operands, attrs and result types equal an earlier op in the same
  region or an enclosing one reuses that op's results (regions may read
  values of enclosing regions, never of nested ones);
- dead values: an op without effects whose results are never used is
  removed, repeatedly, including ops with regions whose nested ops have no
  effects.

Effects that are never merged, moved or removed (12.6: "no optimisation may
drop, fuse or swap the order of two state accesses"): `state.read`,
`state.write`, calls of functions with a state footprint (`stateful`), the
terminators `yield` and `return`, and `while` (a loop the language does not
promise to end, 13.3).
"""

from __future__ import annotations

import json

from linnet.plan.values import JSON

Json = dict[str, JSON]

_EFFECTS = frozenset({"state.read", "state.write", "yield", "return", "while"})


def optimize_region(region: Json) -> None:
    """Merge identical values, then drop unused ones, in `region` and everything nested."""
    _merge(region, {}, {})
    while _prune(region, _uses(region)):
        pass


def _has_effect(op: Json) -> bool:
    kind = op["kind"]
    if kind in _EFFECTS:
        return True
    attrs = op["attrs"]
    if kind in ("call", "semantic.call") and isinstance(attrs, dict) and attrs.get("stateful"):
        return True
    return any(_has_effect(inner) for r in _regions(op) for inner in _ops(r))


def _ops(region: Json) -> list[Json]:
    ops = region["ops"]
    assert isinstance(ops, list)
    return ops


def _regions(op: Json) -> list[Json]:
    regions = op["regions"]
    assert isinstance(regions, list)
    return regions


def _merge(region: Json, seen: dict[str, list[int]], renamed: dict[int, int]) -> None:
    kept: list[Json] = []
    for op in _ops(region):
        operands = op["operands"]
        assert isinstance(operands, list)
        op["operands"] = [renamed.get(i, i) for i in operands]
        for inner in _regions(op):
            _merge(inner, dict(seen), renamed)
        results = op["results"]
        assert isinstance(results, list)
        if _regions(op) or _has_effect(op) or not results:
            kept.append(op)
            continue
        key = json.dumps(
            [op["kind"], op["operands"], op["attrs"], [r["type"] for r in results]],
            sort_keys=True,
        )
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = [r["id"] for r in results]
            kept.append(op)
        else:
            for value, replacement in zip(results, earlier, strict=True):
                renamed[value["id"]] = replacement
    region["ops"] = kept


def _uses(region: Json, acc: set[int] | None = None) -> set[int]:
    acc = set() if acc is None else acc
    for op in _ops(region):
        operands = op["operands"]
        assert isinstance(operands, list)
        acc.update(operands)
        for inner in _regions(op):
            _uses(inner, acc)
    return acc


def _prune(region: Json, uses: set[int]) -> bool:
    """Remove dead ops once; True if anything changed (uses may then shrink further)."""
    changed = False
    kept: list[Json] = []
    for op in _ops(region):
        results = op["results"]
        assert isinstance(results, list)
        dead = bool(results) and not any(r["id"] in uses for r in results)
        if dead and not _has_effect(op):
            changed = True
            continue
        for inner in _regions(op):
            changed = _prune(inner, uses) or changed
        kept.append(op)
    region["ops"] = kept
    return changed
