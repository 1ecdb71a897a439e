"""Did-you-mean: the name a misspelt one most likely meant (issue 11, "one error per mistake").

Stage: used by the module loader (E1202) and the checker (E1201, E2107, E3101)
when a lookup fails. In: the unknown spelling and the names that were visible.
Out: at most one suggestion, as a help line.

Spellings are compared by `linnet.spelling` (edit distance, or the same
letters ignoring case and underscores: `LayerNorm` for `layer_norm`, the
PyTorch class name of a std function); callers order candidates from the
innermost scope out, since ties go to the first.

The standard library is indexed lazily (`std_items`), so a name that is not
imported can be found in the std module that declares it: `layer_norm` ->
`use std.nn.norm::{layer_norm}`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from linnet.spelling import closest

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


# ---------------------------------------------------------------- the std library

_PUB_ITEM = re.compile(r"^pub\s+(fn|op|entry|block|const|struct|enum|type)\s+([A-Za-z_]\w*)", re.M)
# What a lookup wants (`check.unknown`) -> the declaration keywords that can be meant.
_KEYWORDS_FOR = {
    "function": ("fn", "op", "entry"),
    "type": ("block", "struct", "enum", "type"),
    "value": ("const",),
}


def std_items(std_root: Path, head: str = "std") -> dict[str, tuple[tuple[str, str], ...]]:
    """Every public top-level item under a root: name -> (module path, keyword) pairs.

    The std library (`head` "std"), or a package's `src/` (`head` "crate"). A
    textual scan (top-level `pub` declarations start a line), so it costs
    nothing until a lookup fails and needs no module imported. Cached per
    root and file modification times.
    """
    if not std_root.is_dir():
        return {}
    files = tuple(
        (str(f), f.stat().st_mtime_ns) for f in sorted(std_root.rglob("*.linnet")) if f.is_file()
    )
    return _scan(std_root, head, files)


@lru_cache(maxsize=8)
def _scan(
    std_root: Path, head: str, files: tuple[tuple[str, int], ...]
) -> dict[str, tuple[tuple[str, str], ...]]:
    found: dict[str, list[tuple[str, str]]] = {}
    for name, _ in files:
        file = Path(name)
        parts = file.relative_to(std_root).with_suffix("").parts
        if head == "crate" and parts == ("lib",):
            continue  # the package root imports the others; nothing imports it
        module = ".".join((head, *parts))
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in _PUB_ITEM.finditer(text):
            found.setdefault(match.group(2), []).append((module, match.group(1)))
    return {item: tuple(places) for item, places in found.items()}


def std_import_help(
    name: str, std_root: Path | None, want: str, head: str = "std"
) -> tuple[str, ...]:
    """Help for a name a module under the root declares as `want` asks (exactly, or close)."""
    if std_root is None or want not in _KEYWORDS_FOR:
        return ()
    keywords = _KEYWORDS_FOR[want]
    modules: dict[str, str] = {}
    for item, places in std_items(std_root, head).items():
        for module, keyword in places:
            if keyword in keywords:
                modules.setdefault(item, module)
    spelled = name if name in modules else closest(name, sorted(modules))
    if spelled is None:
        return ()
    module = modules[spelled]
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
