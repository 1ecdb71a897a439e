"""Identifiers for generated source: sanitised, unique, never a keyword or prelude name.

Stage: shared by translation and module assembly. In: names from a model
(ONNX value names such as `/model/layers.0/Mul_output_0`, `dim_param`s such
as `batch_size`, initializer names). Out: identifiers valid under section 2.4
that no declaration rule rejects (E1004 reserved words, E1207 prelude names,
keywords), unique within their scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from linnet.syntax.tokens import KEYWORDS, PRELUDE_NAMES, RESERVED

# Reduction words may name locals, but such a local can never be indexed
# (3.3 rule 3), so generated code avoids them; `std` heads import paths.
FORBIDDEN: frozenset[str] = (
    KEYWORDS | RESERVED | PRELUDE_NAMES | frozenset({"sum", "prod", "any", "all", "std", "_"})
)

_NON_IDENT = re.compile(r"[^A-Za-z0-9_]+")


def sanitize(text: str, fallback: str = "v") -> str:
    """An identifier close to `text`: other characters become `_`, a leading
    digit gets a prefix, forbidden words get a trailing `_`."""
    out = _NON_IDENT.sub("_", text).strip("_")
    out = re.sub(r"__+", "_", out)
    if not out:
        out = fallback
    if out[0].isdigit():
        out = f"{fallback}{out}"
    if out in FORBIDDEN:
        out += "_"
    return out


def snake(text: str) -> str:
    """`LayerNormalization` -> `layer_normalization`, for names derived from operators."""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", text)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return sanitize(s.lower())


def pascal(text: str) -> str:
    """`self_attn` -> `SelfAttn`, for block type names."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+|_", text) if p]
    out = "".join(p[:1].upper() + p[1:] for p in parts) or "Block"
    if out[0].isdigit():
        out = "B" + out
    if out in FORBIDDEN:
        out += "_"
    return out


class Namer:
    """Hands out unique identifiers in one scope: `x`, `x_2`, `x_3`, ..."""

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken: set[str] = set(taken)
        self._next: dict[str, int] = {}

    def reserve(self, name: str) -> None:
        self._taken.add(name)

    def taken(self, name: str) -> bool:
        return name in self._taken

    def fresh(self, hint: str) -> str:
        base = sanitize(hint)
        if base not in self._taken:
            self._taken.add(base)
            return base
        n = self._next.get(base, 2)
        while f"{base}_{n}" in self._taken:
            n += 1
        self._next[base] = n + 1
        name = f"{base}_{n}"
        self._taken.add(name)
        return name
