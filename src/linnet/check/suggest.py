"""Did-you-mean: the name a misspelt one most likely meant (issue 11, "one error per mistake").

Stage: used by the module loader (E1202) and the checker (E1201, E2107, E3101)
when a lookup fails. In: the unknown spelling and the names that were visible.
Out: at most one suggestion, as a help line.

A candidate is suggested when its edit distance (optimal string alignment:
insertions, deletions, substitutions and swaps of two neighbours, as rustc's
`edit_distance`) is at most a third of the longer name (at least 1), or when
both spell the same letters ignoring case and underscores (`LayerNorm` for
`layer_norm`, the PyTorch class name of a std function). Ties go to the
candidate that comes first in the list, so callers order candidates from the
innermost scope out.

The standard library is indexed lazily (`std_items`), so a name that is not
imported can be found in the std module that declares it: `layer_norm` ->
`use std.nn.norm::{layer_norm}`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

# PyTorch spellings with no letter-for-letter Linnet counterpart: a std item
# (`module::item`), a prelude function (a bare name), or a phrase.
TORCH_NAMES: dict[str, str] = {
    "matmul": "std.linalg::matmul",
    "mm": "std.linalg::matmul",
    "bmm": "std.linalg::batched_matmul",
    "einsum": "written in index notation: `let y[i, j] = sum[k] a[i, k] * b[k, j]`",
    "transpose": "std.linalg::transpose",
    "view": "reshape",
    "flatten": "reshape",
    "unsqueeze": "reshape",
    "squeeze": "reshape",
    "cat": "concat",
    "expand": "broadcast_to",
    "clamp": "written `max(x, lo)` / `min(x, hi)`",
    "maximum": "max",
    "minimum": "min",
    "arange": "iota",
    "full": "fill",
    "zeros": "fill",
    "ones": "fill",
    "mean": "written in index notation: `sum[i] x[i] / N`",
    "Dropout": "the identity at inference: remove the call",
    "dropout": "the identity at inference: remove the call",
}


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance (a swap of two neighbours counts once)."""
    if a == b:
        return 0
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def _folded(name: str) -> str:
    return name.replace("_", "").lower()


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate `name` most likely misspells, or None when none is close."""
    folded = _folded(name)
    best: str | None = None
    best_distance = max(1, max(len(name), 3) // 3) + 1
    for candidate in candidates:
        if candidate == name:
            continue
        if _folded(candidate) == folded:
            return candidate
        if abs(len(candidate) - len(name)) >= best_distance:
            continue
        distance = edit_distance(name, candidate)
        if (
            distance < best_distance
            and distance < len(name)
            and distance <= max(1, max(len(name), len(candidate)) // 3)
        ):
            best, best_distance = candidate, distance
    return best


def did_you_mean(name: str, candidates: Iterable[str], what: str = "") -> tuple[str, ...]:
    """`("did you mean `x`?",)` or `()`; `what` names the kind (`the method `x``)."""
    found = closest(name, candidates)
    if found is None:
        return ()
    return (f"did you mean {what + ' ' if what else ''}`{found}`?",)


# ---------------------------------------------------------------- the std library

_PUB_ITEM = re.compile(r"^pub\s+(fn|op|entry|block|const|struct|enum|type)\s+([A-Za-z_]\w*)", re.M)


@lru_cache(maxsize=4)
def std_items(std_root: Path) -> dict[str, tuple[str, ...]]:
    """Every public top-level item of the std library: name -> modules declaring it.

    A textual scan (top-level `pub` declarations start a line), so it costs
    nothing until a lookup fails, and never needs the modules to be imported.
    """
    found: dict[str, list[str]] = {}
    if not std_root.is_dir():
        return {}
    for file in sorted(std_root.rglob("*.linnet")):
        module = ".".join(("std", *file.relative_to(std_root).with_suffix("").parts))
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in _PUB_ITEM.finditer(text):
            found.setdefault(match.group(2), []).append(module)
    return {name: tuple(modules) for name, modules in found.items()}


def std_modules(std_root: Path) -> list[str]:
    """Every std module as a dotted path (`std.nn.norm`), sorted."""
    if not std_root.is_dir():
        return []
    return sorted(
        ".".join(("std", *f.relative_to(std_root).with_suffix("").parts))
        for f in std_root.rglob("*.linnet")
    )


def std_import_help(name: str, std_root: Path | None) -> tuple[str, ...]:
    """Help for a name that a std module declares (exactly, or as a close spelling)."""
    if std_root is None:
        return ()
    items = std_items(std_root)
    spelled = name if name in items else closest(name, sorted(items))
    if spelled is None:
        return ()
    module = items[spelled][0]
    if spelled == name:
        return (f"`{name}` is declared in `{module}`: add `use {module}::{{{name}}}`",)
    return (f"did you mean `{spelled}` of `{module}`? add `use {module}::{{{spelled}}}`",)


def torch_help(name: str) -> tuple[str, ...]:
    """A hint for a PyTorch spelling without a letter-for-letter Linnet name."""
    target = TORCH_NAMES.get(name)
    if target is None:
        return ()
    if "::" in target and " " not in target:
        module, _, item = target.partition("::")
        return (f"PyTorch's `{name}` is `{item}` in Linnet: add `use {module}::{{{item}}}`",)
    if target.isidentifier():
        return (f"PyTorch's `{name}` is the prelude function `{target}` in Linnet",)
    return (f"PyTorch's `{name}` is {target}",)
