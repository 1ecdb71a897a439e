"""A small materializer for plan documents, used only by the tests (language.md 19, 6.7).

It reads nothing but the JSON: generics are bound by symbol number, blocks
are paths into a weights dict, and every op is evaluated element by element
in NumPy (floats in f64, integers in i64 with C-style truncating division),
slowly and obviously. `tests/test_plan_semantics.py` runs the language.md
examples through it and compares with NumPy written directly, so the plan is
checked to *mean* the program, not just to have the right shape.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

FLOATS = ("f16", "bf16", "f32", "f64")


class Some:
    def __init__(self, value: Any) -> None:
        self.value = value


class Block:
    """A block instance: its path prefix (`hidden.1.`)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix


class Env:
    """Symbol numbers to values (`sym`/`pack`/`var`), and index numbers to positions."""

    def __init__(self, syms: dict[int, Any], vars_: dict[int, str]) -> None:
        self.syms = syms
        self.vars = vars_
        self.indices: dict[int, Any] = {}

    def child(self) -> Env:
        env = Env(dict(self.syms), dict(self.vars))
        env.indices = dict(self.indices)
        return env


def dim(d: Any, env: Env) -> int:
    if isinstance(d, int):
        return d
    if "sym" in d:
        return int(env.syms[d["sym"]])
    if "packsize" in d:
        return math.prod(env.syms[d["packsize"]])
    args = [dim(a, env) for a in d["args"]]
    op = d["op"]
    if op == "add":
        return sum(args)
    if op == "mul":
        return math.prod(args)
    a, b = args
    if op == "floordiv":
        return a // b
    if op == "mod":
        return a % b
    return min(a, b) if op == "min" else max(a, b)


def shape(units: Sequence[Any], env: Env) -> tuple[int, ...]:
    out: list[int] = []
    for u in units:
        if isinstance(u, dict) and "pack" in u:
            out.extend(env.syms[u["pack"]])
        else:
            out.append(dim(u, env))
    return tuple(out)


def dtype_name(dt: Any, env: Env) -> str:
    return dt if isinstance(dt, str) else env.vars[dt["var"]]


def np_dtype(name: str) -> Any:
    if name in FLOATS:
        return np.float64
    return np.bool_ if name == "bool" else np.int64


class Materializer:
    """Runs functions of one plan with given weights and state."""

    def __init__(
        self,
        plan: dict[str, Any],
        weights: dict[str, np.ndarray[Any, Any]],
        state: dict[str, np.ndarray[Any, Any]] | None = None,
    ) -> None:
        self.plan = plan
        self.functions = {f["name"]: f for f in plan["functions"]}
        self.weights = weights
        self.state = state if state is not None else {}

    def root_env(self, generics: dict[str, Any]) -> Env:
        env = Env({}, {})
        for g in self.plan["root"]["generics"] if self.plan["root"] else []:
            value = generics.get(g["name"], g.get("default"))
            if "var" in g:
                env.vars[g["var"]] = value
            else:
                env.syms[g["sym"]] = value
        return env

    def call(
        self,
        name: str,
        args: Sequence[Any],
        generics: dict[str, Any],
        block: Block | None = None,
        env: Env | None = None,
    ) -> Any:
        fn = self.functions[name]
        env = env.child() if env is not None else self.root_env(generics)
        for g in fn["generics"]:
            if g["name"] in generics:
                if "var" in g:
                    env.vars[g["var"]] = generics[g["name"]]
                else:
                    env.syms[g["sym"]] = generics[g["name"]]
        if block is None and fn["block"] is not None:
            block = Block("")
        return self.run_function(fn, args, env, block)

    def run_function(
        self, fn: dict[str, Any], args: Sequence[Any], env: Env, block: Block | None
    ) -> Any:
        values: dict[int, Any] = {}
        body = fn["body"]
        for arg, value in zip(body["args"], args, strict=True):
            values[arg["id"]] = value
        out = self.region(body, values, env, block)
        return out[0] if len(out) == 1 else tuple(out)

    def region(
        self, region: dict[str, Any], values: dict[int, Any], env: Env, block: Block | None
    ) -> list[Any]:
        for op in region["ops"]:
            if op["kind"] in ("yield", "return"):
                return [values[i] for i in op["operands"]]
            results = self.op(op, values, env, block)
            for result, value in zip(op["results"], results, strict=True):
                values[result["id"]] = value
        raise AssertionError("a region without a terminator")

    def sub_region(
        self,
        region: dict[str, Any],
        args: Sequence[Any],
        values: dict[int, Any],
        env: Env,
        block: Block | None,
    ) -> list[Any]:
        inner = dict(values)
        for arg, value in zip(region["args"], args, strict=True):
            inner[arg["id"]] = value
        return self.region(region, inner, env, block)

    # -- ops -------------------------------------------------------------------------

    def op(
        self, op: dict[str, Any], values: dict[int, Any], env: Env, block: Block | None
    ) -> list[Any]:
        kind, attrs = op["kind"], op["attrs"]
        xs = [values[i] for i in op["operands"]]
        rtype = op["results"][0]["type"] if op["results"] else None
        if kind.startswith("const."):
            value = attrs["value"]
            if kind == "const.dim":
                value = dim(value, env)
            return [self.typed(value, rtype, env)]
        if kind == "enum.const":
            return [attrs["variant"]]
        if kind in BINARY:
            a, b = xs
            return [self.typed(BINARY[kind](a, b, self.is_int(rtype, env)), rtype, env)]
        if kind == "compare":
            return [COMPARE[attrs["predicate"]](np.asarray(xs[0]), np.asarray(xs[1]))]
        if kind in UNARY:
            return [self.typed(UNARY[kind](np.asarray(xs[0], dtype=np.float64)), rtype, env)]
        if kind == "abs":
            return [np.abs(xs[0])]
        if kind == "neg":
            return [-np.asarray(xs[0])]
        if kind == "not":
            return [np.logical_not(xs[0])]
        if kind == "cast":
            target = dtype_name(attrs["dtype"], env)
            x = np.asarray(xs[0])
            if target not in FLOATS and x.dtype == np.float64:
                x = np.trunc(x)
            return [x.astype(np_dtype(target))]
        if kind == "select":
            return [np.where(*[np.asarray(x) for x in xs])]
        if kind == "reshape":
            return [np.reshape(xs[0], shape(attrs["shape"], env))]
        if kind == "broadcast":
            return [np.broadcast_to(xs[0], shape(attrs["shape"], env))]
        if kind == "permute":
            return [np.transpose(xs[0], attrs["perm"])]
        if kind == "concat":
            return [np.concatenate(xs, axis=attrs["axis_from_end"])]
        if kind == "iota":
            dt = np_dtype(dtype_name(attrs["dtype"], env))
            return [np.arange(dim(attrs["length"], env)).astype(dt)]
        if kind == "fill":
            return [np.full(shape(attrs["shape"], env), xs[0])]
        if kind == "slice":
            return [self.slice(xs, attrs["axes"], env)]
        if kind == "tensor.element":
            return [self.element(xs, attrs["components"], env)]
        if kind == "comprehension":
            return [self.comprehension(op, values, env, block)]
        if kind == "reduce":
            return [self.reduce(op, values, env, block)]
        if kind == "tuple.make":
            return [tuple(xs)]
        if kind == "tuple.get":
            return [xs[0][attrs["index"]]]
        if kind == "option.some":
            return [Some(xs[0])]
        if kind == "option.none":
            return [None]
        if kind == "option.match":
            some, none = op["regions"]
            if isinstance(xs[0], Some):
                return self.sub_region(some, [xs[0].value], values, env, block)
            return self.sub_region(none, [], values, env, block)
        if kind == "enum.match":
            for arm, region in zip(attrs["arms"], op["regions"], strict=True):
                if arm.get("catch_all") or arm["variant"] == xs[0]:
                    return self.sub_region(region, [], values, env, block)
            raise AssertionError("no arm matched")
        if kind == "if":
            then, otherwise = op["regions"]
            return self.sub_region(then if xs[0] else otherwise, [], values, env, block)
        if kind == "while":
            cond, body = op["regions"]
            carried = list(xs)
            while self.sub_region(cond, carried, values, env, block)[0]:
                carried = self.sub_region(body, carried, values, env, block)
            return carried
        if kind in ("static_for", "static_range"):
            return self.static_loop(op, xs, values, env, block)
        if kind == "for":
            return self.runtime_for(op, xs, values, env, block)
        if kind in ("call", "semantic.call"):
            return [self.call_op(op, xs, env, block)]
        if kind in ("block.param", "block.sub", "state.read"):
            owner = xs[0] if xs else block
            assert isinstance(owner, Block)
            path = owner.prefix + attrs["member"]
            if kind == "block.param":
                found = self.weights.get(path)
                return [found if rtype["kind"] != "optional" or found is None else Some(found)]
            if kind == "state.read":
                return [self.state.get(path, np.zeros(shape(rtype["shape"], env)))]
            return [self.sub(path, rtype, env)]
        if kind == "state.write":
            assert block is not None
            self.state[block.prefix + attrs["member"]] = xs[0]
            return []
        if kind == "array.get":
            return [xs[0][attrs["position"]]]
        if kind == "struct.get":
            return [xs[0][attrs["field"]]]
        raise AssertionError(f"the materializer does not know `{kind}`")

    def typed(self, value: Any, rtype: Any, env: Env) -> Any:
        if rtype is None or rtype["kind"] not in ("scalar", "tensor"):
            return value
        return np.asarray(value).astype(np_dtype(dtype_name(rtype["dtype"], env)))

    def is_int(self, rtype: Any, env: Env) -> bool:
        return (
            rtype["kind"] in ("scalar", "tensor") and dtype_name(rtype["dtype"], env) not in FLOATS
        )

    def sub(self, path: str, rtype: Any, env: Env) -> Any:
        if rtype["kind"] == "array":
            return [Block(f"{path}.{i}.") for i in range(dim(rtype["length"], env))]
        if rtype["kind"] == "optional":
            present = any(key.startswith(path + ".") for key in self.weights)
            return Some(Block(path + ".")) if present else None
        return Block(path + ".")

    def slice(self, xs: list[Any], axes: list[Any], env: Env) -> Any:
        x = np.asarray(xs[0])
        index: list[Any] = []
        for axis in axes:
            if axis.get("whole"):
                unit = axis["unit"]
                covered = (
                    len(env.syms[unit["pack"]]) if isinstance(unit, dict) and "pack" in unit else 1
                )
                index.extend([slice(None)] * covered)
            elif axis.get("squeeze"):
                index.append(
                    dim(axis["index"], env) if "index" in axis else int(xs[axis["operand"]])
                )
            else:
                index.append(slice(dim(axis["start"], env), dim(axis["stop"], env), axis["step"]))
        return x[tuple(index)]

    def element(self, xs: list[Any], components: list[Any], env: Env) -> Any:
        index: list[int] = []
        for c in components:
            if "index" in c:
                index.append(env.indices[c["index"]])
            elif "pack" in c:
                index.extend(env.indices[c["pack"]])
            elif "position" in c:
                index.append(dim(c["position"], env))
            else:
                index.append(int(xs[c["operand"]]))
        return np.asarray(xs[0])[tuple(index)]

    def domain(self, decl: dict[str, Any], env: Env) -> list[Any]:
        if decl["pack"]:
            return list(itertools.product(*(range(n) for n in shape(decl["domain"], env))))
        return list(range(dim(decl["domain"], env)))

    def comprehension(
        self, op: dict[str, Any], values: dict[int, Any], env: Env, block: Block | None
    ) -> Any:
        decls = op["attrs"]["indices"]
        domains = [self.domain(d, env) for d in decls]
        out_shape: list[int] = []
        for d in decls:
            out_shape.extend(shape(d["domain"], env) if d["pack"] else [dim(d["domain"], env)])
        rtype = op["results"][0]["type"]
        out = np.zeros(out_shape, dtype=np_dtype(dtype_name(rtype["dtype"], env)))
        for point in itertools.product(*domains):
            inner = env.child()
            position: list[int] = []
            for d, p in zip(decls, point, strict=True):
                inner.indices[d["index"]] = p
                position.extend(p if d["pack"] else [p])
            (value,) = self.sub_region(op["regions"][0], [], values, inner, block)
            out[tuple(position)] = value
        return out

    def reduce(
        self, op: dict[str, Any], values: dict[int, Any], env: Env, block: Block | None
    ) -> Any:
        attrs = op["attrs"]
        decls = attrs["indices"]
        items = []
        for point in itertools.product(*(self.domain(d, env) for d in decls)):
            inner = env.child()
            for d, p in zip(decls, point, strict=True):
                inner.indices[d["index"]] = p
            items.append(self.sub_region(op["regions"][0], [], values, inner, block)[0])
        reducer = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
                   "any": np.any, "all": np.all}[attrs["kind"]]  # fmt: skip
        return reducer(np.asarray(items))

    def static_loop(
        self,
        op: dict[str, Any],
        xs: list[Any],
        values: dict[int, Any],
        env: Env,
        block: Block | None,
    ) -> list[Any]:
        (body,) = op["regions"]
        if op["kind"] == "static_for":
            elements, carried = xs[0], list(xs[1:])
        else:
            attrs = op["attrs"]
            elements = [
                np.int64(i) for i in range(dim(attrs["start"], env), dim(attrs["stop"], env))
            ]
            carried = list(xs)
        for element in elements:
            carried = self.sub_region(body, [element, *carried], values, env, block)
        return carried

    def runtime_for(
        self,
        op: dict[str, Any],
        xs: list[Any],
        values: dict[int, Any],
        env: Env,
        block: Block | None,
    ) -> list[Any]:
        """A runtime `for` (language-extensions 1): carried values, then stacked scan rows."""
        (body,) = op["regions"]
        attrs = op["attrs"]
        carried = list(xs)
        scans = op["results"][len(xs) :]
        rows: list[list[Any]] = [[] for _ in scans]
        for i in range(dim(attrs["start"], env), dim(attrs["stop"], env)):
            out = self.sub_region(body, [np.int64(i), *carried], values, env, block)
            carried = out[: len(carried)]
            for collected, row in zip(rows, out[len(carried) :], strict=True):
                collected.append(row)
        stacked = [
            np.stack(collected) if collected else np.zeros(shape(result["type"]["shape"], env))
            for collected, result in zip(rows, scans, strict=True)
        ]
        return [*carried, *stacked]

    def call_op(self, op: dict[str, Any], xs: list[Any], env: Env, block: Block | None) -> Any:
        attrs = op["attrs"]
        fn = self.functions[attrs["callee"]]
        inner = env.child()
        inner.indices = {}
        for entry in attrs["substitution"]:
            if "var" in entry:
                inner.vars[entry["var"]] = dtype_name(entry["value"], env)
            elif "pack" in entry:
                inner.syms[entry["pack"]] = shape(entry["value"], env)
            else:
                inner.syms[entry["sym"]] = dim(entry["value"], env)
        callee_block = xs[0] if attrs["receiver"] else (block if fn["block"] is not None else None)
        args = xs[1:] if attrs["receiver"] else xs
        return self.run_function(fn, args, inner, callee_block)


def _div(a: Any, b: Any, integer: bool) -> Any:
    if integer:
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        return np.trunc(a / b).astype(np.int64)
    return np.asarray(a, dtype=np.float64) / b


def _rem(a: Any, b: Any, integer: bool) -> Any:
    return np.fmod(a, b)


BINARY = {
    "add": lambda a, b, i: np.add(a, b),
    "sub": lambda a, b, i: np.subtract(a, b),
    "mul": lambda a, b, i: np.multiply(a, b),
    "div": _div,
    "rem": _rem,
    "max": lambda a, b, i: np.maximum(a, b),
    "min": lambda a, b, i: np.minimum(a, b),
    "and": lambda a, b, i: np.logical_and(a, b),
    "or": lambda a, b, i: np.logical_or(a, b),
    "bitand": lambda a, b, i: np.bitwise_and(a, b),
    "bitor": lambda a, b, i: np.bitwise_or(a, b),
    "bitxor": lambda a, b, i: np.bitwise_xor(a, b),
    "shl": lambda a, b, i: np.left_shift(a, b),
    "shr": lambda a, b, i: np.right_shift(a, b),
}
COMPARE = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}  # fmt: skip
UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
}  # fmt: skip
