"""Golden tests of the Core IR text form (`linnet inspect --ir`)."""

from __future__ import annotations

import numpy as np

from linnet.ir.core import Builder, Program, TensorType, Value
from linnet.ir.printer import print_function, print_program

F32 = TensorType((), "f32")


def build_program() -> Program:
    x_type = TensorType((2, 4), "f32")
    b = Builder.for_function([("x", x_type), ("steps", TensorType((), "i64"))])
    x, steps = b.args
    w = b.param("layers.0.proj.weight", TensorType((4, 4), "f32"))
    h = b.contract(x, w, lhs_contract=(1,), rhs_contract=(1,))
    mean = b.reduce(h, "sum", (1,))
    cache = b.state("layers.0.cache", TensorType((2,), "f32"))

    def cond(rb: Builder, c: tuple[Value, ...]) -> list[Value]:
        return [rb.binary("lt", c[0], steps)]

    def body(rb: Builder, c: tuple[Value, ...]) -> list[Value]:
        return [
            rb.binary("add", c[0], rb.const(1, "i64")),
            rb.binary("mul", c[1], rb.const(0.5, "f32")),
        ]

    _, halved = b.while_([b.const(0, "i64"), mean], cond, body)
    (act,) = b.call(
        "std.nn.activation::relu",
        [halved],
        lambda rb, a: [rb.binary("max", a[0], rb.const(0.0, "f32"))],
        {"T": "f32", "Shape": (2,)},
    )
    new_cache = b.binary("add", cache, act)
    table = b.const(np.arange(20, dtype=np.int32).reshape(4, 5), "i32")
    pick = b.gather(table, b.const([3, 1], "i64"), axis=0)
    mask = b.const([[True, False]], "bool")
    fn = b.finish_function("step", [new_cache, pick, mask], {"layers.0.cache": new_cache})
    return Program(
        {"layers.0.proj.weight": TensorType((4, 4), "f32")},
        {"rope.inv_freq": TensorType((2,), "f32")},
        {"layers.0.cache": TensorType((2,), "f32")},
        {"step": fn},
        {"B": 2, "name": "tiny model"},
    )


GOLDEN = """\
generics {B=2, name="tiny model"}
param layers.0.proj.weight : f32[4,4]
buffer rope.inv_freq : f32[2]
state layers.0.cache : f32[2]

entry step(%0 x: f32[2,4], %1 steps: i64[]) -> (f32[2], i32[2,5], bool[1,2])
  %2 = param {path=layers.0.proj.weight} : f32[4,4]
  %3 = contract %0, %2 {lhs_batch=[], lhs_contract=[1], rhs_batch=[], rhs_contract=[1]} : f32[2,4]
  %4 = reduce %3 {axes=[1], kind=sum} : f32[2]
  %5 = state {path=layers.0.cache} : f32[2]
  %6 = const {value=0} : i64[]
  %7, %8 = while %6, %4 : i64[], f32[2]
    cond(%9: i64[], %10: f32[2]):
      %11 = lt %9, %1 : bool[]
      yield %11
    body(%12: i64[], %13: f32[2]):
      %14 = const {value=1} : i64[]
      %15 = add %12, %14 : i64[]
      %16 = const {value=0.5} : f32[]
      %17 = mul %13, %16 : f32[2]
      yield %15, %17
  %18 = call %8 {callee=std.nn.activation::relu, generics={Shape=[2], T=f32}} : f32[2]
    body(%19: f32[2]):
      %20 = const {value=0.0} : f32[]
      %21 = max %19, %20 : f32[2]
      yield %21
  %22 = add %5, %18 : f32[2]
  %23 = const {value=<i32[4,5]>} : i32[4,5]
  %24 = const {value=[3, 1]} : i64[2]
  %25 = gather %23, %24 {axis=0} : i32[2,5]
  %26 = const {value=[[true, false]]} : bool[1,2]
  return %22, %25, %26
  update layers.0.cache = %22
"""


def test_program_golden() -> None:
    assert print_program(build_program()) == GOLDEN


def test_printing_is_stable_across_builds() -> None:
    # Value ids differ between the two builds; the text must not.
    first = print_function(build_program().entries["step"])
    second = print_function(build_program().entries["step"])
    assert first == second


def test_float_constants_print_exactly() -> None:
    b = Builder()
    c = b.const([0.1, -2.5e-8, 1.0 / 3.0], "f32")
    bf = b.const(1.0 / 3.0, "bf16")
    fn = b.finish_function("k", [c, bf])
    text = print_function(fn)
    assert "%0 = const {value=[0.1, -2.5e-08, 0.33333334]} : f32[3]" in text
    assert float(np.float32("0.33333334")) == float(np.float32(1.0 / 3.0))
    assert "%1 = const {value=0.333984375} : bf16[]" in text
