"""A readable, stable text form of the Core IR (`linnet inspect --ir`, golden tests).

Stage: prints any `Function` or `Program`; nothing reads this text back. Values
are numbered `%0, %1, ...` in order of definition (inputs first), so the text
does not depend on the global value ids and two runs print the same thing.
Input names follow their number (`%0 x: f32[2,3]`). One op per line:

    %3 = add %1, %2 : f32[2,5]
    %4 = reduce %3 {axes=[1], kind=sum} : f32[2]

Attrs are sorted by name; strings that look like names or paths print bare,
others quoted; a constant shows its elements (floats in the shortest form that reads back
exactly) when it has at most
`MAX_CONST_ELEMENTS`, otherwise a `<f32[64,64]>` summary. Region ops print
their regions indented under the op, each headed by its role
(`cond`/`body` for while, `body` for for and call, `then`/`else` for if) and ending in
`yield`. A function ends with `return` and one `update <path> = %v` line per
state update; a program first lists its generics, params, buffers and state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from linnet.ir.core import FLOAT_DTYPES, Function, Op, Program, Region, TensorType, Value

MAX_CONST_ELEMENTS = 16
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:]*")  # names and paths print unquoted
_REGION_ROLES = {
    "while": ("cond", "body"),
    "for": ("body",),
    "if": ("then", "else"),
    "call": ("body", "gradient"),
}


def _number(value: object, dtype: str) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    if dtype == "bf16":
        return repr(float(value))  # type: ignore[arg-type]  # exact: bf16 has 8 significant bits
    if dtype in FLOAT_DTYPES:
        return str(value)  # NumPy's shortest text that reads back as the same f16/f32/f64
    return str(int(value))  # type: ignore[call-overload]


def _nested(array: object, dtype: str) -> str:
    shape = getattr(array, "shape", ())
    if shape:
        return "[" + ", ".join(_nested(item, dtype) for item in array) + "]"  # type: ignore[attr-defined]
    return _number(array, dtype)


def format_attr(value: object, result: TensorType | None = None) -> str:
    """One attr value: tuples as lists, strings quoted, constant arrays by element or summary."""
    if hasattr(value, "dtype") and hasattr(value, "tolist") and result is not None:
        if result.size > MAX_CONST_ELEMENTS:
            return f"<{result}>"
        return _nested(value, result.dtype)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(value.items()))
        return "{" + inner + "}"
    if isinstance(value, str):
        if _BARE.fullmatch(value):
            return value
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


class _Printer:
    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self.lines: list[str] = []

    def name(self, value: Value) -> str:
        if value not in self.names:
            self.names[value] = f"%{len(self.names)}"
        return self.names[value]

    def names_of(self, values: Sequence[Value]) -> str:
        return ", ".join(self.name(v) for v in values)

    def region(self, region: Region, indent: str) -> None:
        for op in region.ops:
            self.op(op, indent)
        self.lines.append(f"{indent}yield {self.names_of(region.results)}".rstrip())

    def op(self, op: Op, indent: str) -> None:
        operands = self.names_of(op.operands)
        result_type = op.results[0].type if op.kind == "const" else None
        attrs = ", ".join(
            f"{key}={format_attr(op.attrs[key], result_type)}" for key in sorted(op.attrs)
        )
        types = ", ".join(str(v.type) for v in op.results)
        text = op.kind
        if operands:
            text += " " + operands
        if attrs:
            text += " {" + attrs + "}"
        results = self.names_of(op.results)
        prefix = f"{results} = " if results else ""
        self.lines.append(f"{indent}{prefix}{text} : {types}".rstrip(" :"))
        roles = _REGION_ROLES.get(op.kind, ())
        for index, region in enumerate(op.regions):
            role = roles[index] if index < len(roles) else f"region{index}"
            args = ", ".join(f"{self.name(a)}: {a.type}" for a in region.args)
            self.lines.append(f"{indent}  {role}({args}):")
            self.region(region, indent + "    ")

    def function(self, fn: Function) -> None:
        inputs = ", ".join(
            f"{self.name(v)}{' ' + name if name else ''}: {v.type}" for name, v in fn.inputs
        )
        results = ", ".join(str(v.type) for v in fn.results)
        self.lines.append(f"entry {fn.name}({inputs}) -> ({results})")
        for op in fn.body.ops:
            self.op(op, "  ")
        self.lines.append(f"  return {self.names_of(fn.results)}".rstrip())
        for path, value in fn.state_updates.items():
            self.lines.append(f"  update {path} = {self.name(value)}")


def print_function(fn: Function) -> str:
    """The text form of one function (ends with a newline)."""
    printer = _Printer()
    printer.function(fn)
    return "\n".join(printer.lines) + "\n"


def print_program(program: Program) -> str:
    """Generics, declared params/buffers/state, then every entry."""
    lines: list[str] = []
    if program.generics:
        lines.append(f"generics {format_attr(program.generics)}")
    for kind, table in (
        ("param", program.params),
        ("buffer", program.buffers),
        ("state", program.state),
    ):
        lines.extend(f"{kind} {path} : {t}" for path, t in table.items())
    text = "\n".join(lines) + "\n" if lines else ""
    for fn in program.entries.values():
        text += ("\n" if text else "") + print_function(fn)
    return text
