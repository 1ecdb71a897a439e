"""`Value`: what translation knows about one tensor of the importer graph.

Stage: translation (`linnet.sourcegen.translate`). A value has a static type
(symbolic shape of `Dim`s, a Linnet dtype name) and, when known, a
compile-time value: `const` (a NumPy array: an initializer, a `Constant`
node, or anything folded from constants) and/or `elements` (the symbolic
integers a shape computation holds, `[batch, seq, 12, 64]`). Translators use
the compile-time value to fold shape subgraphs into dimension expressions;
the runtime form (`expr`) is made only when some translator asks for it
(`Context.ref`), so a constant used only as a `Reshape` target never becomes
a member or a statement.
"""

from __future__ import annotations

import numpy as np

from linnet.check.dims import Dim
from linnet.syntax import ast

FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64"})
INT_DTYPES = frozenset({"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"})
NUMERIC_DTYPES = FLOAT_DTYPES | INT_DTYPES
DTYPES = NUMERIC_DTYPES | {"bool"}


class Value:
    """One tensor: its type, its compile-time value if known, its Linnet expression.

    - `shape`: one `Dim` per axis; `()` is a scalar (Linnet has no rank-0
      tensors, 5.1: a rank-0 ONNX tensor is a scalar value).
    - `dtype`: a Linnet dtype name.
    - `const`: the value as an array, when known at import time.
    - `elements`: for integer values used as shapes, sizes or indices, the
      elements in row-major order as dimensions (`Dim`), possibly symbolic.
    - `expr`: the expression that reads the value in generated code, or None
      until `Context.ref` materialises it.
    - `source`: the stored tensor (initializer) it comes from, if any.
    """

    __slots__ = ("const", "dtype", "elements", "expr", "shape", "source")

    def __init__(
        self,
        shape: tuple[Dim, ...],
        dtype: str,
        *,
        expr: ast.Expr | None = None,
        const: np.ndarray | None = None,
        elements: tuple[Dim, ...] | None = None,
        source: str | None = None,
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.expr = expr
        self.const = const
        self.elements = elements
        self.source = source
        if const is not None and elements is None and dtype in INT_DTYPES and const.size <= 64:
            self.elements = tuple(Dim.const(int(v)) for v in const.reshape(-1))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_scalar(self) -> bool:
        return not self.shape

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def static_shape(self) -> tuple[int, ...] | None:
        """The shape as integers, when every extent is a constant."""
        out: list[int] = []
        for d in self.shape:
            v = d.as_int()
            if v is None:
                return None
            out.append(v)
        return tuple(out)

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        what = " const" if self.const is not None else ""
        return f"Value([{dims}; {self.dtype}]{what})"
