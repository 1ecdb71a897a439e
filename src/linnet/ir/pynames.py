"""Readable, unique Python names for IR values, for the backends that generate Python.

Stage: shared by the code generators of `linnet.torch` and `linnet.jax`. A value keeps
its source name where it is a valid identifier (`x`, `layers_0_q_weight`), else gets
`v<n>`; a name already taken (a module the generated code imports, an earlier value)
gets a `_2`, `_3` suffix. Each generator passes the names its code reserves.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable

from linnet.ir.core import Value


class Namer:
    """Names for the values of one generated function (see the module docstring)."""

    def __init__(self, reserved: Iterable[str]) -> None:
        self.names: dict[Value, str] = {}
        self.taken: set[str] = set(reserved)
        self.count = 0

    def __call__(self, value: Value) -> str:
        found = self.names.get(value)
        if found is None:
            found = self.names[value] = self.fresh(value.name)
        return found

    def fresh(self, hint: str = "") -> str:
        base = re.sub(r"\W+", "_", hint).strip("_")
        if not base or not base.isidentifier() or keyword.iskeyword(base) or base[0].isdigit():
            self.count += 1
            base = f"v{self.count}"
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name
