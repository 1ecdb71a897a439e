"""The per-op rules of `linnet.ir.ops`: inferred result types and rejections of malformed ops."""

from __future__ import annotations

import numpy as np
import pytest

from linnet.errors import InternalError
from linnet.ir import ops
from linnet.ir.core import Builder, TensorType


def t(shape: tuple[int, ...], dtype: str = "f32") -> TensorType:
    return TensorType(shape, dtype)


def infer(
    op_kind: str,
    *operands: TensorType,
    given: tuple[TensorType, ...] | None = None,
    **attrs: object,
) -> tuple[TensorType, ...]:
    return ops.infer(op_kind, operands, attrs, (), given)


def test_every_kind_of_the_contract_has_a_rule() -> None:
    contract = {
        "const", "iota", "param", "buffer", "state", "cast",
        "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "abs", "not",
        "add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor", "shl", "shr",
        "eq", "ne", "lt", "le", "gt", "ge", "select", "broadcast", "reshape", "permute",
        "slice", "concat", "gather", "take", "reduce", "contract", "while", "if", "call",
        "cumsum",  # language-extensions 0.5
        "for",  # language-extensions 0.5
    }  # fmt: skip
    assert contract == ops.OP_KINDS


@pytest.mark.parametrize(
    ("kind", "operands", "attrs", "expected"),
    [
        ("add", (t((2, 1, 3)), t((4, 1))), {}, t((2, 4, 3))),
        ("lt", (t((3,), "i8"), t((), "i8")), {}, t((3,), "bool")),
        ("eq", (t((2,), "bool"), t((2,), "bool")), {}, t((2,), "bool")),
        ("shl", (t((2,), "u16"), t((2,), "u16")), {}, t((2,), "u16")),
        ("select", (t((2, 1), "bool"), t((3,)), t(())), {}, t((2, 3))),
        ("broadcast", (t((3, 1)),), {"shape": (2, 3, 4)}, t((2, 3, 4))),
        ("reshape", (t((2, 6)),), {"shape": (3, 4)}, t((3, 4))),
        ("permute", (t((2, 3, 4)),), {"perm": (2, 0, 1)}, t((4, 2, 3))),
        ("slice", (t((10, 4)),), {"start": (1, 0), "stop": (20, 4), "step": (3, 2)}, t((3, 2))),
        ("slice", (t((5,)),), {"start": (7,), "stop": (9,), "step": (1,)}, t((0,))),
        ("concat", (t((2, 3)), t((2, 5))), {"axis": 1}, t((2, 8))),
        ("gather", (t((4, 5, 6)), t((2, 3), "i32")), {"axis": 1}, t((4, 2, 3, 6))),
        ("gather", (t((4, 5)), t((), "i64")), {"axis": 0}, t((5,))),
        ("take", (t((4, 5)), t((3, 1), "i32"), t((2,), "i64")), {}, t((3, 2))),
        ("reduce", (t((2, 3, 4)),), {"kind": "sum", "axes": (0, 2)}, t((3,))),
        ("reduce", (t((2, 3), "bool"),), {"kind": "any", "axes": (1,)}, t((2,), "bool")),
        (
            "contract",
            (t((7, 2, 3)), t((7, 3, 5))),
            {"lhs_batch": (0,), "rhs_batch": (0,), "lhs_contract": (2,), "rhs_contract": (1,)},
            t((7, 2, 5)),
        ),
    ],
)
def test_inferred_types(
    kind: str, operands: tuple[TensorType, ...], attrs: dict[str, object], expected: TensorType
) -> None:
    assert infer(kind, *operands, **attrs) == (expected,)


@pytest.mark.parametrize(
    ("kind", "operands", "attrs", "message"),
    [
        ("add", (t((2,)), t((2,), "f16")), {}, "share one dtype"),
        ("add", (t((2,), "bool"), t((2,), "bool")), {}, "does not accept dtype bool"),
        ("mul", (t((2, 3)), t((4,))), {}, r"cannot broadcast \[2, 3\] with \[4\]"),
        ("exp", (t((2,), "i32"),), {}, "does not accept dtype i32"),
        ("not", (t((2,)),), {}, "does not accept dtype f32"),
        ("shr", (t((2,)), t((2,))), {}, "does not accept dtype f32"),
        ("and", (t((2,)), t((2,))), {}, "does not accept dtype f32"),
        ("select", (t((2,), "i8"), t((2,)), t((2,))), {}, "condition must be bool"),
        ("broadcast", (t((3, 2)),), {"shape": (3, 3)}, "cannot broadcast"),
        ("broadcast", (t((3, 2)),), {"shape": (2,)}, "cannot broadcast"),
        ("reshape", (t((2, 3)),), {"shape": (5,)}, "cannot reshape"),
        ("reshape", (t((2, 3)),), {"shape": [6]}, "must be a tuple of ints"),
        ("permute", (t((2, 3)),), {"perm": (0, 0)}, "not a permutation"),
        ("slice", (t((4,)),), {"start": (0,), "stop": (4,), "step": (0,)}, "step >= 1"),
        ("slice", (t((4,)),), {"start": (-1,), "stop": (4,), "step": (1,)}, "start and stop"),
        ("slice", (t((4, 2)),), {"start": (0,), "stop": (4,), "step": (1,)}, "one entry per axis"),
        ("concat", (t((2, 3)), t((3, 3))), {"axis": 1}, "differ off axis 1"),
        ("concat", (t((2, 3)),), {"axis": -1}, "out of range"),
        ("gather", (t((4,)), t((2,))), {"axis": 0}, "integer dtype"),
        ("gather", (t((4,)), t((2,), "i32")), {"axis": 1}, "out of range"),
        ("take", (t((4, 5)), t((2,), "i32")), {}, "needs 2 index tensors"),
        (
            "reduce",
            (t((2,), "bool"),),
            {"kind": "sum", "axes": (0,)},
            "sum does not accept dtype bool",
        ),
        ("reduce", (t((2,)),), {"kind": "all", "axes": (0,)}, "all does not accept dtype f32"),
        ("reduce", (t((2,)),), {"kind": "mean", "axes": (0,)}, "attr kind"),
        ("reduce", (t((2, 3)),), {"kind": "max", "axes": (1, 1)}, "distinct axes"),
        (
            "contract",
            (t((2, 3)), t((4, 5))),
            {"lhs_batch": (), "rhs_batch": (), "lhs_contract": (1,), "rhs_contract": (0,)},
            r"lhs axis 1 \(3\) does not match rhs axis 0 \(4\)",
        ),
        (
            "contract",
            (t((2, 3)), t((3, 5))),
            {"lhs_batch": (0,), "rhs_batch": (), "lhs_contract": (1,), "rhs_contract": (0,)},
            "pair up",
        ),
        ("add", (t((2,)),), {}, r"expects 2 operand\(s\)"),
        ("fused_mul_add", (t((2,)),), {}, "unknown op kind"),
    ],
)
def test_rejections_name_the_op(
    kind: str, operands: tuple[TensorType, ...], attrs: dict[str, object], message: str
) -> None:
    with pytest.raises(InternalError, match=message):
        infer(kind, *operands, **attrs)


def test_ops_that_need_declared_types() -> None:
    with pytest.raises(InternalError, match="op cast: needs exactly one declared result type"):
        infer("cast", t((2,)))
    with pytest.raises(InternalError, match="op cast: result shape"):
        infer("cast", t((2,)), given=(t((3,), "i8"),))
    with pytest.raises(InternalError, match="op iota: result must be a rank-1 numeric"):
        infer("iota", given=(t((2, 2)),))
    with pytest.raises(InternalError, match="op param: attr path"):
        infer("param", given=(t((2,)),))
    with pytest.raises(InternalError, match="unknown dtype 'f8'"):
        infer("state", given=(t((2,), "f8"),), path="cache")
    assert infer("buffer", given=(t((2,), "bf16"),), path="rope.freqs") == (t((2,), "bf16"),)


def test_declared_types_must_agree_with_the_rule() -> None:
    with pytest.raises(
        InternalError, match=r"declared result types \(f32\[3\]\) differ from \(f32\[2\]\)"
    ):
        infer("neg", t((2,)), given=(t((3,)),))


def test_const_type_comes_from_the_array() -> None:
    assert infer("const", value=np.zeros((2, 3), np.int16)) == (t((2, 3), "i16"),)
    with pytest.raises(InternalError, match="numpy array"):
        infer("const", value=[1, 2])
    with pytest.raises(InternalError, match="NumPy dtype complex64 has no Linnet dtype"):
        infer("const", value=np.zeros(2, np.complex64))


def test_region_ops_check_their_signatures() -> None:
    b = Builder.for_function([("x", t((3,)))])
    (x,) = b.args
    bad_cond = b.nested([t((3,))]).finish([x])  # f32[3], not a bool scalar
    body = b.nested([t((3,))])
    body_region = body.finish([body.args[0]])
    with pytest.raises(
        InternalError, match=r"op while: cond region results \(f32\[3\]\) should be \(bool\[\]\)"
    ):
        b.while_([x], bad_cond, body_region)
    then = b.nested().finish([x])
    other = b.nested()
    other_region = other.finish([other.const(1, "i32")])
    flag = b.const(True, "bool")
    with pytest.raises(
        InternalError, match=r"op if: else region results \(i32\[\]\) should be \(f32\[3\]\)"
    ):
        b.if_(flag, then, other_region)
    with pytest.raises(InternalError, match="condition must be a bool scalar"):
        b.if_(x, then, then)
    wrong_args = b.nested([t((4,))])
    with pytest.raises(
        InternalError,
        match=r"op call: std.nn::f body region args \(f32\[4\]\) should be \(f32\[3\]\)",
    ):
        b.call("std.nn::f", [x], wrong_args.finish([wrong_args.args[0]]))
